"""Collect the MLPerf Training v6.0 DeepSeek-V3 671B submissions on GB200 that ran NVIDIA's
Megatron-Bridge implementation: one set per submitter (``mlperf/v6.0/deepseekv3_671b/GB200`` for
NVIDIA's, ``mlperf/v6.0/deepseekv3_671b/<submitter>/GB200`` for a partner's).

    python benchmarks/published/layouts/collect_mlperf_deepseek.py OUT.yaml

Source: mlcommons/training_results_v6.0 as the fork ``Richardyu114/training_results_v6.0`` holds it
at eabf23a07b2a0c60a289ff871dc3a46fff0d0421 (no git snapshot of either can be had here), read
through the public file index. What was read is transcribed, verbatim, into
``mlperf-v6.0-deepseekv3-raw.json`` beside this file, and this script reads only that: each
submission's system json, its launch script (the one its logs' ``:::DLPAL`` line names) with the
scripts it sources, and, of each result log, its logged global batch and sequence and the
``train_step_time`` values of one fixed chunk near its end: the 16,000 characters from 32,000
before it, well past the warm-up (the transcription's ``rule``; a first rule, the chunk at 60,000,
found steps in the 512-GPU logs only, as the larger logs open with one ``cache_clear`` line per
node). A step here is one training block (``VAL_CHECK_INTERVAL=1``); its time moves by under 1%
within a log, by up to 7% from one log to the next. Measured: the
median over the logs of each log's median chunk value, and ``tokens_per_s_per_gpu`` = GBS x
sequence / (step x GPUs). MLPerf publishes no TFLOP/s.

What each setting is (implementation ``pretrain.py`` and ``conf/`` of NVIDIA's
``deepseekv3_671b`` code, container ngc26.04 with Megatron-Bridge and Megatron-LM at tag
``26.04-alpha.rc2``: megatron-core 0.18.0, Transformer Engine v2.15, its Dockerfile):

- The job starts from Bridge's ``deepseek_v3_pretrain_config()`` at that tag (identical to
  v0.4.0's): the DeepSeek-V3 architecture with MTP 1, sequence 4096, micro batch 1, the
  distributed optimizer with bf16 moments and gradients (precision-aware), no gradient reduce in
  FP32, cross-entropy fusion (``te``), grouped experts, no shared-expert overlap (the flex
  dispatcher's backend turns it off), pipeline split without embedding or loss. The vocabulary is
  the DeepSeek-V3 preset's 129,280, the size of the conf's mock tokenizer too (the run loads the
  benchmark's Hugging Face tokenizer; the recipe's NullTokenizer size does not apply).
- The launch variables over it: TENSOR_MODEL_PARALLEL, PIPELINE_MODEL_PARALLEL,
  INTERLEAVED_PIPELINE, CONTEXT_PARALLEL, EXPERT_PARALLEL, EXPERT_TENSOR_PARALLEL (default 1),
  PIPELINE_LAYOUT, MICRO_BATCH_SIZE (default 1), SEQ_LENGTH (4096), MTP_NUM_LAYERS (1); sequence
  parallel where TP > 1; RECOMPUTE_MODULES (selective, those modules; none: no recompute);
  CUDA_GRAPH_IMPLEMENTATION and CUDA_GRAPH_SCOPE; FP8 (``bf16_with_mxfp8_mixed``: MXFP8) with
  FP8_PARAM_GATHER and FP8_DPA (FP4: NVFP4, left out); MOE_TOKEN_DISPATCHER_TYPE with
  MOE_FLEX_DISPATCHER_BACKEND (a backend makes the dispatcher flex); MOE_GROUPED_GEMM,
  MOE_PERMUTE_FUSION, MOE_ROUTER_FORCE_LOAD_BALANCING; OVERLAP_MOE_EXPERT_PARALLEL_COMM and
  DELAY_WGRAD_COMPUTE; GRAD_ACCUM_FUSION; USE_DIST_OPTIMIZER, OVERLAP_GRAD_REDUCE,
  OVERLAP_PARAM_GATHER and BUCKET_SIZE (``conf/deepseekv3_671b.yaml`` defaults;
  ALIGN_PARAM_GATHER must be off: memtune sets it only under its by-DP rule);
  CUDA_DEVICE_MAX_CONNECTIONS, PYTORCH_CUDA_ALLOC_CONF, NCCL_GRAPH_REGISTER; manual GC (on). ``data_parallel_sharding_strategy`` is set to ``optim_grads_params`` but acts only under
  Megatron-FSDP, which these runs leave off (USE_MCORE_FSDP).
- Global batch: MINIBS x DP, checked against the logged ``global_batch_size``; the sequence
  against the logged ``max_sequence_length``.

Not modelled (memtune has no key): the router and RoPE fusions and the router's dtype, Transformer
Engine's op fuser (USE_TE_OPS: the CuTe DSL fused grouped MLP), paged stashing and the expert
capacity factor, HybridEP's SM counts and ranks per NVLink domain, the high-priority all-to-all
stream and the dynamic compute stream, the optimizer's CUDA graph and on-device clipping, the
auxiliary-loss coefficient, NCCL and NVTE tuning, cuDNN norms, the manual GC interval, warm-up
steps.

Left out (listed in the output's header): accelerators outside memtune's GPU catalog, NVFP4
runs, submissions whose logs disagree on the batch or give no step time, jobs memtune's check
gate refuses.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mlperf
from collect_mlperf_llama31 import SOURCE_LINE, UNSET, UNSET_LINE, gpu_of, refusal, truthy, yaml_bool

RAW = Path(__file__).resolve().parent / "mlperf-v6.0-deepseekv3-raw.json"
MODEL = "deepseek-v3"
# Dockerfile revisions (tag 26.04-alpha.rc2 of Megatron-LM: megatron/core/package_info.py 0.18.0)
VERSIONS = ["env.megatron_core_version=0.18.0", "env.transformer_engine_version=2.15.0"]
# conf/deepseekv3_671b.yaml and conf/model/671b.yaml defaults of the variables read below
DEFAULTS = {
    "EXPERT_TENSOR_PARALLEL": "1",
    "MICRO_BATCH_SIZE": "1",
    "SEQ_LENGTH": "4096",
    "MTP_NUM_LAYERS": "1",
    "RECOMPUTE_MODULES": "",
    "CUDA_GRAPH_IMPLEMENTATION": "none",
    "CUDA_GRAPH_SCOPE": "",
    "FP8": "False",
    "FP4": "False",
    "FP8_PARAM_GATHER": "False",
    "FP8_DPA": "False",
    "MOE_TOKEN_DISPATCHER_TYPE": "alltoall",
    "MOE_FLEX_DISPATCHER_BACKEND": "null",
    "MOE_GROUPED_GEMM": "True",
    "MOE_PERMUTE_FUSION": "True",
    "MOE_ROUTER_FORCE_LOAD_BALANCING": "False",
    "OVERLAP_MOE_EXPERT_PARALLEL_COMM": "False",
    "DELAY_WGRAD_COMPUTE": "False",
    "GRAD_ACCUM_FUSION": "False",
    "USE_DIST_OPTIMIZER": "True",
    "OVERLAP_GRAD_REDUCE": "True",
    "OVERLAP_PARAM_GATHER": "True",
    "ALIGN_PARAM_GATHER": "False",
    "BUCKET_SIZE": "134217728",
    "USE_MCORE_FSDP": "False",
}
# Bridge's deepseek_v3_pretrain_config() at 26.04-alpha.rc2, where the variables do not reach
RECIPE = [
    "model.account_for_embedding_in_pipeline_split=false",
    "model.account_for_loss_in_pipeline_split=false",
    "model.pipeline_dtype=bf16",
    "model.cross_entropy_loss_fusion=true",
    "model.cross_entropy_fusion_impl=te",
    "model.moe_shared_expert_overlap=false",
    "model.transformer_impl=transformer_engine",
    "optimizer.use_precision_aware_optimizer=true",
    "optimizer.main_params_dtype=fp32",
    "optimizer.main_grads_dtype=bf16",
    "optimizer.exp_avg_dtype=bf16",
    "optimizer.exp_avg_sq_dtype=bf16",
    "ddp.grad_reduce_in_fp32=false",
    "ddp.use_megatron_fsdp=false",
    "ddp.data_parallel_sharding_strategy=no_shard",
    "train.manual_gc=true",
]


class Launch:
    """A launch script's variables (the scripts it sources read in its place, ``unset`` kept),
    with the implementation's defaults under them."""

    def __init__(self, sub: dict[str, Any]) -> None:
        texts = {s["path"].rsplit("/", 1)[-1]: s["text"] for s in sub["sourced"]}
        lines = []
        for line in sub["config_text"].splitlines():
            if m := SOURCE_LINE.match(line):
                if m.group(1) not in texts:
                    raise mlperf.Skip(f"{sub['config_path']} sources {m.group(1)}, which was not transcribed")
                lines.append(texts[m.group(1)])
            elif m := UNSET_LINE.match(line):
                lines.append(f"export {m.group(1)}={UNSET}")
            else:
                lines.append(line)
        self.env = {k: v for k, v in mlperf.exports("\n".join(lines)).items() if v != UNSET}

    def get(self, name: str) -> str:
        return self.env.get(name, DEFAULTS.get(name, ""))

    def flag(self, name: str) -> bool:
        return truthy(self.get(name))

    def count(self, name: str) -> int:
        value = self.get(name)
        if not value.isdigit():
            raise mlperf.Skip(f"{name} is not set")
        return int(value)


def layout_overrides(env: Launch) -> list[str]:
    tp, vpp = env.count("TENSOR_MODEL_PARALLEL"), env.get("INTERLEAVED_PIPELINE")
    layout = env.get("PIPELINE_LAYOUT")
    if not layout:
        raise mlperf.Skip("no PIPELINE_LAYOUT: the recipe's layout for its own PP would stand")
    return [
        f"model.tensor_model_parallel_size={tp}",
        f"model.pipeline_model_parallel_size={env.count('PIPELINE_MODEL_PARALLEL')}",
        f"model.virtual_pipeline_model_parallel_size={vpp if vpp.isdigit() and int(vpp) > 1 else 'null'}",
        f"model.context_parallel_size={env.count('CONTEXT_PARALLEL')}",
        f"model.expert_model_parallel_size={env.count('EXPERT_PARALLEL')}",
        f"model.expert_tensor_parallel_size={env.count('EXPERT_TENSOR_PARALLEL')}",
        f"model.sequence_parallel={yaml_bool(tp > 1)}",
        f"model.pipeline_model_parallel_layout={layout}",
        f"model.mtp_num_layers={env.count('MTP_NUM_LAYERS')}",
        f"train.micro_batch_size={env.count('MICRO_BATCH_SIZE')}",
    ]


def recompute_overrides(env: Launch) -> list[str]:
    modules = [m for m in env.get("RECOMPUTE_MODULES").split(",") if m]
    if not modules:
        return ["model.recompute_granularity=null"]
    return ["model.recompute_granularity=selective", f"model.recompute_modules=[{', '.join(modules)}]"]


def precision_overrides(env: Launch) -> list[str]:
    if env.flag("FP4"):
        raise mlperf.Skip("NVFP4 (FP4=True): memtune has no FP4 recipe")
    if not env.flag("FP8"):
        return ["model.fp8=null", "model.fp8_param_gather=false"]
    return [
        "model.fp8=e4m3",
        "model.fp8_recipe=mxfp8",
        f"model.fp8_param_gather={yaml_bool(env.flag('FP8_PARAM_GATHER'))}",
        f"model.fp8_dot_product_attention={yaml_bool(env.flag('FP8_DPA'))}",
    ]


def moe_overrides(env: Launch) -> list[str]:
    backend = env.get("MOE_FLEX_DISPATCHER_BACKEND")
    flex = backend in ("deepep", "hybridep")
    changes = [f"model.moe_token_dispatcher_type={'flex' if flex else env.get('MOE_TOKEN_DISPATCHER_TYPE')}"]
    if flex:
        changes.append(f"model.moe_flex_dispatcher_backend={backend}")
    return changes + [
        f"model.moe_grouped_gemm={yaml_bool(env.flag('MOE_GROUPED_GEMM'))}",
        f"model.moe_permute_fusion={yaml_bool(env.flag('MOE_PERMUTE_FUSION'))}",
        f"model.moe_router_force_load_balancing={yaml_bool(env.flag('MOE_ROUTER_FORCE_LOAD_BALANCING'))}",
        f"model.overlap_moe_expert_parallel_comm={yaml_bool(env.flag('OVERLAP_MOE_EXPERT_PARALLEL_COMM'))}",
        f"model.delay_wgrad_compute={yaml_bool(env.flag('DELAY_WGRAD_COMPUTE'))}",
    ]


def graph_overrides(env: Launch) -> list[str]:
    impl, scope = env.get("CUDA_GRAPH_IMPLEMENTATION"), env.get("CUDA_GRAPH_SCOPE")
    if impl in ("", "none"):
        return ["model.cuda_graph_impl=none"]
    return [f"model.cuda_graph_impl={impl}", f"model.cuda_graph_scope=[{scope.replace(',', ', ')}]"]


def data_parallel_overrides(env: Launch) -> list[str]:
    if env.flag("USE_MCORE_FSDP"):
        raise mlperf.Skip("Megatron-FSDP (USE_MCORE_FSDP=True) with the optim_grads_params strategy")
    if env.flag("ALIGN_PARAM_GATHER"):
        raise mlperf.Skip("ALIGN_PARAM_GATHER=True: memtune sets it only under the by-DP rule")
    dist = yaml_bool(env.flag("USE_DIST_OPTIMIZER"))
    return [
        f"ddp.use_distributed_optimizer={dist}",
        f"optimizer.use_distributed_optimizer={dist}",
        f"ddp.overlap_grad_reduce={yaml_bool(env.flag('OVERLAP_GRAD_REDUCE'))}",
        f"ddp.overlap_param_gather={yaml_bool(env.flag('OVERLAP_PARAM_GATHER'))}",
        "ddp.overlap_by_data_parallel_size=false",
        f"ddp.bucket_size={env.count('BUCKET_SIZE')}",
        f"model.gradient_accumulation_fusion={yaml_bool(env.flag('GRAD_ACCUM_FUSION'))}",
    ]


def env_overrides(env: Launch) -> list[str]:
    keys = ("CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_GRAPH_REGISTER")
    return [f"env.{k}={env.env[k]}" for k in keys if k in env.env] + VERSIONS


def measured(sub: dict[str, Any], env: Launch, gpus: int) -> tuple[float, int, int]:
    """The median over the logs of each log's median chunk step time, the global batch and the
    sequence, each checked."""
    batches = {int(log["global_batch_size"]) for log in sub["logs"] if log["global_batch_size"] is not None}
    seqs = {int(log["max_sequence_length"]) for log in sub["logs"] if log["max_sequence_length"] is not None}
    medians = [
        statistics.median(s["value"] for s in log["step_times"]) for log in sub["logs"] if log["step_times"]
    ]
    if len(batches) != 1 or len(seqs) != 1 or not medians:
        raise mlperf.Skip("the logs give no step time, or disagree on the global batch or sequence")
    gbs, seq = batches.pop(), seqs.pop()
    dp = gpus // (
        env.count("TENSOR_MODEL_PARALLEL")
        * env.count("PIPELINE_MODEL_PARALLEL")
        * env.count("CONTEXT_PARALLEL")
    )
    if gbs != env.count("MINIBS") * dp:
        raise mlperf.Skip(f"logged global batch {gbs} is not MINIBS x DP = {env.count('MINIBS') * dp}")
    if seq != env.count("SEQ_LENGTH"):
        raise mlperf.Skip(f"logged sequence {seq} is not SEQ_LENGTH {env.count('SEQ_LENGTH')}")
    return statistics.median(medians), gbs, seq


def run_of(sub: dict[str, Any], gpu: str, commit: str) -> dict[str, Any]:
    env = Launch(sub)
    system = sub["system_json"]
    nodes, per_node = int(system["number_of_nodes"]), int(system["accelerators_per_node"])
    gpus = nodes * per_node
    if (env.count("DGXNNODES"), env.count("DGXNGPU")) != (nodes, per_node):
        raise mlperf.Skip(f"launch script {sub['config_path']} is not of {nodes}x{per_node}")
    overrides = (
        layout_overrides(env) + recompute_overrides(env) + precision_overrides(env) + moe_overrides(env)
    )
    overrides += graph_overrides(env) + data_parallel_overrides(env) + RECIPE + env_overrides(env)
    step, gbs, seq = measured(sub, env, gpus)
    vpp = env.get("INTERLEAVED_PIPELINE")
    logs = len(sub["logs"])
    return {
        "label": f"DeepSeek-V3 671B {nodes}x{per_node} {gpu} TP{env.get('TENSOR_MODEL_PARALLEL')} "
        f"PP{env.get('PIPELINE_MODEL_PARALLEL')} VPP{vpp or '-'} EP{env.get('EXPERT_PARALLEL')} "
        f"MBS{env.get('MICRO_BATCH_SIZE')} GBS{gbs}",
        "gpus": gpus,
        "gpu": gpu,
        "gpus_per_node": per_node,
        "seq": seq,
        "gbs": gbs,
        "mode": "pretrain",
        "overrides": overrides,
        "measured": {"tokens_per_s_per_gpu": round(gbs * seq / (step * gpus), 1)},
        "source": f"MLPerf Training v6.0 {sub['submitter']}/results/{sub['system']}/deepseekv3_671b ({logs} logs, "
        f"median step {step:.4g} s, each log's from its chunk 32,000 characters before its end); launch {sub['config_path']} with "
        f"{', '.join(sourced_name(s) for s in sub['sourced'])} (fork Richardyu114/training_results_v6.0 at {commit})",
    }


def sourced_name(script: dict[str, str]) -> str:
    """A sourced script's name, and where its text was read where the submission does not hold it."""
    name = script["path"].rsplit("/", 1)[-1]
    return (
        name
        if script["read_from"] == script["path"]
        else f"{name} (not published there; read from {script['read_from']})"
    )


def collect(raw: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The sets (one per submitter) and the submissions left out."""
    sets: dict[str, dict[str, Any]] = {}
    skipped = [f"{x['what']}: {x['why']}" for x in raw.get("left_out", [])]
    for sub in raw["submissions"]:
        name = f"v6.0 deepseekv3_671b {sub['submitter']} {sub['system']}"
        try:
            gpu = gpu_of(str(sub["system_json"]["accelerator_model_name"]))
            if gpu is None:
                raise mlperf.Skip("accelerator not in memtune's GPU catalog")
            run = run_of(sub, gpu, raw["commit"])
            if refused := refusal(MODEL, run):
                raise mlperf.Skip(f"memtune refuses the translated job: {refused}")
        except mlperf.Skip as why:
            skipped.append(f"{name}: {why}")
            continue
        owner = "" if sub["submitter"] == mlperf.SUBMITTER else f"{sub['submitter']}/"
        set_id = f"mlperf/v6.0/deepseekv3_671b/{owner}{gpu}"
        sets.setdefault(
            set_id,
            {
                "id": set_id,
                "source": f"mlcommons/training_results_v6.0 (fork Richardyu114/training_results_v6.0 at "
                f"{raw['commit']}), {sub['submitter']}'s deepseekv3_671b submissions (logs, launch scripts; "
                "pretrain.py, conf/ and Dockerfile of NVIDIA's implementation)",
                "model": MODEL,
                "mode": "pretrain",
                "runs": [],
            },
        )["runs"].append(run)
    for s in sets.values():
        s["runs"].sort(key=lambda r: r["gpus"])
    return list(sets.values()), skipped


def main() -> None:
    raw = json.loads(RAW.read_text(encoding="utf-8"))
    sets, skipped = collect(raw)
    header = [
        "Generated by benchmarks/published/layouts/collect_mlperf_deepseek.py from the MLPerf Training v6.0",
        "DeepSeek-V3 671B submissions on GB200 (transcribed in mlperf-v6.0-deepseekv3-raw.json).",
        "Every run below passes memtune's check gate (memtune.check.gate; nothing priced).",
        "Submissions left out:",
        *(f"  {line}" for line in skipped),
    ]
    mlperf.write_sets(sys.argv[1], header, sets)
    print(f"{len(sets)} sets, {sum(len(s['runs']) for s in sets)} runs; {len(skipped)} submissions left out")


if __name__ == "__main__":
    main()
