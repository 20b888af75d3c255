"""The step model's per-stage compute against single-rank runs timed alone on one GPU.

    python benchmarks/compute_accuracy.py [--split tune|holdout] [--set NAME] [--shared DIR] [--at-tables]

The sets, each one rank's iteration under PyTorch's fake process group (no collective moves
data, so the iteration is the rank's compute, host work and optimizer step):

- ``shared``: the shared half of a measured set nobody here chose
  (``/work/shared/reference/compute-time-h200``, 19 configurations; its README says how they
  were measured: forward+backward without zeroing the gradient buffers or finalizing them,
  and the optimizer step apart). All of it is tune data: the other half is kept back.
- ``ctime``, ``crel``: memtune's own runs (``benchmarks/gpu/results/ctime-h200.results.jsonl``
  on the H200 the kernel tables came from, ``crel-h100.results.jsonl`` on an H100:
  ``memtune measure``'s loop, forward+backward with the gradient buffers zeroed and finalized,
  and the optimizer step apart), split by the measured set's sha1 rule
  (benchmarks/measured/README.md).
- ``compute-timing``: memtune's earlier runs, iteration seconds only.
- ``cchk``, ``cchk2``, ``cchk3``: checks of a frozen model on new shapes (``cchk-h100``,
  ``cchk2-h100``, ``cchk3-h100``), each defined before it was measured; the tune runs only
  measure the lent machine (``measured_machine``), the holdout runs are the check.
  ``lorachk``: the same for the LoRA adapters' priced work (``lorachk-h100``); ``cchk4``: a
  fourth, after LoRA's optimizer and host work were priced (``cchk4-h100``); ``cchk5``: a fifth,
  after GEMMs of more rows were never priced slower and FP8 attention was priced
  (``cchk5-h100``); ``cchk6``: a sixth, at the same model, on shapes no earlier run measured
  (``cchk6-h100``); ``cchk7``: a seventh, at the same model, of new shapes the model judged
  GPU-bound before they ran (``cchk7-h100``).
- ``cchk2r``: the ``cchk2-`` runs timed again on another lent H100, to show how far the machine
  moves a step; ``cchk3a``: the ``cchk3-`` runs timed again right after, in the same call on
  the same H100, to show how far a step moves on one machine; ``cchk4a`` to ``cchk7a``
  likewise for the ``cchk4-`` to ``cchk7-`` runs (none of them is a check).

The prediction is ``predict_step(...)`` of that rank's stage: its compute
(``Simulated.stage_compute_s``: the passes, host-bound time included, and the step's own work;
the stage run alone, as under the fake process group no pass waits for another stage)
less what the loop did not time (``StepPrediction.stage_step_parts``), with the host floor of
the loop that ran it (``MEASURE_RUNNER``, memtune/perf/constants.py). Errors are of the whole
step's compute; ``--split`` prints one split of memtune's own sets (the shared half is printed
with the tune split).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memtune.perf.layer import TABLES_MACHINE, Machine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "measured"))

RESULTS = ROOT / "benchmarks" / "gpu" / "results"
OWN_SETS = {
    "ctime": RESULTS / "ctime-h200.results.jsonl",
    "crel": RESULTS / "crel-h100.results.jsonl",
    "compute-timing": RESULTS / "compute-timing-h200.results.jsonl",
}
SHARED = Path("/work/shared/reference/compute-time-h200")
# Each set's machine: the time its kernels took inside a step relative to what the kernel
# tables give (memtune.perf.layer.Machine; the tables' own H200, where the ctime- and
# compute-timing runs were timed, is 1). The shared half's H200s ran the same kernels faster in
# their steps: a factor fitted by benchmarks/fit_step_constants.py on its GPU busy fraction,
# which does not tell the attention apart. The H100s of the crel-, cchk- and cchk2- runs are
# measured from each set's traced tune runs (``measured_machine``): their flash attention ran
# slower than the H100's table and every other kernel faster. They price those sets' machines,
# never a user's job.
SHARED_MACHINE = Machine(0.92, 0.92)
# The sets whose machine their own traced tune runs measure (their kernels by name).
TRACED_SETS = (
    "crel", "cchk", "cchk2", "cchk2r", "cchk3", "cchk3a", "lorachk", "cchk4", "cchk4a", "cchk5", "cchk5a",
    "cchk6", "cchk6a", "cchk7", "cchk7a",
)  # fmt: skip
# Checks of a frozen model, never fitted on (``cchk-``, benchmarks/measured/matrix.py): their
# tune runs only measure their machine, their holdout runs are the check.
CHECK_SETS = {
    "cchk": RESULTS / "cchk-h100.results.jsonl",
    "cchk2": RESULTS / "cchk2-h100.results.jsonl",
    "cchk3": RESULTS / "cchk3-h100.results.jsonl",
    "lorachk": RESULTS / "lorachk-h100.results.jsonl",
    "cchk4": RESULTS / "cchk4-h100.results.jsonl",
    "cchk5": RESULTS / "cchk5-h100.results.jsonl",
    "cchk6": RESULTS / "cchk6-h100.results.jsonl",
    "cchk7": RESULTS / "cchk7-h100.results.jsonl",
}
# The cchk2- runs timed again in a later call, on another lent H100: how far the machine moves a
# step. Not a check (its shapes were seen) and pooled in no figure; its tune runs measure its
# machine as a check's do.
# The cchk3- runs timed twice in one call on one machine, one pass after the other: how far a
# step moves between two passes on the same machine (cchk3a, also in no figure); likewise the
# cchk4-, cchk5- and cchk6- runs (cchk4a, cchk5a, cchk6a).
REPEATS = {
    "cchk2r": RESULTS / "cchk2-repeat-h100.results.jsonl",
    "cchk3a": RESULTS / "cchk3-again-h100.results.jsonl",
    "cchk4a": RESULTS / "cchk4-again-h100.results.jsonl",
    "cchk5a": RESULTS / "cchk5-again-h100.results.jsonl",
    "cchk6a": RESULTS / "cchk6-again-h100.results.jsonl",
    "cchk7a": RESULTS / "cchk7-again-h100.results.jsonl",
}
# memtune's catalog name of each GPU a run was timed on (its record's ``environment.gpu``). A run
# is priced for that GPU whatever its plan named: the device tool lends an H100 or an H200 for
# either, and the plans of ``cchk3-`` on name the H200 (``matrix.run``) though they ran on H100s.
RAN_ON = {"NVIDIA H100 80GB HBM3": "H100-80GB", "NVIDIA H200": "H200"}
# PyTorch's flash kernels by name in a trace (``pytorch_flash::flash_fwd_kernel``, ``..._bwd_...``)
FLASH_KERNEL = "pytorch_flash::"


@dataclass(frozen=True)
class Timed:
    """One timed rank: its job, its pipeline stage and what was measured (seconds)."""

    id: str
    split: str
    derived: Any
    pp_rank: int
    step_s: float  # the step's compute as the loop timed it
    forward_backward_s: float | None  # forward+backward, where timed apart
    optimizer_s: float | None
    zeroed_and_finalized: bool  # the loop's forward+backward zeroed and finalized the gradients
    device_s: float | None = None  # the GPU's kernels' share of forward+backward, where profiled
    attention_s: float = 0.0  # of which PyTorch's flash attention kernels
    machine: Machine = TABLES_MACHINE  # its machine's kernel time relative to the tables' machine

    def pricer(self) -> Any:
        """The step model's pricer for this run: its loop's host floor, the stage alone."""
        from memtune.catalog.gpus import get_gpu
        from memtune.perf.constants import MEASURE_RUNNER
        from memtune.perf.step import StepPricer

        gpu = get_gpu(self.derived.job.cluster.gpu)
        return StepPricer(gpu, MEASURE_RUNNER, stages_alone=True, machine=self.machine)


def shared_job(c: dict[str, Any]) -> dict[str, Any]:
    """A configuration of the shared half as a memtune job, by its README's fields and fixed
    settings: local spec, RMSNorm, SwiGLU, RoPE, no biases, untied embeddings, dropout 0, bf16
    with an fp32 gradient buffer, the distributed optimizer, SP when TP > 1, the all-to-all
    dispatcher with SequentialMLP experts, ETP = TP; ``attn: sdpa`` is the flash stand-in,
    without it Megatron's unfused attention on the torch softmax path."""
    tp, pp, ep = c.get("tp", 1), c.get("pp", 1), c.get("ep", 1)
    dp = c["world"] // (tp * pp)
    model: dict[str, Any] = dict(
        num_layers=c["layers"],
        hidden_size=c["hidden"],
        ffn_hidden_size=c["ffn"],
        num_attention_heads=c["heads"],
        num_query_groups=c["groups"],
        kv_channels=c.get("kv_channels", c["hidden"] // c["heads"]),
        vocab_size=c["vocab"],
        seq_length=c["seq"],
        gated_linear_unit=True,
        activation_func="silu",
        normalization="RMSNorm",
        position_embedding_type="rope",
        share_embeddings_and_output_weights=False,
        add_bias_linear=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        bf16=True,
        transformer_impl="local",
        attention_backend="flash" if c.get("attn") == "sdpa" else "unfused",
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        sequence_parallel=tp > 1,
    )
    if pp > 1:
        model["pipeline_dtype"] = "bf16"
    if c.get("vpp"):
        model["virtual_pipeline_model_parallel_size"] = c["vpp"]
    if c.get("num_experts"):
        model.update(
            num_moe_experts=c["num_experts"],
            moe_router_topk=c["topk"],
            moe_ffn_hidden_size=c["moe_ffn"],
            expert_model_parallel_size=ep,
            moe_token_dispatcher_type="alltoall",
            moe_grouped_gemm=False,
            moe_router_force_load_balancing=bool(c.get("force_balance")),
        )
    if c.get("mtp"):
        model["mtp_num_layers"] = c["mtp"]
    recompute = c.get("recompute")
    if recompute and recompute.startswith("full:"):
        _, method, layers = recompute.split(":")
        model.update(recompute_granularity="full", recompute_method=method, recompute_num_layers=int(layers))
    elif recompute:
        model.update(recompute_granularity="selective", recompute_modules=recompute.split(","))
    return {
        "defaults": "megatron-core",
        "model": model,
        "train": {"micro_batch_size": c["mbs"], "global_batch_size": c["nmb"] * c["mbs"] * dp},
        "optimizer": {"use_distributed_optimizer": True},
        "ddp": {"use_distributed_optimizer": True, "grad_reduce_in_fp32": True},
        "cluster": {"num_gpus": c["world"], "gpu": "H200"},
    }


def shared_half(directory: Path = SHARED) -> list[Timed]:
    from memtune.config import derive, validate

    results = {}
    for line in (directory / "results.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        results[record["name"]] = record
    timed = []
    for line in (directory / "configs.jsonl").read_text(encoding="utf-8").splitlines():
        c = json.loads(line)
        r = results[c["name"]]
        stage = c.get("rank", 0) // (c["world"] // c.get("pp", 1))
        d = derive(validate(shared_job(c)))
        busy = r["gpu_busy_fraction_fb"] * r["fb_s"]
        timed.append(
            Timed(
                c["name"],
                "tune",
                d,
                stage,
                r["step_compute_s"],
                r["fb_s"],
                r["opt_s"],
                False,
                busy,
                machine=SHARED_MACHINE,
            )
        )
    return timed


def own_runs(name: str) -> list[Timed]:
    """memtune's own timed runs of set ``name`` (``timed_runs``), on their own machine where the
    set was traced."""
    timed = timed_runs({**OWN_SETS, **CHECK_SETS, **REPEATS}[name])
    return measured_machine(timed) if name in TRACED_SETS else timed


def as_run(record: dict[str, Any]) -> dict[str, Any]:
    """A result record's config, its cluster's GPU the one the run was timed on (``RAN_ON``)."""
    config = record["config"]
    return {**config, "cluster": {**config["cluster"], "gpu": RAN_ON[record["environment"]["gpu"]]}}


def timed_runs(path: Path) -> list[Timed]:
    """The runs of one results file, each priced for the GPU it ran on (``as_run``): the median
    of each quantity over the iterations after the first, and where an iteration was traced its
    kernels' time."""
    from matrix import split_of

    from memtune.config import derive, validate

    timed: list[Timed] = []
    if not path.exists():
        return timed
    for line in path.read_text(encoding="utf-8").splitlines():
        run = json.loads(line)
        if "measured" not in run:
            continue
        iterations = run["measured"]["iterations"][1:]

        def median(key: str, its: list[dict[str, Any]] = iterations) -> float | None:
            return statistics.median(it[key] for it in its) if key in its[0] else None

        d = derive(validate(as_run(run)))
        step = median("seconds")
        assert step is not None
        fb, opt = median("forward_backward_seconds"), median("optimizer_seconds")
        profile = run["measured"].get("profile")  # the traced forward+backward's kernels
        device = profile["device_s"] if profile else None
        attention = (
            sum(k["us"] for k in profile["kernels"] if FLASH_KERNEL in k["name"]) / 1e6 if profile else 0.0
        )
        timed.append(
            Timed(run["id"], split_of(run["id"]), d, run["pp_rank"], step, fb, opt, True, device, attention)
        )
    return timed


def planned(run_id: str, config: dict[str, Any], rank: int, gpu: str = "H100-80GB") -> Timed:
    """A run not yet measured, as the model sees it on ``gpu`` (the tables' machine): enough to
    price it and to judge it GPU-bound before any time is known."""
    from matrix import split_of

    from memtune.config import derive, validate

    d = derive(validate({**config, "cluster": {**config["cluster"], "gpu": gpu}}))
    return Timed(run_id, split_of(run_id), d, d.pp_rank_of(rank), 0.0, None, None, True)


def measured_machine(runs: list[Timed]) -> list[Timed]:
    """``runs`` priced on their own machine, measured by their tune runs' traced iteration:
    its kernels' factor is the median of their kernels' time outside the flash attention over
    what the model gives at 1, its attention's the median of their flash kernels' time over the
    model's (the model is linear in the attention factor: its price at 2 less its price at 1)."""
    traced = [r for r in runs if r.device_s and r.split == "tune"]
    kernels, attention = [], []
    for r in traced:
        at_one = predicted_device_s(replace(r, machine=Machine()))
        flash = predicted_device_s(replace(r, machine=Machine(1.0, 2.0))) - at_one
        kernels.append((r.device_s - r.attention_s) / (at_one - flash))
        if r.attention_s and flash:
            attention.append(r.attention_s / flash)
    # a set that traced no flash kernel gives its attention the other kernels' factor
    machine = Machine(round(statistics.median(kernels), 3), round(statistics.median(attention or kernels), 3))
    return [replace(r, machine=machine) for r in runs]


@dataclass(frozen=True)
class Compared:
    run: Timed
    step: float  # relative error of the step's compute
    forward_backward: float | None
    optimizer: float | None
    device: float | None  # of the kernels' time in forward+backward, where profiled
    host_bound: bool  # the model gives the rank's passes more host work than kernel time


def compare(run: Timed) -> Compared:
    from memtune.perf.step import predict_step

    p = predict_step(run.derived, pricer=run.pricer())
    parts = p.stage_step_parts[run.pp_rank]
    passes = p.simulated.stage_compute_s[run.pp_rank] - parts.total_s
    if run.zeroed_and_finalized:
        passes += parts.zero_grad_s + parts.finalize_s
    step = passes + parts.optimizer_s
    fb = passes / run.forward_backward_s - 1 if run.forward_backward_s else None
    opt = parts.optimizer_s / run.optimizer_s - 1 if run.optimizer_s else None
    device = predicted_device_s(run) / run.device_s - 1 if run.device_s else None
    return Compared(
        run, step / run.step_s - 1, fb, opt, device, predicted_host_s(run) > predicted_device_s(run)
    )


def predicted_device_s(run: Timed) -> float:
    """The GPU's kernels in the rank's forward and backward passes, as the step model prices
    them (its host work and waits left out): what a profile's summed kernel time measures."""
    d = run.derived
    stage = run.pricer().price(d).stages[run.pp_rank]
    return d.num_microbatches * sum(w.forward_s + w.backward_s for w in stage.chunks)


def predicted_host_s(run: Timed) -> float:
    """The host's work in the rank's forward and backward passes, as the step model prices it."""
    d = run.derived
    stage = run.pricer().price(d).stages[run.pp_rank]
    return d.num_microbatches * sum(w.forward_host_s + w.backward_host_s for w in stage.chunks)


def sets(names: list[str], shared: Path) -> Iterator[tuple[str, list[Timed]]]:
    for name in names:
        yield name, shared_half(shared) if name == "shared" else own_runs(name)


def summary(compared: list[Compared]) -> str:
    parts = [
        f"step {statistics.median(abs(c.step) for c in compared):.1%} "
        f"(max {max(abs(c.step) for c in compared):.1%})"
    ]
    for label, attr in (
        ("forward+backward", "forward_backward"),
        ("optimizer", "optimizer"),
        ("GPU kernels", "device"),
    ):
        values = [abs(getattr(c, attr)) for c in compared if getattr(c, attr) is not None]
        if values:
            parts.append(f"{label} {statistics.median(values):.1%}")
    # A rank whose host work outlasts its kernels times the host, which moves from one process to
    # the next on a lent machine (the repeat passes: GPU-bound runs within a few percent, host-bound
    # ones by up to half); the split is the model's, fixed before any run was compared by it.
    for label, bound in (("GPU-bound", False), ("host-bound", True)):
        errors = [abs(c.step) for c in compared if c.host_bound == bound]
        if errors:
            parts.append(f"{label} {len(errors)} at {statistics.median(errors):.1%}")
    return ", ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=("tune", "holdout"))
    parser.add_argument(
        "--set", choices=("shared", *OWN_SETS, *CHECK_SETS, *REPEATS), action="append", dest="names"
    )
    parser.add_argument("--shared", type=Path, default=SHARED, help="the shared half's directory")
    parser.add_argument(
        "--at-tables",
        action="store_true",
        help="price every run on the tables' machine, as a user's job is, not on its set's measured one",
    )
    args = parser.parse_args()
    own = [*OWN_SETS, *CHECK_SETS, *REPEATS]
    names = args.names or (["shared", *own] if args.shared.exists() else own)
    splits = (args.split,) if args.split else ("tune", "holdout")
    for name, runs in sets(names, args.shared):
        for split in splits:
            chosen = [run for run in runs if run.split == split]
            if args.at_tables:
                chosen = [replace(run, machine=TABLES_MACHINE) for run in chosen]
            if not chosen:
                continue
            compared = [compare(run) for run in chosen]
            for c in compared:
                line = f"{split:8} {c.run.id:40} {c.run.step_s:6.3f} s  {c.step:+6.1%}"
                if c.forward_backward is not None and c.optimizer is not None:
                    line += f"  fwd+bwd {c.forward_backward:+6.1%}  optimizer {c.optimizer:+6.1%}"
                if c.device is not None:
                    line += f"  kernels {c.device:+6.1%}"
                print(line)
            print(f"{name} {split}: {len(chosen)} runs, median |error|: {summary(compared)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
