"""Every Megatron fact has one home (memtune/config/derived.py and the small modules it reads).

The first tests are the disagreements found when the same fact was computed in several places;
the last one fails when a consumer computes one of these facts itself again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memtune.check import gate, run_checks
from memtune.check.context import Context
from memtune.config import derive, load_job
from memtune.config.changes import Change, with_changes
from memtune.diagnose import _config_expandable
from memtune.estimate import estimate
from memtune.estimate.flavour import flavour_of
from memtune.measure.plan import plan_measurement
from memtune.units import GiB

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama3-70b-sft.yaml"


def test_distributed_optimizer_from_either_section_is_in_effect_everywhere():
    loaded = load_job(EXAMPLE)
    both = estimate(gate(loaded.job)).worst.peak_bytes
    ddp_only = with_changes(loaded.job, [Change("optimizer.use_distributed_optimizer", False)])
    assert derive(ddp_only).use_distributed_optimizer
    assert Context.of(ddp_only).distributed_optimizer
    # Regression: the estimator used to read only the optimizer section (94.5 GiB instead of 69.1).
    assert estimate(gate(ddp_only)).worst.peak_bytes == both
    neither = with_changes(
        ddp_only, [Change("ddp.use_distributed_optimizer", False), Change("ddp.overlap_param_gather", False)]
    )
    # Unsharded over DP 2, Adam's fp32 master and moments (12 bytes per parameter) double: > 20 GiB.
    assert estimate(gate(neither)).worst.peak_bytes - both > 20 * GiB
    assert "OPT001" in {f.code for f in run_checks(ddp_only)}


@pytest.mark.parametrize(
    "cuda_conf, new_conf, expandable",
    [
        # torch reads PYTORCH_CUDA_ALLOC_CONF first and the new name only when it is unset.
        ("expandable_segments:False", "expandable_segments:True", False),
        ("expandable_segments:True", "expandable_segments:False", True),
        (None, "expandable_segments:True", True),
        ("expandable_segments:true", None, False),  # torch accepts only True/False
    ],
)
def test_allocator_settings_agree_across_commands(cuda_conf, new_conf, expandable):
    job = with_changes(
        load_job(EXAMPLE).job,
        [
            Change("env.PYTORCH_CUDA_ALLOC_CONF", cuda_conf),
            Change("env.PYTORCH_ALLOC_CONF", new_conf),
            Change("env.torch_version", "2.11.0"),
        ],
    )
    est = estimate(gate(job))
    assert derive(job).allocator.expandable_segments is expandable
    assert Context.of(job).expandable_segments is expandable
    assert _config_expandable(type("Loaded", (), {"job": job})()) is expandable
    assert est.margin == (0.02 if expandable else 0.08)


def test_new_allocator_name_is_ignored_before_torch_2_11():
    job = with_changes(
        load_job(EXAMPLE).job,
        [
            Change("env.PYTORCH_CUDA_ALLOC_CONF", None),
            Change("env.PYTORCH_ALLOC_CONF", "expandable_segments:True"),
            Change("env.torch_version", "2.9.1"),
        ],
    )
    assert not derive(job).allocator.expandable_segments
    assert estimate(gate(job)).margin == 0.08
    assert "ENV006" in {f.code for f in run_checks(job)}


def test_estimate_and_measure_map_a_global_rank_to_the_same_stage():
    job = with_changes(
        load_job(EXAMPLE).job,
        [
            Change("model.virtual_pipeline_model_parallel_size", None),
            Change("model.transformer_impl", "local"),
        ],
    )
    checked = gate(job)
    est = estimate(checked)
    for rank in range(0, checked.derived.world_size, 3):
        assert est.pp_rank_of(rank) == plan_measurement(checked, rank).pp_rank == rank // 8


def _graphs_on_tests(path: Path) -> list[int]:
    """Lines comparing ``<x>.cuda_graph_impl`` with ``"none"``: the "CUDA graphs on" fact."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            reads_impl = any(isinstance(o, ast.Attribute) and o.attr == "cuda_graph_impl" for o in operands)
            if reads_impl and any(isinstance(o, ast.Constant) and o.value == "none" for o in operands):
                lines.append(node.lineno)
    return lines


def test_cuda_graphs_on_is_read_from_derived():
    package = ROOT / "memtune"
    offenders = [
        f"{path.relative_to(package).as_posix()}:{line} tests cuda_graph_impl against 'none';"
        " use Derived.cuda_graphs"
        for path in sorted(package.rglob("*.py"))
        if not path.relative_to(package).as_posix().startswith(("config/derived.py", *EXEMPT))
        for line in _graphs_on_tests(path)
    ]
    assert offenders == []


# --- no second home ----------------------------------------------------------------------
# (attribute read, files allowed to read it, why)
FACT_READS = {
    "use_distributed_optimizer": (
        {"config/derived.py", "check/rules/optimizer.py"},  # OPT001 compares the two flags by design
        "Derived.use_distributed_optimizer",
    ),
    # stacks.py: Megatron-LM reduces gradients in fp32 exactly when it trains in bf16
    "bf16": ({"config/derived.py", "check/rules/optimizer.py", "config/stacks.py"}, "Derived.param_dtype"),
    "fp16": ({"config/derived.py", "check/rules/optimizer.py"}, "Derived.param_dtype"),
    "grad_reduce_in_fp32": ({"config/derived.py", "measure/plan.py"}, "Derived.grad_dtype"),
    # The DP overlaps in effect: Bridge's CommOverlapConfig may decide them by the DP size.
    # OPT checks overlap_param_gather as written; the loaders and the planner's query write them.
    "overlap_grad_reduce": (
        {"config/derived.py", "perf/simulate.py", "config/loaders/bridge.py"},
        "Derived.overlap_grad_reduce",
    ),
    "overlap_param_gather": (
        {"config/derived.py", "perf/simulate.py", "check/rules/optimizer.py", "config/loaders/bridge.py"},
        "Derived.overlap_param_gather",
    ),
    "bucket_size": ({"config/derived.py"}, "Derived.bucket_size"),
    "torch_version": ({"config/derived.py"}, "Derived.torch_version"),
    "megatron_core_version": ({"config/derived.py"}, "Derived.mcore_version"),
    "PYTORCH_CUDA_ALLOC_CONF": (
        {"config/derived.py", "check/rules/environment.py", "measure/plan.py"},
        "Derived.allocator",
    ),
    "PYTORCH_ALLOC_CONF": (
        {"config/derived.py", "check/rules/environment.py", "measure/plan.py"},
        "Derived.allocator",
    ),
    "data_parallel_sharding_strategy": (
        {"config/derived.py", "check/rules/optimizer.py"},
        "Derived.fsdp_strategy",
    ),
    "attention_backend": (
        # REC011 quotes the value in its message
        {"config/derived.py", "measure/plan.py", "estimate/render.py", "check/rules/recompute.py"},
        "Derived.flash_attention",
    ),
    # The full-recompute replay rule: which layers of a chunk are checkpointed, and replayed.
    # REC001-REC003 validate the settings as written, as Megatron does; fix/changes.py compares
    # the configured count with the one it would propose.
    "recompute_method": ({"config/derived.py", "check/rules/recompute.py"}, "Derived.full_recompute_groups"),
    "recompute_num_layers": (
        {"config/derived.py", "check/rules/recompute.py", "fix/changes.py"},
        "Derived.full_recompute_groups",
    ),
    # The kernel flavour (estimate/flavour.py's Flavour is a view of these Derived facts).
    "bias_activation_fusion": ({"config/derived.py"}, "Derived.fused_activation"),
    "deallocate_pipeline_outputs": ({"config/derived.py"}, "Derived.pipeline_outputs_kept"),
    "cpu_offloading_activations": (
        # LoRA's re-gather eligibility names activation offloading as its reason
        {"config/derived.py", "peft/model.py"},
        "Derived.activation_offload_layers",
    ),
}
# Loaders translate foreign formats into the schema and the GPU-side runner reads Megatron's own
# config objects: neither derives facts.
EXEMPT = ("config/loaders/", "measure/runner.py", "config/schema.py")


# A read of the raw config: ``job.optimizer.x``, ``model.x``, ``m.x``, ``env.x`` and the like.
CONFIG_OBJECTS = {"model", "optimizer", "ddp", "env", "job", "m", "opt", "peft", "cluster"}


def _attribute_reads(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    reads = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        name = (
            base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
        )
        if name in CONFIG_OBJECTS:
            reads.append((node.attr, node.lineno))
    return reads


def _gpu_name_tests(path: Path) -> list[int]:
    """Lines that test a GPU's name by its prefix (``cluster.gpu...startswith``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
        ):
            receiver = ast.unparse(node.func.value)
            if ".gpu" in receiver:
                lines.append(node.lineno)
    return lines


def test_the_gpu_generation_is_told_in_one_place():
    offenders = [
        f"{path.relative_to(ROOT / 'memtune').as_posix()}:{line} tests the GPU name; use Derived.blackwell_or_newer"
        for path in sorted((ROOT / "memtune").rglob("*.py"))
        if path.relative_to(ROOT / "memtune").as_posix() != "config/derived.py"
        for line in _gpu_name_tests(path)
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "gpu, newer", [("B200", True), ("GB200", True), ("H100-80GB", False), ("H200", False)]
)
def test_check_and_the_derived_facts_agree_on_the_gpu_generation(gpu, newer):
    job = with_changes(
        load_job(EXAMPLE).job, [Change("cluster.gpu", gpu), Change("env.CUDA_DEVICE_MAX_CONNECTIONS", None)]
    )
    assert derive(job).blackwell_or_newer is newer
    assert Context.of(job).blackwell_or_newer is newer
    # Megatron-LM asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with TP > 1 only before Blackwell.
    assert derive(job).device_max_connections == (None if newer else "1")


def test_the_kernel_flavour_is_the_derived_facts():
    job = with_changes(
        load_job(EXAMPLE).job,
        [
            Change("model.fp8", "hybrid"),
            Change("model.deallocate_pipeline_outputs", False),
            Change("model.bias_activation_fusion", True),  # with the example's SiLU (SwiGLU)
        ],
    )
    fl = flavour_of(derive(job))
    assert (fl.transformer_engine, fl.fp8_activations, fl.pipeline_outputs_kept, fl.fused_activation) == (
        True,
        True,
        True,
        True,
    )
    local = with_changes(
        job, [Change("model.transformer_impl", "local"), Change("model.activation_func", "relu")]
    )
    assert (flavour_of(derive(local)).fp8_activations, flavour_of(derive(local)).fused_activation) == (
        False,
        False,
    )


def test_no_fact_is_computed_outside_its_home():
    package = ROOT / "memtune"
    offenders = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.startswith(EXEMPT):
            continue
        for attr, line in _attribute_reads(path):
            if attr in FACT_READS and relative not in FACT_READS[attr][0]:
                offenders.append(f"{relative}:{line} reads .{attr}; use {FACT_READS[attr][1]}")
    assert offenders == []


@pytest.mark.parametrize(
    "impl, grouped, sequential",
    [
        ("local", True, True),
        ("local", False, True),
        ("transformer_engine", True, False),
        ("transformer_engine", False, True),
    ],
)
def test_sequential_experts_follow_the_spec_and_grouped_gemm(impl, grouped, sequential):
    # megatron-core 0.19.2: the local backend always builds SequentialMLP; TE builds TEGroupedMLP
    # only with moe_grouped_gemm
    job = with_changes(
        load_job(ROOT / "examples" / "qwen3-30b-a3b-ep8.yaml").job,
        [Change("model.transformer_impl", impl), Change("model.moe_grouped_gemm", grouped)],
    )
    assert derive(job).experts_are_sequential_modules is sequential
