"""Data layer: loading and generating the documents and samples the tasks read (GovReport selection,
PG-19 stream and forgetting-curve samples in ``documents.py``; the retrieval-gain tasks' sequences in
``retrieval_cases.py``; the embedded corpus; LongEval cases, their sizes and word lists), the per-token export's
files (``export_files.py``) and a checkpoint's exact identity (``checkpoints.py``).

May import: numpy, datasets, transformers (tokenizers only), fsspec and the basics. No model, no engine,
never lm-eval.
"""
