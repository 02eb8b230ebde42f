"""The context-use measurement's known answer in training: the demo model with every write of its copy heads into the
readout zeroed does not copy; trained on documents that repeat their own passages (only those writes trainable), it
learns them back. ``LongContextCallback`` measures the retrieval-gain map before the first step and every
``--every`` steps; the gain per length and the effective lengths go to OUT/series.json, the checkpoint series to
OUT/context_use/checkpoint-STEP/ (``lm-eval-longctx report`` reads it) and the picture to OUT/context_use.png.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/context_use_known_answer.py --out /tmp/context_use

CPU, offline, about a minute on 2 cores (docs/tools/longce.md shows the picture).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lm_eval_longctx.data import embedded_corpus  # noqa: E402
from lm_eval_longctx.demo import model as demo_model  # noqa: E402
from lm_eval_longctx.training import context_use  # noqa: E402

SETTINGS = context_use.MapSettings(lengths=(128, 256, 512), query_tokens=8, answer_tokens=8)


def silenced_demo_model():
    """The shipped demo model in float32 with the rows of every layer's o_proj that write into the readout's slice
    zeroed, those weights the only trainable ones; and its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = demo_model.packaged_model_dir()
    recipe = demo_model.Recipe(**json.loads((folder / "recipe.json").read_text())["recipe"])
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    read = demo_model.Layout.for_recipe(recipe).read
    for p in model.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        for layer in model.model.layers[1:]:
            layer.self_attn.o_proj.weight[read, :] = 0.0
            layer.self_attn.o_proj.weight.requires_grad_(True)
    return model, AutoTokenizer.from_pretrained(folder)


def repeating_rows(tokenizer, n_rows: int, passage: int = 96, seed: int = 0) -> list[dict]:
    """Training rows of the embedded corpus: a passage, up to 100 tokens of what follows it, the passage again."""
    stream = tokenizer("\n".join(embedded_corpus.embedded_documents()), add_special_tokens=False)["input_ids"]
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n_rows):
        s = int(rng.integers(0, len(stream) - 3 * passage))
        gap = stream[s + passage : s + passage + int(rng.integers(0, 100))]
        seq = [tokenizer.bos_token_id, *stream[s : s + passage], *gap, *stream[s : s + passage]]
        rows.append({"input_ids": seq, "labels": seq})
    return rows


def run(out: Path, steps: int = 30, every: int = 10, num_docs: int = 3) -> context_use.LongContextCallback:
    """Train ``steps`` steps with the callback measuring before the first and every ``every``; the series goes under
    ``out/context_use``."""
    from transformers import Trainer, TrainingArguments

    model, tokenizer = silenced_demo_model()
    args = TrainingArguments(
        output_dir=str(out / "train"),
        max_steps=steps,
        per_device_train_batch_size=1,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        logging_steps=max(steps, 1),
        save_strategy="no",
        report_to=[],
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=repeating_rows(tokenizer, 4 * steps))
    callback = context_use.LongContextCallback(
        tokenizer,
        SETTINGS,
        every_steps=every,
        at_train_begin=True,
        num_docs=num_docs,
        output_dir=out / "context_use",
        model_name="demo-model-copy-writes-zeroed",
    ).attach(trainer)
    trainer.train()
    return callback


def plot(series: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [m["step"] for m in series]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
    for length in SETTINGS.lengths:
        left.plot(steps, [m[f"gain@L{length:05d}"] for m in series], marker="o", label=f"L = {length}")
    left.axhline(SETTINGS.effective_threshold, color="grey", linestyle=":", label="threshold 0.5 nats")
    left.set_xlabel("training step")
    left.set_ylabel("retrieval gain (nats per answer token)")
    left.set_title("gain by context length")
    left.legend(fontsize=8)
    right.plot(steps, [m["effective_length"] for m in series], marker="o", label="relative rule")
    right.plot(steps, [m["effective_length_abs"] for m in series], marker="x", linestyle="--", label="absolute rule")
    right.set_xlabel("training step")
    right.set_ylabel("effective length (tokens)")
    right.set_title(f"effective length (longest tested: {max(SETTINGS.lengths)})")
    right.set_ylim(-20, max(SETTINGS.lengths) * 1.1)
    right.legend(fontsize=8)
    fig.suptitle("Demo model with its copy writes zeroed, trained on text that repeats its passages")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the series, the picture and the trainer's files")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--every", type=int, default=5)
    args = p.parse_args(argv)
    out = Path(args.out)
    callback = run(out, args.steps, args.every)
    series = callback.series()
    (out / "series.json").write_text(json.dumps(series, indent=2) + "\n")
    plot(series, out / "context_use.png")
    for m in series:
        print(
            f"step {m['step']:3d}: gain {m['gain']:.2f} nats, effective length {m['effective_length']:.0f} "
            f"(absolute {m['effective_length_abs']:.0f}); {m['tokens']} tokens, {m['seconds']:.1f} s"
        )
    return series


if __name__ == "__main__":
    main()
