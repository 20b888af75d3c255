"""Ways to show an :class:`Estimate`: a rich table, JSON, a per-module explanation, a plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from memtune.config.stacks import ReceivedDefault
from memtune.estimate import Estimate, RankEstimate
from memtune.estimate.verdict import HOST_VERDICT, MIN_RUNS, Margin
from memtune.output import SCHEMA_VERSION
from memtune.plotfile import save_figure
from memtune.tables import Cell, Column, print_lines
from memtune.tables import print_table as print_rows
from memtune.units import GiB, gib

if TYPE_CHECKING:  # memtune.perf builds on memtune.estimate (docs/architecture.md)
    from memtune.config.derived import Derived
    from memtune.perf.step import Throughput
    from memtune.perf.uncertainty import StepUncertainty

VERDICT_STYLE = {"fits": "green", "tight": "yellow", "does not fit": "bold red", HOST_VERDICT: "bold red"}
# Short names of what a checkpoint load adds (estimate/resume.py), for the 80-column table.
LOAD_PART_LABELS = {
    "optimizer.rebuilt_by_load_state_dict": "optimizer rebuilt",
    "model.linear_fc1_merged": "fc1 merged",
    "optimizer.linear_fc1_merged": "fc1 state merged",
    "optimizer.dummy_step": "dummy step",
}
# Short names of what a checkpoint save adds on the device (estimate/save.py).
SAVE_PART_LABELS = {
    "optimizer.fully_reshardable_gather": "state gathered",
    "optimizer.unscaled_state": "fp32 state copies",
}


def components(rank: RankEstimate) -> dict[str, int]:
    return {
        "weights": round(rank.state.weights),
        "grads": round(rank.state.grads),
        "optimizer": round(rank.state.optimizer),
        "activations": round(rank.activations),
        "transient": round(rank.transient),
    }


def rank_json(est: Estimate, rank: RankEstimate, global_rank: int | None = None) -> dict[str, Any]:
    data = {
        "pp_rank": rank.pp_rank,
        "layers": rank.layers,
        "in_flight_microbatches": {str(k): v for k, v in rank.in_flight.items()},
        "peak_phase": rank.peak_phase,
        "peak_bytes": rank.peak_bytes,
        "components": components(rank),
        "non_pytorch_bytes": est.non_pytorch_bytes,
        "host_bytes": rank.host_bytes,
        "host_pinned_bytes": rank.host_pinned_bytes,
        "needed_bytes": est.needed_bytes(rank),
        "fits": est.fits(rank),
        "verdict": est.verdict(rank),
        "judged_phase": est.judged_phase(rank),
        "phase_peaks": est.phase_peaks(rank),
        "resume": resume_json(est, rank),
        "save": save_json(est, rank),
        "host": host_json(est, rank),
    }
    if global_rank is not None:
        data = {"rank": global_rank, **data}
    return data


def resume_json(est: Estimate, rank: RankEstimate) -> dict[str, Any] | None:
    """The rank's resume phase beside its training peak; None when the job does not resume."""
    resume = est.resume(rank)
    if resume is None:
        return None
    return {
        "format": est.derived.resume_format,
        "load_bytes": resume.load_bytes,
        "first_step_bytes": resume.first_step_bytes,
        "peak_bytes": resume.peak_bytes,
        "phase": resume.phase,
        "load_parts": {name: round(nbytes) for name, nbytes in resume.parts.items()},
    }


def save_json(est: Estimate, rank: RankEstimate) -> dict[str, Any] | None:
    """The rank's save phase beside its training peak; None when the job does not save."""
    save = est.save(rank)
    if save is None:
        return None
    d = est.derived
    return {
        "format": d.save_format,
        "optimizer_sharding": d.optimizer_save_sharding,
        "async": d.async_save,
        "peak_bytes": save.peak_bytes,
        "resident_bytes": round(save.resident),
        "parts": {name: round(nbytes) for name, nbytes in save.parts.items()},
        "host_staged_bytes": save.host_staged_bytes,
        "host_transient_bytes": save.host_transient_bytes,
    }


def host_json(est: Estimate, rank: RankEstimate) -> dict[str, Any]:
    """The host memory of the rank's processes by part, and of its node against the node's RAM."""
    host = est.host(rank)
    return {
        "rank_bytes": host.rank_bytes,
        "parts": {name: round(nbytes) for name, nbytes in host.parts.items()},
        "ranks_per_node": host.ranks_per_node,
        "per_node_bytes": host.per_node_bytes,
        "node_capacity_bytes": host.capacity_bytes,
        "fits": host.fits,
    }


def throughput_json(throughput: Throughput, uncertainty: StepUncertainty | None = None) -> dict[str, Any]:
    """The predicted step's figures with their uncertainty, null with the reason when the step
    was not simulated."""
    p = throughput.prediction
    return {
        "step_time_s": p.step_time_s if p else None,
        "step_time_uncertainty": uncertainty_json(uncertainty) if p and uncertainty else None,
        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu if p else None,
        "model_tflops_per_gpu": p.model_tflops_per_gpu if p else None,
        "unmeasured": list(p.unmeasured) if p else [],
        "not_simulated": throughput.not_simulated,
    }


def uncertainty_json(u: StepUncertainty) -> dict[str, Any]:
    """The step time's uncertainty (memtune/perf/uncertainty.py): a share of the prediction."""
    return {
        "relative": u.error,
        "statistic": u.statistic,
        "held_out_runs": u.runs,
        "family": u.family,
        "held_out_set": u.held_out,
        "source": u.description,
    }


def throughput_line(throughput: Throughput, uncertainty: StepUncertainty | None = None) -> str:
    p = throughput.prediction
    if p is None:
        return f"Predicted step: not simulated, {throughput.not_simulated}"
    error = f" ± {uncertainty.error:.0%}" if uncertainty else ""
    return (
        f"Predicted step: {p.step_time_s:.3g} s{error}, {p.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, "
        f"{p.model_tflops_per_gpu:.3g} model TFLOP/s per GPU"
    )


def estimate_json(
    est: Estimate,
    throughput: Throughput,
    global_rank: int | None = None,
    uncertainty: StepUncertainty | None = None,
    ignored: Sequence[str] = (),
) -> dict[str, Any]:
    """One document shape with or without ``global_rank``: with it, ``ranks`` holds only that
    rank's pipeline stage, tagged with the global rank. ``ignored`` are the keys the loader did
    not use, which ``assumptions`` lists."""
    d = est.derived
    if global_rank is None:
        ranks = [rank_json(est, r) for r in est.ranks]
    else:
        ranks = [rank_json(est, est.rank(global_rank), global_rank)]
    return {
        "schema_version": SCHEMA_VERSION,
        "gpu": est.gpu.name,
        "capacity_bytes": est.capacity_bytes,
        "fragmentation_margin": est.margin,
        "uncertainty_margins": est.uncertainty,
        "verdict_margin": verdict_margin_json(est.verdict_margin),
        "world_size": d.world_size,
        "parallelism": {
            "tp": d.tp,
            "pp": d.pp,
            "vpp": d.vpp,
            "cp": d.cp,
            "ep": d.ep,
            "etp": d.etp,
            "dp": d.dp,
        },
        "num_microbatches": d.num_microbatches,
        "worst_pp_rank": est.worst.pp_rank,
        "verdict": est.verdict(),
        "judged_phase": est.judged_phase(),
        "host_bytes_per_node": est.host_bytes_per_node,
        "host_capacity_bytes_per_node": est.derived.host_memory_bytes_per_node,
        "host_fits": est.host_fits,
        "ranks": ranks,
        "throughput": throughput_json(throughput, uncertainty),
        "assumptions": assumptions(est, ignored),
    }


def safety_margin_explained(m: Margin, uncertainty: dict[str, float]) -> str:
    """What the verdict's safety margin (the part beyond fragmentation) rests on: the TE margins
    where they are the larger, else the family's observed worst under-estimate, or the widest
    where the job is not measured."""
    if m.a_priori >= m.fragmentation + m.calibrated:
        return (
            f"The {m.error:.1%} safety margin covers Transformer Engine paths the source does not pin down: "
            + (", ".join(f"{share:.0%} for {path}" for path, share in uncertainty.items()))
        )
    if m.basis is None:
        why = (
            f"{', '.join(m.thin)}: fewer than {MIN_RUNS} tune runs"
            if m.thin
            else f"{' + '.join(m.families)} never measured together"
        )
        return f"The {m.calibrated:.1%} safety margin is the widest margin any family needed ({why})."
    b = m.basis
    seen = (
        f"the peak exceeded the estimate by at most {b.worst_under:.1%}"
        if b.worst_under
        else "no peak exceeded the estimate"
    )
    return (
        f"The {m.calibrated:.1%} safety margin is for {b.family} ({seen} on {b.runs} tune runs of this family,"
        f" {b.confidence:.0%} confidence that a new job of the family stays within it; docs/verdict.md)."
    )


def verdict_margin_json(m: Margin) -> dict[str, Any]:
    return {
        "total": m.total,
        "calibrated": m.calibrated,
        "families": list(m.families),
        "measured": m.measured,
        "basis": asdict(m.basis) | {"runs": m.basis.runs, "confidence": m.basis.confidence}
        if m.basis
        else None,
        "thin_families": list(m.thin),
    }


def assumptions(est: Estimate, ignored: Sequence[str] = ()) -> list[str]:
    d, job = est.derived, est.job
    notes = _defaults_assumed(est, ignored)
    notes.append(_implementation_note(est))
    if est.flavour.transformer_engine:
        notes.append(
            "Transformer Engine path modeled from TE's source (norm fused into the next linear); not measured on this project's GPU"
        )
    if d.is_moe:
        imbalance = est.options.moe_routing_imbalance
        notes.append(
            f"MoE: each expert rank receives the balanced token share x {imbalance:g}"
            " (--moe-imbalance; 1 = balanced routing, as with moe_router_force_load_balancing)"
        )
    if job.peft is not None:
        notes.append(
            "LoRA: frozen base weights keep no gradient or optimizer state, and frozen Megatron-Core linears keep no"
            " inputs (the adapters keep what LoRA-A needs); TE's frozen linears are assumed alike"
        )
    optimizer = (
        "torch's foreach AdamW (what Megatron falls back to without TE or Apex)"
        if job.model.transformer_impl == "local"
        else "TE/Apex FusedAdam"
    )
    notes.append(f"optimizer step: {optimizer}")
    notes.append(_outside_pytorch_note(est))
    if d.cuda_graphs:
        notes.append(
            "CUDA graphs: the static buffers of captured scopes (inside PyTorch) are not modeled; expect more"
        )
    if est.derived.resumes:
        notes.append(
            f"resume ({est.derived.resume_format}): the checkpoint loads beside the model state, before any"
            " activation; its copies are freed when load_checkpoint returns (docs/resume.md); measured with"
            " torch's AdamW (`memtune bench resume`), Transformer Engine's FusedAdam path modeled from source"
        )
    notes.extend(not_modeled(est))
    notes.extend(checkpoint_notes(est))
    notes.extend(host_notes(est))
    notes.append(
        f"fragmentation margin {est.margin:.0%} of the peak"
        f" (expandable segments {'on' if est.expandable_segments else 'off'})"
    )
    return notes


def _defaults_assumed(est: Estimate, ignored: Sequence[str]) -> list[str]:
    """Notes on the keys left unused and the sizes the job does not give, with what is assumed."""
    d, job = est.derived, est.job
    notes = []
    if ignored:
        notes.append(f"not used, their memory effect not modeled: {', '.join(ignored)}")
    if d.world_size_assumed:
        notes.append(f"cluster.num_gpus not given: assumed {d.world_size} GPUs (data-parallel size {d.dp})")
    # a Hugging Face config.json, for one, gives the architecture and none of the job's sizes
    if "seq_length" not in job.model.model_fields_set:
        notes.append(f"model.seq_length not given: assumed {job.model.seq_length} (Megatron-Core's default)")
    if not job.train.model_fields_set & {"micro_batch_size", "global_batch_size"}:
        notes.append(
            f"train.micro_batch_size/global_batch_size not given: assumed {d.micro_batch_size} and "
            f"{d.global_batch_size} ({d.num_microbatches} microbatches)"
        )
    return notes


def _implementation_note(est: Estimate) -> str:
    """The layer implementation and the attention and softmax kernels the estimate assumes."""
    d, fl, job = est.derived, est.flavour, est.job
    impl = (
        "Transformer Engine spec" if fl.transformer_engine else "local spec (torch norms, Megatron linears)"
    )
    softmax = (
        ("Transformer Engine's" if fl.transformer_engine else "Megatron's") + " fused softmax kernel"
        if d.fused_softmax_kernel
        else f"torch softmax in {d.softmax_dtype}"
        + (
            ", Transformer Engine's kernel shape rule fails"
            if fl.transformer_engine
            else ", masked_softmax_fusion asked for but the kernel's shape rule fails"
            if job.model.masked_softmax_fusion
            else ""
        )
    )
    attn = (
        "flash/fused attention (no s x s scores kept)"
        if fl.flash_attention
        else f"unfused attention ({softmax}, s x s scores kept)"
    )
    return f"{impl}; {attn}"


def _outside_pytorch_note(est: Estimate) -> str:
    """What the estimate counts outside PyTorch: the CUDA context, NCCL communicators, CUDA graphs."""
    outside = est.outside
    groups = ", ".join(outside.communicators) or "none"
    graphs = (
        f" + ~{outside.cuda_graph_bytes / GiB:.2g} GiB of instantiated CUDA graphs"
        if est.derived.cuda_graphs
        else ""
    )
    return (
        f"outside PyTorch: CUDA context and kernels ~{outside.context_bytes / GiB:.2g} GiB"
        f" + ~{outside.per_communicator_bytes / GiB:.2g} GiB per NCCL communicator ({groups}){graphs}"
    )


def checkpoint_notes(est: Estimate) -> list[str]:
    """What the save phase assumes, and the checkpoint keys the job sets that change no memory."""
    d, c = est.derived, est.job.checkpoint
    notes = []
    if not d.saves:
        notes.append(
            "checkpoint.save not set: no save phase is judged (a job that saves: set it, docs/save.md)"
        )
    elif est.save(est.ranks[0]) is None:
        notes.append(f"save ({d.save_format}): not modeled; training and resume peaks only")
    else:
        sharding = d.optimizer_save_sharding
        notes.append(
            f"save ({d.save_format}"
            + (f", distributed optimizer {sharding}" if sharding else "")
            + (", async in a persistent worker" if d.async_save else "")
            + "): between iterations, beside the model state and run-long buffers; modeled from"
            " Megatron-Core's and Megatron-LM's source, measured on the local spec (`memtune bench resume`)"
        )
        if c.async_save and not d.async_save:
            notes.append(
                "checkpoint.async_save without use_persistent_ckpt_worker: Megatron-LM saves synchronously"
                " (Megatron-Bridge refuses it); estimated as a synchronous save"
            )
    if d.resumes and c.load is None:
        notes.append("checkpoint.pretrained_checkpoint: loaded as with finetune, without the optimizer state")
    unused = [
        name
        for name, on in (
            ("checkpoint.load_rng", c.load_rng is False),
            ("checkpoint.save_rng", c.save_rng is False),
            ("checkpoint.ckpt_assume_constant_structure", c.ckpt_assume_constant_structure),
        )
        if on
    ]
    if unused:
        notes.append(
            f"{', '.join(unused)}: no memory effect (the RNG state is kilobytes; a cached save plan)"
        )
    return notes


def host_notes(est: Estimate) -> list[str]:
    """Where the host memory figure comes from."""
    host = est.host(est.ranks[0])
    capacity = (
        f"{host.capacity_bytes / GiB:,.0f} GiB per node"
        + ("" if est.job.cluster.host_memory_gib is not None else " (the reference system's)")
        if host.capacity_bytes is not None
        else "unknown (no reference system for this GPU; set cluster.host_memory_gib)"
    )
    return [
        f"host memory: {host.ranks_per_node} ranks per node, each a training process (measured resident set),"
        " 4 data loader workers (train and validation, 2 each) and what it offloads or stages; node RAM "
        + capacity
    ]


def not_modeled(est: Estimate) -> list[str]:
    """Flags the job sets whose memory effect the estimate leaves out, with its direction."""
    m, d = est.job.model, est.derived
    notes = []
    if m.cpu_offloading:
        notes.append(
            "cpu_offloading: the offloaded layers' activations leave the device and come back one layer at a"
            " time in backward; modeled from source, not measured (needs Transformer Engine)"
        )
    if m.fine_grained_activation_offloading and m.offload_modules and not m.cpu_offloading:
        notes.append(
            f"fine_grained_activation_offloading ({', '.join(m.offload_modules)}): measured on the local spec,"
            " the Transformer Engine spec's groups from source; saved tensors of at least"
            f" {m.min_offloaded_tensor_size} elements move to pinned host memory at each module's end, except the"
            " last group of each module in the first microbatch to run backward (every microbatch on the last"
            " stage)"
            + (
                f" and the later {1 - m.activation_offload_fraction:.0%} of the rest"
                if m.activation_offload_fraction < 1
                else ""
            )
            + "; backward reloads them ahead by the number of groups kept, each reload once the module"
            " before it has finished its backward; layers inside full-recompute checkpoints are not"
            " offloaded; the first (warm-up) iteration offloads everything"
        )
    orphaned = max(r.state.orphaned_optimizer_copies for r in est.ranks)
    if est.job.optimizer.optimizer_cpu_offload and orphaned:
        notes.append(
            f"optimizer_cpu_offload: includes {orphaned / GiB:.2f} GiB of fp32 device copies of the first"
            " HybridDeviceOptimizer, which get_megatron_optimizer replaces but a reference cycle keeps until a"
            " full garbage collection; Python's automatic collector may run one at any time (the MoE router's"
            " first torch.compile often triggers it), so the peak lies between this bound and that much less;"
            " train.manual_gc (Megatron-LM's --manual-gc) collects before training and removes them"
        )
    if m.tp_comm_overlap:
        notes.append(
            "tp_comm_overlap: Transformer Engine's userbuffers are registered cudaMalloc memory, outside"
            " PyTorch's counters (in 'other' only as far as the communicators go); the overlapped GEMMs' own"
            " workspace is counted"
        )
    if m.moe_permute_fusion and d.is_moe:
        notes.append(
            "moe_permute_fusion: TE's fused permutation is modeled as the unfused one (fresh copies of the"
            " routed tokens); it likely keeps slightly less"
        )
    if m.defer_embedding_wgrad_compute and not d.deferred_wgrad_microbatches:
        notes.append(
            "defer_embedding_wgrad_compute: without PP > 1 and gradient_accumulation_fusion Megatron-Core refuses it;"
            " estimated as if off"
        )
    if m.cross_entropy_loss_fusion and m.cross_entropy_fusion_impl == "te":
        notes.append(
            "cross entropy: TE's fused kernel modeled from its source (gradient written into the bf16 logits);"
            " not measured here"
        )
    return notes


# A pipeline rank is its row: its name, its peak and what is left of the GPU at the peak define
# it; the components and the counts behind them give way on a narrow terminal, the counts first.
RANK_COLUMNS = (
    Column("pp", "left"),
    Column("layers", keep=20),
    Column("mb", keep=30),
    Column("weights", keep=70),
    Column("grads", keep=60),
    Column("optim", keep=65),
    Column("activ", keep=80),
    Column("trans", keep=55),
    Column("peak"),
    Column("other", keep=50),
    Column("free"),
)
RESUME_COLUMNS = (
    Column("pp", "left"),
    Column("train", keep=60),
    Column("load", keep=80),
    Column("1st step", keep=70),
    Column("resume"),
    Column("free"),
    Column("load adds (largest)", "left", keep=40, wrap=True),
)


def _free(est: Estimate, peak_bytes: int) -> Text:
    """Capacity left at the peak, before any margin (docs/verdict.md, "free"); red below 0."""
    free = est.capacity_bytes - peak_bytes - est.non_pytorch_bytes
    return Text(gib(free), style="red" if free < 0 else "")


def print_table(
    est: Estimate,
    console: Console,
    throughput: Throughput,
    only: RankEstimate | None = None,
    uncertainty: StepUncertainty | None = None,
) -> None:
    d = est.derived
    title = (
        f"Peak memory per pipeline rank, GiB (2^30 B) · {est.gpu.name}: {est.capacity_bytes / GiB:.2f} GiB\n"
        f"TP{d.tp} PP{d.pp}"
        + (f" VPP{d.vpp}" if d.vpp > 1 else "")
        + f" CP{d.cp}"
        + (f" EP{d.ep} ETP{d.etp}" if d.is_moe else "")
        + f" DP{d.dp}, {d.world_size} GPUs, {d.num_microbatches} microbatches"
    )
    worst = est.worst
    shown = [only] if only else est.ranks
    rows: list[list[Cell]] = [
        [
            f"{rank.pp_rank}" + ("*" if rank is worst and len(est.ranks) > 1 else ""),
            str(rank.layers),
            str(sum(rank.in_flight.values())),
            *(gib(v) for v in components(rank).values()),
            gib(rank.peak_bytes),
            gib(est.non_pytorch_bytes),
            _free(est, rank.peak_bytes),
        ]
        for rank in shown
    ]
    print_rows(
        console, RANK_COLUMNS, rows, title=title, row_styles=["bold" if r is worst else "" for r in shown]
    )
    print_resume(est, console, shown)
    print_save(est, console, shown)
    rank = only or est.verdict_rank
    if len(est.ranks) > 1 and not only:
        print_lines(
            console,
            Text(
                "* most-loaded rank · mb: microbatch-chunks held at the peak · activ: saved activations · "
                "trans: working set at the peak + workspaces · other: memory outside PyTorch · "
                "free: capacity left at the peak, before margins",
                style="dim",
            ),
        )
    print_lines(console, verdict_line(est, rank))
    print_lines(console, Text(throughput_line(throughput, uncertainty)))
    print_lines(console, host_line(est, rank))
    print_lines(console, Text("Assumptions:", style="dim"))
    for note in assumptions(est):
        print_lines(console, Text(f"  - {note}", style="dim"))


PHASE_WORDS = {
    "optimizer step": "the optimizer step",
    "checkpoint load": "the checkpoint load",
    "first iteration": "the first iteration after the load",
    "checkpoint save": "the checkpoint save",
}


def margins_phrase(m: Margin) -> str:
    """The verdict's margins in plain words: "a 2% fragmentation margin and a 2.9% safety margin"."""
    return f"a {m.fragmentation:.0%} fragmentation margin and a {m.error:.1%} safety margin"


def verdict_line(est: Estimate, rank: RankEstimate) -> Text:
    """The verdict in plain words (docs/verdict.md), then what the rank needs and why; what the
    safety margin rests on is ``--explain``'s."""
    verdict = est.verdict(rank)
    needed, capacity = est.needed_bytes(rank), est.capacity_bytes
    peak = est.verdict_peak_bytes(rank)
    device_phase = max(est.phase_peaks(rank).items(), key=lambda kv: (kv[1], kv[0] == "training"))[0]
    phase = rank.peak_phase if device_phase == "training" else device_phase
    margins = margins_phrase(est.verdict_margin)
    if verdict == HOST_VERDICT:
        host = est.host(rank)
        plain = (
            f"does not fit in host memory: a node's ranks need {gib(host.per_node_bytes)} GiB of its "
            f"{gib(host.capacity_bytes or 0)} GiB of RAM"
        )
    elif verdict == "fits":
        plain = f"fits, with {gib(capacity - needed)} GiB to spare after {margins}"
    elif verdict == "tight":
        plain = f"tight: the peak fits, but {gib(needed - capacity)} GiB short of {margins}"
    else:
        over = peak + est.non_pytorch_bytes - capacity
        plain = f"does not fit: even before any margin it needs {gib(over)} GiB more than the GPU has"
    return Text.assemble(
        ("Verdict: ", "bold"),
        (plain, VERDICT_STYLE[verdict]),
        f". Pipeline rank {rank.pp_rank} needs {gib(needed)} of {gib(capacity)} GiB: peak {gib(peak)} "
        f"during {PHASE_WORDS.get(phase, phase)}, {gib(needed - peak - est.non_pytorch_bytes)} of margins and "
        f"{gib(est.non_pytorch_bytes)} outside PyTorch.",
    )


def print_resume(est: Estimate, console: Console, ranks: Sequence[RankEstimate]) -> None:
    """A row per rank for the resume phase, beside the training peak above it."""
    d = est.derived
    if not d.resumes:
        return
    if est.resume(ranks[0]) is None:
        _unmodeled(console, "Resume", d.resume_format)
        return
    rows: list[list[Cell]] = []
    for rank in ranks:
        resume = est.resume(rank)
        assert resume is not None  # the format is modeled for every rank alike
        rows.append(
            [
                str(rank.pp_rank),
                gib(rank.peak_bytes),
                gib(resume.load_bytes),
                gib(resume.first_step_bytes),
                gib(resume.peak_bytes),
                _free(est, resume.peak_bytes),
                _largest_addition(resume.load_bytes - resume.resident, resume.parts, LOAD_PART_LABELS),
            ]
        )
    title = (
        f"Resume from a {d.resume_format} checkpoint"
        + ("" if d.optimizer_loaded_at_resume else " (no optimizer state)")
        + ", GiB"
    )
    print_rows(console, RESUME_COLUMNS, rows, title=title)


ACTIVATION_COLUMNS = (Column("tensor", "left", wrap=True), Column("GiB"), Column("share"))


def print_explain(
    est: Estimate,
    console: Console,
    rank: RankEstimate | None = None,
    defaults: Sequence[ReceivedDefault] = (),
    uncertainty: StepUncertainty | None = None,
) -> None:
    rank = rank or est.worst
    total = sum(rank.modules.values())
    rows = [
        (name, gib(nbytes), f"{nbytes / total:.1%}")
        for name, nbytes in sorted(rank.modules.items(), key=lambda kv: -kv[1])
    ]
    title = (
        f"Activations held by pipeline rank {rank.pp_rank} at its forward/backward peak: {gib(total)} of"
        f" {gib(rank.forward_backward_bytes)} GiB, all in-flight microbatches"
    )
    if rank.peak_phase != "forward/backward":
        title += f" (its peak, {gib(rank.peak_bytes)} GiB, is in {PHASE_WORDS[rank.peak_phase]}, once they are freed)"
    if rows:
        print_rows(console, ACTIVATION_COLUMNS, rows, title=title)
    else:
        print_lines(console, Text(f"{title}: none", style="bold"))
    s = rank.state
    print_lines(
        console,
        Text(
            f"Model state: {gib(s.weights)} weights + {gib(s.grads)} gradient buffer + {gib(s.optimizer)} optimizer"
            f" ({s.trainable / 1e9:.3f} B trainable parameters, optimizer state for {s.optimizer_params / 1e9:.3f} B);"
            f" optimizer-step temporaries {gib(s.optimizer_step_transient)} GiB."
        ),
    )
    print_lines(
        console,
        Text(
            f"Transient at the peak (largest module working set + persistent workspaces): {gib(rank.transient)} GiB."
        ),
    )
    if rank.te_allocations:
        print_lines(
            console,
            Text(
                "Transformer Engine's own buffers, kept all run (in the transient): "
                + ", ".join(f"{name} {gib(nbytes)} GiB" for name, nbytes in rank.te_allocations.items())
                + "."
            ),
        )
    print_lines(console, Text(safety_margin_explained(est.verdict_margin, est.uncertainty)))
    if uncertainty:
        print_lines(console, Text(uncertainty.basis() + "."))
    print_lines(console, Text("How the layers were modeled:", style="dim"))
    for note in flavour_notes(est):
        print_lines(console, Text(f"  - {note}", style="dim"))
    print_lines(
        console,
        Text(
            f"Defaults the job took from its stack ({est.job.defaults}; memtune/config/stacks.py):"
            + ("" if defaults else " none"),
            style="dim",
        ),
    )
    for default in defaults:
        print_lines(console, Text(f"  - {default}", style="dim"))


def flavour_notes(est: Estimate) -> list[str]:
    """What the estimate assumes each module keeps, for the implementation in use."""
    d, fl = est.derived, est.flavour
    notes = []
    if fl.transformer_engine:
        notes.append(
            "TE LayerNormLinear keeps the norm input, its fp32 statistics and the norm output (the local shard under SP, re-gathered in backward)"
        )
    else:
        notes.append(
            "torch norms keep their input and fp32 statistics; Megatron's linears keep their input (the local shard under SP)"
        )
    if fl.flash_attention:
        notes.append(
            "flash/fused attention keeps q, k, v (k and v at query-group width), the output and the fp32 log-sum-exp; no s x s matrix"
        )
    else:
        softmax = (
            "Megatron's fused softmax kernel keeps only its bf16 output (s x s per head)"
            if d.fused_softmax_kernel
            else "the torch softmax keeps its fp32 output and the bf16 probabilities (s x s per head) and a causal mask"
            if d.softmax_dtype == "fp32"
            else "the torch softmax in half precision keeps its output (s x s per head) and a causal mask"
        )
        notes.append(f"unfused attention repeats K and V to all heads; {softmax}")
    if fl.fused_activation:
        notes.append(
            "bias_activation_fusion: the GLU/GeLU kernel keeps only the fc1 output; fc2 keeps its input"
        )
    else:
        notes.append(
            "unfused GLU keeps the fc1 output, the activated gate, the offset linear half and the product fc2 takes"
        )
    if fl.fp8_activations:
        notes.append(_fp8_note(d))
    ce = {
        "unfused": "cross entropy keeps fp32 softmax of the logits (4 bytes x tokens x vocab / TP); bf16 logits exist beside it in forward",
        "native": "native fused cross entropy (torch.compile) keeps the fp32 softmax and holds one more fp32 copy of the logits in forward",
        "te": "TE's fused cross entropy keeps only the bf16 logits, into which it writes the gradient",
    }[d.cross_entropy]
    notes.append(f"last stage: {ce}")
    if d.deferred_wgrad_microbatches:
        notes.append(
            f"last stage: defer_embedding_wgrad_compute keeps the logits gradient and the output layer's input of"
            f" {d.deferred_wgrad_microbatches} microbatches until the schedule's end"
        )
    return notes


def _fp8_note(d: Derived) -> str:
    """What an FP8 job of Transformer Engine keeps in FP8 (docs/fusions.md)."""
    linears = "FP8: TE keeps linear inputs in FP8 (1 byte); norms stay bf16"
    if d.fp8_attention:
        output = "in FP8" if d.attention_fp8_recipe == "delayed" else "in bf16"
        return f"{linears}; FP8 attention keeps q, k and v in FP8 and its output {output}"
    if d.attention_saved_output_bytes:
        return f"{linears}, as does attention, which keeps its bf16 output beside linear_proj's FP8 copy"
    return f"{linears}, as does attention"


def plot(est: Estimate, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(est.ranks) + 2), 4))
    names = [f"pp {r.pp_rank}" for r in est.ranks]
    bottom = [0.0] * len(est.ranks)
    parts = {name: [components(r)[name] / GiB for r in est.ranks] for name in components(est.ranks[0])}
    parts["outside PyTorch"] = [est.non_pytorch_bytes / GiB] * len(est.ranks)
    for name, values in parts.items():
        ax.bar(names, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.axhline(est.capacity_bytes / GiB, color="black", linestyle="--", label=f"{est.gpu.name} capacity")
    ax.set_ylabel("GiB (2^30 bytes)")
    ax.set_title("memtune estimate: peak memory per pipeline rank")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def host_line(est: Estimate, rank: RankEstimate) -> Text:
    """A node's host memory against its RAM, with the largest parts of one rank's."""
    host = est.host(rank)
    parts = sorted(host.parts.items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{name} {gib(nbytes)}" for name, nbytes in parts[:3])
    of = "" if host.capacity_bytes is None else f" of {gib(host.capacity_bytes)} GiB"
    return Text.assemble(
        ("Host memory: ", "bold"),
        (f"{gib(host.per_node_bytes)} GiB per node{of}", "" if host.fits else "bold red"),
        f" ({host.ranks_per_node} ranks x {gib(host.rank_bytes)} GiB: {shown})",
    )


SAVE_COLUMNS = (
    Column("pp", "left"),
    Column("train", keep=60),
    Column("save"),
    Column("free"),
    Column("staged", keep=70),
    Column("host", keep=50),
    Column("save adds (largest)", "left", keep=40, wrap=True),
)


def print_save(est: Estimate, console: Console, ranks: Sequence[RankEstimate]) -> None:
    """A row per rank for the save phase, beside the training peak, and what it holds on the host."""
    d = est.derived
    if not d.saves:
        return
    if est.save(ranks[0]) is None:
        _unmodeled(console, "Save", d.save_format)
        return
    rows: list[list[Cell]] = []
    for rank in ranks:
        save = est.save(rank)
        assert save is not None  # the format is modeled for every rank alike
        rows.append(
            [
                str(rank.pp_rank),
                gib(rank.peak_bytes),
                gib(save.peak_bytes),
                _free(est, save.peak_bytes),
                gib(save.host_staged_bytes),
                gib(save.host_transient_bytes),
                _largest_addition(save.peak_bytes - save.resident, save.parts, SAVE_PART_LABELS),
            ]
        )
    how = d.optimizer_save_sharding
    title = (
        f"Save in {d.save_format}"
        + (f" ({how})" if how else "")
        + (", async" if d.async_save else "")
        + ("" if d.optimizer_saved else " (no optimizer state)")
        + ", GiB"
    )
    print_rows(console, SAVE_COLUMNS, rows, title=title)


def _unmodeled(console: Console, phase: str, fmt: str) -> None:
    print_lines(console, Text(f"{phase}: checkpoint format {fmt} is not modeled; training peak only"))


def _largest_addition(added: float, parts: dict[str, float], labels: dict[str, str]) -> str:
    """What a phase adds over its resident state, named by its largest part."""
    part = max(parts, key=parts.__getitem__, default=None)
    return f"{gib(added)} ({labels[part]})" if part else "0.00"
