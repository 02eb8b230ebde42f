"""Fine-tune a causal LM with LongCE through the transformers ``Trainer`` (a ``compute_loss`` override).

LongCE (LongPPL paper, section 4) up-weights the tokens whose prediction gains from long context:
w_t = min(exp(loss_short_t - loss_full_t), gamma) for t >= K (1 before), computed by
``lm_eval_longctx.training.longce`` with a no-grad short pass of the model being trained over the LongPPL
reference windows (K = --trunc-len, d = --stride). The whole integration is ``LongCETrainer``:

    class LongCETrainer(Trainer):
        def __init__(self, *args, longce: LongCELoss, **kwargs):
            super().__init__(*args, **kwargs)
            self.longce = longce
            self.loss_is_scaled_for_ga = False  # per-batch mean: the Trainer divides by the GA steps

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = self.longce(model, outputs.logits, inputs["input_ids"], labels, inputs.get("attention_mask"))
            return (loss, outputs) if return_outputs else loss

Data: plain-text files (--train-file, repeatable), tokenized with the model's tokenizer, concatenated
with EOS between documents and cut into blocks of --seq-len tokens (labels = input_ids). Blocks
must be longer than K for LongCE to differ from CE.

Real use (downloads the model; --seq-len well above --trunc-len)::

    python scripts/finetune_longce.py --model meta-llama/Llama-2-7b-hf --train-file book.txt \\
        --seq-len 32768 --trunc-len 4096 --stride 1024 --output-dir out/ --bf16

Offline smoke run (a tiny random Llama and tiny text built here, CPU, 2 steps, nothing downloaded)::

    HF_HUB_OFFLINE=1 /work/venv/bin/python scripts/finetune_longce.py --tiny-demo --max-steps 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lm_eval_longctx.settings import add_arguments  # noqa: E402
from lm_eval_longctx.training.longce import DEFAULT_STRIDE, DEFAULT_TRUNC_LEN, LongCELoss  # noqa: E402
from lm_eval_longctx.training.longce import SETTINGS as LONGCE_SETTINGS  # noqa: E402


def make_trainer_class():
    from transformers import Trainer

    class LongCETrainer(Trainer):
        """A ``Trainer`` whose loss is LongCE; everything else (optimizer, GA, logging) is stock."""

        def __init__(self, *args, longce: LongCELoss, **kwargs):
            super().__init__(*args, **kwargs)
            self.longce = longce
            # LongCE returns a per-batch mean, not a sum over num_items_in_batch, so the Trainer
            # must divide it by the gradient-accumulation steps itself.
            self.loss_is_scaled_for_ga = False

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            # `model` (possibly DDP-wrapped) also runs the short pass: no grad, eval mode, restored after
            loss = self.longce(model, outputs.logits, inputs["input_ids"], labels, inputs.get("attention_mask"))
            return (loss, outputs) if return_outputs else loss

    return LongCETrainer


def tiny_demo(workdir: Path) -> tuple[str, list[str]]:
    """A tiny random Llama + tokenizer and a few text files, all built locally."""
    from lm_eval_longctx.demo.offline import python_reference_documents, random_llama, train_tokenizer

    docs = python_reference_documents(n_docs=2, chars_per_doc=6_000)
    tokenizer = train_tokenizer(docs, vocab_size=300)
    model = random_llama(
        len(tokenizer),
        seed=0,
        hidden_size=32,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(workdir / "model")
    tokenizer.save_pretrained(workdir / "model")
    files = []
    for i, doc in enumerate(docs):
        (workdir / f"doc{i}.txt").write_text(doc, encoding="utf-8")
        files.append(str(workdir / f"doc{i}.txt"))
    return str(workdir / "model"), files


def build_dataset(tokenizer, files: list[str], seq_len: int):
    from datasets import Dataset

    stream: list[int] = []
    for f in files:
        stream += tokenizer(Path(f).read_text(encoding="utf-8"))["input_ids"]
        if tokenizer.eos_token_id is not None:
            stream.append(tokenizer.eos_token_id)
    blocks = [stream[i : i + seq_len] for i in range(0, len(stream) - seq_len + 1, seq_len)]
    if not blocks:
        raise SystemExit(f"the text has {len(stream)} tokens, fewer than one block of --seq-len {seq_len}")
    return Dataset.from_dict(
        {"input_ids": blocks, "labels": [list(b) for b in blocks], "attention_mask": [[1] * seq_len for _ in blocks]}
    )


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="model id or local path (AutoModelForCausalLM)")
    p.add_argument("--train-file", action="append", default=[], help="plain-text file (repeatable)")
    p.add_argument("--tiny-demo", action="store_true", help="build a tiny random model and text locally")
    p.add_argument("--output-dir", default=None)
    p.add_argument("--seq-len", type=int, default=None, help="tokens per block (default 32768; 64 with --tiny-demo)")
    # K, d, gamma and the short batch come from LongCE's settings declaration (K and d default to 24 and 8
    # with --tiny-demo)
    add_arguments(
        p,
        LONGCE_SETTINGS,
        ["trunc_len", "stride", "gamma", "short_batch_size"],
        defaults={"trunc_len": None, "stride": None},
    )
    p.add_argument(
        "--reference-mask",
        action="store_true",
        help="reference behaviour: no masking of padding / -100 labels, mean over all positions",
    )
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--bf16", action="store_true")
    p.add_argument(
        "--eval-every",
        type=int,
        default=None,
        metavar="N",
        help="every N steps, measure the retrieval-gain map on held-out documents of the embedded corpus "
        "(training.context_use.LongContextCallback), log it as longctx/..., and with --output-dir write it under "
        "OUTPUT_DIR/context_use/checkpoint-STEP",
    )
    p.add_argument(
        "--eval-lengths",
        type=int,
        nargs="+",
        default=None,
        help="the measurement's context lengths (default: seq-len / 4, seq-len / 2 and seq-len less BOS, Q and A)",
    )
    p.add_argument("--eval-docs", type=int, default=4, help="held-out documents per measurement")
    args = p.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments

    tmp = None
    if args.tiny_demo:
        tmp = tempfile.TemporaryDirectory()
        args.model, args.train_file = tiny_demo(Path(tmp.name))
        defaults = dict(seq_len=64, trunc_len=24, stride=8)
    else:
        defaults = dict(seq_len=32768, trunc_len=DEFAULT_TRUNC_LEN, stride=DEFAULT_STRIDE)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if not args.model or not args.train_file:
        p.error("--model and --train-file are required (or --tiny-demo)")
    if args.seq_len <= args.trunc_len:
        print(f"warning: --seq-len {args.seq_len} <= --trunc-len {args.trunc_len}: every weight is 1 (plain CE)")

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16 if args.bf16 else torch.float32)
    dataset = build_dataset(tokenizer, args.train_file, args.seq_len)
    out_dir = args.output_dir or (tmp.name + "/out" if tmp else "longce_out")
    training_args = TrainingArguments(
        output_dir=out_dir,
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.lr,
        max_steps=args.max_steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=args.bf16,
        use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0,
    )
    longce = LongCELoss(
        trunc_len=args.trunc_len,
        stride=args.stride,
        gamma=args.gamma,
        short_batch_size=args.short_batch_size,
        mask_ignored=not args.reference_mask,
    )
    trainer = make_trainer_class()(model=model, args=training_args, train_dataset=dataset, longce=longce)
    callback = None
    if args.eval_every:
        from lm_eval_longctx.training.context_use import LongContextCallback, MapSettings

        room = 2 * 24 + 1  # the measurement's BOS, query and answer tokens
        lengths = args.eval_lengths or sorted(
            {n for n in (args.seq_len // 4, args.seq_len // 2, args.seq_len - room) if n >= room}
        )
        if not lengths:
            p.error(f"--seq-len {args.seq_len} leaves no context length for the measurement: give --eval-lengths")
        callback = LongContextCallback(
            tokenizer,
            MapSettings(lengths=tuple(lengths)),
            every_steps=args.eval_every,
            num_docs=args.eval_docs,
            output_dir=Path(args.output_dir) / "context_use" if args.output_dir else None,
            model_name=str(args.model),
        ).attach(trainer)
    result = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    print(f"LongCE fine-tuning: {result.global_step} steps, losses {losses}")
    if callback is not None:
        for m in callback.series():
            by_length = ", ".join(f"{k}={v:.3f}" for k, v in m.items() if k.startswith("gain@L") and "_d" not in k)
            print(
                f"context use at step {m['step']}: {by_length}; effective length {m['effective_length']:.0f} "
                f"(absolute rule {m['effective_length_abs']:.0f})"
            )
    if args.output_dir:
        trainer.save_model(args.output_dir)
    if tmp is not None:
        tmp.cleanup()
    return {
        "steps": result.global_step,
        "losses": losses,
        "context_use": callback.series() if callback is not None else [],
    }


if __name__ == "__main__":
    main()
