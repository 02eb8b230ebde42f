#!/usr/bin/env python
"""Build the offline default: a tiny random Llama checkpoint and long documents, no network.

    python scripts/make_offline_demo.py out/demo

writes ``out/demo/model``, ``out/demo/docs.jsonl`` and ``out/demo/metadata.json`` (the task
settings for ``--metadata``) and prints the lm_eval command that runs
``longppl_govreport`` on them (the same task code as with the real GovReport data; only the
model and the data files differ). The numbers of a random model are not meaningful: this checks
that the pipeline runs end to end on a machine with no model hub.
"""

import argparse
import json
import sys

from lm_eval_longctx.demo.offline import build_demo


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="output folder")
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--chars-per-doc", type=int, default=24_000)
    args = p.parse_args(argv)
    info = build_demo(args.out, n_docs=args.docs, chars_per_doc=args.chars_per_doc)
    md = json.dumps(info["metadata"])
    with open(f"{args.out}/metadata.json", "w", encoding="utf-8") as f:
        f.write(md)
    print(json.dumps(info, indent=2))
    print(
        "\nlm_eval --tasks longppl_govreport --model hf "
        f"--model_args pretrained={info['model']},dtype=float32 --device cpu --metadata '{md}'"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
