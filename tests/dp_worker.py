"""One rank of a 2-process CPU data-parallel run (launched by tests/integration/test_data_parallel.py via torchrun).

Stock HFLM turns data parallelism on only with several CUDA devices; this subclass takes rank and
world size from the Accelerator as HFLM does on GPUs, so the evaluator's sharding, padding and
gathering run exactly as under `accelerate launch -m lm_eval` on a multi-GPU machine.
"""

import json
import sys

from lm_eval import simple_evaluate
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager


class CpuDataParallelHFLM(HFLM):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        acc = getattr(self, "accelerator", None)
        if acc is not None and acc.num_processes > 1:
            self._rank, self._world_size = acc.process_index, acc.num_processes


def main(model_dir, task_dir, metadata_json, out_path, limit):
    metadata = json.loads(metadata_json)
    lm = CpuDataParallelHFLM(pretrained=model_dir, dtype="float32", device="cpu")
    assert lm.world_size == 2, "expected two ranks"
    tm = TaskManager(include_defaults=False, include_path=task_dir, metadata=metadata)
    res = simple_evaluate(
        model=lm,
        tasks=["longppl_govreport"],
        task_manager=tm,
        log_samples=True,
        bootstrap_iters=200,
        limit=int(limit) if limit != "none" else None,
    )
    if lm.rank == 0:
        r = res["results"]["longppl_govreport"]
        doc_ids = sorted(s["doc_id"] for s in res["samples"]["longppl_govreport"])
        with open(out_path, "w") as f:
            json.dump({"longppl": r["longppl,none"], "ppl": r["ppl,none"], "doc_ids": doc_ids}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
