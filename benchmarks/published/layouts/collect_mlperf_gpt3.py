"""Collect the MLPerf Training GPT-3 175B submissions (v3.0, v3.1, v4.0, v4.1) that ran NVIDIA's
NeMo implementation: NVIDIA's, every one, and its partners'.

Source: the mirrored git directories of mlcommons/training_results_vX.Y (read with ``mlperf.py``,
nothing executed). A submission is a system directory (``eos-dfw_n512_ngc23.09_nemo``) with its
result logs (``NVIDIA/results/<system>/gpt3/result_<i>.txt``), its system description
(``NVIDIA/systems/<system>.json``: GPU model, nodes, GPUs per node) and its implementation: the
system's own ``NVIDIA/benchmarks/gpt3/implementations/<system>/`` (v4.1), else the one directory
of launch configs the version shares (``pytorch/`` in v3.0-v3.1, ``nemo/`` in v4.0). One set per
version and GPU kind (``mlperf/<version>/gpt3/<GPU>``), one run per submission, ranked by tokens/s
per GPU (MLPerf publishes no TFLOP/s).

What each value is read from:

- Scale: ``gpus`` = the system json's ``number_of_nodes`` x ``accelerators_per_node``; the GPU
  from ``accelerator_model_name`` (``H100-SXM5-80GB`` -> H100-80GB, ``B200-SXM-180GB`` -> B200,
  ``H200`` -> H200, ``(GB200)`` -> GB200).
- Measurement (``mlperf.measured_step``): the global batch and the step time, the median over
  the logs of each log's median step (``train_step_timing``, or training-block time over its
  steps where the log has none); ``tokens_per_s_per_gpu`` = GBS x 2,048 / (step s x GPUs). The
  micro batch follows from the logged ``gradient_accumulation_steps`` (GBS / (DP x GA)) and is
  checked against the launch config's.
- Layout and switches: the launch config ``config_<SYSTEM>_<nodes>x<gpus>x<minibs>x<TP>x<PP>...sh``
  whose node count is the system json's (the v4.0 system READMEs name the same files), with every
  ``source``d script read in place (``mlperf.exports``); variables it leaves unset take their
  defaults from the implementation's ``run_and_time.sh`` (``: "${VAR:=...}"``) and NeMo configs
  (``conf/custom.yaml``, ``conf/optim/distributed_fused_adam.yaml``: ``${oc.env:VAR,default}``),
  and a variable neither reads has no effect. TENSOR_MODEL_PARALLEL, PIPELINE_MODEL_PARALLEL,
  INTERLEAVED_PIPELINE (VPP; 0 = off), MICRO_BATCH_SIZE, SEQ_PARALLEL; FP8 + FP8_HYBRID (NeMo's
  fp8 with an amax history, FP8_AMAX_HISTORY=1024 ``max``: Transformer Engine's delayed scaling,
  ``model.fp8=hybrid``, ``fp8_recipe=delayed``); FP8_PARAMS (v4.0+: FP8 weights gathered in FP8,
  ``model.fp8_param_gather``); USE_DIST_OPTIMIZER (Apex's DistributedFusedAdam, sharded over DP:
  the distributed optimizer), OVERLAP_GRAD_SYNC / OVERLAP_PARAM_SYNC (``ddp.overlap_grad_reduce``
  / ``overlap_param_gather``), its ``grad_sync_dtype: bf16`` (``ddp.grad_reduce_in_fp32=false``)
  and BUCKET_CAP_MB (Apex sizes a bucket as ``1024 * 1024 * bucket_cap_mb / 2`` bf16 elements,
  apex/contrib/optimizers/distributed_fused_adam.py: ``ddp.bucket_size``); TP_COMM_OVERLAP
  (Transformer Engine's userbuffer TP overlap, ``model.tp_comm_overlap``) and the per-GEMM
  overlap file custom.yaml selects (``conf/tp_overlap/<GPU_ARCH>100tp<TP>[pp<PP>]mbs<MBS>.yaml``,
  its ``${oc.env:...}`` values as the launch sets them: ``model.tp_comm_overlap_cfg``, the fields
  memtune prices; none where the file is absent, or where GPU_ARCH may come from a script the
  submission leaves out); ACT_CKPT_GRANULARITY /
  _METHOD / _NUM_LAYERS (recompute; null in every submission); LAYER_CUDA_GRAPH (v4.0's
  ``enable_cuda_graph`` callback and v4.1's ``external_cuda_graph`` both capture every decoder
  layer per microbatch with Transformer Engine's ``make_graphed_callables``:
  ``model.cuda_graph_impl=transformer_engine``); DEFER_EMBEDDING_WGRAD_COMPUTE (v4.1; v4.0's
  custom.yaml turns it on where PP > 1, MINIBS <= 256 and MBS = 1, and v4.1's does so by default)
  and WGRAD_DEFERRAL_LIMIT; CROSS_ENTROPY_LOSS_FUSION (v4.1's custom.yaml, default on; earlier
  NeMo configs have no such key: off); NVTE_FUSED_ATTN=1 with NVTE_FLASH_ATTN=0 (cuDNN fused
  attention, ``model.attention_backend=fused``); CUDA_DEVICE_MAX_CONNECTIONS.
- Constant in every implementation: bias-GeLU, masked-softmax and gradient-accumulation fusions
  (NeMo's ``megatron_gpt_config.yaml``: ``bias_activation_fusion: True``,
  ``masked_softmax_fusion: True``; ``gradient_accumulation_fusion: True`` in the submissions'
  ``megatron_gpt_config.yaml`` / ``custom.yaml``), bf16 (``trainer.precision: bf16``).
- Architecture (the ``model:`` section): the implementation's NeMo config (v3.0
  ``conf/megatron_gpt_config.yaml``; v3.1+ ``conf/custom.yaml`` with NUM_LAYERS 96, HIDDEN_SIZE
  12288, NUM_ATTENTION_HEADS 96, FFN 4h): 96 layers, hidden 12,288, 96 heads, FFN 49,152,
  ``encoder_seq_length: 2048``, learned absolute positions, ``layernorm1p`` (LayerNorm with a
  zero-centred gain: LayerNorm's memory and time), GeLU, biases, tied embeddings, dropout 0,
  ``make_vocab_size_divisible_by: 128``; vocabulary 50,257 (mlcommons/training
  large_language_model/megatron-lm/README.md: the C4 SentencePiece model's vocab size).

Not modelled (memtune has no key): overlapped and un-batched pipeline send/recv
(``overlap_p2p_comm``), the userbuffer overlap beyond the priced fields (NVTE_UB_*,
MC_TP_OVERLAP_AG/RS, atomic/strided reduce-scatter, CGA sizes, FP8 buffers, UB_SKIPMC), layer-norm SM margins, asynchronous and
TP-only amax reduction (NVTE_ASYNC_AMAX_REDUCTION, NVTE_DP_AMAX_REDUCE_INTERVAL, tp_only_amax_red),
NCCL tuning (NCCL_MIN_NCHANNELS, NCCL_P2P_NET_CHUNKSIZE, NCCL_NVLS_ENABLE=0, NCCL_WORK_FIFO_DEPTH,
the per-communicator CTA/CGA config, MEGATRON_CORE_*_CGA_GROUPS/MAX_CTAS), SHARP, vboost and clock
settings, the Apex optimizer's own pipelining, rank order (TP_PP_DP_MAPPING), the GPU order
(CUDA_VISIBLE_DEVICES), data-loader and checkpoint-loading options. The software versions are left
at memtune's defaults: v3.x ran NeMo's own (pre-Megatron-Core) GPT model and every version Apex's
optimizer, so no megatron-core release describes them.

Partners (every other submitter of ``mlperf.submitters(version)``: NVIDIA_CoreWeave, Azure+NVIDIA,
smc, Oracle; sets ``mlperf/<version>/gpt3/<submitter>/<GPU>``) are read by the same functions: the
implementation is the submitter's directory under ``<submitter>/benchmarks/gpt3/`` holding a
config for the node count (Oracle publishes five identical copies of one: one is read), the config
must be the one the logs name (run.sub's ``:::DLPAL ... <DGXSYSTEM>`` line) where they name one,
and the training script (megatron_gpt_pretraining_custom.py) must be an NVIDIA implementation's
but for comment lines (Azure's copy drops them). Where the NeMo configs (``conf/``) are not
published (Oracle), those of NVIDIA's implementation of the version with the same run_and_time.sh
and training script are read, and the source says so. smc's logs (``result_<job>-<id>_<i>.txt``)
are read though ``mlperf.submissions`` skips their names; partners' rank-labelled logs (`` 0:
:::MLLOG``) as in collect_mlperf_llama31.py. Azure's "H100-SXM-80GB" is the SXM part (memtune's
H100-80GB, alias h100-sxm).

Left out (listed in the output's header): submissions on accelerators outside memtune's catalog
(Google's TPUs, Intel's Gaudi2: not NVIDIA's code either), and repeated logs (below). Where the logged global batch differs from the launch config's (a MINIBS the run
overrode), the logged one is used and the source says so. A submission whose logs
repeat another's (SYSJSON header lines aside: v4.1's eos-dfw_n1452_ngc24.04_nemo repeats v4.0's,
smc-ac-power's and smc-dc-power's repeat smc's) is one measurement: kept where it was first
published (earlier version, NVIDIA before partners), left out after. The B200 preview's launch config sources ``config_common_blackwell.sh``, which the
submission does not include: what it set is unknown, and the source says so.

    python benchmarks/published/layouts/collect_mlperf_gpt3.py OUT.yaml
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import mlperf  # the shared reader, beside this file
from collect_nemo_summary import GPT3  # GPT-3's architecture, beside this file

from memtune.config.changes import Change

VERSIONS = ("v3.0", "v3.1", "v4.0", "v4.1")
BENCHMARK = "gpt3"
SEQ = 2048
# (Azure's ND H100 v5 names its H100 SXM "H100-SXM-80GB": memtune's H100-80GB, alias h100-sxm)
GPUS = {
    "H100-SXM5-80GB": "H100-80GB",
    "H100-SXM-80GB": "H100-80GB",
    "H200": "H200",
    "B200-SXM-180GB": "B200",
    "(GB200)": "GB200",
}
SHORT = {"H100-80GB": "H100", "H200": "H200", "B200": "B200", "GB200": "GB200"}
# the NeMo configs a launch reads its variables' defaults from (those present)
NEMO_CONFS = ("conf/megatron_gpt_config.yaml", "conf/custom.yaml", "conf/optim/distributed_fused_adam.yaml")
# the files that make an implementation NVIDIA's: its launcher and its training script
CODE = ("run_and_time.sh", "megatron_gpt_pretraining_custom.py")
# sourced only in a branch these runs do not take (MLPERF_VERSION=v31 is not set)
NOT_TAKEN = {"config_common_v31.sh"}
MODEL = {
    # conf/megatron_gpt_config.yaml (v3.0) and conf/custom.yaml (v3.1+) of the implementations:
    # 96 x 12288, 96 heads, FFN 4h, and the GPT-3 architecture NeMo's launcher gives (learned
    # positions, LayerNorm (layernorm1p), GeLU, biases, tied embeddings, dropout 0, vocabulary
    # 50,257: mlcommons/training large_language_model/megatron-lm/README.md), as the NeMo
    # summary's collector has it; make_vocab_size_divisible_by 128
    **GPT3,
    "num_layers": 96,
    "hidden_size": 12288,
    "num_attention_heads": 96,
    "ffn_hidden_size": 49152,
    "make_vocab_size_divisible_by": 128,
}
COMMON = [
    # NeMo's megatron_gpt_config.yaml (bias_activation_fusion, masked_softmax_fusion: True) and the
    # submissions' gradient_accumulation_fusion: True
    "model.bias_activation_fusion=true",
    "model.masked_softmax_fusion=true",
    "model.gradient_accumulation_fusion=true",
    # FP8_HYBRID with an amax history (config_fp8.sh): Transformer Engine's DelayedScaling
    "model.fp8_recipe=delayed",
]
_CONFIG = re.compile(r"config_[A-Za-z0-9]+_(\d+)x(\d+)x(\d+)x(\d+)x(\d+)[^/]*\.sh$")
_SOURCE = re.compile(r"^\s*(?:source|\.)\s+.*?([A-Za-z0-9_.-]+\.sh)\s*$")
_OC_ENV = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*),([^{}]*)\}")
_OC_READ = re.compile(r"oc\.env:([A-Za-z_][A-Za-z0-9_]*)")
_SHELL_DEFAULT = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*):?[-=]([^}]*)\}$")


@dataclass(frozen=True)
class Launch:
    """What one submission's launch reads: its config and the values of its variables."""

    implementation: str
    config: str  # the config_*.sh path
    sourced: tuple[str, ...]  # the scripts it sources that the submission includes, in order
    missing: tuple[str, ...]  # those it does not include
    env: dict[str, str]  # the launch scripts' variables, then run_and_time.sh's defaults
    defaults: dict[str, str]  # ${oc.env:VAR,default} of the NeMo configs
    consumed: frozenset[str]  # variables run_and_time.sh or a NeMo config reads
    confs: dict[str, str]  # the NeMo configs present, by path inside the implementation
    conf_dir: str  # the implementation whose conf/ was read (the submission's, or a twin's)
    notes: tuple[str, ...] = ()  # what the choice of config or code rests on, where not a name

    def get(self, name: str) -> str | None:
        """A variable's effective value; None where nothing reads it or nothing sets it."""
        if name not in self.consumed:
            return None
        value = self.env.get(name, self.defaults.get(name))
        return None if value in (None, "", "null", "None") else value

    def flag(self, name: str) -> bool:
        return (self.get(name) or "").lower() in ("true", "1")


def gpu_of(accelerator: str) -> str | None:
    return next((gpu for key, gpu in GPUS.items() if key in accelerator), None)


def implementation_of(repo: Path, sub: mlperf.Submission) -> tuple[str, list[str]]:
    """The system's own implementation directory where it has launch configs, else the one
    directory of the submitter's holding a config for the submission's node count (or copies
    of one directory: Oracle's five)."""
    base = f"{sub.submitter}/benchmarks/{BENCHMARK}"
    found = [p for p in mlperf.listing(repo, base) if _CONFIG.search(p)]
    dirs = sorted({p.rsplit("/", 1)[0] for p in found})
    if sub.implementation in dirs:
        return sub.implementation, []
    fitting = [d for d in dirs if _configs(found, d, sub.nodes)]
    if len({mlperf.blob(repo, d) for d in fitting}) != 1:
        raise mlperf.Skip(
            f"{len(fitting)} implementations with a {sub.nodes}-node config: {', '.join(fitting)}"
        )
    copies = [f"{len(fitting)} identical copies of the implementation, {fitting[0]} read"]
    return fitting[0], copies if len(fitting) > 1 else []


def _configs(paths: list[str], directory: str, nodes: int) -> list[str]:
    return [
        p
        for p in paths
        if p.rsplit("/", 1)[0] == directory and (m := _CONFIG.search(p)) and int(m.group(1)) == nodes
    ]


def launch_config(repo: Path, implementation: str, sub: mlperf.Submission) -> str:
    """The implementation's one config for the submission's node count, checked against the one
    the system's README names where it has one (v4.0) and the one its logs name (run.sub's
    ``:::DLPAL`` line, partners')."""
    configs = _configs(mlperf.listing(repo, implementation), implementation, sub.nodes)
    if len(configs) != 1:
        raise mlperf.Skip(f"{implementation}: {len(configs)} launch configs for {sub.nodes} nodes: {configs}")
    readme = mlperf.show(repo, f"{sub.implementation}/README-{sub.system}.md")
    named = set(re.findall(r"(config_[A-Za-z0-9_x]+\.sh)", readme))
    if logged := mlperf.logged_script(repo, sub):
        named.add(logged)
    if named and named != {configs[0].rsplit("/", 1)[1]}:
        raise mlperf.Skip(f"its README or logs name {sorted(named)}, not {configs[0]}")
    return configs[0]


def expand(repo: Path, implementation: str, path: str, sourced: list[str], missing: list[str]) -> str:
    """The script's text with every script it sources read in place (recursively)."""
    lines = []
    for line in mlperf.show(repo, path).splitlines():
        m = _SOURCE.match(line)
        if not m:
            lines.append(line)
            continue
        name = m.group(1)
        if name in NOT_TAKEN:
            continue
        inner = f"{implementation}/{name}"
        if not mlperf.show(repo, inner):
            missing.append(name)
            continue
        sourced.append(name)
        lines.append(expand(repo, implementation, inner, sourced, missing))
    return "\n".join(lines)


def resolve_defaults(env: dict[str, str]) -> dict[str, str]:
    """``"${VAR:=value}"`` / ``"${VAR:-value}"`` left as text by ``exports``: VAR's value where the
    scripts set it, else the value written."""
    resolved = {}
    for name, value in env.items():
        m = _SHELL_DEFAULT.match(value)
        if m is None:
            resolved[name] = value
        elif m.group(1) == name:  # export MINIBS="${MINIBS:=128}", MINIBS unset before
            resolved[name] = m.group(2)
        else:  # export TENSOR_MODEL_PARALLEL="${TP:=4}"
            resolved[name] = env.get(m.group(1), m.group(2))
    return resolved


def nemo_confs(
    repo: Path, sub: mlperf.Submission, implementation: str
) -> tuple[dict[str, str], list[str], str]:
    """The implementation's NeMo configs; where it publishes none (Oracle), those of NVIDIA's
    implementation of the version whose run_and_time.sh and training script are this one's; and
    the directory they were read from."""
    if confs := {c: t for c in NEMO_CONFS if (t := mlperf.show(repo, f"{implementation}/{c}"))}:
        return confs, [], implementation
    mine = [mlperf.blob(repo, f"{implementation}/{f}") for f in CODE]
    base = f"{mlperf.SUBMITTER}/benchmarks/{BENCHMARK}/implementations"
    for twin in sorted({p.rsplit("/", 1)[0] for p in mlperf.listing(repo, base)}):
        if all(mine) and [mlperf.blob(repo, f"{twin}/{f}") for f in CODE] == mine:
            confs = {c: t for c in NEMO_CONFS if (t := mlperf.show(repo, f"{twin}/{c}"))}
            return (
                confs,
                [f"conf/ not published: {twin}'s read (its {' and '.join(CODE)} are this one's)"],
                twin,
            )
    raise mlperf.Skip(f"{implementation}: no NeMo config (conf/) published")


def comment_free(text: str) -> str:
    """A file's text without comment lines and blank lines (Azure's copy of NVIDIA's code drops
    comments)."""
    return "\n".join(
        line.rstrip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")
    )


@functools.cache
def nvidia_scripts() -> frozenset[str]:
    """NVIDIA's GPT-3 training scripts (every version's), comment-free."""
    return frozenset(
        comment_free(mlperf.show(mlperf.git_dir(v), p))
        for v in VERSIONS
        for p in mlperf.listing(mlperf.git_dir(v), f"{mlperf.SUBMITTER}/benchmarks/{BENCHMARK}")
        if p.endswith(f"/{CODE[1]}")
    )


def check_code(repo: Path, implementation: str) -> None:
    """Refuse a training script that is not NVIDIA's (but for comments)."""
    if comment_free(mlperf.show(repo, f"{implementation}/{CODE[1]}")) not in nvidia_scripts():
        raise mlperf.Skip(f"{implementation}/{CODE[1]} is no NVIDIA implementation's (modified code)")


def read_launch(repo: Path, sub: mlperf.Submission) -> Launch:
    implementation, notes = implementation_of(repo, sub)
    check_code(repo, implementation)
    config = launch_config(repo, implementation, sub)
    sourced: list[str] = []
    missing: list[str] = []
    text = expand(repo, implementation, config, sourced, missing)
    run_and_time = mlperf.show(repo, f"{implementation}/run_and_time.sh")
    env = resolve_defaults(mlperf.exports(text, run_and_time))
    confs, borrowed, conf_dir = nemo_confs(repo, sub, implementation)
    defaults = {m.group(1): m.group(2).strip() for t in confs.values() for m in _OC_ENV.finditer(t)}
    consumed = {m.group(1) for t in confs.values() for m in _OC_READ.finditer(t)}
    consumed |= set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", run_and_time))
    consumed |= {"CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN"}  # read by TE/torch
    return Launch(
        implementation,
        config,
        tuple(sourced),
        tuple(missing),
        env,
        defaults,
        frozenset(consumed),
        confs,
        conf_dir,
        tuple(notes + borrowed),
    )


def integer(launch: Launch, name: str) -> int:
    value = launch.get(name)
    if value is None or not value.isdigit():
        raise mlperf.Skip(f"{launch.config}: {name} is {value!r}, not a number")
    return int(value)


def layout(launch: Launch) -> tuple[int, int, int | None]:
    tp, pp = integer(launch, "TENSOR_MODEL_PARALLEL"), integer(launch, "PIPELINE_MODEL_PARALLEL")
    vpp = integer(launch, "INTERLEAVED_PIPELINE")
    return tp, pp, (vpp if vpp > 1 else None)


def micro_batch(launch: Launch, sub: mlperf.Submission, gbs: int, dp: int) -> int:
    """The config's micro batch, checked against the logs' (GBS / (DP x gradient accumulation))."""
    logged = mlperf.read_log(mlperf.show(mlperf.git_dir(sub.version), sub.logs[0]))
    steps = logged.keys.get("gradient_accumulation_steps")
    configured = integer(launch, "MICRO_BATCH_SIZE")
    if isinstance(steps, int) and gbs != dp * steps * configured:
        raise mlperf.Skip(f"{sub.system}: GBS {gbs} != DP {dp} x GA {steps} x MBS {configured}")
    return configured


def recompute(launch: Launch) -> list[str]:
    granularity = launch.get("ACT_CKPT_GRANULARITY")
    if granularity is None:
        return ["model.recompute_granularity=null"]
    changes = [f"model.recompute_granularity={granularity}"]
    if granularity == "full":
        changes += [
            f"model.recompute_method={launch.get('ACT_CKPT_METHOD')}",
            f"model.recompute_num_layers={launch.get('ACT_CKPT_NUM_LAYERS')}",
        ]
    return changes


def defers_embedding_wgrad(launch: Launch, pp: int, minibs: int, mbs: int) -> bool:
    """NeMo's ``defer_embedding_wgrad_compute``: DEFER_EMBEDDING_WGRAD_COMPUTE where the config
    reads it, else custom.yaml's rule (on where PP > 1, MINIBS <= 256 and MBS = 1); off where
    custom.yaml has no such key (v3.x)."""
    custom = launch.confs.get("conf/custom.yaml", "")
    if "defer_embedding_wgrad_compute:" not in custom:
        return False
    if launch.get("DEFER_EMBEDDING_WGRAD_COMPUTE") is not None:
        return launch.flag("DEFER_EMBEDDING_WGRAD_COMPUTE")
    if "${if:${or:${eq:1,${oc.decode:${oc.env:PIPELINE_MODEL_PARALLEL}}}" not in custom:
        raise mlperf.Skip(f"{launch.implementation}: defer_embedding_wgrad_compute rule not understood")
    return pp > 1 and minibs <= 256 and mbs == 1


def optimizer(launch: Launch) -> list[str]:
    if not launch.flag("USE_DIST_OPTIMIZER"):
        return ["ddp.use_distributed_optimizer=false", "optimizer.use_distributed_optimizer=false"]
    optim = launch.confs.get("conf/optim/distributed_fused_adam.yaml") or launch.confs.get(
        "conf/megatron_gpt_config.yaml", ""
    )
    sync = re.search(r"grad_sync_dtype:\s*(\w+)", optim)
    if not sync or sync.group(1) != "bf16":
        raise mlperf.Skip(f"{launch.implementation}: grad_sync_dtype is not bf16")
    bucket = int(float(launch.get("BUCKET_CAP_MB") or "100") * 1024 * 1024 / 2)
    return [
        "ddp.use_distributed_optimizer=true",
        "optimizer.use_distributed_optimizer=true",
        f"ddp.overlap_grad_reduce={str(launch.flag('OVERLAP_GRAD_SYNC')).lower()}",
        f"ddp.overlap_param_gather={str(launch.flag('OVERLAP_PARAM_SYNC')).lower()}",
        "ddp.grad_reduce_in_fp32=false",
        f"ddp.bucket_size={bucket}",
    ]


def precision(launch: Launch) -> list[str]:
    if not launch.flag("FP8"):
        return []
    if not launch.flag("FP8_HYBRID"):
        raise mlperf.Skip(f"{launch.config}: FP8 without FP8_HYBRID")
    return ["model.fp8=hybrid", f"model.fp8_param_gather={str(launch.flag('FP8_PARAMS')).lower()}"]


def kernels(launch: Launch) -> list[str]:
    changes = [
        f"model.cross_entropy_loss_fusion={str(launch.flag('CROSS_ENTROPY_LOSS_FUSION')).lower()}",
        f"model.cuda_graph_impl={'transformer_engine' if launch.flag('LAYER_CUDA_GRAPH') else 'none'}",
    ]
    if launch.get("NVTE_FUSED_ATTN") == "1" and launch.get("NVTE_FLASH_ATTN") == "0":
        changes.append("model.attention_backend=fused")
    if connections := launch.get("CUDA_DEVICE_MAX_CONNECTIONS"):
        changes.append(f"env.CUDA_DEVICE_MAX_CONNECTIONS={connections}")
    return changes


def overlap_cfg(repo: Path, launch: Launch) -> dict[str, dict[str, object]] | None:
    """The userbuffer overlap file custom.yaml selects (``optional override
    tp_overlap@model.ub_tp_comm_overlap_cfg: ${GPU_ARCH}100tp${TP}...mbs${MBS}`` under
    ``conf/tp_overlap/``), with its fields memtune prices; None where the selector or the file is
    absent (Transformer Engine's defaults, as Hydra's ``optional`` leaves them), or where the
    selector reads a variable the launch leaves unset while sourcing a script the submission does
    not include (the B200 preview's ``config_common_blackwell.sh``: its GPU_ARCH is unknown)."""
    selector = mlperf.OVERLAP_SELECTOR.search(launch.confs.get("conf/custom.yaml", ""))
    if selector is None:
        return None
    unset = {v for v in _OC_READ.findall(selector.group(1)) if v not in launch.env}
    if unset and launch.missing:  # a script the submission leaves out may set them (GPU_ARCH)
        return None
    return mlperf.overlap_file(repo, launch.conf_dir, selector.group(1), launch.env)


def overrides(launch: Launch, sub: mlperf.Submission, gbs: int) -> tuple[list[str], str]:
    """The run's memtune overrides and its label's layout part."""
    tp, pp, vpp = layout(launch)
    dp = sub.nodes * sub.gpus_per_node // (tp * pp)
    mbs = micro_batch(launch, sub, gbs, dp)
    sp = launch.flag("SEQ_PARALLEL") and tp > 1
    defer = defers_embedding_wgrad(launch, pp, gbs // dp, mbs)
    changes = [
        f"model.tensor_model_parallel_size={tp}",
        f"model.pipeline_model_parallel_size={pp}",
        f"model.virtual_pipeline_model_parallel_size={vpp if vpp else 'null'}",
        "model.context_parallel_size=1",
        f"train.micro_batch_size={mbs}",
        f"model.sequence_parallel={str(sp).lower()}",
        f"model.tp_comm_overlap={str(launch.flag('TP_COMM_OVERLAP') and tp > 1).lower()}",
        *precision(launch),
        *optimizer(launch),
        *recompute(launch),
        f"model.defer_embedding_wgrad_compute={str(defer).lower()}",
    ]
    if defer and (limit := launch.get("WGRAD_DEFERRAL_LIMIT")):
        changes.append(f"model.wgrad_deferral_limit={limit}")
    if (
        launch.flag("TP_COMM_OVERLAP")
        and tp > 1
        and (cfg := overlap_cfg(mlperf.git_dir(sub.version), launch))
    ):
        changes.append(str(Change("model.tp_comm_overlap_cfg", cfg)))
    changes += kernels(launch)
    return changes, f"TP{tp} PP{pp} VPP{vpp or '-'} MBS{mbs} GBS{gbs}"


def configured_gbs(launch: Launch, sub: mlperf.Submission) -> int:
    """The global batch the launch config sets: MINIBS per data-parallel rank (its README)."""
    tp, pp, _ = layout(launch)
    return int(launch.env["MINIBS"]) * sub.nodes * sub.gpus_per_node // (tp * pp)


def logs_of(sub: mlperf.Submission) -> str:
    """The submission's logs: ``result_{0,1,2}.txt``, else their names."""
    names = [p.rsplit("/", 1)[1] for p in sub.logs]
    if all(re.fullmatch(r"result_\d+\.txt", n) for n in names):
        return f"result_{{{','.join(n[7:-4] for n in names)}}}.txt"
    return "{" + ",".join(names) + "}"


def source_of(sub: mlperf.Submission, launch: Launch, step: float, gbs: int, configured_gbs: int) -> str:
    parts = [
        f"MLPerf Training {sub.version} {sub.submitter} {sub.system}: "
        f"{sub.submitter}/results/{sub.system}/{BENCHMARK}/{logs_of(sub)} "
        f"(median of per-log median step {step:.4f} s); launch config {launch.config}"
        f" (+ {', '.join(launch.sourced)}; {', '.join(sorted(launch.confs))})",
        *launch.notes,
    ]
    if configured_gbs != gbs:
        parts.append(f"the config's MINIBS gives GBS {configured_gbs}, the logs record {gbs} (used)")
    if missing := launch.missing:
        parts.append(
            f"sources {', '.join(missing)}, which the submission does not include (its settings unknown)"
        )
    return "; ".join(parts)


def run_of(sub: mlperf.Submission, gpu: str) -> dict[str, Any]:
    repo = mlperf.git_dir(sub.version)
    measured = mlperf.measured_step(repo, sub)
    if measured is None:
        raise mlperf.Skip(f"{sub.version} {sub.system}: no step time in the logs")
    step, gbs, _ = measured
    launch = read_launch(repo, sub)
    changes, shape = overrides(launch, sub, gbs)
    gpus = sub.nodes * sub.gpus_per_node
    return {
        "label": f"GPT-3 175B {sub.nodes}x{sub.gpus_per_node} {SHORT[gpu]} {shape}",
        "gpus": gpus,
        "gpu": gpu,
        "gpus_per_node": sub.gpus_per_node,
        "seq": SEQ,
        "gbs": gbs,
        "mode": "pretrain",
        "source": source_of(sub, launch, step, gbs, configured_gbs(launch, sub)),
        "overrides": changes,
        "measured": {"tokens_per_s_per_gpu": round(gbs * SEQ / (step * gpus), 1)},
    }


def head_commit(version: str) -> str:
    done = subprocess.run(
        ["git", f"--git-dir={mlperf.git_dir(version)}", "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()[:12]


def odd_named(version: str, submitter: str) -> list[mlperf.Submission]:
    """Submissions whose logs are named ``result_<job>-<id>_<i>.txt`` (smc's, v4.0), which
    ``mlperf.submissions`` does not read."""
    repo, logs = mlperf.git_dir(version), {}
    for path in mlperf.listing(repo, f"{submitter}/results"):
        parts = path.split("/")
        if len(parts) == 5 and parts[3] == BENCHMARK and re.fullmatch(r"result_[\w-]+\.txt", parts[4]):
            logs.setdefault(parts[2], []).append(path)
    return [
        mlperf.Submission(
            version,
            BENCHMARK,
            submitter,
            system,
            json.loads(described),
            tuple(sorted(paths)),
            f"{submitter}/benchmarks/{BENCHMARK}/implementations/{system}",
        )
        for system, paths in sorted(logs.items())
        if (described := mlperf.show(repo, f"{submitter}/systems/{system}.json"))
    ]


def every_submission(version: str) -> list[mlperf.Submission]:
    """Every submitter's GPT-3 submissions of the version, NVIDIA's first."""
    order = sorted(mlperf.submitters(version), key=lambda s: (s != mlperf.SUBMITTER, s))
    return [
        sub
        for s in order
        for sub in mlperf.submissions(version, BENCHMARK, submitter=s) or odd_named(version, s)
    ]


def run_or_skip(seen: dict[frozenset[str], str], sub: mlperf.Submission) -> dict[str, Any]:
    """The submission's run, or mlperf.Skip: a repeat of logs seen before, another vendor's accelerator
    or one memtune does not know."""
    gpu = gpu_of(sub.accelerator)
    if first := mlperf.repeat_of(seen, mlperf.git_dir(sub.version), sub):
        raise mlperf.Skip(f"the same result logs as {first} (one measurement)")
    if gpu is None and "NVIDIA" not in sub.accelerator:
        raise mlperf.Skip("not an NVIDIA GPU (nor NVIDIA's code), not in memtune's GPU catalog")
    if gpu is None:
        raise mlperf.Skip(f"{sub.accelerator} is not in memtune's GPU catalog")
    return run_of(sub, gpu)


def new_set(version: str, submitter: str, gpu: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    partner = submitter != mlperf.SUBMITTER
    code = "on NVIDIA's NeMo implementation " if partner else ""
    return {
        "id": f"mlperf/{version}/{BENCHMARK}/{f'{submitter}/' if partner else ''}{gpu}",
        "source": f"MLPerf Training {version} results, {submitter}'s GPT-3 175B submissions {code}"
        f"(github.com/mlcommons/training_results_{version} at {head_commit(version)})",
        "model": dict(MODEL),
        "common": list(COMMON),
        "runs": sorted(runs, key=lambda run: run["gpus"]),
    }


def collect() -> tuple[list[dict[str, Any]], list[str]]:
    """The sets, and the submissions left out with the reason."""
    sets: list[dict[str, Any]] = []
    skipped: list[str] = []
    seen: dict[frozenset[str], str] = {}
    for version in VERSIONS:
        runs: dict[tuple[bool, str, str], list[dict[str, Any]]] = {}
        for sub in every_submission(version):
            try:
                run = run_or_skip(seen, sub)
            except mlperf.Skip as why:
                skipped.append(
                    f"{version} {sub.submitter} {sub.system} ({sub.accelerator}, {sub.nodes}x{sub.gpus_per_node}): {why}"
                )
                continue
            key = (sub.submitter != mlperf.SUBMITTER, sub.submitter, run["gpu"])
            runs.setdefault(key, []).append(run)
        sets += [
            new_set(version, submitter, gpu, found) for (_, submitter, gpu), found in sorted(runs.items())
        ]
    return sets, skipped


NOTES = ("the config's MINIBS", "sources ", "conf/ not published", "its logs name")


def notes_of(sets: list[dict[str, Any]]) -> list[str]:
    """What the runs' sources flag: a logged batch unlike the config's, a missing script."""
    return [
        f"{entry['id']} {run['label']}: {part}"
        for entry in sets
        for run in entry["runs"]
        for part in run["source"].split("; ")[1:]
        if part.startswith(NOTES)
    ]


def header(sets: list[dict[str, Any]], skipped: list[str]) -> list[str]:
    lines = [
        "Generated by benchmarks/published/layouts/collect_mlperf_gpt3.py from the MLPerf Training GPT-3 175B",
        f"submissions ({', '.join(VERSIONS)}; mlcommons/training_results_vX.Y): NVIDIA's, and its partners' on",
        "NVIDIA's NeMo implementation (sets mlperf/<version>/gpt3/<submitter>/<GPU>). Measured: tokens/s per",
        "GPU = GBS x 2048 / (median step s x GPUs); no TFLOP/s is published. Left out:",
        *(f"  {line}" for line in skipped or ["no submission: every one is on a GPU of memtune's catalog"]),
        "Notes:",
        *(f"  {line}" for line in notes_of(sets)),
    ]
    return lines


def main() -> None:
    out = sys.argv[1]
    sets, skipped = collect()
    mlperf.write_sets(out, header(sets, skipped), sets)
    print(f"{len(sets)} sets, {sum(len(s['runs']) for s in sets)} runs")


if __name__ == "__main__":
    main()
