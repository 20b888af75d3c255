"""Collect the MLPerf Training Llama 2 70B LoRA submissions (v4.0, v4.1, v5.0, v5.1) that ran
NVIDIA's NeMo code on NVIDIA GPUs: NVIDIA's, and its partners' (below).

Source: the mirrored git directories of mlcommons/training_results_vX.Y (``mlperf.py`` reads
them; nothing is executed). A submission is one system directory under
``NVIDIA/results/<system>/llama2_70b_lora/`` (ten ``result_<i>.txt`` logs), its system json
(GPU kind, nodes, GPUs per node) and its implementation. One set per version and GPU kind,
``mlperf/<version>/llama2_70b_lora/<GPU>``; its runs are that version's submissions on that GPU
(different node counts, each with its own launch config).

Where each setting is read from:

- Launch config: the ``config_<SYSTEM>_<nodes>x<gpus>x...sh`` the submission's
  ``README-<system>.md`` names (v4.0 and v5.1 keep the code in ``implementations/nemo``, the
  other versions in the submission's own directory), checked against the system json's node
  count and GPUs per node, with every script it ``source``s (``config_common.sh``, and
  ``config_common_fp4.sh``) expanded in place and read with ``mlperf.exports``.
- What each variable switches: ``conf/megatron_gpt_peft_tuning_config.yaml`` of the
  implementation, whose ``${oc.decode:${oc.env:VAR,default}}`` values are resolved with the
  launch config's variables (else the yaml's default): TP, PP, CP (with its ``cp_comm_type``,
  Transformer Engine's ``p2p`` where unset), VPP, sequence parallel, micro batch, the sequence
  (``MAX_SEQLEN``, default 8192: the GovReport samples packed to
  8,192 tokens, ``packed_sequence``/``PackedSequenceSpecs``), FP8 (``fp8_hybrid``: hybrid;
  ``fp8_recipe``, default delayed scaling: every run here uses delayed scaling with an amax
  history, none current scaling or MXFP8), FP8 weights (NeMo 1.0 ``fp8_params``: TE's
  ``fp8_model_init``; NeMo 2.0 ``fp8_params``/``fp8_param_gather``), recompute (none is set),
  TP communication overlap (``ub_tp_comm_overlap``, only where TP > 1 with SP, as NeMo
  requires) with the per-GEMM file its config selects (``conf/tp_overlap/<GPU_ARCH>100tp<TP>
  [cp<CP>]mbs<MBS>.yaml``, its interpolations as the launch sets them: the fields memtune
  prices, ``model.tp_comm_overlap_cfg``), CUDA graphs, the optimizer and DDP overlaps.
- CUDA graphs: NeMo 1.0's ``enable_cuda_graph`` (v4.1) and NeMo 2.0's ``external_cuda_graph``
  are Transformer Engine's ``make_graphed_callables`` per layer, captured by the
  implementation's callback (``transformer_engine``); NeMo 2.0's ``enable_cuda_graph`` is
  Megatron-Core's per-layer graphs (``local``, v5.0), or its full-iteration graph where
  ``cuda_graph_scope`` is ``full_iteration`` (v5.1).
- Optimizer: NeMo 1.0 (v4.0, v4.1) ``model.optim.name``: ``mcore_distributed_optim`` (v4.1) is
  the distributed optimizer with ``overlap_grad_sync``/``overlap_param_sync`` and the gradient
  reduced in fp32 (``grad_sync_dtype`` default); ``fused_adam`` (v4.0) is not distributed
  (``MainParamsOptimizerWrapper``: fp32 main gradients, its asynchronous all-reduce off with SP).
  NeMo 2.0 (v5.0, v5.1): ``optim.use_distributed_optimizer``, ``ddp.overlap_*``, and
  ``grad_reduce_in_fp32=False`` as ``train.py`` passes it.
- LoRA: NeMo 1.0 ``model.peft.lora_tuning`` (``adapter_dim`` 16, ``alpha`` 32, dropout 0.1 on
  the input, ``target_modules: ['attention']``, which NeMo's ``peft_config.get_target_modules``
  expands to ``linear_qkv`` and ``linear_proj``); NeMo 2.0 the ``LoRA(...)`` call of
  ``train.py`` (the same values). NeMo's ``ParallelLinearAdapter`` scales the adapter's output
  by alpha/dim (``peft.scale_position=output``). Its all-to-all path for the row adapters
  (``peft.a2a_experimental``): NeMo 1.0's ``lora_tuning.a2a_experimental`` (``LORA_A2A``, which
  the launch configs export), NeMo 2.0's ``a2a_experimental=`` in the ``LoRA(...)`` call.
- Environment: ``CUDA_DEVICE_MAX_CONNECTIONS``, ``PYTORCH_CUDA_ALLOC_CONF`` and
  ``NCCL_GRAPH_REGISTER`` as exported; ``attention_backend=fused`` where the launch config forces
  cuDNN attention (``NVTE_FUSED_ATTN=1``, ``NVTE_FLASH_ATTN=0``). Software versions from the
  implementation's Dockerfile: megatron-core from ``megatron/core/package_info.py`` of NVIDIA's
  Megatron-LM at the tag it checks out (the local mirror), torch from the NGC PyTorch container
  it builds on (``TORCH_OF_CONTAINER``), Transformer Engine where the Dockerfile pins a release
  (else memtune's default is left: the container's own TE is not stated).
- Model: memtune's ``llama3-70b`` preset, whose shapes are Llama 2 70B's (meta-llama/Llama-2-70b-hf
  ``config.json``: 80 layers, hidden 8192, FFN 28672, 64 heads, 8 KV heads, SwiGLU, RMSNorm,
  untied embeddings), with Llama 2's 32,000-token vocabulary (same config.json); the RoPE base
  (10,000 for Llama 2) has no memtune key.
- Global batch and step time: the logs (``mlperf.measured_step``: the median over the logs of
  each log's median step, the first left out); the global batch is checked against the launch
  config (``MINIBS`` x data-parallel size). Measured ``tokens_per_s_per_gpu`` = GBS x sequence /
  (step s x GPUs), 1 decimal; MLPerf publishes no TFLOP/s.

FP8 attention: ``model.fp8_dot_product_attention`` of the NeMo config (``FP8_DPA``), forward
and backward in FP8 (``NVTE_FP8_DPA_BWD=1``; a run with its backward in bf16 would be left out).

Not modelled (set by the runs, no memtune key): FP8 activation input store (``FP8_ACT``/``FP8_ACTIVATION``), the delayed
scaling's amax history, algorithm and reduction, Thunder dropout (``NEMO_LORA_USE_THUNDER_DROPOUT``), TP-overlap sub-settings (``MC_TP_OVERLAP_*``,
``tp_comm_overlap_disable_qkv``, ``NVTE_RS_STRIDED_ATOMIC``, the overlap files' atomic GEMMs,
CGA sizes and FP8 buffers), FP8 weight caching in graphs
(``CG_WEIGHT_CACHING``), ``disable_parameter_transpose_cache``, the TE op fuser and fused
QKV-RoPE (``USE_TE_OPS``, ``FUSED_SINGLE_QKV_ROPE``), on-device gradient clipping, cuDNN norms,
SHARP, NCCL tuning (``NCCL_MIN_CTAS``, channels, NVLS), clock boost (``VBOOST_VALUE``), the
Python GC switched off during training, the container's TE version where not pinned.
Gradient-accumulation fusion is not set: under LoRA the frozen base weights have no weight
gradient to fuse. v4.0's FP8 weights (``fp8_params`` with the non-distributed ``fused_adam``)
are not set: memtune requires the distributed optimizer for ``fp8_param_gather`` (OPT005).

Partners (every other submitter directory with ``llama2_70b_lora`` results, ``mlperf.submitters``):
one set per version, submitter and GPU kind, ``mlperf/<version>/llama2_70b_lora/<submitter>/<GPU>``,
translated by the same functions. A partner keeps its code its own way (``benchmark/`` or
``benchmarks/``, a shared ``implementations/nemo`` or ``pytorch``, per-system directories); its
launch config is, in this order of evidence:

1. the one its logs name: ``:::DLPAL ... <DGXSYSTEM>``, where NVIDIA's ``config_common.sh`` sets
   DGXSYSTEM to the sourcing script's name, so ``config_<DGXSYSTEM>.sh`` ran;
2. where the logs name none, or one the submitter does not publish (renamed after the run: Dell,
   Wiwynn), the one named after the system (every word of its name in the system's name or GPU);
3. where the logs name none and none is named after the system, the only one of the submitter's
   that fits;

and it must fit: DGXNNODES and the GPUs per node (of its name's ``<nodes>x<gpus>x`` word, else
DGXNGPU) are the system json's, and it agrees with the logs on the global batch (MINIBS x DP),
the learning rate, the steps and the gradient accumulation. Several copies that fit and translate
alike are one (one in a directory named after the system, or that the system's README points
to, is cited); copies that translate differently leave the submission out. The code is the NeMo
implementation beside the script (or above its ``configs/``), else the submitter's only one; one
built on ROCm is not NVIDIA's; its Dockerfile gives the versions (none: memtune's defaults).
The logs are read with srun's rank label (``0: :::MLLOG``) removed (``mlperf.read_log`` reads
only lines that start with ``:::MLLOG``); otherwise the step is ``mlperf.measured_step``'s.
A submission whose logs repeat one kept before (earliest version first, NVIDIA before partners),
compared without the lines that name the system or publisher (``:::SYSJSON``, MLLOG
``submission_*``), is left out.

Left out (listed in the output's header, one line each): accelerators outside memtune's GPU
catalog (L40S, GB300, B300, H200 NVL), accelerators not NVIDIA's (AMD, Intel Gaudi: not NVIDIA's
NeMo code), runs in NVFP4 (memtune has no FP4 precision), submitters that publish no NeMo
implementation (Juniper's DeepSpeed, launch scripts only), partners' runs whose launch config
cannot be found as above or does not fit, repeated logs, logs absent from the mirror, result
directories ``mlperf.submissions`` does not read, and any run whose translation memtune's check
gate refuses (``memtune.check.gate``; nothing is priced).

    python benchmarks/published/layouts/collect_mlperf_lora.py OUT.yaml
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from memtune.bench import plan as bench_plan
from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.errors import InputError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mlperf

BENCHMARK = "llama2_70b_lora"
VERSIONS = ("v4.0", "v4.1", "v5.0", "v5.1")
IMPLEMENTATIONS = f"{mlperf.SUBMITTER}/benchmarks/{BENCHMARK}/implementations"
NEMO_CONFIG = "conf/megatron_gpt_peft_tuning_config.yaml"
# system json accelerator_model_name fragment -> memtune GPU catalog name (`memtune gpus`)
GPUS = {
    "H100-SXM5-80GB": "H100-80GB",
    "H100-SXM-80GB": "H100-80GB",  # Supermicro's v4.0 AS-8125GS-TNHR system json
    "A100-SXM4-80GB": "A100-80GB",
    "H200-SXM5-141GB": "H200",
    "(B200-SXM-180GB)": "B200",
    "(GB200)": "GB200",
}
SHORT = {"H100-80GB": "H100", "A100-80GB": "A100", "H200": "H200", "B200": "B200", "GB200": "GB200"}
MODEL = "llama3-70b"
COMMON = ["model.vocab_size=32000"]  # meta-llama/Llama-2-70b-hf config.json
MEGATRON_GIT = mlperf.MIRRORS / "NVIDIA+Megatron-LM" / "repo"
# NGC PyTorch container release notes (docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes):
# "PyTorch container image version YY.MM is based on ..."
TORCH_OF_CONTAINER = {"24.04": "2.3.0", "24.09": "2.5.0", "25.04": "2.7.0", "25.09": "2.9.0"}
# NeMo 1.0 peft_config.py (PEFT_MODULE_MAP, LORA_CONFIG_TO_MCORE_MAP, get_target_modules)
NEMO1_TARGETS = {
    "attention": ["linear_qkv", "linear_proj"],
    "mlp": ["linear_fc1", "linear_fc2"],
    "all": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
    "attention_qkv": ["linear_qkv"],
    "attention_dense": ["linear_proj"],
    "mlp_fc1": ["linear_fc1"],
    "mlp_fc2": ["linear_fc2"],
}
ENV_KEYS = (
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "NCCL_GRAPH_REGISTER",
)


class LeftOut(Exception):
    """A submission that is not translated, with the reason."""


@dataclass(frozen=True)
class Code:
    """A submission's implementation: its directory, launch config and what they set."""

    directory: str
    config: str  # the launch script's file name
    launch: str  # the launch script as the run's source names it
    sourced: tuple[str, ...]  # the scripts it sources, in order
    env: dict[str, str]  # the launch scripts' exports
    cfg: dict[str, Any]  # the NeMo config, resolved (dotted keys)
    train_py: str
    callbacks_py: str
    overlap: dict[str, dict[str, Any]] | None = None  # the userbuffer overlap file's priced fields

    @property
    def nemo1(self) -> bool:
        return "model.mcore_gpt" in self.cfg


# --- reading the implementation ----------------------------------------------------------------


def gpu_of(sub: mlperf.Submission) -> str | None:
    return next((name for part, name in GPUS.items() if part in sub.accelerator), None)


def launch_config(repo: Path, sub: mlperf.Submission) -> tuple[str, str]:
    """The implementation directory and launch script the submission's README names, checked
    against its node count and GPUs per node."""
    readme = mlperf.show(repo, f"{sub.implementation}/README-{sub.system}.md")
    named = re.search(r"implementations/([^/\s`]+)/(config_[^\s`/]+\.sh)", readme)
    if named is None:
        raise LeftOut(f"{sub.system}: its README names no launch config")
    directory, config = f"{IMPLEMENTATIONS}/{named.group(1)}", named.group(2)
    if not re.match(rf"config_[A-Za-z0-9]+_{sub.nodes}x{sub.gpus_per_node}x", config):
        raise LeftOut(f"{sub.system}: {config} is not for {sub.nodes}x{sub.gpus_per_node} GPUs")
    return directory, config


_SOURCE = re.compile(r"^\s*source\s+\$\(dirname\s+\$\{BASH_SOURCE\[0\]\}\)/(\S+)\s*$")
_OTHER_SOURCE = re.compile(r"^\s*(source|\.)\s+\S")


def expanded(repo: Path, directories: tuple[str, ...], name: str, sourced: list[str]) -> str:
    """The launch script with every script it sources put in place of its ``source`` line, each
    looked up in ``directories`` in order (NVIDIA's ``config_common.sh`` lies beside the script or
    under ``configs/``); a script sourced from anywhere else leaves the submission out."""
    text = next((t for d in directories if (t := mlperf.show(repo, f"{d}/{name}"))), "")
    if not text:
        raise LeftOut(f"{directories[0]}/{name}: not in the repository")
    lines = []
    for line in text.splitlines():
        if m := _SOURCE.match(line):
            sourced.append(m.group(1))
            lines.append(expanded(repo, directories, m.group(1), sourced))
        elif _OTHER_SOURCE.match(line):
            raise LeftOut(f"{name} sources a script outside the repository ({line.strip()})")
        else:
            lines.append(line)
    return "\n".join(lines)


_DECODED_ENV = re.compile(r"\$\{oc\.decode:\$\{oc\.env:(\w+),([^${}]*)\}\}")
_PLAIN_ENV = re.compile(r"\$\{oc\.env:(\w+),([^${}]*)\}")
_YAML_KEY = re.compile(r"^(\s*)([A-Za-z_][\w@.]*):\s*(.*)$")


def decoded(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def resolved(value: str, env: dict[str, str]) -> Any:
    """A NeMo config value: ``${oc.decode:${oc.env:VAR,default}}`` (or without decode) with the
    launch config's VAR, else the default; a plain value as YAML reads it; any other
    interpolation as its text."""
    for pattern, decode in ((_DECODED_ENV, True), (_PLAIN_ENV, False)):
        if m := pattern.fullmatch(value):
            text = env.get(m.group(1), m.group(2).strip())
            return decoded(text) if decode else text.strip("'\"")
    return value if "${" in value else decoded(value)


def nemo_config(text: str, env: dict[str, str]) -> dict[str, Any]:
    """The NeMo yaml's leaf values by dotted key, resolved (list items under ``defaults`` skipped)."""
    found: dict[str, Any] = {}
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = _YAML_KEY.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        indent, key, value = len(m.group(1)), m.group(2), re.split(r"\s+#", m.group(3))[0].strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not value:
            stack.append((indent, key))
            continue
        found[".".join([k for _, k in stack] + [key])] = resolved(value, env)
    return found


def code_of(repo: Path, sub: mlperf.Submission) -> Code:
    directory, config = launch_config(repo, sub)
    return read_code(repo, directory, config, (directory, f"{directory}/configs"), f"{directory}/{config}")


def read_code(repo: Path, directory: str, config: str, places: tuple[str, ...], launch: str) -> Code:
    """The implementation in ``directory`` as the launch script ``config`` (looked up, with what
    it sources, in ``places``) sets it."""
    sourced: list[str] = []
    env = mlperf.exports(expanded(repo, places, config, sourced))
    text = mlperf.show(repo, f"{directory}/{NEMO_CONFIG}")
    cfg = nemo_config(text, env)
    if not cfg:
        raise LeftOut(f"{directory}/{NEMO_CONFIG}: not in the repository")
    return Code(
        directory,
        config,
        launch,
        tuple(sourced),
        env,
        cfg,
        mlperf.show(repo, f"{directory}/train.py"),
        mlperf.show(repo, f"{directory}/custom_callbacks.py"),
        overlap_cfg(repo, directory, text, env),
    )


def overlap_cfg(
    repo: Path, directory: str, text: str, env: dict[str, str]
) -> dict[str, dict[str, Any]] | None:
    """The userbuffer overlap file the NeMo config selects (``optional tp_overlap@model.
    ub_tp_comm_overlap_cfg: ${GPU_ARCH}100tp${TP}[cp${CP}]mbs${MBS}`` under ``conf/tp_overlap/``),
    with the fields memtune prices; None where the selector or the file is absent (Transformer
    Engine's defaults, as Hydra's ``optional`` leaves them)."""
    selector = mlperf.OVERLAP_SELECTOR.search(text)
    return None if selector is None else mlperf.overlap_file(repo, directory, selector.group(1), env)


# --- partners: which launch config a partner's run used -------------------------------------------

# where partners keep this benchmark's code (ASUSTeK's v4.0 ft-llm, Fujitsu's v4.1 llama2_70b)
PARTNER_TREE = re.compile(r"^[^/]+/benchmarks?/(llama2_70b_lora|llama2-70b_lora|ft-llm|llama2_70b)/")
# copies of libraries and backups inside an implementation, never a launch config of the run
VENDORED = frozenset(
    {"NeMo", "Megatron-LM", "megatron", "TransformerEngine", "apex", "nccl", "3rdparty", "config.bak"}
)
_HELPER = re.compile(r"(^|_)common(_|\.)|mounts")
_LAYOUT = re.compile(r"^\d+x\d+x\d+x")
_DLPAL = re.compile(r"^:::DLPAL .* (\S+)\s*$", re.M)
_RANK = re.compile(r"^\s*\d+: (?=:::MLLOG )", re.M)
# log lines that name the system or its publisher, not the run
_NAMING = re.compile(r':::SYSJSON|"key": "submission_')
# a launch config: named by the logs, named after the system, or the only one that fits
HOW = ("named by its logs", "named after the system", "the only one of the submitter's that fits")


@functools.cache
def log_text(repo: Path, path: str) -> str:
    """A result log, the rank label srun's --label puts before partners' lines ("0: ") removed."""
    return _RANK.sub("", mlperf.show(repo, path))


@functools.cache
def partner_files(repo: Path, submitter: str) -> tuple[str, ...]:
    """The submitter's files of this benchmark's implementations, vendored libraries left out."""
    paths = mlperf.listing(repo, submitter)
    return tuple(p for p in paths if PARTNER_TREE.match(p) and not VENDORED & set(p.split("/")[:-1]))


def launch_scripts(repo: Path, submitter: str) -> list[str]:
    """Every ``config_*.sh`` launch script of the submitter (not the common ones they source)."""
    names = (p for p in partner_files(repo, submitter) if re.search(r"/config_[^/]+\.sh$", p))
    return [p for p in names if not _HELPER.search(p.rsplit("/", 1)[1])]


def logged_config(repo: Path, sub: mlperf.Submission) -> str | None:
    """The launch script the logs name (``:::DLPAL ... <DGXSYSTEM>``; ``config_common.sh`` sets
    DGXSYSTEM to the sourcing script's name), where they name one."""
    names = {m for path in sub.logs for m in _DLPAL.findall(log_text(repo, path))}
    if len(names) > 1:
        raise LeftOut(f"its logs name several launch configs ({', '.join(sorted(names))})")
    return f"config_{names.pop()}.sh" if names else None


def named_after(path: str, sub: mlperf.Submission) -> bool:
    """The script's name is the system's: every word of it (the layout word left out) is in the
    system's name or its GPU's, one at least in the system's."""
    stem = path.rsplit("/", 1)[1].removeprefix("config_").removesuffix(".sh")
    words = [w.lower() for w in stem.split("_") if len(w) > 1 and not _LAYOUT.match(w)]
    system, gpu = sub.system.lower(), sub.accelerator.lower()
    return bool(words) and all(w in system or w in gpu for w in words) and any(w in system for w in words)


def beside_system(repo: Path, path: str, sub: mlperf.Submission) -> bool:
    """The script lies in a directory named after the system (or the start of its name), or one
    the system's own README (``implementations/<system>/README*``) points to (``../<dir>``)."""
    folder = path.rsplit("/", 1)[0].removesuffix("/configs").rsplit("/", 1)[1]
    norm = [re.sub(r"[^a-z0-9]", "", x.lower()) for x in (folder, sub.system)]
    return (len(norm[0]) >= 6 and norm[1].startswith(norm[0])) or folder in linked_dirs(repo, sub)


def linked_dirs(repo: Path, sub: mlperf.Submission) -> set[str]:
    """The directories the system's own README points to (``../<dir>``)."""
    readmes = [p for p in partner_files(repo, sub.submitter) if f"/implementations/{sub.system}/README" in p]
    return {name for p in readmes for name in re.findall(r"\.\./([\w.-]+)", mlperf.show(repo, p))}


def candidates(repo: Path, sub: mlperf.Submission) -> tuple[list[str], int, str]:
    """The launch scripts that may be the run's, how they were found (an index of HOW) and what
    the logs name where that is not published."""
    scripts = launch_scripts(repo, sub.submitter)
    logged = logged_config(repo, sub)
    if found := [p for p in scripts if logged and p.endswith(f"/{logged}")]:
        return found, 0, ""
    missing = f"its logs name {logged}, which {sub.submitter} does not publish" if logged else ""
    if found := [p for p in scripts if named_after(p, sub)]:
        return found, 1, missing
    if logged:
        raise LeftOut(missing)
    return scripts, 2, ""


def nemo_dirs(repo: Path, submitter: str) -> list[str]:
    """The submitter's implementations of NVIDIA's NeMo code: a NeMo config, not built on ROCm."""
    files = partner_files(repo, submitter)
    dirs = [p.removesuffix(f"/{NEMO_CONFIG}") for p in files if p.endswith(f"/{NEMO_CONFIG}")]
    return sorted(d for d in dirs if not rocm(repo, d))


def rocm(repo: Path, directory: str) -> bool:
    """The implementation is built on AMD's ROCm (its Dockerfile, or its parent's)."""
    parent = directory.rsplit("/", 1)[0]
    return any("rocm" in mlperf.show(repo, f"{d}/Dockerfile").lower() for d in (directory, parent))


def code_dir(repo: Path, sub: mlperf.Submission, script: str) -> str:
    """The NeMo implementation a launch script drives: the one beside it (or above its
    ``configs/``), else the submitter's only one."""
    here = script.rsplit("/", 1)[0]
    dirs = nemo_dirs(repo, sub.submitter)
    if near := [d for d in (here, here.removesuffix("/configs")) if d in dirs]:
        return near[0]
    if len(dirs) == 1:
        return dirs[0]
    raise LeftOut(f"{script}: no NeMo implementation beside it, {len(dirs)} elsewhere")


class Misfit(LeftOut):
    """A launch config for other nodes or GPUs per node than the system's."""


def scale_of(code: Code) -> tuple[int, int | None]:
    """The nodes (DGXNNODES) and GPUs per node the launch config is for: those of its name's
    layout word (``_<nodes>x<gpus>x...``), else DGXNGPU (Red Hat's config_common.sh says 6)."""
    word = re.search(r"_\d+x(\d+)x\d+x", code.config)
    gpus = word.group(1) if word else code.env.get("DGXNGPU")
    return int(code.env.get("DGXNNODES", 0)), int(gpus) if gpus else None


def partner_code(repo: Path, sub: mlperf.Submission, script: str) -> Code:
    directory = code_dir(repo, sub, script)
    here, name = script.rsplit("/", 1)
    code = read_code(repo, directory, name, (here, directory, f"{directory}/configs"), script)
    nodes, gpus = scale_of(code)
    if nodes != sub.nodes or gpus not in (None, sub.gpus_per_node):
        raise Misfit(
            f"{name} is for {nodes}x{gpus or '?'} GPUs, the system has {sub.nodes}x{sub.gpus_per_node}"
        )
    return code


def checked_logs(repo: Path, sub: mlperf.Submission, code: Code, shape: dict[str, Any], gbs: int) -> None:
    """The launch config agrees with what the logs record: learning rate, steps and gradient
    accumulation (GBS / (MBS x DP))."""
    logged = mlperf.read_log(log_text(repo, sub.logs[0])).keys
    dp = sub.nodes * sub.gpus_per_node // (shape["tp"] * shape["pp"] * shape["cp"])
    expected = {
        "opt_base_learning_rate": code.cfg.get("model.optim.lr", code.cfg.get("optim.lr")),
        "opt_learning_rate_training_steps": code.cfg.get("trainer.max_steps"),
        "gradient_accumulation_steps": gbs // (shape["mbs"] * dp),
    }
    for key, value in expected.items():
        if not (isinstance(logged.get(key), (int, float)) and math.isclose(logged[key], value or 0)):
            raise LeftOut(f"{code.config} sets {key} {value}, the logs {logged.get(key)}")


def fitting(
    repo: Path, sub: mlperf.Submission, gpu: str, scripts: list[str]
) -> tuple[list, list[str], list[str]]:
    """The scripts' runs that fit the submission as (in a directory named after the system, run,
    notes, script), and why the others do not (for other nodes or GPUs; otherwise)."""
    fits, misfits, why = [], [], []
    for script in sorted(scripts, key=lambda p: not beside_system(repo, p, sub)):
        found: list[str] = []
        try:
            fits.append(
                (beside_system(repo, script, sub), run_of(repo, sub, gpu, found, script), found, script)
            )
        except Misfit as reason:
            misfits.append(str(reason))
        except LeftOut as reason:
            why.append(str(reason))
    return fits, misfits, why


def unfit(sub: mlperf.Submission, how: int, misfits: list[str], why: list[str]) -> str:
    """Why no launch config fits: what failed, or that none is for the system's scale."""
    if why or how < 2:
        return "; ".join((why + misfits)[:3])
    return (
        f"none of {sub.submitter}'s {len(misfits)} launch configs is for {sub.nodes}x{sub.gpus_per_node} GPUs"
    )


def partner_run(repo: Path, sub: mlperf.Submission, gpu: str, notes: list[str]) -> dict[str, Any]:
    """The run of a partner's submission, from the one launch config (or several that translate
    alike) that fits it: the best found (HOW; in a directory named after the system first)."""
    if not nemo_dirs(repo, sub.submitter):
        raise LeftOut(
            f"{sub.submitter} publishes no NVIDIA NeMo implementation of {BENCHMARK} ({NEMO_CONFIG})"
        )
    scripts, how, missing = candidates(repo, sub)
    fits, misfits, why = fitting(repo, sub, gpu, scripts)
    best = [fit[1:] for fit in fits if fit[0]] or [fit[1:] for fit in fits]
    if not best:
        raise LeftOut(unfit(sub, how, misfits, why) or "no launch config")
    if len({(tuple(run["overrides"]), run["gbs"]) for run, *_ in best}) > 1:
        names = ", ".join(script.rsplit("/", 1)[1] for *_, script in best)
        raise LeftOut(
            f"ambiguous: {names} fit it and translate differently" + (f" ({why[0]})" if why else "")
        )
    run, found, _ = best[0]
    if how:
        found.append(
            f"{who(sub)}: launch config: {HOW[how]} ({missing or 'its logs name none'}; it agrees with the logs)"
        )
    notes.extend(found)
    return run


# --- software versions ---------------------------------------------------------------------------


def dockerfile(repo: Path, sub: mlperf.Submission, code: Code) -> tuple[str, str]:
    """The Dockerfile's text and where it came from: the implementation's own, else (v4.1's B200
    preview ships none) that of another implementation of the same version."""
    own = mlperf.show(repo, f"{code.directory}/Dockerfile")
    if own:
        return own, f"{code.directory}/Dockerfile"
    if sub.submitter != mlperf.SUBMITTER:
        # a partner's own other Dockerfile (Dell's v5.0 Dockerfile.x86_64), else none
        named = [
            p for p in partner_files(repo, sub.submitter) if p.startswith(f"{code.directory}/Dockerfile")
        ]
        return (mlperf.show(repo, named[0]), named[0]) if named else ("", "")
    for other in mlperf.submissions(sub.version, BENCHMARK):
        path = f"{other.implementation}/Dockerfile"
        if text := mlperf.show(repo, path):
            return text, path
    return "", ""


def megatron_version(tag: str) -> str | None:
    """megatron-core's version at ``tag`` of NVIDIA's Megatron-LM (package_info.py)."""
    done = subprocess.run(
        ["git", f"--git-dir={MEGATRON_GIT}", "show", f"{tag}:megatron/core/package_info.py"],
        capture_output=True,
        text=True,
        check=False,
    )
    parts = dict(re.findall(r"^(MAJOR|MINOR|PATCH|PRE_RELEASE)\s*=\s*'?([^'\n]*)'?", done.stdout, re.M))
    if done.returncode or not {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        return None
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}{parts.get('PRE_RELEASE', '')}"


def software(text: str) -> dict[str, str]:
    """env.* versions the Dockerfile's ARGs give."""
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    found: dict[str, str] = {}
    container = re.search(r"pytorch:(\d+\.\d+)-py3", args.get("FROM_IMAGE_NAME", ""))
    if container and container.group(1) in TORCH_OF_CONTAINER:
        found["torch_version"] = TORCH_OF_CONTAINER[container.group(1)]
    tag = args.get("MCORE_REVISION") or args.get("MEGATRON_REVISION")
    if tag and (version := megatron_version(tag)):
        found["megatron_core_version"] = version
    te = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", args.get("TE_REVISION", "SKIP"))
    if te:
        found["transformer_engine_version"] = f"{te.group(1)}.{te.group(2)}.{te.group(3) or 0}"
    return found


# --- translation ---------------------------------------------------------------------------------


def layout(code: Code) -> dict[str, Any]:
    c = code.cfg
    tp, pp, cp = (int(c[f"model.{k}_parallel_size"]) for k in ("tensor_model", "pipeline_model", "context"))
    vp = c.get("model.virtual_pipeline_model_parallel_size") or 1
    return {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "vp": int(vp),
        "sp": bool(c["model.sequence_parallel"]) and tp > 1,
        "mbs": int(c["model.micro_batch_size"]),
        "seq": int(c["model.encoder_seq_length"]),
    }


def layout_overrides(shape: dict[str, Any], code: Code) -> list[str]:
    vp = shape["vp"] if shape["vp"] > 1 else "null"
    overlap = bool(code.cfg.get("model.ub_tp_comm_overlap")) and shape["sp"]
    return [
        f"model.tensor_model_parallel_size={shape['tp']}",
        f"model.pipeline_model_parallel_size={shape['pp']}",
        f"model.context_parallel_size={shape['cp']}",
        f"model.virtual_pipeline_model_parallel_size={vp}",
        f"model.sequence_parallel={str(shape['sp']).lower()}",
        f"train.micro_batch_size={shape['mbs']}",
        f"model.tp_comm_overlap={str(overlap).lower()}",
        *([str(Change("model.tp_comm_overlap_cfg", code.overlap))] if overlap and code.overlap else []),
    ] + ([f"model.cp_comm_type={code.cfg.get('model.cp_comm_type') or 'p2p'}"] if shape["cp"] > 1 else [])


def recompute_overrides(code: Code) -> list[str]:
    c = code.cfg
    prefix = "model.activations_checkpoint_" if code.nemo1 else "model.recompute_"
    granularity = c.get(f"{prefix}granularity")
    if granularity is None:
        return ["model.recompute_granularity=null"]
    found = [f"model.recompute_granularity={granularity}"]
    for key in ("method", "num_layers"):
        if c.get(f"{prefix}{key}") is not None:
            found.append(f"model.recompute_{key}={c[f'{prefix}{key}']}")
    return found


def distributed_optimizer(code: Code) -> bool:
    if code.nemo1:
        return code.cfg.get("model.optim.name") in ("mcore_distributed_optim", "distributed_fused_adam")
    return bool(code.cfg.get("optim.use_distributed_optimizer"))


def fp8_weights(code: Code) -> bool:
    """FP8 weights: NeMo 1.0's and 2.0's ``fp8_params``, or ``fp8_param_gather`` (v5.1)."""
    c = code.cfg
    return bool(c.get("model.fp8") and (c.get("model.fp8_params") or c.get("model.fp8_param_gather")))


def precision_overrides(code: Code) -> list[str]:
    c = code.cfg
    if c.get("model.fp4"):
        raise LeftOut(f"NVFP4 ({code.config}): memtune has no FP4 precision")
    if not c.get("model.fp8"):
        return ["model.fp8=null"]
    kind = "e4m3" if c.get("model.fp8_e4m3") else "hybrid"
    recipe = {"delayed": "delayed", "tensorwise": "tensorwise", "mxfp8": "mxfp8", "blockwise": "blockwise"}
    name = str(c.get("model.fp8_recipe", "delayed"))
    if name not in recipe:
        raise LeftOut(f"FP8 recipe {name!r}: no memtune equivalent")
    # memtune (as Megatron-LM) takes FP8 weights only with the distributed optimizer (OPT005)
    gather = fp8_weights(code) and distributed_optimizer(code)
    attention = bool(c.get("model.fp8_dot_product_attention"))
    if attention and code.env.get("NVTE_FP8_DPA_BWD", "1") != "1":
        raise LeftOut(
            f"FP8 attention with its backward in bf16 (NVTE_FP8_DPA_BWD=0, {code.config}): not modelled"
        )
    return [
        f"model.fp8={kind}",
        f"model.fp8_recipe={recipe[name]}",
        f"model.fp8_param_gather={str(gather).lower()}",
        f"model.fp8_dot_product_attention={str(attention).lower()}",
    ]


def optimizer_overrides(code: Code, shape: dict[str, Any]) -> list[str]:
    c, dist = code.cfg, distributed_optimizer(code)
    if code.nemo1 and dist:
        grad, param = c.get("model.optim.overlap_grad_sync"), c.get("model.optim.overlap_param_sync")
        fp32 = c.get("model.optim.grad_sync_dtype", "fp32") == "fp32"
    elif code.nemo1:
        # MainParamsOptimizerWrapper: fp32 main gradients; async all-reduce only with PP 1 and no SP
        grad, param, fp32 = shape["pp"] == 1 and not shape["sp"], False, True
    else:
        if "grad_reduce_in_fp32=False" not in code.train_py:
            raise LeftOut(f"{code.directory}/train.py: grad_reduce_in_fp32 is not the False expected")
        grad, param, fp32 = c.get("ddp.overlap_grad_reduce"), c.get("ddp.overlap_param_gather"), False
    words = [str(bool(v)).lower() for v in (dist, dist, grad, param and dist, fp32)]
    keys = (
        "optimizer.use_distributed_optimizer",
        "ddp.use_distributed_optimizer",
        "ddp.overlap_grad_reduce",
        "ddp.overlap_param_gather",
        "ddp.grad_reduce_in_fp32",
    )
    return [f"{k}={w}" for k, w in zip(keys, words)]


def cuda_graph_impl(code: Code) -> str:
    c = code.cfg
    if c.get("model.external_cuda_graph"):
        return "transformer_engine"
    if not c.get("model.enable_cuda_graph"):
        return "none"
    if code.nemo1:
        if "make_graphed_callables" not in code.callbacks_py:
            raise LeftOut(f"{code.directory}: enable_cuda_graph without TE's make_graphed_callables")
        return "transformer_engine"
    return "full_iteration" if c.get("model.cuda_graph_scope") == "full_iteration" else "local"


def nemo2_lora(train_py: str) -> dict[str, Any]:
    """The ``LoRA(...)`` call of a NeMo 2.0 train.py: rank, alpha, dropout and targets."""
    call = re.search(r"\bLoRA\((.*?)\n\s*\)", train_py, re.S)
    text = call.group(1) if call else ""
    found = {k: re.search(rf"\b{k}=([\d.]+)", text) for k in ("dim", "alpha", "dropout")}
    targets = re.search(r"target_modules=\[([^\]]*)\]", text)
    if targets is None or not all(found.values()):
        raise LeftOut("train.py: no LoRA(dim=, alpha=, dropout=, target_modules=) call")
    value = {k: m.group(1) for k, m in found.items() if m}
    a2a = re.search(r"\ba2a_experimental=(True|False)\b", text)
    return {
        **value,
        "targets": re.findall(r"[\"'](\w+)[\"']", targets.group(1)),
        "a2a": a2a is not None and a2a.group(1) == "True",
    }


def lora(code: Code) -> dict[str, Any]:
    """The adapters: NeMo 2.0's ``LoRA(...)`` in train.py, NeMo 1.0's ``lora_tuning``."""
    if not code.nemo1:
        return nemo2_lora(code.train_py)
    tuning = "model.peft.lora_tuning."
    targets = [t for name in code.cfg[f"{tuning}target_modules"] for t in NEMO1_TARGETS[name]]
    return {
        "dim": code.cfg[f"{tuning}adapter_dim"],
        "alpha": code.cfg[f"{tuning}alpha"],
        "dropout": code.cfg[f"{tuning}adapter_dropout"],
        "targets": targets,
        "a2a": bool(code.cfg.get(f"{tuning}a2a_experimental")),
    }


def lora_overrides(code: Code) -> list[str]:
    adapters = lora(code)
    order = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    targets = ",".join(sorted(set(adapters["targets"]), key=order.index))
    return [
        f"peft.dim={adapters['dim']}",
        f"peft.alpha={adapters['alpha']}",
        f"peft.dropout={adapters['dropout']}",
        f"peft.target_modules=[{targets}]",
        "peft.scale_position=output",
    ] + (["peft.a2a_experimental=true"] if adapters["a2a"] else [])


def environment_overrides(code: Code, versions: dict[str, str]) -> list[str]:
    env = code.env
    found = [f"env.{k}={env[k]}" for k in ENV_KEYS if k in env]
    if env.get("NVTE_FUSED_ATTN") == "1" and env.get("NVTE_FLASH_ATTN") == "0":
        found.append("model.attention_backend=fused")
    if code.cfg.get("ddp.nccl_ub"):
        found.append("env.use_nccl_ub=true")
    return found + [f"env.{k}={v}" for k, v in sorted(versions.items())]


def overrides(code: Code, shape: dict[str, Any], versions: dict[str, str]) -> list[str]:
    if code.cfg.get("model.cpu_offloading"):
        raise LeftOut(f"{code.config}: CPU offloading")
    graphs = cuda_graph_impl(code)
    return (
        precision_overrides(code)
        + optimizer_overrides(code, shape)
        + layout_overrides(shape, code)
        + recompute_overrides(code)
        + [f"model.cuda_graph_impl={graphs}"]
        + lora_overrides(code)
        + environment_overrides(code, versions)
    )


# --- runs and sets -------------------------------------------------------------------------------


def checked_batch(sub: mlperf.Submission, code: Code, shape: dict[str, Any], gbs: int) -> None:
    """The logs' global batch is the launch config's MINIBS x data-parallel size."""
    gpus = sub.nodes * sub.gpus_per_node
    expected = int(code.env.get("MINIBS", 1)) * (gpus // (shape["tp"] * shape["pp"])) // shape["cp"]
    if expected != gbs:
        raise LeftOut(f"{code.config}: the logs' global batch {gbs} is not MINIBS x DP = {expected}")


def notes_of(sub: mlperf.Submission, code: Code, docker: str) -> list[str]:
    """What a reader of the run should know of its translation."""
    where, found = who(sub), []
    if fp8_weights(code) and not distributed_optimizer(code):
        found.append(
            f"{where}: FP8 weights (fp8_params) with the non-distributed {code.cfg.get('model.optim.name')}; "
            "model.fp8_param_gather=false, as memtune takes FP8 weights only with the distributed optimizer (OPT005)"
        )
    if docker and not docker.startswith(f"{code.directory}/"):
        found.append(f"{where}: ships no Dockerfile; software versions from {docker}")
    if not docker:
        found.append(f"{where}: ships no Dockerfile; software versions left at memtune's defaults")
    return found


def run_of(
    repo: Path, sub: mlperf.Submission, gpu: str, notes: list[str], script: str | None = None
) -> dict[str, Any]:
    """The run of a submission: NVIDIA's from the launch config its README names, a partner's
    from ``script``."""
    code = code_of(repo, sub) if script is None else partner_code(repo, sub, script)
    measured = mlperf.measured_step(repo, sub)
    if measured is None:
        raise LeftOut("no step time in its logs")
    step, gbs, logs = measured
    shape = layout(code)
    checked_batch(sub, code, shape, gbs)
    checked_logs(repo, sub, code, shape, gbs)
    text, docker = dockerfile(repo, sub, code)
    notes.extend(notes_of(sub, code, docker))
    gpus = sub.nodes * sub.gpus_per_node
    run = {
        "label": f"Llama 2 70B LoRA {sub.nodes}x{sub.gpus_per_node} {SHORT[gpu]} TP{shape['tp']} "
        f"PP{shape['pp']} CP{shape['cp']} MBS{shape['mbs']} GBS{gbs}",
        "gpus": gpus,
        "gpu": gpu,
        "gpus_per_node": sub.gpus_per_node,
        "seq": shape["seq"],
        "gbs": gbs,
        "mode": "lora",
        "source": source_of(sub, code, f"({logs} logs, median step {step:.4f} s)", docker),
        "overrides": overrides(code, shape, software(text)),
        "measured": {"tokens_per_s_per_gpu": round(gbs * shape["seq"] / (step * gpus), 1)},
    }
    gated(run)
    return run


def source_of(sub: mlperf.Submission, code: Code, step: str, docker: str) -> str:
    """Where the run's numbers and settings come from: its logs, launch config and code."""
    sourcing = f" (sourcing {', '.join(code.sourced)})" if code.sourced else ""
    return (
        f"mlcommons/training_results_{sub.version} {sub.submitter}/results/{sub.system}/{BENCHMARK}/"
        f"result_*.txt {step}; launch config {code.launch}{sourcing}; {code.directory}/{NEMO_CONFIG}"
        + (f"; versions from {docker}" if docker else "")
    )


def gated(run: dict[str, Any]) -> None:
    """The run's job passes memtune's check gate (built as ``memtune bench plan`` builds it;
    nothing is priced)."""
    fields = {"model": MODEL, **{k: run[k] for k in bench_plan.RUN_FIELDS if k in run}}
    changes = [Change.parse(text) for text in COMMON + run["overrides"]]
    try:
        gate(with_changes(bench_plan._base(fields), changes))
    except InputError as exc:
        raise LeftOut(f"memtune's check gate refuses it: {exc.problems[0]}") from exc


def commit(repo: Path) -> str:
    done = subprocess.run(
        ["git", f"--git-dir={repo}", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def who(sub: mlperf.Submission) -> str:
    """How the output names a submission: NVIDIA's by its system, a partner's with the submitter."""
    system = sub.system if sub.submitter == mlperf.SUBMITTER else f"{sub.submitter}/{sub.system}"
    return f"{sub.version} {system}"


def gpu_or_out(sub: mlperf.Submission) -> str:
    """The submission's memtune GPU, or why it has none."""
    if "NVIDIA" not in sub.accelerator:
        raise LeftOut(
            f"{sub.accelerator} is not an NVIDIA GPU (the code is not NVIDIA's NeMo implementation)"
        )
    if (gpu := gpu_of(sub)) is None:
        raise LeftOut(f"{sub.accelerator} is not in memtune's GPU catalog")
    return gpu


def fingerprint(repo: Path, sub: mlperf.Submission) -> str:
    """The submission's logs as one digest, without the lines that name the system or publisher
    (``:::SYSJSON``, also echoed by bash, and the ``submission_*`` MLLOG keys: Dell's v4.1 -POWER
    system repeats its 8-node run with only ``submission_platform`` changed)."""
    texts = [mlperf.show(repo, path) for path in sub.logs]
    if not all(texts):
        raise LeftOut("its result logs are listed in the repository but their content is not in the mirror")
    kept = ("\n".join(x for x in t.splitlines() if not _NAMING.search(x)) for t in texts)
    return hashlib.sha256("\0".join(sorted(kept)).encode()).hexdigest()


def submission_run(
    repo: Path, sub: mlperf.Submission, seen: dict[str, str], notes: list[str]
) -> dict[str, Any]:
    """The submission's run, unless it repeats the logs of one kept before (``seen``)."""
    gpu = gpu_or_out(sub)
    digest = fingerprint(repo, sub)
    if digest in seen:
        raise LeftOut(f"its logs repeat those of {seen[digest]}")
    run = (
        run_of(repo, sub, gpu, notes)
        if sub.submitter == mlperf.SUBMITTER
        else partner_run(repo, sub, gpu, notes)
    )
    seen[digest] = who(sub)
    return run


def unread(repo: Path, version: str, submitter: str, subs: list[mlperf.Submission]) -> list[str]:
    """The submitter's result directories of this benchmark that ``mlperf.submissions`` does not
    return (logs not named result_<i>.txt, or no system json)."""
    systems = {p.split("/")[2] for p in mlperf.listing(repo, f"{submitter}/results") if f"/{BENCHMARK}/" in p}
    found = []
    for system in sorted(systems - {sub.system for sub in subs}):
        json = mlperf.show(repo, f"{submitter}/systems/{system}.json")
        why = "its logs are not named result_<i>.txt" if json else "it has no system json"
        found.append(f"{version} {submitter}/{system}: {why} (mlperf.submissions does not read it)")
    return found


def submitters(version: str) -> list[str]:
    """NVIDIA, then the partners, in the order of their directories."""
    return [mlperf.SUBMITTER] + [s for s in mlperf.submitters(version) if s != mlperf.SUBMITTER]


def collect() -> tuple[list[dict[str, Any]], list[str], list[str], list[str]]:
    """The sets, what was left out (with why), notes on the translation, and the repositories read."""
    sets: dict[tuple[str, str, str], dict[str, Any]] = {}
    left_out: list[str] = []
    notes: list[str] = []
    read: list[str] = []
    seen: dict[str, str] = {}
    for version in VERSIONS:
        repo = mlperf.git_dir(version)
        read.append(f"mlcommons/training_results_{version} at {commit(repo)}")
        for submitter in submitters(version):
            subs = mlperf.submissions(version, BENCHMARK, submitter=submitter)
            left_out.extend(unread(repo, version, submitter, subs))
            for sub in subs:
                try:
                    run = submission_run(repo, sub, seen, notes)
                except LeftOut as why:
                    left_out.append(f"{who(sub)}: {why}")
                    continue
                key = (version, submitter, run["gpu"])
                sets.setdefault(key, new_set(version, submitter, run["gpu"], repo, sub.gpus_per_node))[
                    "runs"
                ].append(run)
    for entry in sets.values():
        entry["runs"].sort(key=lambda r: r["gpus"])
    return list(sets.values()), left_out, notes, read


def new_set(version: str, submitter: str, gpu: str, repo: Path, gpus_per_node: int) -> dict[str, Any]:
    nvidia = submitter == mlperf.SUBMITTER
    code = "NeMo" if nvidia else "NVIDIA's NeMo implementation"
    return {
        "id": f"mlperf/{version}/{BENCHMARK}/" + (gpu if nvidia else f"{submitter}/{gpu}"),
        "source": f"mlcommons/training_results_{version} at {commit(repo)}: {submitter}'s closed-division "
        f"{BENCHMARK} submissions on {gpu} ({code}, FP8, GovReport packed to 8,192 tokens)",
        "model": MODEL,
        "gpu": gpu,
        "gpus_per_node": gpus_per_node,
        "mode": "lora",
        "common": list(COMMON),
        "runs": [],
    }


def header(read: list[str], left_out: list[str], notes: list[str]) -> list[str]:
    lines = [
        "Generated by benchmarks/published/layouts/collect_mlperf_lora.py from",
        *(f"  {r}" for r in read),
        "(and NVIDIA/Megatron-LM's package_info.py at the tags the Dockerfiles check out).",
        "What each setting is read from, and what is not modelled: the script's docstring.",
        "Left out:",
        *(f"  {why}" for why in left_out),
        "Notes:",
        *(f"  {note}" for note in notes),
    ]
    return lines


def main() -> None:
    out = sys.argv[1]
    sets, left_out, notes, read = collect()
    mlperf.write_sets(out, header(read, left_out, notes), sets)
    print(f"{len(sets)} sets, {sum(len(s['runs']) for s in sets)} runs, {len(left_out)} left out")


if __name__ == "__main__":
    main()
