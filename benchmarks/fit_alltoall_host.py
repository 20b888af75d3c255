"""Fit what the all-to-all dispatcher's real exchanges add to a MoE layer's host work
(``MOE_DISPATCHER_HOST_FWD_S["alltoall"]``, memtune/perf/constants.py) on its one tune run.

    python benchmarks/fit_alltoall_host.py

The router, the dispatcher's bookkeeping and the permutes are measured (``MOE_LAYER_HOST_S``,
``MOE_EXPERT_HOST_S``: the ``hostmoe-`` runs, under the fake process group). What real
exchanges add on the host (the collectives' launches, the host's wait for the token counts
before each exchange) shows in a whole step only: the one Megatron-LM functional-test tune run
with the all-to-all dispatcher and no other cost the model leaves out
(``gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_resume_torch_dist_dist_optimizer``: 12 MoE layers of width
512, TP 4, EP 2, ETP 2; a tune run by ``memtune/bench/plan.py ci_split_of``). The value: the one on
a 0.1 ms grid from 0 to 6 ms whose predicted step time is nearest the published one. Prints the
run's error at 0 and at the value, and the value.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memtune.bench.plan import _priced, ci_split_of  # noqa: E402
from memtune.check import gate  # noqa: E402
from memtune.config import validate  # noqa: E402
from memtune.config.loaders import native  # noqa: E402
from memtune.perf import constants as K  # noqa: E402

RUN = (
    ROOT
    / "benchmarks/published/layouts/megatron-lm-ci"
    / "mlm-ci-speed-moe-gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_resume_torch_dist_dist_optimizer.yaml"
)
GRID = [round(i * 1e-4, 4) for i in range(61)]  # 0 ... 6 ms


def run() -> tuple[str, dict]:
    """The tune run's id and its published entry."""
    entry = yaml.safe_load(RUN.read_text(encoding="utf-8"))
    if ci_split_of(entry["id"]) != "tune":
        raise SystemExit(f"{entry['id']} is not a tune run")
    return entry["id"], entry


def error(entry: dict, host_s: float) -> float:
    """Published / predicted step time - 1 with the all-to-all exchanges' host work at ``host_s``."""
    checked = gate(validate(native.read(entry["config"])))
    saved = K.MOE_DISPATCHER_HOST_FWD_S["alltoall"]
    K.MOE_DISPATCHER_HOST_FWD_S["alltoall"] = host_s
    try:
        return entry["published"]["step_time_s"] / _priced(checked).step_time_s - 1
    finally:
        K.MOE_DISPATCHER_HOST_FWD_S["alltoall"] = saved


def fitted(entry: dict) -> float:
    """The grid value whose prediction is nearest the published step."""
    return min(GRID, key=lambda x: abs(error(entry, x)))


def main() -> int:
    run_id, entry = run()
    value = fitted(entry)
    print(f"  {error(entry, 0.0):+.1%} -> {error(entry, value):+.1%}  {run_id}")
    print(f'MOE_DISPATCHER_HOST_FWD_S["alltoall"] = {value * 1e3:.1f} ms')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
