"""Fit the step model's fixed costs and kernel factors on tune runs only.

    python benchmarks/fit_step_constants.py [--shared DIR] [--passes N]

The tune data, never a holdout run (benchmarks/compute_accuracy.py says what each set is):
the shared half of the single-rank H200 timings (all of it is tune data: the other half is
kept back), the tune split of memtune's own single-rank runs (``ctime-``, ``crel-``,
``compute-timing``; the measured set's sha1 rule), and the tune runs of Megatron-LM's
functional-test step times (``benchmarks/published/layouts/megatron-lm-ci``,
``memtune/bench/plan.py ci_split_of``).

First the optimizer step alone, by least squares on the optimizer seconds of the shared half
and of the ``ctime-``/``crel-`` tune runs (CPU-offloaded and LoRA steps left out): the loop's
``step_s``, Megatron's bytes around Adam per parameter (with and without the distributed
optimizer) and the local multi-tensor path's cost per tensor. Then the host floors
(``MEASURE_RUNNER`` for the single-rank loops, ``MEGATRON_LM_LOOP`` for Megatron-LM's) and the
shared factors by coordinate descent over fixed grids, from the constants as committed,
minimising the sum of the shared half's median |relative error| of the step's compute and its
largest, the mean |error| of each of memtune's own tune sets (each capped at ``CAP``), the CI
tune runs' median (the whole step), and the shared half's median error of the GPU's kernel time
in forward+backward (its profiled busy fraction), so that host and device are each right.
The shared half's machines get their own kernel factor against the tables' machine
(``compute_accuracy.SHARED_MACHINE``), fitted by their profiled busy fraction, which only their
own terms see; the H100 of the ``crel-`` runs is measured by their traced kernels
(``compute_accuracy.measured_machine``): the in-step factor every user's job takes is thus set by
memtune's own runs on the machine the tables were timed on and by the CI runs, not by a faster
machine's. Prints the values, which ``memtune/perf/constants.py`` then carries, and the errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

CI = ROOT / "benchmarks" / "published" / "layouts" / "megatron-lm-ci"
FLOOR_GRIDS = {
    "layer_fwd_s": [0.8e-3, 1.0e-3, 1.2e-3, 1.4e-3, 1.6e-3, 1.8e-3, 2.0e-3, 2.2e-3, 2.5e-3, 3.0e-3, 3.5e-3],
    "backward_factor": [1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0],
    "microbatch_s": [0.0, 1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 7e-3, 10e-3, 15e-3],
    "step_s": [10e-3, 15e-3, 20e-3, 25e-3, 30e-3, 40e-3, 50e-3, 60e-3, 80e-3],
}
LEAST_SQUARES = {"MEASURE_RUNNER": "step_s"}  # fitted with the optimizer, not on the grid
CAP = 0.3  # an own run's error counts up to this much in the fit
# the shared half's machine against the tables' (compute_accuracy.SHARED_MACHINE)
MACHINE_GRID = [0.76, 0.78, 0.8, 0.82, 0.84, 0.86, 0.88, 0.9, 0.92, 0.94, 0.96, 0.98, 1.0]
SHARED_GRIDS: dict[str, list[Any]] = {
    "IN_STEP_KERNEL_FACTOR": [0.88, 0.9, 0.92, 0.94, 0.96, 0.98, 1.0, 1.02, 1.04, 1.06, 1.08, 1.1],
    "GRAD_ACCUMULATION_HBM_SHARE": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0],
    "VIRTUAL_CHUNK_PASS_S": [0.0, 0.25e-3, 0.5e-3, 0.75e-3, 1.0e-3, 1.5e-3, 2.0e-3],
    "UNFUSED_BMM_FRACTION": [0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6],
    "UNFUSED_SOFTMAX_HBM_SHARE": [0.6, 0.7, 0.8, 0.9, 1.0, 1.1],
    "MTP_EXTRA_HOST_LAYERS": [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0],
}


def optimizer_fit(runs: list[Any]) -> tuple[float, float, float, float, int]:
    """Least squares of the optimizer seconds: step_s, bytes per parameter without and with the
    distributed optimizer, seconds per tensor on the local multi-tensor path."""
    from memtune.catalog.gpus import get_gpu
    from memtune.perf import constants as K
    from memtune.perf.layer import ShapePricer
    from memtune.perf.step import _params_of, _shard_tensors

    rows, targets = [], []
    for run in runs:
        d = run.derived
        if run.optimizer_s is None or d.job.optimizer.optimizer_cpu_offload or d.job.peft is not None:
            continue
        params, tensors = _shard_tensors(d, [_params_of(d, c) for c in d.chunks[run.pp_rank]])
        pricer = ShapePricer(d, get_gpu(d.job.cluster.gpu), K.MEASURE_RUNNER)
        adam = params * pricer.hbm_ratio / pricer.eager.adam_params_per_s[d.adam_kernel]
        per_byte = params / pricer.hbm
        distributed = d.use_distributed_optimizer
        local = d.adam_kernel == "foreach"
        rows.append(
            [1.0, 0.0 if distributed else per_byte, per_byte if distributed else 0.0, tensors * local]
        )
        targets.append(run.optimizer_s - adam)
    solution, *_ = numpy.linalg.lstsq(numpy.array(rows), numpy.array(targets), rcond=None)
    step_s, plain, distributed, per_tensor = (float(x) for x in solution)
    return step_s, plain, distributed, per_tensor, len(rows)


def main() -> int:
    from compute_accuracy import OWN_SETS, SHARED, compare, own_runs, shared_half

    from memtune.bench.plan import accuracy
    from memtune.perf import constants as K
    from memtune.perf.layer import Machine

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()

    shared = shared_half(args.shared)
    own = {name: [r for r in own_runs(name) if r.split == "tune"] for name in OWN_SETS}
    # the optimizer's bytes on the H200s alone: the crel- runs' H100 ran its memory-bound kernels
    # at 1.31x the H200's time, not the 1.43x of the two's HBM figures
    step_s, plain, distributed, per_tensor, fitted = optimizer_fit(shared + own["ctime"])
    K.OPTIMIZER_STEP_BYTES_PER_PARAM = {False: round(plain, 1), True: round(distributed, 1)}
    K.OPTIMIZER_PER_TENSOR_S = {**K.OPTIMIZER_PER_TENSOR_S, "foreach": round(per_tensor, 6)}
    K.MEASURE_RUNNER = dataclasses.replace(K.MEASURE_RUNNER, step_s=round(step_s, 5))

    def medians() -> tuple[float, ...]:
        compared = [compare(r) for r in shared]
        shared_errors = [abs(c.step) for c in compared]
        # memtune's own sets by their mean error, each capped at CAP: a median would leave a
        # whole family (host-bound MoE ranks, say) out of the fit
        own_errors = [[min(abs(compare(r).step), CAP) for r in runs] for runs in own.values() if runs]
        # the GPU's share the profiles measured, so that host and device are each right
        device = statistics.median(abs(c.device) for c in compared if c.device is not None)
        profiled = [c.device for c in map(compare, own["crel"]) if c.device is not None]
        crel_device = statistics.median(abs(e) for e in profiled) if profiled else 0.0
        ci = statistics.median(
            abs(r.measured / r.predicted - 1) for g in accuracy([CI], "tune") for r in g.runs
        )
        own_means = (statistics.mean(e) for e in own_errors)
        return (statistics.median(shared_errors), *own_means, device, crel_device, max(shared_errors), ci)

    machines = {"shared": shared}  # profiled by its busy fraction alone
    knobs: list[tuple[str | None, str, list[Any]]] = [("machine", name, MACHINE_GRID) for name in machines]
    knobs += [(None, name, grid) for name, grid in SHARED_GRIDS.items()]
    knobs.append((None, "RECOMPUTE_HOST_SHARE.mlp", [0.1, 0.2, 0.3, 0.4, 0.5, 0.7]))
    knobs += [
        (floor, field, grid)
        for floor in ("MEGATRON_LM_LOOP", "MEASURE_RUNNER")
        for field, grid in FLOOR_GRIDS.items()
        if LEAST_SQUARES.get(floor) != field
    ]

    def get(floor: str | None, name: str) -> Any:
        if floor == "machine":
            return machines[name][0].machine.kernels
        if name.startswith("RECOMPUTE_HOST_SHARE."):
            return K.RECOMPUTE_HOST_SHARE[name.split(".")[1]]
        return getattr(getattr(K, floor), name) if floor else getattr(K, name)

    def put(floor: str | None, name: str, value: Any) -> None:
        if floor == "machine":
            fitted_machine = Machine(value, value)  # its busy fraction does not tell the attention apart
            machines[name][:] = [dataclasses.replace(r, machine=fitted_machine) for r in machines[name]]
        elif name.startswith("RECOMPUTE_HOST_SHARE."):
            K.RECOMPUTE_HOST_SHARE = {**K.RECOMPUTE_HOST_SHARE, name.split(".")[1]: value}
        elif floor:
            setattr(K, floor, dataclasses.replace(getattr(K, floor), **{name: value}))
        else:
            setattr(K, name, value)

    best = sum(medians())
    for _ in range(args.passes):
        for floor, name, grid in knobs:
            kept = get(floor, name)
            for value in grid:
                put(floor, name, value)
                score = sum(medians())
                if score < best - 1e-9:
                    best, kept = score, value
            put(floor, name, kept)
        print(f"pass done: {best:.4f}", flush=True)
    print(f"OPTIMIZER_STEP_BYTES_PER_PARAM = {K.OPTIMIZER_STEP_BYTES_PER_PARAM} ({fitted} runs)")
    print(f"OPTIMIZER_PER_TENSOR_S = {K.OPTIMIZER_PER_TENSOR_S}")
    for name in SHARED_GRIDS:
        print(f"{name} = {getattr(K, name):g}")
    print(f"RECOMPUTE_HOST_SHARE = {K.RECOMPUTE_HOST_SHARE}")
    print(f"compute_accuracy.SHARED_MACHINE: {shared[0].machine}")
    print(f"the crel- runs' machine, measured: {own['crel'][0].machine}")
    for floor in ("MEGATRON_LM_LOOP", "MEASURE_RUNNER"):
        print(f"{floor} = {getattr(K, floor)}")
    names = [
        "shared median",
        *(f"{name} mean" for name, runs in own.items() if runs),
        "shared GPU kernels",
        "crel GPU kernels",
    ]
    values = medians()
    print(", ".join(f"{n} {v:.1%}" for n, v in zip(names, values, strict=False)))
    print(f"shared max {values[-2]:.1%}, CI tune {values[-1]:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
