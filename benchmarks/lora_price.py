"""What the step model charges LoRA jobs for their adapters' collectives and for re-gather.

    python benchmarks/lora_price.py

Llama 3 8B on 8 H100s and Llama 3 70B on 32 (sequence 4,096, GBS 32, memtune's LoRA preset),
TP 1-8 with sequence parallelism, on Transformer Engine and on the local spec: the predicted
tokens/s per GPU without and with ``peft.sequence_parallel_input_regather``, and what
re-gathering costs. The figures quoted in docs/plan.md and docs/fix-order.md come from here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.perf.step import predict_step
from memtune.plan.query import Query, base_job


def tokens_per_s(model: str, gpus: int, tp: int, impl: str, regather: bool) -> float:
    base = base_job(Query(model, gpus, "H100-80GB", 8, 4096, 32, "lora"))
    changes = [
        f"model.tensor_model_parallel_size={tp}",
        "model.sequence_parallel=true",
        f"model.transformer_impl={impl}",
        f"peft.sequence_parallel_input_regather={str(regather).lower()}",
    ]
    job = gate(with_changes(base, [Change.parse(c) for c in changes])).derived
    return predict_step(job).tokens_per_s_per_gpu


def main() -> None:
    print(f"{'model':12} {'spec':18} {'TP':>3} {'tokens/s/GPU':>13} {'re-gather':>10} {'cost':>7}")
    for model, gpus in (("llama3-8b", 8), ("llama3-70b", 32)):
        for impl in ("transformer_engine", "local"):
            for tp in (1, 2, 4, 8):
                plain = tokens_per_s(model, gpus, tp, impl, False)
                again = tokens_per_s(model, gpus, tp, impl, True)
                print(
                    f"{model:12} {impl:18} {tp:>3} {plain:>13,.0f} {again:>10,.0f} {again / plain - 1:>+7.1%}"
                )


if __name__ == "__main__":
    main()
