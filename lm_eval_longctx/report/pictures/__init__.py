"""Pictures of results (forgetting curve, LongEval, retrieval-gain map), from results JSONs.

May import what ``report`` may: numpy, matplotlib (inside functions, object-oriented API on an Agg canvas),
the metrics layer. No torch, no lm-eval.
"""
