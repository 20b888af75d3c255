"""Collect Megatron-LM's functional-test runs (GPT, MoE, Mixtral) that log their memory peak.

Each test case under ``tests/functional_tests/test_cases/{gpt,moe,mixtral}/`` has ``model_config.yaml`` (the
``pretrain_gpt.py`` flags, ``MODEL_ARGS``) and per-platform ``golden_values_*.json`` whose
``mem-max-allocated-bytes`` is ``torch.cuda.max_memory_allocated()`` of the last global rank
(the one that writes TensorBoard), cumulative since the process started, logged every
iteration. The GPT recipe runs them on one node of 8 GPUs.

    python benchmarks/published/collect_megatron_ci.py MEGATRON_LM_GIT_DIR OUT_DIR [--platform dgx_h100]

writes ``OUT_DIR/<test case>.yaml`` per training run whose flags this script translates: the
original flags that shape memory (``megatron_lm_args``), the memtune config built from them
with Megatron-LM's argparse defaults spelled out, the published peak (the largest value
logged) and its source (repository, commit, paths). Runs with flags it does not translate
(inference and RL entry points, tokenizers whose vocabulary it cannot size) are skipped and
listed on stdout with the reason.

Reserved cases: in the ``moe/`` and ``mixtral/`` families, a case whose name's SHA-1 hex digest
starts with 8-f is held back for verification by others; this script reads nothing of it (not
its model config, not its golden values) and does not name it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import yaml

CASES = "tests/functional_tests/test_cases"
FAMILIES = ("gpt", "moe", "mixtral")
RESERVED_FAMILIES = ("moe", "mixtral")
ALLOWED_FIRST_DIGITS = "01234567"  # of sha1(case name) in the reserved families
WORLD_SIZE = 8  # tests/test_utils/recipes/h100/gpt.yaml: nodes 1, gpus 8
GPT2_BPE_VOCAB = 50257  # vocab.json of the GPT-2 BPE tokenizer the tests pass with --vocab-file

# Flags that change nothing the estimate depends on (logging, data, checkpoints, schedules).
IGNORED_PREFIXES = (
    "--log",
    "--tensorboard",
    "--wandb",
    "--timing",
    "--data",
    "--split",
    "--vocab-file",
    "--merge-file",
    "--save",
    "--load",
    "--ckpt",
    "--dist-ckpt",
    "--async-save",
    "--use-persistent-ckpt-worker",
    "--use-checkpoint",
    "--auto-detect-ckpt-format",
    "--no-load",
    "--finetune",
    "--lr",
    "--min-lr",
    "--decoupled",
    "--weight-decay",
    "--clip-grad",
    "--adam-",
    "--train-",
    "--eval",
    "--exit-interval",
    "--seed",
    "--init-method-std",
    "--distributed-",
    "--deterministic-mode",
    "--use-mcore-models",
    "--max-position-embeddings",
    "--rotary-",
    "--calculate-per-token-loss",
    "--no-create-attention-mask-in-dataloader",
    "--manual-gc",
    "--no-mmap-bin-files",
    "--mock-data",
    "--num-workers",
    "--empty-unused-memory-level",
    "--override-opt_param-scheduler",
    "--norm-epsilon",
    "--apply-layernorm-1p",
    "--no-rope-fusion",
    "--use-rotary-position-embeddings",
    "--straggler",
    "--check-weight-hash",
    "--verify-integrity",
    "--rerun-mode",
    "--fim-",
    "--use-tp-pp-dp-mapping",
    "--ddp-average-in-collective",
    "--overlap-p2p-communication",
    "--disable-gloo-process-groups",
    "--tokenizer-type",
    "--no-bias-dropout-fusion",
    "--no-ckpt",
    "--async-",
    "--overlap-param-gather-with-optimizer-step",
    "--exit-duration-in-mins",
    "--no-check-for-nan-in-loss-and-grad",
    "--enable-experimental",
    "--cuda-graph-warmup-steps",
    # Router and loss settings: which experts are chosen, not what a layer keeps.
    "--moe-aux-loss-coeff",
    "--moe-router-score-function",
    "--moe-router-pre-softmax",
    "--moe-router-enable-expert-bias",
    "--moe-router-bias-update-rate",
    "--moe-router-topk-scaling-factor",
    "--moe-router-dtype",
    "--moe-router-fusion",
    "--mtp-loss-scaling-factor",
    "--muon-",
    # RoPE/YaRN scaling values and the rotated share: no tensor of another size.
    "--rotary-percent",
    "--mscale",
    # The userbuffers layout file: which GEMMs overlap and how, not the buffer sizes memtune counts.
    "--tp-comm-overlap-cfg",
    # The dtype of FSDP's reduce-scatter, not of the buffers it keeps.
    "--megatron-fsdp-grad-comm-dtype",
    # TE's CUDA RNG state tracker (graph-safe generators): a few bytes per state.
    "--te-rng-tracker",
    # FP8 on all but the first and last layers: memtune counts FP8 on all of them (the README's caveats).
    "--first-last-layers-bf16",
)


class Skip(Exception):
    pass


def _flag(args: dict, name: str, default=None):
    return args.get(name, default)


def translate(args: dict) -> dict:
    """Megatron-LM flags -> memtune config, with Megatron-LM's argparse defaults made explicit."""
    unknown = [
        k
        for k in args
        if not k.startswith(IGNORED_PREFIXES) and k not in TRANSLATED and not k.startswith("--inference")
    ]
    if unknown:
        raise Skip(f"untranslated flags {', '.join(sorted(unknown))}")
    layers = int(args["--num-layers"])
    tp = int(_flag(args, "--tensor-model-parallel-size", 1))
    pp = int(_flag(args, "--pipeline-model-parallel-size", 1))
    vpp = None
    if "--num-layers-per-virtual-pipeline-stage" in args:
        vpp = layers // pp // int(args["--num-layers-per-virtual-pipeline-stage"])
    if "--num-virtual-stages-per-pipeline-rank" in args:
        vpp = int(args["--num-virtual-stages-per-pipeline-rank"])
    if "--vocab-size" in args:
        vocab = int(args["--vocab-size"])
    elif "--vocab-file" in args and "--merge-file" in args:
        vocab = GPT2_BPE_VOCAB
    else:
        raise Skip("vocabulary size not known from the tokenizer flags")
    swiglu = bool(_flag(args, "--swiglu", False))
    squared_relu = bool(_flag(args, "--squared-relu", False))
    position = _flag(args, "--position-embedding-type", "learned_absolute")
    if _flag(args, "--use-rotary-position-embeddings", False):
        position = "rope"
    half = "bf16" if _flag(args, "--bf16", False) else "fp16" if _flag(args, "--fp16", False) else None
    model = {
        "num_layers": layers,
        "hidden_size": int(args["--hidden-size"]),
        "num_attention_heads": int(args["--num-attention-heads"]),
        "vocab_size": vocab,
        "make_vocab_size_divisible_by": int(_flag(args, "--make-vocab-size-divisible-by", 128)),
        "seq_length": int(args["--seq-length"]),
        "gated_linear_unit": swiglu,
        "activation_func": "silu" if swiglu else "squared_relu" if squared_relu else "gelu",
        "normalization": _flag(args, "--normalization", "LayerNorm"),
        "share_embeddings_and_output_weights": not _flag(
            args, "--untie-embeddings-and-output-weights", False
        ),
        "qk_layernorm": bool(_flag(args, "--qk-layernorm", False)),
        "add_bias_linear": not _flag(args, "--disable-bias-linear", False),
        "hidden_dropout": float(_flag(args, "--hidden-dropout", 0.1)),
        "attention_dropout": float(_flag(args, "--attention-dropout", 0.1)),
        "position_embedding_type": position,
        # Megatron-LM's fusion defaults (arguments.py): on unless a --no-* flag turns them off.
        "bias_activation_fusion": not _flag(
            args, "--no-bias-swiglu-fusion" if swiglu else "--no-bias-gelu-fusion", False
        ),
        "masked_softmax_fusion": not _flag(args, "--no-masked-softmax-fusion", False),
        "attention_softmax_in_fp32": bool(
            _flag(args, "--attention-softmax-in-fp32", False)
            or _flag(args, "--apply-query-key-layer-scaling", False)
        ),
        "cross_entropy_loss_fusion": bool(_flag(args, "--cross-entropy-loss-fusion", False)),
        "cross_entropy_fusion_impl": _flag(args, "--cross-entropy-fusion-impl", "native"),
        "gradient_accumulation_fusion": not _flag(args, "--no-gradient-accumulation-fusion", False),
        "defer_embedding_wgrad_compute": bool(_flag(args, "--defer-embedding-wgrad-compute", False)),
        "wgrad_deferral_limit": int(_flag(args, "--wgrad-deferral-limit", 0)),
        "tp_comm_overlap": bool(_flag(args, "--tp-comm-overlap", False)),
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": pp,
        "virtual_pipeline_model_parallel_size": vpp,
        "context_parallel_size": int(_flag(args, "--context-parallel-size", 1)),
        "sequence_parallel": bool(_flag(args, "--sequence-parallel", False)),
        "account_for_embedding_in_pipeline_split": bool(
            _flag(args, "--account-for-embedding-in-pipeline-split", False)
        ),
        "account_for_loss_in_pipeline_split": bool(
            _flag(args, "--account-for-loss-in-pipeline-split", False)
        ),
        "num_layers_in_first_pipeline_stage": _int_or_none(
            _flag(args, "--decoder-first-pipeline-num-layers")
        ),
        "num_layers_in_last_pipeline_stage": _int_or_none(_flag(args, "--decoder-last-pipeline-num-layers")),
        "microbatch_group_size_per_vp_stage": _int_or_none(
            _flag(args, "--microbatch-group-size-per-virtual-pipeline-stage")
        ),
        # Megatron-LM's training loop always frees pipeline outputs once sent.
        "deallocate_pipeline_outputs": True,
        "bf16": half == "bf16",
        "fp16": half == "fp16",
        "transformer_impl": _flag(args, "--transformer-impl", "transformer_engine"),
        "attention_backend": _flag(args, "--attention-backend", "auto"),
    }
    if "--ffn-hidden-size" in args:
        model["ffn_hidden_size"] = int(args["--ffn-hidden-size"])
    elif swiglu:
        # Megatron-LM sizes a SwiGLU MLP to 2/3 of 4h, rounded up to a multiple of 64.
        model["ffn_hidden_size"] = ((int(4 * model["hidden_size"] * 2 / 3) + 63) // 64) * 64
    if "--kv-channels" in args:
        model["kv_channels"] = int(args["--kv-channels"])
    if _flag(args, "--group-query-attention", False):
        model["num_query_groups"] = int(args["--num-query-groups"])
    if _flag(args, "--test-mode", False):
        model["test_mode"] = True
    if "--fp8-format" in args:
        model["fp8"] = args["--fp8-format"]
        model["fp8_recipe"] = _flag(args, "--fp8-recipe", "delayed")
        model["fp8_param_gather"] = bool(_flag(args, "--fp8-param-gather", False))
    granularity = _flag(args, "--recompute-granularity")
    if granularity:
        model["recompute_granularity"] = granularity
        model["recompute_method"] = _flag(args, "--recompute-method")
        model["recompute_num_layers"] = _int_or_none(_flag(args, "--recompute-num-layers"))
    if half and pp > 1:
        model["pipeline_dtype"] = half
    model.update(_moe(args))
    model.update(_mla(args))
    model.update(_features(args))
    distributed = bool(_flag(args, "--use-distributed-optimizer", False))
    optimizer = _flag(args, "--optimizer", "adam")
    if optimizer not in ("adam", "sgd"):
        raise Skip(f"optimizer {optimizer} (memtune models the state of adam and sgd only)")
    micro = int(args["--micro-batch-size"])
    return {
        "defaults": "megatron-lm",
        "model": {k: v for k, v in model.items() if v is not None},
        "train": {
            "micro_batch_size": micro,
            "global_batch_size": int(_flag(args, "--global-batch-size", micro)),
        },
        "optimizer": {"optimizer": optimizer, "use_distributed_optimizer": distributed},
        "ddp": {
            "use_distributed_optimizer": distributed,
            **_fsdp(args),
            # Megatron-LM reduces gradients in fp32 unless told otherwise (accumulate_allreduce_grads_in_fp32).
            "grad_reduce_in_fp32": True,
            "overlap_grad_reduce": bool(_flag(args, "--overlap-grad-reduce", False)),
            "overlap_param_gather": bool(_flag(args, "--overlap-param-gather", False)),
            "num_distributed_optimizer_instances": int(
                _flag(args, "--num-distributed-optimizer-instances", 1)
            ),
        },
        # The format only, which Megatron-LM ties to Megatron-FSDP (check OPT012/OPT014); the
        # published peak is of the training iterations, so no load phase.
        "checkpoint": {"ckpt_format": _flag(args, "--ckpt-format", "torch_dist")},
        "cluster": {"num_gpus": WORLD_SIZE, "gpu": "H100-80GB"},
    }


def _moe(args: dict) -> dict:
    if "--num-experts" not in args:
        # Without experts Megatron-LM builds no expert group, so --expert-tensor-parallel-size
        # changes nothing (the gpt/ etp4 cases); memtune would refuse it.
        return {}
    model = {
        "num_moe_experts": int(args["--num-experts"]),
        "expert_model_parallel_size": int(_flag(args, "--expert-model-parallel-size", 1)),
        "expert_tensor_parallel_size": _int_or_none(_flag(args, "--expert-tensor-parallel-size")),
        # Megatron-LM's argparse default is 2; the tests set it explicitly.
        "moe_router_topk": int(_flag(args, "--moe-router-topk", 2)),
        "moe_ffn_hidden_size": _int_or_none(_flag(args, "--moe-ffn-hidden-size")),
        "moe_shared_expert_intermediate_size": _int_or_none(
            _flag(args, "--moe-shared-expert-intermediate-size")
        ),
        "moe_grouped_gemm": bool(_flag(args, "--moe-grouped-gemm", False)),
        "moe_token_dispatcher_type": _flag(args, "--moe-token-dispatcher-type", "allgather"),
        "moe_router_load_balancing_type": _flag(args, "--moe-router-load-balancing-type", "aux_loss"),
        "moe_permute_fusion": bool(_flag(args, "--moe-permute-fusion", False)),
        "moe_shared_expert_overlap": bool(_flag(args, "--moe-shared-expert-overlap", False)),
        "moe_router_num_groups": _int_or_none(_flag(args, "--moe-router-num-groups")),
        "moe_router_group_topk": _int_or_none(_flag(args, "--moe-router-group-topk")),
        "moe_flex_dispatcher_backend": _flag(args, "--moe-flex-dispatcher-backend"),
        "overlap_moe_expert_parallel_comm": bool(_flag(args, "--overlap-moe-expert-parallel-comm", False)),
        "delay_wgrad_compute": bool(_flag(args, "--delay-wgrad-compute", False)),
    }
    if "--moe-layer-freq" in args:
        model["moe_layer_freq"] = _layer_freq(str(args["--moe-layer-freq"]))
    if _flag(args, "--moe-token-dispatcher-type") == "flex":
        raise Skip("flex dispatcher (DeepEP/HybridEP buffers are not modelled)")
    return model


def _layer_freq(text: str) -> int | list[int]:
    """``--moe-layer-freq``: an int or a list expression like ``([0]*3+[1]*5)`` (Megatron-LM evaluates it)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    pattern: list[int] = []
    for term in text.strip("()").split("+"):
        value, _, count = term.strip().partition("*")
        inner = value[1:-1].strip()
        if not (
            value.startswith("[") and value.endswith("]") and inner.isdigit() and (count or "1").isdigit()
        ):
            raise Skip(f"--moe-layer-freq {text!r} is not a sum of [v]*n terms")
        pattern += [int(inner)] * int(count or 1)
    return pattern


def _mla(args: dict) -> dict:
    if not _flag(args, "--multi-latent-attention", False):
        return {}
    return {
        "multi_latent_attention": True,
        "q_lora_rank": _int_or_none(_flag(args, "--q-lora-rank")),
        "kv_lora_rank": int(_flag(args, "--kv-lora-rank", 32)),
        "qk_head_dim": int(_flag(args, "--qk-head-dim", 128)),
        "qk_pos_emb_head_dim": int(_flag(args, "--qk-pos-emb-head-dim", 64)),
        "v_head_dim": int(_flag(args, "--v-head-dim", 128)),
    }


def _list(value) -> list[str]:
    """A list flag as the test YAML writes it: ``[a b c]`` or a YAML list."""
    if isinstance(value, list):
        return [str(v) for v in value]
    return str(value).strip("[]").replace(",", " ").split()


def _features(args: dict) -> dict:
    model: dict = {}
    if "--mtp-num-layers" in args:
        model["mtp_num_layers"] = int(args["--mtp-num-layers"])
    if "--pipeline-model-parallel-layout" in args:
        model["pipeline_model_parallel_layout"] = str(args["--pipeline-model-parallel-layout"])
    if "--recompute-modules" in args:
        model["recompute_modules"] = _list(args["--recompute-modules"])
    if _flag(args, "--fine-grained-activation-offloading", False):
        model["fine_grained_activation_offloading"] = True
        model["offload_modules"] = _list(_flag(args, "--offload-modules", "[]"))
    impl = _flag(args, "--cuda-graph-impl")
    if impl and impl != "none":
        model["cuda_graph_impl"] = impl
        scope = _flag(args, "--cuda-graph-modules", _flag(args, "--cuda-graph-scope"))
        if scope:
            model["cuda_graph_scope"] = _list(scope)
    if _flag(args, "--use-flash-attn", False):
        model["attention_backend"] = "flash"
    return model


def _fsdp(args: dict) -> dict:
    if not _flag(args, "--use-megatron-fsdp", False):
        return {}
    if _flag(args, "--outer-dp-sharding-strategy", "no_shard") != "no_shard":
        raise Skip("hybrid FSDP (--outer-dp-sharding-strategy) is not modelled")
    ddp = {
        "use_megatron_fsdp": True,
        # Megatron-LM's argparse default (arguments.py --data-parallel-sharding-strategy).
        "data_parallel_sharding_strategy": _flag(
            args, "--data-parallel-sharding-strategy", "optim_grads_params"
        ),
    }
    for flag, key in (
        ("--megatron-fsdp-main-params-dtype", "megatron_fsdp_main_params_dtype"),
        ("--megatron-fsdp-main-grads-dtype", "megatron_fsdp_main_grads_dtype"),
    ):
        value = _flag(args, flag)
        if value not in (None, "auto"):
            ddp[key] = value
    return ddp


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


TRANSLATED = {
    "--num-layers",
    "--hidden-size",
    "--num-attention-heads",
    "--ffn-hidden-size",
    "--kv-channels",
    "--group-query-attention",
    "--num-query-groups",
    "--vocab-size",
    "--make-vocab-size-divisible-by",
    "--seq-length",
    "--micro-batch-size",
    "--global-batch-size",
    "--swiglu",
    "--squared-relu",
    "--normalization",
    "--untie-embeddings-and-output-weights",
    "--qk-layernorm",
    "--test-mode",
    "--disable-bias-linear",
    "--hidden-dropout",
    "--attention-dropout",
    "--position-embedding-type",
    "--no-bias-swiglu-fusion",
    "--no-bias-gelu-fusion",
    "--no-masked-softmax-fusion",
    "--attention-softmax-in-fp32",
    "--apply-query-key-layer-scaling",
    "--cross-entropy-loss-fusion",
    "--cross-entropy-fusion-impl",
    "--no-gradient-accumulation-fusion",
    "--defer-embedding-wgrad-compute",
    "--wgrad-deferral-limit",
    "--tp-comm-overlap",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--context-parallel-size",
    "--sequence-parallel",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--microbatch-group-size-per-virtual-pipeline-stage",
    "--bf16",
    "--fp16",
    "--transformer-impl",
    "--attention-backend",
    "--fp8-format",
    "--fp8-recipe",
    "--fp8-param-gather",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--use-distributed-optimizer",
    "--optimizer",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--num-distributed-optimizer-instances",
    "--num-experts",
    "--expert-model-parallel-size",
    "--expert-tensor-parallel-size",
    "--moe-router-topk",
    "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size",
    "--moe-grouped-gemm",
    "--moe-token-dispatcher-type",
    "--moe-router-load-balancing-type",
    "--moe-permute-fusion",
    "--moe-shared-expert-overlap",
    "--moe-router-num-groups",
    "--moe-router-group-topk",
    "--moe-layer-freq",
    "--moe-flex-dispatcher-backend",
    "--overlap-moe-expert-parallel-comm",
    "--delay-wgrad-compute",
    "--multi-latent-attention",
    "--q-lora-rank",
    "--kv-lora-rank",
    "--qk-head-dim",
    "--qk-pos-emb-head-dim",
    "--v-head-dim",
    "--mtp-num-layers",
    "--pipeline-model-parallel-layout",
    "--recompute-modules",
    "--fine-grained-activation-offloading",
    "--offload-modules",
    "--cuda-graph-impl",
    "--cuda-graph-modules",
    "--cuda-graph-scope",
    "--use-flash-attn",
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--outer-dp-sharding-strategy",
    "--megatron-fsdp-main-params-dtype",
    "--megatron-fsdp-main-grads-dtype",
}


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def allowed(family: str, name: str) -> bool:
    """False for the reserved cases (sha1 of the name 8-f in moe/ and mixtral/), which stay unread."""
    return (
        family not in RESERVED_FAMILIES or hashlib.sha1(name.encode()).hexdigest()[0] in ALLOWED_FIRST_DIGITS
    )


def run_id(family: str, name: str) -> str:
    # gpt/ ids predate the other families and fix the existing tune/holdout split.
    return f"mlm-ci-{name}" if family == "gpt" else f"mlm-ci-{family}-{name}"


def collect(repo: str, out: Path, platform: str) -> int:
    commit = _git(repo, "rev-parse", "HEAD").strip()
    golden_name = f"golden_values_dev_{platform}.json"
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for family in FAMILIES:
        names = _git(repo, "ls-tree", "-d", "--name-only", "HEAD", f"{CASES}/{family}/").split()
        for case in sorted(names):
            name = case.rsplit("/", 1)[1]
            if not allowed(family, name):
                continue
            written += _collect_case(repo, commit, out, family, case, golden_name, platform)
    print(f"{written} runs -> {out}", file=sys.stderr)
    return 0


def _collect_case(
    repo: str, commit: str, out: Path, family: str, case: str, golden_name: str, platform: str
) -> int:
    name = case.rsplit("/", 1)[1]
    if f"{case}/{golden_name}" not in _git(repo, "ls-tree", "--name-only", "HEAD", f"{case}/").split():
        return 0
    golden = json.loads(_git(repo, "show", f"HEAD:{case}/{golden_name}"))
    series = golden.get("mem-max-allocated-bytes") if isinstance(golden, dict) else None
    peaks = series.get("values", {}) if isinstance(series, dict) else {}
    if not peaks:
        return 0
    spec = yaml.safe_load(_git(repo, "show", f"HEAD:{case}/model_config.yaml"))
    args = spec.get("MODEL_ARGS") or {}
    if spec.get("TEST_TYPE") not in ("regular", "ckpt-resume", "frozen-resume"):
        print(f"skip {name}: test type {spec.get('TEST_TYPE')}")
        return 0
    try:
        config = translate(args)
    except Skip as exc:
        print(f"skip {name}: {exc}")
        return 0
    peak = max(float(v) for v in peaks.values() if v not in ("nan", None))
    record = {
        "id": run_id(family, name),
        "source": {
            "repository": "NVIDIA/Megatron-LM",
            "commit": commit,
            "model_config": f"{case}/model_config.yaml",
            "golden_values": f"{case}/{golden_name}",
        },
        "hardware": f"{platform} (8 GPUs, one node)",
        "rank": WORLD_SIZE - 1,
        "published": {
            "metric": "mem-max-allocated-bytes (max over logged iterations)",
            "bytes": int(peak),
        },
        "environment": {k: str(v) for k, v in (spec.get("ENV_VARS") or {}).items() if "ALLOC_CONF" in k},
        "megatron_lm_args": {
            k: v for k, v in args.items() if not k.startswith(IGNORED_PREFIXES) or k == "--vocab-file"
        },
        "config": config,
    }
    alloc = record["environment"]
    if alloc:
        config["env"] = dict(alloc)
    (out / f"{record['id']}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("repo", help="a Megatron-LM git directory (bare is fine)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--platform", default="dgx_h100")
    args = parser.parse_args()
    return collect(args.repo, args.out, args.platform)


if __name__ == "__main__":
    raise SystemExit(main())
