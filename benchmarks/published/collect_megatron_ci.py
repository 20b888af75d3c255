"""Collect Megatron-LM's functional-test GPT runs that log their memory peak.

Each test case under ``tests/functional_tests/test_cases/gpt/`` has ``model_config.yaml`` (the
``pretrain_gpt.py`` flags, ``MODEL_ARGS``) and per-platform ``golden_values_*.json`` whose
``mem-max-allocated-bytes`` is ``torch.cuda.max_memory_allocated()`` of the last global rank
(the one that writes TensorBoard), cumulative since the process started, logged every
iteration. The GPT recipe runs them on one node of 8 GPUs.

    python benchmarks/published/collect_megatron_ci.py MEGATRON_LM_GIT_DIR OUT_DIR [--platform dgx_h100]

writes ``OUT_DIR/<test case>.yaml`` per training run whose flags this script translates: the
original flags that shape memory (``megatron_lm_args``), the memtune config built from them
with Megatron-LM's argparse defaults spelled out, the published peak (the largest value
logged) and its source (repository, commit, paths). Runs with flags it does not translate (CUDA
graphs, FSDP, inference and RL entry points, tokenizers whose vocabulary it cannot size) are
skipped and listed on stdout with the reason.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

CASES = "tests/functional_tests/test_cases/gpt"
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
    "--test-mode",
    "--use-tp-pp-dp-mapping",
    "--ddp-average-in-collective",
    "--overlap-p2p-communication",
    "--disable-gloo-process-groups",
    "--tokenizer-type",
    "--no-bias-dropout-fusion",
    "--no-ckpt",
    "--async-",
    "--overlap-param-gather-with-optimizer-step",
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
    distributed = bool(_flag(args, "--use-distributed-optimizer", False))
    optimizer = _flag(args, "--optimizer", "adam")
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
            # Megatron-LM reduces gradients in fp32 unless told otherwise (accumulate_allreduce_grads_in_fp32).
            "grad_reduce_in_fp32": True,
            "overlap_grad_reduce": bool(_flag(args, "--overlap-grad-reduce", False)),
            "overlap_param_gather": bool(_flag(args, "--overlap-param-gather", False)),
            "num_distributed_optimizer_instances": int(
                _flag(args, "--num-distributed-optimizer-instances", 1)
            ),
        },
        "cluster": {"num_gpus": WORLD_SIZE, "gpu": "H100-80GB"},
    }


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
}


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def collect(repo: str, out: Path, platform: str) -> int:
    commit = _git(repo, "rev-parse", "HEAD").strip()
    files = _git(repo, "ls-tree", "-r", "--name-only", "HEAD", CASES).split()
    golden_name = f"golden_values_dev_{platform}.json"
    cases = sorted({f.rsplit("/", 1)[0] for f in files if f.endswith("/" + golden_name)})
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for case in cases:
        name = case.rsplit("/", 1)[1]
        golden = json.loads(_git(repo, "show", f"HEAD:{case}/{golden_name}"))
        series = golden.get("mem-max-allocated-bytes") if isinstance(golden, dict) else None
        peaks = series.get("values", {}) if isinstance(series, dict) else {}
        if not peaks:
            continue
        spec = yaml.safe_load(_git(repo, "show", f"HEAD:{case}/model_config.yaml"))
        args = spec.get("MODEL_ARGS") or {}
        if spec.get("TEST_TYPE") not in ("regular", "ckpt-resume", "frozen-resume"):
            print(f"skip {name}: test type {spec.get('TEST_TYPE')}")
            continue
        try:
            config = translate(args)
        except Skip as exc:
            print(f"skip {name}: {exc}")
            continue
        peak = max(float(v) for v in peaks.values() if v not in ("nan", None))
        record = {
            "id": f"mlm-ci-{name}",
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
        written += 1
    print(f"{written} runs -> {out}", file=sys.stderr)
    return 0


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
