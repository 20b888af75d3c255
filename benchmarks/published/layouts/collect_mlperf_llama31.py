"""Collect NVIDIA's MLPerf Training Llama 3.1 405B (v5.0, v5.1) and Llama 3.1 8B (v5.1) submissions.

Source: the git directories of ``mlcommons/training_results_v5.0`` and ``..._v5.1`` mirrored under
``/work/.mirror`` (read at HEAD through ``mlperf.py``; nothing is executed). A submission is one
system directory of ``NVIDIA/results/<system>/<benchmark>/``: its logs (``result_<i>.txt``), its
``NVIDIA/systems/<system>.json`` (accelerator, nodes, GPUs per node) and its implementation. One set
per version, benchmark and GPU kind (``mlperf/<version>/<benchmark>/<GPU>``); its runs are that
version's submissions on that GPU, at different scales, ranked by tokens/s per GPU.

What each setting is read from:

- The launch script: the one the submission's ``README-<system>.md`` names (the 8B submissions all
  point into ``implementations/nemo/``), else the implementation's only
  ``config_<SYSTEM>_<nodes>x<gpus>x...sh``; its node and GPU counts must match the system json.
  The scripts it sources (``config_common*.sh``) are read in order with it, ``export`` and
  ``unset`` lines alike (``mlperf.exports``). A sourced script the submission does not publish is
  read from another NVIDIA implementation of the same benchmark, version and container (the v5.0
  GB200 256-GPU ``config_common_cg.sh``); where none publishes it (``config_common_blackwell.sh`` of
  both v5.0 GB200 submissions) its settings are unknown, the code's defaults stand and the run's
  ``source`` says so.
- What each variable switches: the implementation's ``conf/custom.yaml`` (``${oc.env:VAR,default}``,
  defaults taken from there) and ``pretrain.py`` (NeMo 2 ``MegatronStrategy``,
  ``MegatronMixedPrecision``, ``MegatronCommOverlapCallback``). Sequence: ``encoder_seq_length``
  (8192), checked against the logs' ``max_sequence_length``.
- Layout: TENSOR_MODEL_PARALLEL, PIPELINE_MODEL_PARALLEL, INTERLEAVED_PIPELINE (VPP; ``null`` none),
  CONTEXT_PARALLEL, SEQ_PARALLEL (off at TP 1), MICRO_BATCH_SIZE, ASYM_PP_EMBED / ASYM_PP_LOSS
  (``account_for_embedding/loss_in_pipeline_split``), ACT_CKPT_* (recompute; unset in all).
- Precision: FP8 with FP8_HYBRID (``hybrid``, else ``e4m3``: v5.0 sets no FP8_HYBRID) and
  FP8_RECIPE (``delayed`` by v5.0's default, ``tensorwise`` current scaling in v5.1; no MXFP8);
  FP8_PARAMS (v5.0 H100) / FP8_PARAM_GATHER (GB200, v5.1) -> ``fp8_param_gather``. FP4=True
  (NVFP4) has no memtune recipe: those runs are left out.
- Data parallel: USE_DIST_OPTIMIZER -> the distributed optimizer; ``grad_reduce_in_fp32`` false
  (pretrain.py). NeMo's ``MegatronCommOverlapCallback`` decides the DP overlaps by the DP size
  (on where DP > 1, 128 Mi-parameter buckets, ``align_param_gather`` with an interleaved pipeline),
  the user's values over it: in v5.0 it is given OVERLAP_GRAD_REDUCE / OVERLAP_PARAM_GATHER (both
  true) and no bucket size, which is ``ddp.overlap_by_data_parallel_size`` (Bridge's port of that
  callback); in v5.1 it is also given BUCKET_SIZE, so the overlaps and bucket are set as given.
- TP_COMM_OVERLAP -> ``tp_comm_overlap`` (TP > 1); DEFER_EMBEDDING_WGRAD_COMPUTE and
  WGRAD_DEFERRAL_LIMIT; GRAD_ACCUM_FUSION, CROSS_ENTROPY_LOSS_FUSION, CE_FUSION_IMPL.
- CUDA graphs: v5.0's FULL_CUDA_GRAPH (the implementation captures the whole training step itself)
  -> ``cuda_graph_impl=full_iteration``; v5.1's MCORE_CUDA_GRAPH with FULL_CUDA_GRAPH
  (Megatron-Core's ``enable_cuda_graph`` with scope ``full_iteration``) -> ``local`` with scope
  ``[full_iteration]``, as megatron-core 0.15 spells it.
- Environment: CUDA_DEVICE_MAX_CONNECTIONS, PYTORCH_CUDA_ALLOC_CONF (the 8B unsets it),
  NCCL_GRAPH_REGISTER; ``megatron_core_version`` and ``transformer_engine_version`` from the
  Dockerfile's MCORE_REVISION / TE_REVISION (Megatron-LM's ``megatron/core/package_info.py`` at
  that tag; TE_REVISION=SKIP keeps the container's, not stated, so left unset, as is torch).
- Measured: global batch and step time from the logs (``mlperf.measured_step``: the median over
  the logs of each log's median ``train_step_time``, the first left out), checked against
  MINIBS x GPUs / (TP x PP x CP); ``tokens_per_s_per_gpu`` = GBS x seq / (step s x GPUs). MLPerf
  publishes no TFLOP/s.

Not modelled (memtune has no key): NCCL tuning (NCCL_MIN_NCHANNELS, NCCL_MIN/MAX_CTAS,
NCCL_P2P_NET_CHUNKSIZE, NCCL_WORK_FIFO_DEPTH, the per-communicator NCCL_CFG_PATH file,
NCCL_NVLS_ENABLE, NCCL_LOCAL_REGISTER), SHARP, Transformer Engine's userbuffer settings
(``conf/tp_overlap/*.yaml`` SM counts and methods, MC_TP_OVERLAP_AG/RS, TE_UB_ATOMIC_GEMM_RS),
NVTE_*_LAYERNORM_SM_MARGIN, NVTE_NORM_*_USE_CUDNN, the FP8 amax history / algorithm and TP-only
amax reduction, OVERLAP_P2P_COMM / BATCH_P2P_COMM, OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP,
TP_PP_DP_MAPPING (rank order), the Transformer Engine op fuser (USE_TE_OPS), FUSED_QKV_ROPE, the
custom embedding kernel (``embedding_lib``), NeMo's garbage-collection callback (automatic GC off,
a collection every GC_TRAIN steps; memtune's ``train.manual_gc`` also collects before training,
which this callback does not), TORCH_NCCL_AVOID_RECORD_STREAMS, the warm-up on synthetic data.

Left out (listed in the output's header): accelerators outside memtune's GPU catalog (GB300,
"Blackwell Ultra"), NVFP4 runs, submissions whose launch script cannot be found or whose logs give
no step time or disagree on the batch, and jobs memtune's check gate refuses (each run's job is
built as ``memtune bench plan`` builds it and passed through ``memtune.check.gate``; nothing is
priced).

    python benchmarks/published/layouts/collect_mlperf_llama31.py OUT.yaml
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from memtune.bench import plan as bench_plan
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.errors import InputError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mlperf

BENCHMARKS = (("v5.0", "llama31_405b"), ("v5.1", "llama31_405b"), ("v5.1", "llama31_8b"))
MODELS = {"llama31_405b": ("llama3.1-405b", "Llama 3.1 405B"), "llama31_8b": ("llama3-8b", "Llama 3.1 8B")}
# system json accelerator_model_name -> memtune GPU (exact names, then parenthesised markers)
GPUS = {"NVIDIA H100-SXM5-80GB": "H100-80GB", "(GB200)": "GB200", "(B200-SXM-180GB)": "B200"}
SHORT = {"H100-80GB": "H100", "GB200": "GB200", "B200": "B200"}
# Dockerfile MCORE_REVISION -> megatron/core/package_info.py at that Megatron-LM tag
MCORE = {"core_r0.11.0": "0.11.0", "25.04-alpha.rc2": "0.12.0", "25.09-alpha.rc1": "0.15.0"}
# Dockerfile TE_REVISION -> Transformer Engine release (SKIP: the container's, not stated)
TE = {"v2.2.1": "2.2.1", "release_v2.8": "2.8.0"}
UNSET = "\0unset"
SOURCE_LINE = re.compile(r"^\s*source\s+.*/([\w.-]+\.sh)\s*$")
UNSET_LINE = re.compile(r"^\s*unset\s+([A-Za-z_]\w*)\s*$")
CONFIG_NAME = re.compile(r"config_[A-Za-z0-9]+_(\d+)x(\d+)x")


@dataclass
class Launch:
    """A submission's launch script, the scripts it sources and the variables they set."""

    config: str
    read: list[str] = field(default_factory=list)
    unpublished: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def folder(self) -> str:
        return str(PurePosixPath(self.config).parent)


class Skip(Exception):
    """A submission left out, with the reason."""


def gpu_of(accelerator: str) -> str | None:
    if accelerator in GPUS:
        return GPUS[accelerator]
    return next(
        (gpu for marker, gpu in GPUS.items() if marker.startswith("(") and marker in accelerator), None
    )


def truthy(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "t", "yes")


def yaml_bool(value: bool) -> str:
    return "true" if value else "false"


# --- the launch script -------------------------------------------------------------------------


def config_path(repo: Path, sub: mlperf.Submission) -> str:
    """The launch script the submission's README names, else the only one of its scale."""
    readme = mlperf.show(repo, f"{sub.implementation}/README-{sub.system}.md")
    if m := re.search(r"`(benchmarks/[^`]+/config_[^`/]+\.sh)`", readme):
        path = f"{mlperf.SUBMITTER}/{m.group(1)}"
        if mlperf.show(repo, path):
            return path
    scale = f"_{sub.nodes}x{sub.gpus_per_node}x"
    found = [p for p in mlperf.listing(repo, sub.implementation) if "/config_" in p and scale in p]
    if len(found) != 1:
        raise Skip(f"{len(found)} launch scripts of {sub.nodes}x{sub.gpus_per_node} and none named")
    return found[0]


def sibling_script(repo: Path, sub: mlperf.Submission, folder: str, name: str) -> str | None:
    """``name`` from another NVIDIA implementation of this benchmark, version and container."""
    container = re.search(r"_ngc[\d.]+_\w+$", folder)
    if not container:
        return None
    root = f"{mlperf.SUBMITTER}/benchmarks/{sub.benchmark}/implementations"
    return next(
        (
            p
            for p in sorted(mlperf.listing(repo, root))
            if p.endswith(f"/{name}") and PurePosixPath(p).parent.name.endswith(container.group(0))
        ),
        None,
    )


def expanded(repo: Path, sub: mlperf.Submission, path: str, launch: Launch) -> str:
    """The script's text with each sourced script's text in its place and ``unset`` as a marker."""
    launch.read.append(path)
    lines = []
    for line in mlperf.show(repo, path).splitlines():
        if m := SOURCE_LINE.match(line):
            lines.append(sourced(repo, sub, str(PurePosixPath(path).parent), m.group(1), launch))
        elif m := UNSET_LINE.match(line):
            lines.append(f"export {m.group(1)}={UNSET}")
        else:
            lines.append(line)
    return "\n".join(lines)


def sourced(repo: Path, sub: mlperf.Submission, folder: str, name: str, launch: Launch) -> str:
    own = f"{folder}/{name}"
    path = own if mlperf.show(repo, own) else sibling_script(repo, sub, folder, name)
    if path is None:
        launch.unpublished.append(name)
        return ""
    return expanded(repo, sub, path, launch)


def read_launch(repo: Path, sub: mlperf.Submission) -> Launch:
    launch = Launch(config_path(repo, sub))
    text = expanded(repo, sub, launch.config, launch)
    launch.env = {k: v for k, v in mlperf.exports(text).items() if v != UNSET}
    scale = CONFIG_NAME.search(launch.config)
    if scale is None or (int(scale[1]), int(scale[2])) != (sub.nodes, sub.gpus_per_node):
        raise Skip(f"launch script {launch.config} is not of {sub.nodes}x{sub.gpus_per_node}")
    return launch


# --- what the variables switch -----------------------------------------------------------------


@dataclass
class Settings:
    """The launch variables with the defaults of the implementation's conf/custom.yaml."""

    env: dict[str, str]
    conf: str
    pretrain: str

    def get(self, name: str, fallback: str | None = None) -> str | None:
        if name in self.env:
            return self.env[name]
        m = re.search(rf"oc\.env:{name},([^}}$]*)\}}", self.conf)
        return m.group(1).strip("'\"") if m else fallback

    def flag(self, name: str) -> bool:
        return truthy(self.get(name, "False"))

    def number(self, name: str) -> int | None:
        value = self.get(name)
        return None if value is None or value in ("null", "None", "") else int(value)

    def count(self, name: str) -> int:
        value = self.number(name)
        if value is None:
            raise Skip(f"{name} is not set")
        return value

    def callback_args(self) -> set[str]:
        """Keyword arguments pretrain.py gives NeMo's MegatronCommOverlapCallback."""
        m = re.search(r"MegatronCommOverlapCallback\((.*?)\n\s*\)", self.pretrain, re.S)
        return set(re.findall(r"(\w+)=", m.group(1))) if m else set()


def read_settings(repo: Path, launch: Launch) -> Settings:
    conf = mlperf.show(repo, f"{launch.folder}/conf/custom.yaml")
    pretrain = mlperf.show(repo, f"{launch.folder}/pretrain.py")
    if not conf or not pretrain:
        raise Skip(f"no conf/custom.yaml or pretrain.py beside {launch.config}")
    return Settings(launch.env, conf, pretrain)


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    vpp: int | None  # None: no interleaved pipeline
    cp: int
    mbs: int


def layout(s: Settings) -> Layout:
    vpp = s.number("INTERLEAVED_PIPELINE")
    return Layout(
        s.count("TENSOR_MODEL_PARALLEL"),
        s.count("PIPELINE_MODEL_PARALLEL"),
        vpp if vpp and vpp > 1 else None,
        s.count("CONTEXT_PARALLEL"),
        s.count("MICRO_BATCH_SIZE"),
    )


def layout_overrides(s: Settings, lay: Layout) -> list[str]:
    granularity = s.get("ACT_CKPT_GRANULARITY", "null")
    changes = [
        f"model.tensor_model_parallel_size={lay.tp}",
        f"model.pipeline_model_parallel_size={lay.pp}",
        f"model.virtual_pipeline_model_parallel_size={lay.vpp or 'null'}",
        f"model.context_parallel_size={lay.cp}",
        f"model.sequence_parallel={yaml_bool(s.flag('SEQ_PARALLEL') and lay.tp > 1)}",
        f"train.micro_batch_size={lay.mbs}",
        f"model.account_for_embedding_in_pipeline_split={yaml_bool(s.flag('ASYM_PP_EMBED'))}",
        f"model.account_for_loss_in_pipeline_split={yaml_bool(s.flag('ASYM_PP_LOSS'))}",
        f"model.recompute_granularity={granularity}",
    ]
    if granularity == "full":
        changes += [
            f"model.recompute_method={s.get('ACT_CKPT_METHOD')}",
            f"model.recompute_num_layers={s.get('ACT_CKPT_NUM_LAYERS')}",
        ]
    if lay.pp > 1:
        changes.append("model.pipeline_dtype=bf16")
    return changes


def precision_overrides(s: Settings) -> list[str]:
    if s.flag("FP4"):
        raise Skip(f"NVFP4 (FP4=True, FP4_RECIPE={s.get('FP4_RECIPE')}): memtune has no FP4 recipe")
    if not s.flag("FP8"):
        return ["model.fp8=null", "model.fp8_param_gather=false"]
    gather = "FP8_PARAM_GATHER" if "oc.env:FP8_PARAM_GATHER" in s.conf else "FP8_PARAMS"
    return [
        f"model.fp8={'hybrid' if s.flag('FP8_HYBRID') else 'e4m3'}",
        f"model.fp8_recipe={s.get('FP8_RECIPE', 'delayed')}",
        f"model.fp8_param_gather={yaml_bool(s.flag(gather))}",
    ]


def data_parallel_overrides(s: Settings, lay: Layout) -> tuple[list[str], list[str]]:
    """The distributed optimizer and DP overlaps, and what memtune cannot say of them."""
    dist = yaml_bool(s.flag("USE_DIST_OPTIMIZER"))
    grad, param = s.flag("OVERLAP_GRAD_REDUCE"), s.flag("OVERLAP_PARAM_GATHER")
    changes = [
        f"ddp.use_distributed_optimizer={dist}",
        f"optimizer.use_distributed_optimizer={dist}",
        "ddp.grad_reduce_in_fp32=false",
        f"ddp.overlap_grad_reduce={yaml_bool(grad)}",
        f"ddp.overlap_param_gather={yaml_bool(param)}",
    ]
    if "bucket_size" not in s.callback_args() and grad and param:
        return [*changes, "ddp.overlap_by_data_parallel_size=true"], []
    changes += ["ddp.overlap_by_data_parallel_size=false", f"ddp.bucket_size={s.count('BUCKET_SIZE')}"]
    if lay.pp > 1 and lay.vpp and s.flag("ALIGN_PARAM_GATHER"):
        return changes, ["align_param_gather (memtune sets it only under the by-DP rule)"]
    return changes, []


def kernel_overrides(s: Settings, lay: Layout) -> list[str]:
    defer = s.flag("DEFER_EMBEDDING_WGRAD_COMPUTE")
    changes = [
        f"model.tp_comm_overlap={yaml_bool(s.flag('TP_COMM_OVERLAP') and lay.tp > 1)}",
        f"model.defer_embedding_wgrad_compute={yaml_bool(defer)}",
        f"model.wgrad_deferral_limit={s.count('WGRAD_DEFERRAL_LIMIT') if defer else 0}",
        f"model.gradient_accumulation_fusion={yaml_bool(truthy(s.get('GRAD_ACCUM_FUSION', 'True')))}",
        f"model.cross_entropy_loss_fusion={yaml_bool(s.flag('CROSS_ENTROPY_LOSS_FUSION'))}",
        f"model.cross_entropy_fusion_impl={s.get('CE_FUSION_IMPL', 'native')}",
    ]
    return changes + graph_overrides(s)


def graph_overrides(s: Settings) -> list[str]:
    if "cuda_graph_scope" in s.conf:  # v5.1: Megatron-Core's enable_cuda_graph with a scope
        if not s.flag("MCORE_CUDA_GRAPH"):
            return ["model.cuda_graph_impl=none"]
        scope = "[full_iteration]" if s.flag("FULL_CUDA_GRAPH") else "[]"
        return ["model.cuda_graph_impl=local", f"model.cuda_graph_scope={scope}"]
    if s.flag("FULL_CUDA_GRAPH"):  # v5.0: the implementation captures the whole training step
        return ["model.cuda_graph_impl=full_iteration"]
    if s.flag("MCORE_CUDA_GRAPH"):
        return ["model.cuda_graph_impl=local"]
    return [
        "model.cuda_graph_impl=transformer_engine"
        if s.flag("LAYER_CUDA_GRAPH")
        else "model.cuda_graph_impl=none"
    ]


def env_overrides(repo: Path, launch: Launch) -> list[str]:
    changes = [
        f"env.{k}={launch.env[k]}"
        for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER")
        if k in launch.env
    ]
    docker = mlperf.exports(
        re.sub(r"^ARG ", "export ", mlperf.show(repo, f"{launch.folder}/Dockerfile"), flags=re.M)
    )
    if mcore := MCORE.get(docker.get("MCORE_REVISION", "")):
        changes.append(f"env.megatron_core_version={mcore}")
    if te := TE.get(docker.get("TE_REVISION", "")):
        changes.append(f"env.transformer_engine_version={te}")
    return changes


# --- one run -----------------------------------------------------------------------------------


def sequence(repo: Path, sub: mlperf.Submission, s: Settings) -> int:
    m = re.search(r"encoder_seq_length:\s*(\d+)", s.conf)
    logged = mlperf.read_log(mlperf.show(repo, sub.logs[0])).keys.get("max_sequence_length")
    if not m or int(m.group(1)) != logged:
        raise Skip(f"sequence: conf/custom.yaml says {m and m.group(1)}, the log {logged}")
    return int(m.group(1))


def measured(repo: Path, sub: mlperf.Submission, s: Settings, lay: Layout) -> tuple[float, int, int]:
    found = mlperf.measured_step(repo, sub)
    if found is None:
        raise Skip("the logs give no step time, or disagree on the global batch")
    gpus = sub.nodes * sub.gpus_per_node
    expected = s.count("MINIBS") * (gpus // (lay.tp * lay.pp * lay.cp))
    if found[1] != expected:
        raise Skip(f"logged global batch {found[1]} is not MINIBS x DP = {expected}")
    return found


def run_of(repo: Path, sub: mlperf.Submission, gpu: str) -> tuple[dict[str, Any], list[str]]:
    """One run, and the scripts its launch script sources that the submission does not publish."""
    launch = read_launch(repo, sub)
    s = read_settings(repo, launch)
    lay = layout(s)
    precision = precision_overrides(s)
    seq = sequence(repo, sub, s)
    step, gbs, logs = measured(repo, sub, s, lay)
    dp, lost = data_parallel_overrides(s, lay)
    gpus = sub.nodes * sub.gpus_per_node
    run = {
        "label": f"{MODELS[sub.benchmark][1]} {sub.nodes}x{sub.gpus_per_node} {SHORT[gpu]} TP{lay.tp} PP{lay.pp} "
        f"VPP{lay.vpp or '-'} CP{lay.cp} MBS{lay.mbs} GBS{gbs}",
        "gpus": gpus,
        "gpu": gpu,
        "gpus_per_node": sub.gpus_per_node,
        "seq": seq,
        "gbs": gbs,
        "mode": "pretrain",
        "overrides": layout_overrides(s, lay)
        + precision
        + dp
        + kernel_overrides(s, lay)
        + env_overrides(repo, launch),
        "measured": {"tokens_per_s_per_gpu": round(gbs * seq / (step * gpus), 1)},
        "source": source_of(sub, launch, step, logs, lost),
    }
    return run, launch.unpublished


def source_of(sub: mlperf.Submission, launch: Launch, step: float, logs: int, lost: list[str]) -> str:
    read = ", ".join(
        PurePosixPath(p).name if PurePosixPath(p).parent == PurePosixPath(launch.folder) else p
        for p in launch.read[1:]
    )
    text = (
        f"MLPerf Training {sub.version} {mlperf.SUBMITTER}/results/{sub.system}/{sub.benchmark} "
        f"({logs} logs, median step {step:.4g} s); launch {launch.config} with {read}"
    )
    if launch.unpublished:
        text += f"; sourced but not published (its settings unknown, code defaults kept): {', '.join(launch.unpublished)}"
    if lost:
        text += f"; not expressible: {', '.join(lost)}"
    return text


# --- the sets ----------------------------------------------------------------------------------


def collect() -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The sets, the submissions left out and the runs read with unpublished settings."""
    sets: dict[str, dict[str, Any]] = {}
    skipped, unknown = [], []
    for version, benchmark in BENCHMARKS:
        repo = mlperf.git_dir(version)
        for sub in mlperf.submissions(version, benchmark):
            where = f"{version} {benchmark} {sub.system} ({sub.accelerator}, {sub.nodes}x{sub.gpus_per_node})"
            gpu = gpu_of(sub.accelerator)
            try:
                if gpu is None:
                    raise Skip("accelerator not in memtune's GPU catalog")
                run, unpublished = run_of(repo, sub, gpu)
            except Skip as why:
                skipped.append(f"{where}: {why}")
                continue
            if refused := refusal(MODELS[benchmark][0], run):
                skipped.append(f"{where}: memtune refuses the translated job: {refused}")
                continue
            if unpublished:
                unknown.append(
                    f"{where}: sources {', '.join(unpublished)}, published nowhere; code defaults kept"
                )
            set_id = f"mlperf/{version}/{benchmark}/{gpu}"
            sets.setdefault(set_id, new_set(set_id, version, benchmark, repo))["runs"].append(run)
    for entry in sets.values():
        entry["runs"].sort(key=lambda r: r["gpus"])
    return list(sets.values()), skipped, unknown


def refusal(model: str, run: dict[str, Any]) -> str | None:
    """Why memtune's check gate refuses the run's job (nothing is priced), or None."""
    fields = {"model": model, **{k: run[k] for k in bench_plan.RUN_FIELDS if k in run}}
    try:
        gate(with_changes(bench_plan._base(fields), [Change.parse(t) for t in run["overrides"]]))
    except InputError as exc:
        return str(exc.problems[0])
    return None


def new_set(set_id: str, version: str, benchmark: str, repo: Path) -> dict[str, Any]:
    commit = head(repo)
    return {
        "id": set_id,
        "source": f"mlcommons/training_results_{version} at {commit}, {mlperf.SUBMITTER}'s {benchmark} submissions "
        "(logs, launch scripts, conf/custom.yaml, pretrain.py)",
        "model": MODELS[benchmark][0],
        "mode": "pretrain",
        "runs": [],
    }


def head(repo: Path) -> str:
    done = subprocess.run(
        ["git", f"--git-dir={repo}", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def main() -> None:
    out = sys.argv[1]
    sets, skipped, unknown = collect()
    header = [
        "# Generated by benchmarks/published/layouts/collect_mlperf_llama31.py from NVIDIA's MLPerf Training",
        "# Llama 3.1 405B (v5.0, v5.1) and Llama 3.1 8B (v5.1) submissions (mlcommons/training_results_v5.x).",
        "# Every run below passes memtune's check gate (memtune.check.gate; nothing priced).",
        "# Submissions left out:",
        *(f"#   {line}" for line in skipped),
        "# Runs whose launch settings are partly unknown:",
        *(f"#   {line}" for line in unknown),
    ]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(header) + "\n")
        yaml.safe_dump({"sets": sets}, f, sort_keys=False, width=120)
    print(f"{len(sets)} sets, {sum(len(s['runs']) for s in sets)} runs; {len(skipped)} submissions left out")


if __name__ == "__main__":
    main()
