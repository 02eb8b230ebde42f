"""Data layer: loading and generating the documents and samples the tasks read (GovReport selection,
PG-19 stream and forgetting-curve samples in ``documents.py``; the embedded corpus; LongEval cases and
their word lists) and the per-token export's files (``export_files.py``).

May import: numpy, datasets, transformers (tokenizers only), fsspec and the basics. No model, no engine,
never lm-eval.
"""
