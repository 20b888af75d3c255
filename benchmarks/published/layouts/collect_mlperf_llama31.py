"""Collect the MLPerf Training Llama 3.1 405B (v5.0, v5.1) and Llama 3.1 8B (v5.1) submissions
that ran NVIDIA's NeMo implementation: NVIDIA's and its partners'.

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
  FP8_PARAMS (v5.0 H100) / FP8_PARAM_GATHER (GB200, v5.1) -> ``fp8_param_gather``; FP8_DPA ->
  ``fp8_dot_product_attention`` (only the NVFP4 configs, left out, set it). FP4=True
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

Partners (every other submitter of ``mlperf.submitters(version)``; ``<submitter>/`` in place of
``NVIDIA/``, sets ``mlperf/<version>/<benchmark>/<submitter>/<GPU>``) are read by the same
functions, once their launch script and code are found:

- The launch script: the one their README-<system>.md names, else the one their logs name (run.sub
  prints ``:::DLPAL ... <DGXSYSTEM>``, the script's name), else the one named after the system
  (Dell's ``config_2xXE9680Lx8B200-SXM-180GB_...``), else the only one of the system's nodes x GPUs,
  else the submitter's only one (Lenovo's), those in a folder named after the system (or its name
  up to a dot: University-of-Florida's ``hpg.dgxb200x8``) first; copies of one file count once,
  different candidates leave the submission out. Where the logs name a script that is not
  published (HPE's ``..._8b-trial``, Dell's ``...-280GB...``), the source says which was read. Its
  scale comes from its name, else its DGXNNODES x DGXNGPU.
- The code (pretrain.py, conf/, Dockerfile): beside the script, else in the folder its README
  links (``../b200_nemo``), else the nearest folder above (Nebius's ``configs/<system>/``), else
  the submitter's only folder of code (Supermicro's); where none is published (Oracle), NVIDIA's
  implementation of the benchmark and version whose run_and_time.sh is the submission's. Its
  pretrain.py and conf/custom.yaml must be files of an NVIDIA implementation (v5.0 or v5.1): a
  modified copy (Cisco's, which drops the communication-overlap callback) is left out.
- Where the logs print the run's configuration (pretrain.py's "Experiment configuration"; most
  partners' do, NVIDIA's do not), its TP, PP, VPP, CP, micro batch, fp8 and fp4 must be the
  script's. Partners' logs carry srun's rank labels (`` 0: :::MLLOG``): where
  ``mlperf.measured_step`` reads no step from them, rank 0's lines are read alike.
- A submission whose logs repeat an earlier one's (``:::SYSJSON`` lines aside; Nebius's v5.1 H200
  results are its v5.0 ones) is one measurement: kept where first published (earlier version,
  NVIDIA before partners), left out after.

Left out (listed in the output's header): accelerators outside memtune's GPU catalog (GB300,
B300, "Blackwell Ultra"; AMD's), NVFP4 runs, submissions whose launch script or code cannot be
found or is not NVIDIA's, whose logs give no step time, disagree on the batch or print another
layout, repeated logs, and jobs memtune's check gate refuses (each run's job is built as ``memtune
bench plan`` builds it and passed through ``memtune.check.gate``; nothing is priced).

    python benchmarks/published/layouts/collect_mlperf_llama31.py OUT.yaml
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from memtune.bench import plan as bench_plan
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.errors import InputError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mlperf

BENCHMARKS = (("v5.0", "llama31_405b"), ("v5.1", "llama31_405b"), ("v5.1", "llama31_8b"))
MODELS = {"llama31_405b": ("llama3.1-405b", "Llama 3.1 405B"), "llama31_8b": ("llama3-8b", "Llama 3.1 8B")}
# system json accelerator_model_name -> memtune GPU (exact names, then parenthesised markers)
GPUS = {
    "NVIDIA H100-SXM5-80GB": "H100-80GB",
    "NVIDIA H200-SXM5-141GB": "H200",
    "(GB200)": "GB200",
    "(B200-SXM-180GB)": "B200",
}
SHORT = {"H100-80GB": "H100", "H200": "H200", "GB200": "GB200", "B200": "B200"}
# a submitter's code for a benchmark: <submitter>/benchmarks/<one of these>/ (HPE's 8B is llama3_8b)
CODE_DIRS = {"llama31_8b": ("llama31_8b", "llama3_8b")}
LLAMA = ("llama31_405b", "llama31_8b")
# Dockerfile MCORE_REVISION -> megatron/core/package_info.py at that Megatron-LM tag
# (HPE's commit 4cd81e85: 0.15.0rc0, in 25.09-alpha.rc1 and core_v0.15.0)
MCORE = {
    "core_r0.11.0": "0.11.0",
    "25.04-alpha.rc2": "0.12.0",
    "25.09-alpha.rc1": "0.15.0",
    "4cd81e85d2a24a727060b660bd05ca1e1a1994d7": "0.15.0",
}
# Dockerfile TE_REVISION -> Transformer Engine release (SKIP: the container's, not stated). HPE's
# commit c47f329b is a 2.8.0.dev0 build (build_tools/VERSION.txt) 38 commits before v2.8 and before
# TE restricted FP8 attention under current scaling to Blackwell (25252e9f2, #2012; check SEQ015):
# for every version-dependent rule memtune has (SEQ015 from 2.8, OFF009's from 2.10) it is a 2.7.
TE = {"v2.2.1": "2.2.1", "release_v2.8": "2.8.0", "c47f329b2084406093124851a3aeecb935183def": "2.7.0"}
UNSET = "\0unset"
SOURCE_LINE = re.compile(r"^\s*source\s+.*/([\w.-]+\.sh)\s*$")
UNSET_LINE = re.compile(r"^\s*unset\s+([A-Za-z_]\w*)\s*$")
CONFIG_NAME = re.compile(r"^config_.*?_(\d+)x(\d+)x\d+")
README_LINK = re.compile(r"\]\(\.\./([\w.-]+)/?\)")
LOGGED_KEY = re.compile(r"^\s*(?:\d+:)?\s+(\w+): (\S+)\s*$", re.M)
# a printed configuration's spellings of what check_logged compares
LOGGED_AS = {
    ("virtual_pipeline_model_parallel_size", "1"): "null",
    ("virtual_pipeline_model_parallel_size", "none"): "null",
}


@dataclass
class Launch:
    """A submission's launch script, the scripts it sources and the variables they set; ``code``
    is the folder of its pretrain.py, conf/ and Dockerfile."""

    config: str
    code: str = ""
    read: list[str] = field(default_factory=list)
    unpublished: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def folder(self) -> str:
        return str(PurePosixPath(self.config).parent)


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


def name_of(path: str) -> str:
    return PurePosixPath(path).name


def parent_of(path: str) -> str:
    return str(PurePosixPath(path).parent)


def launch_scripts(repo: Path, sub: mlperf.Submission) -> list[str]:
    """Every launch script (``config_*.sh`` but the sourced common ones) of the submitter's code
    for the benchmark."""
    paths = [
        p
        for code in CODE_DIRS.get(sub.benchmark, (sub.benchmark,))
        for p in mlperf.listing(repo, f"{sub.submitter}/benchmarks/{code}")
    ]
    return [
        p
        for p in paths
        if re.fullmatch(r"config_[\w.+-]+\.sh", name_of(p))
        and not name_of(p).startswith(("config_common", "config_mounts"))
    ]


def readme_script(repo: Path, sub: mlperf.Submission) -> str | None:
    """The launch script the submission's README-<system>.md names, where it is published."""
    readme = mlperf.show(repo, f"{sub.implementation}/README-{sub.system}.md")
    if m := re.search(r"`(benchmarks/[^`]+/config_[^`/]+\.sh)`", readme):
        path = f"{sub.submitter}/{m.group(1)}"
        return path if mlperf.show(repo, path) else None
    return None


def own_folder(path: str, sub: mlperf.Submission) -> bool:
    """Whether ``path`` lies in a folder named after the system (or the system's name up to a
    dot: hpg.dgxb200x8 holds hpg.dgxb200x8.n32's scripts)."""
    folder = PurePosixPath(path).parent.name
    return sub.system == folder or sub.system.startswith(f"{folder}.")


def one_of(repo: Path, sub: mlperf.Submission, found: list[str], rule: str) -> str:
    """The one script of ``found`` (those in the system's own folder first; copies of one file
    count once)."""
    found = [p for p in found if own_folder(p, sub)] or found
    if len({mlperf.blob(repo, p) for p in found}) > 1:
        raise mlperf.Skip(f"{len(found)} launch scripts {rule}: {', '.join(sorted(found))}")
    return sorted(found)[0]


def config_path(repo: Path, sub: mlperf.Submission) -> tuple[str, list[str]]:
    """The launch script this submission ran, and what its choice rests on where the logs name
    another: the one its README names, else the one its logs name, else the one named after the
    system, else the only one of its scale (nodes x GPUs), else the submitter's only one."""
    if named := readme_script(repo, sub):
        return named, []
    scripts, logged = launch_scripts(repo, sub), mlperf.logged_script(repo, sub)
    scale = f"_{sub.nodes}x{sub.gpus_per_node}x"
    for rule, found in (
        ("named in its logs", [p for p in scripts if name_of(p) == logged]),
        ("named after the system", [p for p in scripts if sub.system in name_of(p)]),
        (f"of {sub.nodes}x{sub.gpus_per_node}", [p for p in scripts if scale in name_of(p)]),
        ("published", scripts),
    ):
        if found:
            path = one_of(repo, sub, found, rule)
            note = f"its logs name {logged}, not published: read {name_of(path)}, the one {rule}"
            return path, [note] if logged and name_of(path) != logged else []
    raise mlperf.Skip("no launch script published")


def has_code(repo: Path, folder: str) -> bool:
    return all(mlperf.show(repo, f"{folder}/{f}") for f in ("pretrain.py", "conf/custom.yaml"))


def code_folder(repo: Path, sub: mlperf.Submission, config: str) -> tuple[str, list[str]]:
    """The folder of the code the launch script drives: its own, the one its README points to
    (``../b200_nemo``), or the nearest above it; where the submission publishes none, NVIDIA's
    implementation of the benchmark and version with the same run_and_time.sh."""
    folder, root = parent_of(config), f"{sub.submitter}/benchmarks"
    linked = [
        f"{parent_of(folder)}/{x}" for x in README_LINK.findall(mlperf.show(repo, f"{folder}/README.md"))
    ]
    above = [str(p) for p in PurePosixPath(folder).parents if str(p).startswith(f"{root}/")]
    if found := next(
        (f for f in (folder, *linked, *above, *only_code(repo, sub)) if has_code(repo, f)), None
    ):
        return found, []
    runner = mlperf.blob(repo, f"{folder}/run_and_time.sh")
    base = f"{mlperf.SUBMITTER}/benchmarks/{sub.benchmark}/implementations"
    twins = sorted(
        parent_of(p)
        for p in mlperf.listing(repo, base)
        if name_of(p) == "run_and_time.sh" and runner and mlperf.blob(repo, p) == runner
    )
    if twins and has_code(repo, twins[0]):
        return twins[0], [
            f"pretrain.py, conf/ and Dockerfile not published: read from {twins[0]} "
            "(its run_and_time.sh is this submission's)"
        ]
    raise mlperf.Skip("its pretrain.py and conf/custom.yaml are not published")


def only_code(repo: Path, sub: mlperf.Submission) -> list[str]:
    """The submitter's folder of code for the benchmark, where it publishes one only."""
    folders = {
        parent_of(p)
        for code in CODE_DIRS.get(sub.benchmark, (sub.benchmark,))
        for p in mlperf.listing(repo, f"{sub.submitter}/benchmarks/{code}")
        if name_of(p) == "pretrain.py"
    }
    coded = [f for f in folders if has_code(repo, f)]
    return coded if len(coded) == 1 else []


@functools.cache
def nvidia_code() -> frozenset[str]:
    """The object ids of every NVIDIA Llama 3.1 implementation's pretrain.py and custom.yaml."""
    found = set()
    for version in sorted({v for v, _ in BENCHMARKS}):
        done = subprocess.run(
            ["git", f"--git-dir={mlperf.git_dir(version)}", "ls-tree", "-r", "HEAD", "--"]
            + [f"{mlperf.SUBMITTER}/benchmarks/{b}" for b in LLAMA],
            capture_output=True,
            text=True,
            check=True,
        )
        for line in done.stdout.splitlines():
            meta, path = line.split("\t", 1)
            if path.endswith(("/pretrain.py", "/conf/custom.yaml")):
                found.add(meta.split()[2])
    return frozenset(found)


def check_code(repo: Path, code: str) -> None:
    """Refuse code that is not NVIDIA's: the translation reads what NVIDIA's switches."""
    for f in ("pretrain.py", "conf/custom.yaml"):
        if mlperf.blob(repo, f"{code}/{f}") not in nvidia_code():
            raise mlperf.Skip(
                f"{code}/{f} is no NVIDIA implementation's (modified code: NVIDIA's translation does not hold)"
            )


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
            lines.append(sourced(repo, sub, parent_of(path), m.group(1), launch))
        elif m := UNSET_LINE.match(line):
            lines.append(f"export {m.group(1)}={UNSET}")
        else:
            lines.append(line)
    return "\n".join(lines)


def sourced(repo: Path, sub: mlperf.Submission, folder: str, name: str, launch: Launch) -> str:
    """A sourced script: beside the one sourcing it, else beside the code, else another NVIDIA
    implementation's."""
    path = next(
        (p for p in (f"{folder}/{name}", f"{launch.code}/{name}") if mlperf.show(repo, p)),
        None,
    ) or sibling_script(repo, sub, folder, name)
    if path is None:
        launch.unpublished.append(name)
        return ""
    return expanded(repo, sub, path, launch)


def scale_of(launch: Launch) -> tuple[int, int] | None:
    """Nodes x GPUs per node: from the script's name, else its DGXNNODES and DGXNGPU."""
    if m := CONFIG_NAME.search(name_of(launch.config)):
        return int(m[1]), int(m[2])
    nodes, gpus = launch.env.get("DGXNNODES", ""), launch.env.get("DGXNGPU", "")
    return (int(nodes), int(gpus)) if nodes.isdigit() and gpus.isdigit() else None


def read_launch(repo: Path, sub: mlperf.Submission) -> Launch:
    config, notes = config_path(repo, sub)
    code, borrowed = code_folder(repo, sub, config)
    check_code(repo, code)
    launch = Launch(config, code, notes=notes + borrowed)
    text = expanded(repo, sub, launch.config, launch)
    launch.env = {k: v for k, v in mlperf.exports(text).items() if v != UNSET}
    if scale_of(launch) != (sub.nodes, sub.gpus_per_node):
        raise mlperf.Skip(f"launch script {launch.config} is not of {sub.nodes}x{sub.gpus_per_node}")
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
            raise mlperf.Skip(f"{name} is not set")
        return value

    def callback_args(self) -> set[str]:
        """Keyword arguments pretrain.py gives NeMo's MegatronCommOverlapCallback."""
        m = re.search(r"MegatronCommOverlapCallback\((.*?)\n\s*\)", self.pretrain, re.S)
        return set(re.findall(r"(\w+)=", m.group(1))) if m else set()


def read_settings(repo: Path, launch: Launch) -> Settings:
    conf = mlperf.show(repo, f"{launch.code}/conf/custom.yaml")
    pretrain = mlperf.show(repo, f"{launch.code}/pretrain.py")
    if not conf or not pretrain:
        raise mlperf.Skip(f"no conf/custom.yaml or pretrain.py beside {launch.config}")
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
        raise mlperf.Skip(f"NVFP4 (FP4=True, FP4_RECIPE={s.get('FP4_RECIPE')}): memtune has no FP4 recipe")
    if not s.flag("FP8"):
        return ["model.fp8=null", "model.fp8_param_gather=false"]
    gather = "FP8_PARAM_GATHER" if "oc.env:FP8_PARAM_GATHER" in s.conf else "FP8_PARAMS"
    return [
        f"model.fp8={'hybrid' if s.flag('FP8_HYBRID') else 'e4m3'}",
        f"model.fp8_recipe={s.get('FP8_RECIPE', 'delayed')}",
        f"model.fp8_param_gather={yaml_bool(s.flag(gather))}",
        f"model.fp8_dot_product_attention={yaml_bool(s.flag('FP8_DPA'))}",
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
        re.sub(r"^ARG ", "export ", mlperf.show(repo, f"{launch.code}/Dockerfile"), flags=re.M)
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
        raise mlperf.Skip(f"sequence: conf/custom.yaml says {m and m.group(1)}, the log {logged}")
    return int(m.group(1))


def measured(repo: Path, sub: mlperf.Submission, s: Settings, lay: Layout) -> tuple[float, int, int]:
    found = mlperf.measured_step(repo, sub)
    if found is None:
        raise mlperf.Skip("the logs give no step time, or disagree on the global batch")
    gpus = sub.nodes * sub.gpus_per_node
    expected = s.count("MINIBS") * (gpus // (lay.tp * lay.pp * lay.cp))
    if found[1] != expected:
        raise mlperf.Skip(f"logged global batch {found[1]} is not MINIBS x DP = {expected}")
    return found


def logged_config(text: str) -> dict[str, str]:
    """The first value of each key of the configuration a log prints (pretrain.py's
    "Experiment configuration", where the run prints it; partners' logs mostly do)."""
    start = text.find("Experiment configuration")
    found: dict[str, str] = {}
    for m in LOGGED_KEY.finditer(text, start if start >= 0 else len(text)):
        found.setdefault(m.group(1), m.group(2))
    return found


def check_logged(repo: Path, sub: mlperf.Submission, s: Settings, lay: Layout, config: str) -> None:
    """Refuse a launch script whose layout or precision the logs' printed configuration denies."""
    expected = {
        "tensor_model_parallel_size": str(lay.tp),
        "pipeline_model_parallel_size": str(lay.pp),
        "virtual_pipeline_model_parallel_size": str(lay.vpp or "null"),
        "context_parallel_size": str(lay.cp),
        "micro_batch_size": str(lay.mbs),
        "fp8": yaml_bool(s.flag("FP8")),
        "fp4": yaml_bool(s.flag("FP4")),
    }
    for path in sub.logs:
        logged = logged_config(mlperf.show(repo, path))
        logged = {k: LOGGED_AS.get((k, v.lower()), v.lower()) for k, v in logged.items()}
        if wrong := [f"{k} {logged[k]}, not {v}" for k, v in expected.items() if logged.get(k, v) != v]:
            raise mlperf.Skip(f"{name_of(path)} prints {'; '.join(wrong)} as {name_of(config)} sets")


def run_of(repo: Path, sub: mlperf.Submission, gpu: str) -> tuple[dict[str, Any], list[str]]:
    """One run, and the scripts its launch script sources that the submission does not publish."""
    launch = read_launch(repo, sub)
    s = read_settings(repo, launch)
    lay = layout(s)
    precision = precision_overrides(s)
    check_logged(repo, sub, s, lay, launch.config)
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
        f"MLPerf Training {sub.version} {sub.submitter}/results/{sub.system}/{sub.benchmark} "
        f"({logs} logs, median step {step:.4g} s); launch {launch.config} with {read}"
    )
    if launch.code != launch.folder:
        text += f"; code (pretrain.py, conf/, Dockerfile) {launch.code}"
    if launch.notes:
        text += f"; {'; '.join(launch.notes)}"
    if launch.unpublished:
        text += f"; sourced but not published (its settings unknown, code defaults kept): {', '.join(launch.unpublished)}"
    if lost:
        text += f"; not expressible: {', '.join(lost)}"
    return text


# --- the sets ----------------------------------------------------------------------------------


def every_submission(version: str, benchmark: str) -> list[mlperf.Submission]:
    """Every submitter's submissions of the benchmark in the version, NVIDIA's first."""
    order = sorted(mlperf.submitters(version), key=lambda s: (s != mlperf.SUBMITTER, s))
    return [sub for s in order for sub in mlperf.submissions(version, benchmark, submitter=s)]


def set_id_of(sub: mlperf.Submission, gpu: str) -> str:
    owner = "" if sub.submitter == mlperf.SUBMITTER else f"{sub.submitter}/"
    return f"mlperf/{sub.version}/{sub.benchmark}/{owner}{gpu}"


def run_or_skip(repo: Path, sub: mlperf.Submission) -> tuple[dict[str, Any], list[str]]:
    """The submission's run, or mlperf.Skip: another vendor's accelerator or one memtune does not know,
    or a job memtune's check gate refuses."""
    gpu = gpu_of(sub.accelerator)
    if gpu is None and "NVIDIA" not in sub.accelerator:
        raise mlperf.Skip("not an NVIDIA GPU (nor NVIDIA's code), not in memtune's GPU catalog")
    if gpu is None:
        raise mlperf.Skip("accelerator not in memtune's GPU catalog")
    run, unpublished = run_of(repo, sub, gpu)
    if refused := refusal(MODELS[sub.benchmark][0], run):
        raise mlperf.Skip(f"memtune refuses the translated job: {refused}")
    return run, unpublished


def collect() -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The sets, the submissions left out and the runs read with unpublished settings."""
    sets: dict[str, dict[str, Any]] = {}
    skipped, unknown, seen = [], [], {}
    for version, benchmark in BENCHMARKS:
        repo = mlperf.git_dir(version)
        for sub in every_submission(version, benchmark):
            where = (
                f"{version} {benchmark} {sub.submitter} {sub.system} "
                f"({sub.accelerator}, {sub.nodes}x{sub.gpus_per_node})"
            )
            try:
                if first := mlperf.repeat_of(seen, repo, sub):
                    raise mlperf.Skip(f"the same result logs as {first} (one measurement)")
                run, unpublished = run_or_skip(repo, sub)
            except mlperf.Skip as why:
                skipped.append(f"{where}: {why}")
                continue
            if unpublished:
                unknown.append(
                    f"{where}: sources {', '.join(unpublished)}, published nowhere; code defaults kept"
                )
            set_id = set_id_of(sub, run["gpu"])
            sets.setdefault(set_id, new_set(set_id, sub, repo))["runs"].append((run, sub.system))
    for entry in sets.values():
        entry["runs"] = distinct_labels(sorted(entry["runs"], key=lambda r: r[0]["gpus"]))
    return list(sets.values()), skipped, unknown


def distinct_labels(runs: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
    """The runs, a label two of them share followed by each one's system (Dell's two 2x8 B200)."""
    labels = [run["label"] for run, _ in runs]
    for run, system in runs:
        if labels.count(run["label"]) > 1:
            run["label"] += f" ({system})"
    return [run for run, _ in runs]


def refusal(model: str, run: dict[str, Any]) -> str | None:
    """Why memtune's check gate refuses the run's job (nothing is priced), or None."""
    fields = {"model": model, **{k: run[k] for k in bench_plan.RUN_FIELDS if k in run}}
    try:
        gate(with_changes(bench_plan._base(fields), [Change.parse(t) for t in run["overrides"]]))
    except InputError as exc:
        return str(exc.problems[0])
    return None


def new_set(set_id: str, sub: mlperf.Submission, repo: Path) -> dict[str, Any]:
    code = "" if sub.submitter == mlperf.SUBMITTER else " on NVIDIA's NeMo implementation"
    return {
        "id": set_id,
        "source": f"mlcommons/training_results_{sub.version} at {head(repo)}, {sub.submitter}'s {sub.benchmark} "
        f"submissions{code} (logs, launch scripts, conf/custom.yaml, pretrain.py)",
        "model": MODELS[sub.benchmark][0],
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
        "Generated by benchmarks/published/layouts/collect_mlperf_llama31.py from the MLPerf Training",
        "Llama 3.1 405B (v5.0, v5.1) and Llama 3.1 8B (v5.1) submissions (mlcommons/training_results_v5.x):",
        "NVIDIA's, and its partners' on NVIDIA's NeMo implementation (sets mlperf/<version>/<benchmark>/<submitter>/<GPU>).",
        "Every run below passes memtune's check gate (memtune.check.gate; nothing priced).",
        "Submissions left out:",
        *(f"  {line}" for line in skipped),
        "Runs whose launch settings are partly unknown:",
        *(f"  {line}" for line in unknown),
    ]
    mlperf.write_sets(out, header, sets)
    print(f"{len(sets)} sets, {sum(len(s['runs']) for s in sets)} runs; {len(skipped)} submissions left out")


if __name__ == "__main__":
    main()
