"""The matrix of measured runs: which configs and ranks make up the measured set.

Each entry is one memtune config plus the global rank to measure. Widths are those of real
models (catalog presets); depth is cut where a whole model would not fit one GPU next to
others, except for the full-depth runs at the end. Everything runs Megatron-Core's local layer
spec (the GPU machine has no Transformer Engine): ``attention_backend`` picks Megatron's
unfused ``DotProductAttention`` or memtune's SDPA flash module.

``python benchmarks/gpu/run_matrix.py plan`` turns this list into measurement plans;
README.md beside this file says how to add entries.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, replace

from memtune.catalog.models import get_model
from memtune.config import derive, validate

HOLDOUT_SHARE = 3  # of 10


@dataclass(frozen=True)
class Entry:
    id: str
    config: dict
    rank: int
    solo: bool = False  # large enough to run with nothing else beside it
    smoke: bool = False  # part of the first, shake-out batch


def split_of(run_id: str) -> str:
    """Held out from tuning iff sha1(id) mod 10 < 3: fixed before any comparison was made.

    Runs named ``fresh-*`` were defined and measured after the estimator was frozen (commit
    379140b), ``fresh2-*`` after its last change: nobody saw them while tuning, so each is an
    untouched holdout of the estimator as it then stood.
    """
    if run_id.startswith("fresh-"):
        return "fresh"
    if run_id.startswith("fresh2-"):
        return "fresh2"
    return (
        "holdout" if int(hashlib.sha1(run_id.encode()).hexdigest()[:8], 16) % 10 < HOLDOUT_SHARE else "tune"
    )


def _model(preset: str, **changes) -> dict:
    model = get_model(preset)
    # measured without the fusions Bridge's model bridges add to the presets, unless a run asks
    model.update(transformer_impl="local", attention_backend="flash", bf16=True, moe_grouped_gemm=False)
    model.update(bias_activation_fusion=False)
    model.update(changes)
    return model


# Shapes. L8W: Llama 3 8B width. L1B: Llama 3.2 1B-like (tied embeddings, 2048 wide). GPT: a
# GPT-3-style block (LayerNorm, GeLU, biases, learned positions, dropout 0.1). MX: Mixtral 8x7B
# width. QM: Qwen3-30B-A3B width (128 experts, top-8, qk-norm). DSL: DeepSeek-V2-Lite-like MLA +
# shared experts, first layer dense.
def L8W(**kw):
    return _model("llama3-8b", **{"num_layers": 4, "seq_length": 4096, **kw})


def L1B(**kw):
    shape = dict(
        num_layers=4,
        hidden_size=2048,
        ffn_hidden_size=8192,
        kv_channels=64,
        share_embeddings_and_output_weights=True,
        seq_length=4096,
    )
    return _model("llama3-8b", **{**shape, **kw})


def GPT(**kw):
    base = dict(
        num_layers=4,
        hidden_size=2048,
        num_attention_heads=16,
        ffn_hidden_size=8192,
        vocab_size=50257,
        seq_length=2048,
        normalization="LayerNorm",
        activation_func="gelu",
        add_bias_linear=True,
        position_embedding_type="learned_absolute",
        hidden_dropout=0.1,
        attention_dropout=0.1,
        share_embeddings_and_output_weights=True,
        transformer_impl="local",
        attention_backend="unfused",
        bf16=True,
    )
    base.update(kw)
    return base


def MX(**kw):
    return _model("mixtral-8x7b", **{"num_layers": 2, **kw})


def QM(**kw):
    return _model("qwen3-30b-a3b", **{"num_layers": 4, **kw})


def DSL(**kw):
    base = dict(
        num_layers=3,
        hidden_size=2048,
        num_attention_heads=16,
        vocab_size=102400,
        seq_length=4096,
        ffn_hidden_size=10944,
        multi_latent_attention=True,
        q_lora_rank=None,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        num_moe_experts=64,
        moe_router_topk=6,
        moe_ffn_hidden_size=1408,
        moe_shared_expert_intermediate_size=2816,
        moe_layer_freq=[0, 1, 1],
        moe_token_dispatcher_type="alltoall",
        gated_linear_unit=True,
        activation_func="silu",
        normalization="RMSNorm",
        add_bias_linear=False,
        share_embeddings_and_output_weights=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        transformer_impl="local",
        attention_backend="flash",
        bf16=True,
    )
    base.update(kw)
    return base


def run(
    run_id,
    model,
    *,
    stage=0,
    dp=1,
    microbatches=1,
    mbs=1,
    distopt=False,
    grad_fp32=True,
    ddp=None,
    env=None,
    peft=None,
    optimizer=None,
    solo=False,
    smoke=False,
) -> Entry:
    """One measured run: ``dp`` data-parallel replicas, ``microbatches`` per iteration, the
    first rank of pipeline stage ``stage`` (a negative stage counts from the last)."""
    model = copy.deepcopy(model)
    tp = model.get("tensor_model_parallel_size", 1)
    pp = model.get("pipeline_model_parallel_size", 1)
    if pp > 1:  # Megatron-Core needs it set for pipelining (Megatron-LM's launcher would fill it in)
        model.setdefault("pipeline_dtype", "bf16" if model.get("bf16") else "fp32")
    world = tp * pp * dp
    config = {
        "defaults": "megatron-core",  # measured with Megatron-Core's own defaults (memtune/config/stacks.py)
        "model": model,
        "train": {"micro_batch_size": mbs, "global_batch_size": microbatches * mbs * dp},
        "optimizer": {"use_distributed_optimizer": distopt, **(optimizer or {})},
        "ddp": {"use_distributed_optimizer": distopt, "grad_reduce_in_fp32": grad_fp32, **(ddp or {})},
        "env": env or {},
        "cluster": {"num_gpus": world, "gpu": "H200"},
    }
    if peft is not None:
        config["peft"] = peft
    job = validate(config)
    d = derive(job)
    pp_rank = stage % d.pp
    rank = pp_rank * (d.world_size // d.pp)
    return Entry(run_id, job.model_dump(mode="json", exclude_defaults=True), rank, solo, smoke)


SP = dict(sequence_parallel=True)


def _dense() -> list[Entry]:
    e = []
    # Tensor parallelism, with and without sequence parallelism.
    e.append(run("l1b-tp1-s4k", L1B(), smoke=True))
    e.append(run("l1b-tp2-sp-s4k", L1B(tensor_model_parallel_size=2, **SP)))
    for tp in (2, 4, 8):
        e.append(run(f"l8w-tp{tp}-s4k", L8W(tensor_model_parallel_size=tp)))
        e.append(run(f"l8w-tp{tp}-sp-s4k", L8W(tensor_model_parallel_size=tp, **SP), smoke=tp == 2))
    # Attention: unfused (s x s scores kept) against flash.
    e.append(run("gpt-tp1-unfused-s2k", GPT(), smoke=True))
    e.append(run("gpt-tp1-flash-s2k", GPT(attention_backend="flash")))
    e.append(run("gpt-tp1-unfused-mbs2-s2k", GPT(), mbs=2))
    e.append(run("gpt-tp2-sp-unfused-s2k", GPT(tensor_model_parallel_size=2, **SP)))
    e.append(run("gpt-tp2-sp-flash-s2k", GPT(tensor_model_parallel_size=2, attention_backend="flash", **SP)))
    e.append(
        run("gpt-tp2-unfused-fusedgelu-s2k", GPT(tensor_model_parallel_size=2, bias_activation_fusion=True))
    )
    e.append(run("l1b-tp1-unfused-s2k", L1B(attention_backend="unfused", seq_length=2048)))
    e.append(
        run(
            "l8w-tp4-sp-unfused-s2k",
            L8W(tensor_model_parallel_size=4, attention_backend="unfused", seq_length=2048, **SP),
        )
    )
    # Recompute.
    tp2 = dict(tensor_model_parallel_size=2, **SP)
    e.append(run("l8w-tp2-sp-rc-coreattn", L8W(recompute_granularity="selective", **tp2)))
    e.append(
        run("l8w-tp2-sp-rc-mlp", L8W(recompute_granularity="selective", recompute_modules=["mlp"], **tp2))
    )
    e.append(
        run(
            "l8w-tp2-sp-rc-coreattn-mlp",
            L8W(recompute_granularity="selective", recompute_modules=["core_attn", "mlp"], **tp2),
        )
    )
    for method, n in (("uniform", 1), ("uniform", 2), ("block", 1), ("block", 3)):
        full = dict(recompute_granularity="full", recompute_method=method, recompute_num_layers=n)
        e.append(
            run(f"l8w-tp2-sp-rc-full-{method}{n}", L8W(**full, **tp2), smoke=(method, n) == ("uniform", 1))
        )
    e.append(run("gpt-tp1-unfused-rc-coreattn", GPT(recompute_granularity="selective")))
    e.append(
        run(
            "gpt-tp2-sp-unfused-rc-coreattn",
            GPT(tensor_model_parallel_size=2, recompute_granularity="selective", **SP),
        )
    )
    e.append(
        run(
            "l8w-tp4-sp-s8k-rc-full-uniform1",
            L8W(
                tensor_model_parallel_size=4,
                seq_length=8192,
                recompute_granularity="full",
                recompute_method="uniform",
                recompute_num_layers=1,
                **SP,
            ),
        )
    )
    e.append(
        run(
            "gpt-tp2-unfused-rc-full-block2",
            GPT(
                tensor_model_parallel_size=2,
                recompute_granularity="full",
                recompute_method="block",
                recompute_num_layers=2,
            ),
        )
    )
    # Distributed optimizer and gradient dtype.
    for distopt in (False, True):
        for fp32 in (True, False):
            tag = ("do" if distopt else "nodo") + ("-gfp32" if fp32 else "-gbf16")
            e.append(run(f"l8w-tp2-sp-dp4-{tag}", L8W(**tp2), dp=4, distopt=distopt, grad_fp32=fp32))
            e.append(run(f"l1b-tp1-dp8-{tag}", L1B(), dp=8, distopt=distopt, grad_fp32=fp32))
    e.append(
        run(
            "l8w-tp2-sp-dp4-do-overlap",
            L8W(**tp2),
            dp=4,
            distopt=True,
            ddp={"overlap_grad_reduce": True, "overlap_param_gather": True, "bucket_size": 40_000_000},
        )
    )
    e.append(run("l8w-tp2-sp-dp32-do", L8W(**tp2), dp=32, distopt=True))
    e.append(run("l1b-tp1-dp64-do-gbf16", L1B(), dp=64, distopt=True, grad_fp32=False))
    e.append(run("l8w-tp4-sp-gbf16", L8W(tensor_model_parallel_size=4, **SP), grad_fp32=False))
    e.append(
        run(
            "l1b-tp1-dp2-nodo-overlap",
            L1B(),
            dp=2,
            ddp={"overlap_grad_reduce": True, "bucket_size": 20_000_000},
        )
    )
    # Micro-batch size and sequence length.
    e.append(run("l1b-tp1-s2k-mbs2", L1B(seq_length=2048), mbs=2))
    e.append(run("l1b-tp1-s8k", L1B(seq_length=8192)))
    e.append(run("l1b-tp1-s4k-mbs2-m2", L1B(), mbs=2, microbatches=2))
    e.append(run("l8w-tp4-sp-s8k", L8W(tensor_model_parallel_size=4, seq_length=8192, **SP)))
    e.append(run("l8w-tp4-sp-s8k-mbs2", L8W(tensor_model_parallel_size=4, seq_length=8192, **SP), mbs=2))
    e.append(
        run(
            "l8w-tp8-sp-s8k-mbs2-m3",
            L8W(tensor_model_parallel_size=8, seq_length=8192, **SP),
            mbs=2,
            microbatches=3,
        )
    )
    # Fused SwiGLU, fp32 training, allocator settings.
    e.append(run("l8w-tp2-sp-fusedswiglu", L8W(bias_activation_fusion=True, **tp2)))
    e.append(run("l1b-tp1-fp32-unfused-s2k", L1B(bf16=False, seq_length=2048, attention_backend="unfused")))
    e.append(
        run("l1b-tp1-s4k-expandable", L1B(), env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    )
    e.append(
        run(
            "l8w-tp2-sp-s4k-m4-expandable",
            L8W(**tp2),
            microbatches=4,
            env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        )
    )
    return e


def _pipeline() -> list[Entry]:
    e = []
    pp2 = dict(num_layers=8, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, **SP)
    for m in (1, 4, 8):
        e.append(run(f"l8w-pp2-m{m}-first", L8W(**pp2), microbatches=m, smoke=m == 4))
        e.append(run(f"l8w-pp2-m{m}-last", L8W(**pp2), microbatches=m, stage=-1, smoke=m == 4))
    pp4 = dict(num_layers=8, tensor_model_parallel_size=2, pipeline_model_parallel_size=4, **SP)
    for m in (2, 8):
        for stage, name in ((0, "first"), (1, "mid1"), (2, "mid2"), (3, "last")):
            if m == 2 and name == "mid2":
                continue
            e.append(run(f"l8w-pp4-m{m}-{name}", L8W(**pp4), microbatches=m, stage=stage))
    pp3 = dict(num_layers=6, tensor_model_parallel_size=4, pipeline_model_parallel_size=3, **SP)
    for stage, name in ((0, "first"), (1, "mid"), (2, "last")):
        e.append(run(f"l8w-tp4-pp3-m6-{name}", L8W(**pp3), microbatches=6, stage=stage))
    vpp = dict(pp2, virtual_pipeline_model_parallel_size=2)
    for m in (2, 4, 8):
        e.append(run(f"l8w-pp2-vpp2-m{m}-first", L8W(**vpp), microbatches=m, smoke=m == 4))
        e.append(run(f"l8w-pp2-vpp2-m{m}-last", L8W(**vpp), microbatches=m, stage=-1))
    vpp4 = dict(pp4, virtual_pipeline_model_parallel_size=2)
    e.append(run("l8w-pp4-vpp2-m8-first", L8W(**vpp4), microbatches=8))
    e.append(run("l8w-pp4-vpp2-m8-last", L8W(**vpp4), microbatches=8, stage=-1))
    uneven = dict(pp2, num_layers=6, num_layers_in_first_pipeline_stage=2)
    e.append(run("l8w-pp2-uneven2-4-m4-first", L8W(**uneven), microbatches=4))
    e.append(run("l8w-pp2-uneven2-4-m4-last", L8W(**uneven), microbatches=4, stage=-1))
    accounted = dict(
        pp2,
        num_layers=6,
        account_for_embedding_in_pipeline_split=True,
        account_for_loss_in_pipeline_split=True,
    )
    e.append(run("l8w-pp2-acct-emb-loss-m4-first", L8W(**accounted), microbatches=4))
    e.append(run("l8w-pp2-acct-emb-loss-m4-last", L8W(**accounted), microbatches=4, stage=-1))
    e.append(run("l8w-pp2-m4-first-dealloc", L8W(deallocate_pipeline_outputs=True, **pp2), microbatches=4))
    rc = dict(pp2, recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    e.append(run("l8w-pp2-m8-rc-full-first", L8W(**rc), microbatches=8))
    e.append(
        run(
            "l8w-pp2-vpp2-m4-rc-block1-first",
            L8W(**dict(vpp, recompute_granularity="full", recompute_method="block", recompute_num_layers=1)),
            microbatches=4,
        )
    )
    e.append(run("l8w-pp2-m4-do-dp2-last", L8W(**pp2), microbatches=4, stage=-1, dp=2, distopt=True))
    e.append(run("l8w-pp2-m4-gbf16-first", L8W(**pp2), microbatches=4, grad_fp32=False))
    e.append(run("l8w-pp4-m4-do-dp2-mid2", L8W(**pp4), microbatches=4, stage=2, dp=2, distopt=True))
    return e


def _moe() -> list[Entry]:
    e = []
    a2a = dict(moe_token_dispatcher_type="alltoall")
    for ep in (2, 4, 8):
        e.append(run(f"mx-ep{ep}-s4k", MX(expert_model_parallel_size=ep, **a2a), dp=ep, smoke=ep == 2))
    e.append(
        run(
            "mx-tp2-sp-ep4-etp1",
            MX(
                tensor_model_parallel_size=2,
                expert_model_parallel_size=4,
                expert_tensor_parallel_size=1,
                **SP,
                **a2a,
            ),
            dp=2,
        )
    )
    e.append(
        run(
            "mx-tp2-sp-ep2-etp2",
            MX(tensor_model_parallel_size=2, expert_model_parallel_size=2, **SP, **a2a),
            dp=2,
        )
    )
    e.append(
        run(
            "mx-pp2-ep4-m4-first",
            MX(num_layers=4, pipeline_model_parallel_size=2, expert_model_parallel_size=4, **a2a),
            dp=4,
            microbatches=4,
        )
    )
    e.append(
        run(
            "mx-pp2-ep4-m4-last",
            MX(num_layers=4, pipeline_model_parallel_size=2, expert_model_parallel_size=4, **a2a),
            dp=4,
            microbatches=4,
            stage=-1,
        )
    )
    e.append(run("mx-ep4-gbf16", MX(expert_model_parallel_size=4, **a2a), dp=4, grad_fp32=False))
    e.append(
        run(
            "mx-pp4-ep2-m8-mid1",
            MX(num_layers=4, pipeline_model_parallel_size=4, expert_model_parallel_size=2, **a2a),
            dp=2,
            microbatches=8,
            stage=1,
        )
    )
    e.append(
        run(
            "mx-ep8-rc-full",
            MX(
                expert_model_parallel_size=8,
                recompute_granularity="full",
                recompute_method="uniform",
                recompute_num_layers=1,
                **a2a,
            ),
            dp=8,
        )
    )
    e.append(
        run(
            "mx-ep8-rc-moe",
            MX(
                expert_model_parallel_size=8,
                recompute_granularity="selective",
                recompute_modules=["moe"],
                **a2a,
            ),
            dp=8,
        )
    )
    e.append(
        run(
            "mx-ep8-do-s2k-mbs2",
            MX(expert_model_parallel_size=8, seq_length=2048, **a2a),
            dp=8,
            mbs=2,
            distopt=True,
        )
    )
    e.append(run("qm-ep8-do", QM(expert_model_parallel_size=8), dp=8, distopt=True, smoke=True))
    e.append(run("qm-ep8-dp64-do", QM(expert_model_parallel_size=8), dp=64, distopt=True))
    e.append(run("mx-ep8-dp32-do", MX(expert_model_parallel_size=8), dp=32, distopt=True))
    e.append(run("qm-ep8-do-gbf16", QM(expert_model_parallel_size=8), dp=8, distopt=True, grad_fp32=False))
    e.append(
        run(
            "qm-ep8-do-rc-full-block2",
            QM(
                expert_model_parallel_size=8,
                recompute_granularity="full",
                recompute_method="block",
                recompute_num_layers=2,
            ),
            dp=8,
            distopt=True,
        )
    )
    e.append(run("qm-ep8-nodo", QM(expert_model_parallel_size=8), dp=8))
    e.append(
        run(
            "qm-tp2-sp-ep4-do",
            QM(
                tensor_model_parallel_size=2,
                expert_model_parallel_size=4,
                expert_tensor_parallel_size=1,
                **SP,
            ),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "qm-ep8-do-s2k-mbs2-m2",
            QM(expert_model_parallel_size=8, seq_length=2048),
            dp=8,
            mbs=2,
            microbatches=2,
            distopt=True,
        )
    )
    e.append(
        run(
            "qm-ep8-do-cap1-pad",
            QM(
                expert_model_parallel_size=8,
                moe_expert_capacity_factor=1.0,
                moe_pad_expert_input_to_capacity=True,
            ),
            dp=8,
            distopt=True,
        )
    )
    e.append(
        run(
            "qm-ep8-do-shared",
            QM(expert_model_parallel_size=8, moe_shared_expert_intermediate_size=2048),
            dp=8,
            distopt=True,
        )
    )
    e.append(
        run(
            "qm-ep4-do-rc-coreattn-unfused-s2k",
            QM(
                expert_model_parallel_size=4,
                attention_backend="unfused",
                seq_length=2048,
                recompute_granularity="selective",
            ),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "qm-pp2-vpp2-ep4-m4-first",
            QM(
                num_layers=8,
                pipeline_model_parallel_size=2,
                virtual_pipeline_model_parallel_size=2,
                expert_model_parallel_size=4,
            ),
            dp=4,
            microbatches=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "qm-pp2-vpp2-ep4-m4-last",
            QM(
                num_layers=8,
                pipeline_model_parallel_size=2,
                virtual_pipeline_model_parallel_size=2,
                expert_model_parallel_size=4,
            ),
            dp=4,
            microbatches=4,
            distopt=True,
            stage=-1,
        )
    )
    e.append(run("dsl-mla-ep8-do", DSL(expert_model_parallel_size=8), dp=8, distopt=True, smoke=True))
    e.append(
        run(
            "dsl-mla-ep8-do-rc-upproj",
            DSL(
                expert_model_parallel_size=8,
                recompute_granularity="selective",
                recompute_modules=["mla_up_proj"],
            ),
            dp=8,
            distopt=True,
        )
    )
    e.append(
        run(
            "dsl-mla-ep4-do-s2k-mbs2",
            DSL(expert_model_parallel_size=4, seq_length=2048),
            dp=4,
            mbs=2,
            distopt=True,
        )
    )
    e.append(
        run(
            "dsl-mla-pp2-ep4-m4-last",
            DSL(
                num_layers=4,
                moe_layer_freq=[0, 1, 1, 1],
                pipeline_model_parallel_size=2,
                expert_model_parallel_size=4,
            ),
            dp=4,
            microbatches=4,
            distopt=True,
            stage=-1,
        )
    )
    e.append(
        run(
            "dsl-mla-tp2-sp-ep4-do",
            DSL(
                tensor_model_parallel_size=2,
                expert_model_parallel_size=4,
                expert_tensor_parallel_size=1,
                **SP,
            ),
            dp=4,
            distopt=True,
        )
    )
    return e


def _full_depth() -> list[Entry]:
    e = []
    e.append(
        run(
            "llama3-8b-tp2-sp-dp4-do-s8k",
            _model("llama3-8b", tensor_model_parallel_size=2, **SP),
            dp=4,
            microbatches=2,
            distopt=True,
            solo=True,
        )
    )
    qwen = _model(
        "qwen3-8b", seq_length=8192, tensor_model_parallel_size=2, pipeline_model_parallel_size=2, **SP
    )
    e.append(run("qwen3-8b-tp2-pp2-s8k-m8-first", qwen, dp=4, microbatches=8, distopt=True, solo=True))
    e.append(
        run("qwen3-8b-tp2-pp2-s8k-m8-last", qwen, dp=4, microbatches=8, distopt=True, stage=-1, solo=True)
    )
    llama70 = _model(
        "llama3-70b",
        seq_length=4096,
        tensor_model_parallel_size=4,
        pipeline_model_parallel_size=4,
        virtual_pipeline_model_parallel_size=5,
        **SP,
    )
    e.append(
        run("llama3-70b-tp4-pp4-vpp5-s4k-m16-first", llama70, dp=8, microbatches=16, distopt=True, solo=True)
    )
    e.append(
        run(
            "llama3-70b-tp4-pp4-vpp5-s4k-m16-last",
            llama70,
            dp=8,
            microbatches=16,
            distopt=True,
            stage=-1,
            solo=True,
        )
    )
    mixtral = _model("mixtral-8x7b", pipeline_model_parallel_size=4, expert_model_parallel_size=8)
    e.append(run("mixtral-8x7b-pp4-ep8-s4k-m8-first", mixtral, dp=8, microbatches=8, distopt=True, solo=True))
    qwen_moe = _model("qwen3-30b-a3b", pipeline_model_parallel_size=2, expert_model_parallel_size=8)
    e.append(
        run(
            "qwen3-30b-a3b-pp2-ep8-s4k-m4-last",
            qwen_moe,
            dp=8,
            microbatches=4,
            distopt=True,
            stage=-1,
            solo=True,
        )
    )
    return e


def _fresh() -> list[Entry]:
    """Defined after the estimator was frozen (see split_of): new combinations of every axis."""
    e = []
    a2a = dict(moe_token_dispatcher_type="alltoall")
    tp2sp = dict(tensor_model_parallel_size=2, **SP)
    e.append(run("fresh-l1b-tp2-sp-mbs2-s4k", L1B(**tp2sp), mbs=2, microbatches=2))
    e.append(
        run(
            "fresh-gpt-tp2-sp-unfused-rc-coreattn-mlp",
            GPT(recompute_granularity="selective", recompute_modules=["core_attn", "mlp"], **tp2sp),
        )
    )
    e.append(
        run("fresh-gpt-tp1-unfused-nodropout-mbs2", GPT(hidden_dropout=0.0, attention_dropout=0.0), mbs=2)
    )
    e.append(
        run(
            "fresh-l8w-tp4-sp-s6k-m2-do-dp2",
            L8W(seq_length=6144, tensor_model_parallel_size=4, **SP),
            microbatches=2,
            dp=2,
            distopt=True,
        )
    )
    pp3v = dict(
        num_layers=12, pipeline_model_parallel_size=3, virtual_pipeline_model_parallel_size=2, **tp2sp
    )
    e.append(run("fresh-l8w-pp3-vpp2-m6-first", L8W(**pp3v), microbatches=6))
    e.append(run("fresh-l8w-pp3-vpp2-m6-last", L8W(**pp3v), microbatches=6, stage=-1))
    pp4 = dict(num_layers=8, pipeline_model_parallel_size=4, **tp2sp)
    e.append(run("fresh-l8w-pp4-m3-mid1", L8W(**pp4), microbatches=3, stage=1))
    e.append(
        run(
            "fresh-l8w-tp2-sp-rc-uniform1-do-dp4",
            L8W(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1, **tp2sp),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "fresh-l8w-tp2-sp-rc-block2-do-gbf16",
            L8W(recompute_granularity="full", recompute_method="block", recompute_num_layers=2, **tp2sp),
            dp=8,
            distopt=True,
            grad_fp32=False,
        )
    )
    e.append(
        run(
            "fresh-mx-tp2-sp-ep4-etp2-do",
            MX(expert_model_parallel_size=4, **tp2sp, **a2a),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "fresh-qm-ep4-do-rc-moe",
            QM(expert_model_parallel_size=4, recompute_granularity="selective", recompute_modules=["moe"]),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "fresh-qm-tp4-sp-ep8-etp1-do",
            QM(
                tensor_model_parallel_size=4,
                expert_model_parallel_size=8,
                expert_tensor_parallel_size=1,
                **SP,
            ),
            dp=2,
            distopt=True,
        )
    )
    e.append(
        run(
            "fresh-dsl-mla-pp2-ep4-m4-first",
            DSL(
                num_layers=4,
                moe_layer_freq=[0, 1, 1, 1],
                pipeline_model_parallel_size=2,
                expert_model_parallel_size=4,
            ),
            dp=4,
            microbatches=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "fresh-dsl-mla-ep8-do-s8k", DSL(expert_model_parallel_size=8, seq_length=8192), dp=8, distopt=True
        )
    )
    e.append(
        run(
            "fresh-l1b-pp2-m4-last-tied",
            L1B(num_layers=8, pipeline_model_parallel_size=2),
            microbatches=4,
            stage=-1,
        )
    )
    e.append(
        run(
            "fresh-gpt-pp2-m4-first-unfused",
            GPT(num_layers=8, pipeline_model_parallel_size=2),
            microbatches=4,
        )
    )
    e.append(
        run(
            "fresh-l8w-tp8-sp-s8k-do-dp8",
            L8W(seq_length=8192, tensor_model_parallel_size=8, **SP),
            dp=8,
            distopt=True,
        )
    )
    e.append(
        run(
            "fresh-mx-ep8-rc-coreattn",
            MX(expert_model_parallel_size=8, recompute_granularity="selective", **a2a),
            dp=8,
        )
    )
    e.append(
        run(
            "fresh-l8w-pp2-m4-expandable-last",
            L8W(num_layers=8, pipeline_model_parallel_size=2, **tp2sp),
            microbatches=4,
            stage=-1,
            env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        )
    )
    e.append(
        run(
            "fresh-l8w-pp2-rc-uniform2-m4-first",
            L8W(
                num_layers=8,
                pipeline_model_parallel_size=2,
                recompute_granularity="full",
                recompute_method="uniform",
                recompute_num_layers=2,
                **tp2sp,
            ),
            microbatches=4,
        )
    )
    e.append(
        run(
            "fresh-qwen3-8b-tp4-sp-s4k-do-dp2",
            _model("qwen3-8b", seq_length=4096, tensor_model_parallel_size=4, **SP),
            dp=2,
            microbatches=2,
            distopt=True,
            solo=True,
        )
    )
    llama_pp = _model(
        "llama3-8b",
        seq_length=4096,
        pipeline_model_parallel_size=4,
        virtual_pipeline_model_parallel_size=2,
        **tp2sp,
    )
    e.append(
        run("fresh-llama3-8b-tp2-pp4-vpp2-m8-first", llama_pp, dp=2, microbatches=8, distopt=True, solo=True)
    )
    e.append(
        run(
            "fresh-llama3-8b-tp2-pp4-vpp2-m8-last",
            llama_pp,
            dp=2,
            microbatches=8,
            distopt=True,
            stage=-1,
            solo=True,
        )
    )
    return e


def _fresh2() -> list[Entry]:
    """Defined after the estimator's last change (see split_of)."""
    e = []
    a2a = dict(moe_token_dispatcher_type="alltoall")
    tp2sp = dict(tensor_model_parallel_size=2, **SP)
    e.append(run("fresh2-gpt-tp2-unfused-mbs2", GPT(tensor_model_parallel_size=2), mbs=2))
    e.append(
        run(
            "fresh2-gpt-pp2-m4-last-unfused",
            GPT(num_layers=8, pipeline_model_parallel_size=2),
            microbatches=4,
            stage=-1,
        )
    )
    e.append(
        run("fresh2-gpt-tp1-unfused-rc-coreattn-s4k", GPT(seq_length=4096, recompute_granularity="selective"))
    )
    e.append(
        run(
            "fresh2-gpt-tp4-sp-flash-mbs2",
            GPT(attention_backend="flash", tensor_model_parallel_size=4, **SP),
            mbs=2,
        )
    )
    e.append(
        run(
            "fresh2-l1b-tp1-unfused-rc-coreattn",
            L1B(attention_backend="unfused", seq_length=2048, recompute_granularity="selective"),
        )
    )
    e.append(
        run(
            "fresh2-dsl-mla-tp2-sp-ep4-rc-moe",
            DSL(
                expert_model_parallel_size=4,
                expert_tensor_parallel_size=1,
                recompute_granularity="selective",
                recompute_modules=["moe"],
                **tp2sp,
            ),
            dp=4,
            distopt=True,
        )
    )
    e.append(run("fresh2-dsl-mla-ep4-gbf16", DSL(expert_model_parallel_size=4), dp=4, grad_fp32=False))
    e.append(
        run(
            "fresh2-qm-pp2-ep4-m2-last-gbf16",
            QM(num_layers=8, pipeline_model_parallel_size=2, expert_model_parallel_size=4),
            dp=4,
            microbatches=2,
            distopt=True,
            grad_fp32=False,
            stage=-1,
        )
    )
    e.append(
        run(
            "fresh2-mx-ep4-rc-coreattn-mlp",
            MX(
                expert_model_parallel_size=4,
                recompute_granularity="selective",
                recompute_modules=["core_attn", "mlp"],
                **a2a,
            ),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "fresh2-l8w-pp2-vpp2-m2-rc-uniform1-last",
            L8W(
                num_layers=8,
                pipeline_model_parallel_size=2,
                virtual_pipeline_model_parallel_size=2,
                recompute_granularity="full",
                recompute_method="uniform",
                recompute_num_layers=1,
                **tp2sp,
            ),
            microbatches=2,
            stage=-1,
        )
    )
    e.append(
        run(
            "fresh2-l8w-tp4-sp-s8k-mbs2-do-gbf16",
            L8W(seq_length=8192, tensor_model_parallel_size=4, **SP),
            mbs=2,
            dp=2,
            distopt=True,
            grad_fp32=False,
        )
    )
    e.append(
        run("fresh2-l8w-pp4-m1-last", L8W(num_layers=8, pipeline_model_parallel_size=4, **tp2sp), stage=-1)
    )
    e.append(
        run(
            "fresh2-qwen3-8b-tp2-sp-unfused-s2k",
            _model("qwen3-8b", seq_length=2048, attention_backend="unfused", **tp2sp),
            dp=2,
            microbatches=2,
            distopt=True,
            solo=True,
        )
    )
    e.append(
        run(
            "fresh2-llama3-8b-tp4-sp-pp2-m4-first",
            _model(
                "llama3-8b",
                seq_length=4096,
                tensor_model_parallel_size=4,
                pipeline_model_parallel_size=2,
                **SP,
            ),
            dp=2,
            microbatches=4,
            distopt=True,
            solo=True,
        )
    )
    return e


def _preflight() -> list[Entry]:
    """Multi-token prediction (``mtp-``), Megatron-FSDP (``fsdp-``), optimizer CPU offload under
    Python's automatic collector (``ooff-``) and with Megatron-LM's manual collection
    (``mgc-``), fine-grained activation offloading (``aoff-``), split by the hash rule.
    Megatron-FSDP with PP cannot run on megatron-core 0.19.2 (``memtune measure`` says why)."""
    return _mtp() + _fsdp() + _optimizer_offload() + _optimizer_offload_manual_gc() + _activation_offload()


def _mtp() -> list[Entry]:
    e = []
    tp2 = dict(tensor_model_parallel_size=2, **SP)
    pp2 = dict(num_layers=8, pipeline_model_parallel_size=2, **tp2)
    e.append(run("mtp-l8w-tp2-sp-mtp1", L8W(mtp_num_layers=1, **tp2), microbatches=2, smoke=True))
    e.append(run("mtp-l8w-tp2-sp-mtp2", L8W(mtp_num_layers=2, **tp2), microbatches=2))
    e.append(run("mtp-l8w-pp2-m4-mtp1-first", L8W(mtp_num_layers=1, **pp2), microbatches=4))
    e.append(run("mtp-l8w-pp2-m4-mtp1-last", L8W(mtp_num_layers=1, **pp2), microbatches=4, stage=-1))
    e.append(run("mtp-l8w-pp2-m4-mtp2-last", L8W(mtp_num_layers=2, **pp2), microbatches=4, stage=-1))
    rc = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    e.append(
        run("mtp-l8w-pp2-m4-mtp1-rc-full-last", L8W(mtp_num_layers=1, **pp2, **rc), microbatches=4, stage=-1)
    )
    vpp = dict(pp2, virtual_pipeline_model_parallel_size=2)
    e.append(run("mtp-l8w-pp2-vpp2-m4-mtp1-last", L8W(mtp_num_layers=1, **vpp), microbatches=4, stage=-1))
    sel = dict(recompute_granularity="selective")
    e.append(run("mtp-l8w-tp2-sp-mtp1-rc-sel", L8W(mtp_num_layers=1, **tp2, **sel), microbatches=2))
    e.append(run("mtp-l1b-tp1-mtp1", L1B(mtp_num_layers=1), microbatches=2))
    e.append(
        run(
            "mtp-l1b-pp2-m4-mtp1-last",
            L1B(mtp_num_layers=1, num_layers=8, pipeline_model_parallel_size=2),
            microbatches=4,
            stage=-1,
        )
    )
    a2a = dict(moe_token_dispatcher_type="alltoall")
    e.append(run("mtp-qm-ep4-mtp1", QM(mtp_num_layers=1, expert_model_parallel_size=4, **a2a), dp=4))
    e.append(run("mtp-dsl-ep4-mtp1", DSL(mtp_num_layers=1, expert_model_parallel_size=4), dp=4))
    e.append(run("mtp-gpt-tp1-unfused-mtp1", GPT(mtp_num_layers=1), microbatches=2))
    # Added after the first pass (defined before any comparison; split by the hash rule).
    pp2_moe = dict(num_layers=4, pipeline_model_parallel_size=2, expert_model_parallel_size=2, **a2a)
    e.append(run("mtp-qm-pp2-m4-mtp1-last", QM(mtp_num_layers=1, **pp2_moe), dp=2, microbatches=4, stage=-1))
    tp4 = dict(tensor_model_parallel_size=4, **SP)
    e.append(run("mtp-l8w-tp4-sp-mtp1", L8W(mtp_num_layers=1, **tp4), microbatches=2))
    return e


def _fsdp() -> list[Entry]:
    e = []

    def fsdp(strategy):
        return dict(use_megatron_fsdp=True, data_parallel_sharding_strategy=strategy)

    tp2 = dict(tensor_model_parallel_size=2, **SP)
    for strategy, name in (("optim", "optim"), ("optim_grads", "og"), ("optim_grads_params", "ogp")):
        e.append(
            run(
                f"fsdp-l8w-tp2-sp-dp4-{name}",
                L8W(**tp2),
                dp=4,
                microbatches=2,
                distopt=True,
                ddp=fsdp(strategy),
                smoke=name == "ogp",
            )
        )
    ogp = fsdp("optim_grads_params")
    e.append(run("fsdp-l8w-tp1-dp8-ogp", L8W(), dp=8, distopt=True, ddp=ogp))
    e.append(run("fsdp-l1b-dp4-og", L1B(), dp=4, distopt=True, ddp=fsdp("optim_grads")))
    e.append(run("fsdp-l1b-dp4-ogp", L1B(), dp=4, microbatches=2, distopt=True, ddp=ogp))
    rc = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    e.append(run("fsdp-l8w-tp2-sp-dp4-ogp-rc-full", L8W(**tp2, **rc), dp=4, distopt=True, ddp=ogp))
    a2a = dict(moe_token_dispatcher_type="alltoall")
    e.append(run("fsdp-mx-ep2-dp2-ogp", MX(expert_model_parallel_size=2, **a2a), dp=2, distopt=True, ddp=ogp))
    e.append(
        run(
            "fsdp-qm-ep4-dp4-og",
            QM(expert_model_parallel_size=4, **a2a),
            dp=4,
            distopt=True,
            ddp=fsdp("optim_grads"),
        )
    )
    e.append(run("fsdp-gpt-dp4-ogp", GPT(), dp=4, distopt=True, ddp=ogp))
    tp4 = dict(tensor_model_parallel_size=4, **SP)
    e.append(run("fsdp-l8w-tp4-sp-dp2-og", L8W(**tp4), dp=2, distopt=True, ddp=fsdp("optim_grads")))
    e.append(run("fsdp-l8w-tp2-sp-dp8-optim", L8W(**tp2), dp=8, distopt=True, ddp=fsdp("optim")))
    # Added after the first pass (defined before any comparison; split by the hash rule).
    e.append(run("fsdp-l1b-dp8-optim", L1B(), dp=8, distopt=True, ddp=fsdp("optim")))
    sel = dict(recompute_granularity="selective")
    e.append(run("fsdp-l8w-tp2-sp-dp4-ogp-rc-sel", L8W(**tp2, **sel), dp=4, distopt=True, ddp=ogp))
    e.append(
        run(
            "fsdp-qm-ep2-dp4-optim",
            QM(expert_model_parallel_size=2, **a2a),
            dp=4,
            distopt=True,
            ddp=fsdp("optim"),
        )
    )
    e.append(run("fsdp-gpt-dp2-og", GPT(), dp=2, distopt=True, ddp=fsdp("optim_grads")))
    return e


def _optimizer_offload() -> list[Entry]:
    e = []

    def offload(fraction, overlap=False):
        return dict(
            use_distributed_optimizer=True,
            use_precision_aware_optimizer=True,
            optimizer_cpu_offload=True,
            optimizer_offload_fraction=fraction,
            overlap_cpu_optimizer_d2h_h2d=overlap,
        )

    def ooff(run_id, model, fraction, overlap=False, **kw):
        entry = run(run_id, model, distopt=True, **kw)
        config = copy.deepcopy(entry.config)
        config["optimizer"].update(offload(fraction, overlap))
        job = validate(config)
        return Entry(
            run_id, job.model_dump(mode="json", exclude_defaults=True), entry.rank, entry.solo, entry.smoke
        )

    tp2 = dict(tensor_model_parallel_size=2, **SP)
    e.append(ooff("ooff-l8w-tp2-sp-dp4-f1", L8W(**tp2), 1.0, dp=4, microbatches=2, smoke=True))
    e.append(ooff("ooff-l8w-tp2-sp-dp4-f05", L8W(**tp2), 0.5, dp=4, microbatches=2))
    e.append(ooff("ooff-l8w-tp2-sp-dp4-f05-overlap", L8W(**tp2), 0.5, overlap=True, dp=4, microbatches=2))
    e.append(ooff("ooff-l8w-tp2-sp-dp4-f0", L8W(**tp2), 0.0, dp=4))
    e.append(ooff("ooff-l1b-dp4-f1", L1B(), 1.0, dp=4))
    e.append(ooff("ooff-l1b-dp4-f07-gbf16", L1B(), 0.7, dp=4, grad_fp32=False))
    pp2 = dict(num_layers=8, pipeline_model_parallel_size=2, **tp2)
    e.append(ooff("ooff-l8w-pp2-m4-dp2-f05-first", L8W(**pp2), 0.5, dp=2, microbatches=4))
    e.append(ooff("ooff-l8w-pp2-m4-dp2-f1-last", L8W(**pp2), 1.0, dp=2, microbatches=4, stage=-1))
    rc = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    e.append(ooff("ooff-l8w-tp2-sp-dp4-f05-rc-full", L8W(**tp2, **rc), 0.5, dp=4))
    a2a = dict(moe_token_dispatcher_type="alltoall")
    e.append(ooff("ooff-mx-ep2-dp2-f05", MX(expert_model_parallel_size=2, **a2a), 0.5, dp=2))
    e.append(ooff("ooff-qm-ep4-dp4-f1", QM(expert_model_parallel_size=4, **a2a), 1.0, dp=4))
    # Added after the first pass (defined before any comparison; split by the hash rule).
    e.append(ooff("ooff-l1b-dp2-f03", L1B(), 0.3, dp=2))
    e.append(ooff("ooff-qm-ep2-dp2-f0", QM(expert_model_parallel_size=2, **a2a), 0.0, dp=2))
    return e


def _optimizer_offload_manual_gc() -> list[Entry]:
    """The optimizer-offload runs again with ``train.manual_gc`` (Megatron-LM's --manual-gc,
    set by most Megatron-Bridge recipes): a full collection before training frees the replaced
    first optimizer's device copies, which under the automatic collector come and go with the
    process's history. Ids ``mgc-`` plus the automatic run's id, and four new shapes; defined
    before any of them was measured, split by the hash rule."""
    e = []
    for entry in _optimizer_offload():
        config = copy.deepcopy(entry.config)
        config.setdefault("train", {})["manual_gc"] = True
        e.append(Entry(f"mgc-{entry.id}", config, entry.rank, entry.solo, False))

    def manual_gc(run_id, model, fraction, **kw):
        entry = run(run_id, model, distopt=True, **kw)
        config = copy.deepcopy(entry.config)
        config["optimizer"].update(
            use_distributed_optimizer=True,
            use_precision_aware_optimizer=True,
            optimizer_cpu_offload=True,
            optimizer_offload_fraction=fraction,
        )
        config["train"]["manual_gc"] = True
        job = validate(config)
        return Entry(
            run_id, job.model_dump(mode="json", exclude_defaults=True), entry.rank, entry.solo, False
        )

    a2a = dict(moe_token_dispatcher_type="alltoall")
    e.append(manual_gc("mgc-mx-ep2-dp4-f1", MX(expert_model_parallel_size=2, **a2a), 1.0, dp=4))
    e.append(manual_gc("mgc-qm-ep4-dp4-f05", QM(expert_model_parallel_size=4, **a2a), 0.5, dp=4))
    e.append(manual_gc("mgc-dsl-ep2-dp2-f05", DSL(expert_model_parallel_size=2), 0.5, dp=2))
    e.append(
        manual_gc(
            "mgc-l8w-tp4-sp-dp2-f07",
            L8W(tensor_model_parallel_size=4, **SP),
            0.7,
            dp=2,
            microbatches=2,
        )
    )
    return e


def _activation_offload() -> list[Entry]:
    """Fine-grained activation offloading (``aoff-``): Megatron-Core's own offload code on the
    local spec (the runner stands in for Transformer Engine's flag, memtune/measure/plan.py).
    Shapes where activations set the peak (distributed optimizer over DP 4, 8 layers): dense and
    MoE, several stages, selective and full recompute, a fraction, a size threshold; defined
    before any was measured, split by the hash rule."""
    e = []

    def offload(modules, **kw):
        return dict(fine_grained_activation_offloading=True, offload_modules=modules, **kw)

    def aoff(run_id, model, microbatches=2, dp=4, mbs=2, **kw):
        return run(run_id, model, dp=dp, distopt=True, microbatches=microbatches, mbs=mbs, **kw)

    attn = ["attn_norm", "qkv_linear", "core_attn", "attn_proj"]
    every = [*attn, "mlp_norm"]
    small_vocab = dict(vocab_size=32768)  # keeps the embedding's state from hiding the activations
    tp2 = dict(num_layers=8, tensor_model_parallel_size=2, **small_vocab, **SP)
    e.append(aoff("aoff-l8w-tp2-sp-attn-norm", L8W(**tp2, **offload(["attn_norm"])), smoke=True))
    e.append(aoff("aoff-l8w-tp2-sp-mlp-norm", L8W(**tp2, **offload(["mlp_norm"]))))
    e.append(aoff("aoff-l8w-tp2-sp-qkv", L8W(**tp2, **offload(["qkv_linear"]))))
    e.append(aoff("aoff-l8w-tp2-sp-core-attn", L8W(**tp2, **offload(["core_attn", "attn_proj"]))))
    e.append(aoff("aoff-l8w-tp2-sp-all", L8W(**tp2, **offload(every))))
    e.append(aoff("aoff-l8w-tp2-sp-all-m1", L8W(**tp2, **offload(every)), microbatches=1))
    e.append(
        aoff("aoff-l8w-tp2-sp-all-frac05", L8W(**tp2, **offload(every, activation_offload_fraction=0.5)))
    )
    # Without TP the norm inputs and the query are 16 Mi elements and the GQA keys and values
    # 4 Mi: an 8 Mi threshold keeps the latter on the device.
    e.append(
        aoff(
            "aoff-l8w-tp1-all-min8m",
            L8W(num_layers=8, **small_vocab, **offload(every, min_offloaded_tensor_size=8 * 1024 * 1024)),
            dp=8,
            mbs=1,
        )
    )
    pp2 = dict(
        num_layers=16, pipeline_model_parallel_size=2, tensor_model_parallel_size=2, **small_vocab, **SP
    )
    e.append(aoff("aoff-l8w-pp2-m4-all-first", L8W(**pp2, **offload(every)), microbatches=4, dp=2))
    e.append(aoff("aoff-l8w-pp2-m4-all-last", L8W(**pp2, **offload(every)), microbatches=4, dp=2, stage=-1))
    vpp = dict(pp2, virtual_pipeline_model_parallel_size=2)
    e.append(
        aoff(
            "aoff-l8w-pp2-vpp2-m4-norms-first",
            L8W(**vpp, **offload(["attn_norm", "mlp_norm"])),
            microbatches=4,
            dp=2,
        )
    )
    sel = dict(recompute_granularity="selective")
    e.append(aoff("aoff-l8w-tp2-sp-rc-sel-norms", L8W(**tp2, **sel, **offload(["attn_norm", "mlp_norm"]))))
    full = dict(recompute_granularity="full", recompute_method="block", recompute_num_layers=4)
    # Added after the first pass (defined before any comparison; split by the hash rule): the
    # first pass offloaded attn_norm too, which megatron-core itself fails on (check OFF009).
    e.append(aoff("aoff-l8w-tp2-sp-rc-full-block4-no-attn-norm", L8W(**tp2, **full, **offload(every[1:]))))
    e.append(aoff("aoff-l1b-tp1-all", L1B(num_layers=8, **small_vocab, **offload(every))))
    e.append(aoff("aoff-gpt-unfused-core-attn", GPT(num_layers=8, **offload(["core_attn", "attn_proj"]))))
    a2a = dict(moe_token_dispatcher_type="alltoall")
    e.append(
        aoff(
            "aoff-mx-ep4-all",
            MX(num_layers=4, expert_model_parallel_size=4, **small_vocab, **a2a, **offload(every)),
            dp=8,
        )
    )
    e.append(
        aoff(
            "aoff-qm-ep4-attn",
            QM(num_layers=8, expert_model_parallel_size=4, **small_vocab, **a2a, **offload(attn)),
        )
    )
    e.append(
        aoff(
            "aoff-dsl-ep4-qkv-core",
            DSL(
                num_layers=6,
                moe_layer_freq=[0, 1, 1, 1, 1, 1],
                expert_model_parallel_size=4,
                **offload(["qkv_linear", "core_attn"]),
            ),
        )
    )
    # Added after the model was frozen at 75c5332 (defined before any was measured; split by
    # the hash rule): MLA with a query low-rank path, MLA's own input norm, TP4 at sequence
    # 8192, a fraction on a last stage, unfused GQA attention, an MoE first stage.
    mla_q = dict(
        num_layers=6, moe_layer_freq=[0, 1, 1, 1, 1, 1], q_lora_rank=768, expert_model_parallel_size=4
    )
    e.append(aoff("aoff-dslq-ep4-qkv-core", DSL(**mla_q, **offload(["qkv_linear", "core_attn"]))))
    e.append(aoff("aoff-dslq-ep4-norms", DSL(**mla_q, **offload(["attn_norm", "mlp_norm"]))))
    tp4 = dict(num_layers=8, tensor_model_parallel_size=4, seq_length=8192, **small_vocab, **SP)
    e.append(aoff("aoff-l8w-tp4-sp-s8k-all", L8W(**tp4, **offload(every)), mbs=1))
    e.append(
        aoff(
            "aoff-l8w-pp2-m4-frac025-last",
            L8W(**pp2, **offload(every, activation_offload_fraction=0.25)),
            microbatches=4,
            dp=2,
            stage=-1,
        )
    )
    e.append(
        aoff(
            "aoff-l1b-unfused-core-attn",
            L1B(
                num_layers=8,
                attention_backend="unfused",
                **small_vocab,
                **offload(["core_attn", "attn_proj"]),
            ),
            mbs=1,
        )
    )
    pp2_moe = dict(num_layers=8, pipeline_model_parallel_size=2, expert_model_parallel_size=4, **small_vocab)
    e.append(aoff("aoff-qm-pp2-m4-all-first", QM(**pp2_moe, **a2a, **offload(every)), microbatches=4, dp=4))
    return e


def Q8(**kw):
    """Qwen3 8B width (qk-norm, GQA 32/8, 12288-wide SwiGLU), depth cut to 4."""
    return _model("qwen3-8b", **{"num_layers": 4, "seq_length": 8192, **kw})


def lora(regather=False, **kw) -> dict:
    """A Megatron-Bridge LoRA section: rank 32, alpha 32, every linear unless ``target_modules``."""
    return {"dim": 32, "alpha": 32, "sequence_parallel_input_regather": regather, **kw}


COLUMN = ["linear_qkv", "linear_fc1"]
ATTENTION = ["linear_qkv", "linear_proj"]


def _lora() -> list[Entry]:
    """LoRA jobs (memtune.peft): frozen base, adapters in the DDP buffers and optimizer."""
    e = []
    tp2 = dict(tensor_model_parallel_size=2, **SP)
    for tp in (1, 2, 4):
        layout = dict(tensor_model_parallel_size=tp, **(SP if tp > 1 else {}))
        name = f"tp{tp}" + ("-sp" if tp > 1 else "")
        e.append(run(f"lora-l8w-{name}-s4k", L8W(**layout), peft=lora()))
        e.append(run(f"lora-l8w-{name}-s4k-regather", L8W(**layout), peft=lora(True)))
    e.append(run("lora-l8w-tp2-nosp-s4k", L8W(tensor_model_parallel_size=2), peft=lora()))
    e.append(run("lora-l8w-tp2-sp-column-regather", L8W(**tp2), peft=lora(True, target_modules=COLUMN)))
    e.append(run("lora-l8w-tp2-sp-attention", L8W(**tp2), peft=lora(target_modules=ATTENTION)))
    e.append(run("lora-l8w-tp2-sp-dim128", L8W(**tp2), peft=lora(dim=128, alpha=256)))
    mlp = dict(recompute_granularity="selective", recompute_modules=["mlp"])
    e.append(run("lora-l8w-tp2-sp-rc-mlp-regather", L8W(**tp2, **mlp), peft=lora(True)))
    full = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    e.append(run("lora-l8w-tp2-sp-rc-full-regather", L8W(**tp2, **full), peft=lora(True)))
    pp2 = dict(num_layers=8, pipeline_model_parallel_size=2, **tp2)
    for regather in (False, True):
        suffix = "-regather" if regather else ""
        e.append(run(f"lora-l8w-pp2-m4-first{suffix}", L8W(**pp2), microbatches=4, peft=lora(regather)))
        e.append(
            run(f"lora-l8w-pp2-m4-last{suffix}", L8W(**pp2), microbatches=4, stage=-1, peft=lora(regather))
        )
    e.append(run("lora-l1b-tp2-sp-mbs2-regather", L1B(**tp2), mbs=2, peft=lora(True)))
    e.append(run("lora-gpt-tp2-sp-unfused-regather", GPT(**tp2), peft=lora(True)))
    e.append(run("lora-l8w-tp2-sp-do-dp2", L8W(**tp2), dp=2, distopt=True, peft=lora(True)))
    a2a = dict(moe_token_dispatcher_type="alltoall")
    mx = dict(expert_model_parallel_size=2, **tp2, **a2a)
    e.append(run("lora-mx-tp2-sp-ep2", MX(**mx), dp=2, peft=lora()))
    e.append(run("lora-mx-tp2-sp-ep2-regather", MX(**mx), dp=2, peft=lora(True)))
    e.append(
        run("lora-qm-tp2-sp-ep4-regather", QM(expert_model_parallel_size=4, **tp2), dp=4, peft=lora(True))
    )
    e.append(
        run("lora-dsl-tp2-sp-ep4-regather", DSL(expert_model_parallel_size=4, **tp2), dp=4, peft=lora(True))
    )
    # Re-gather on a Qwen3-8B-shaped model at sequence 8192 (README "LoRA re-gather").
    for tp in (2, 4):
        for regather in (False, True):
            suffix = "-regather" if regather else ""
            q8 = Q8(tensor_model_parallel_size=tp, **SP)
            e.append(run(f"lora-q8-tp{tp}-sp-s8k{suffix}", q8, peft=lora(regather)))
    # The same at Qwen3-8B's full depth (36 layers), where the one gather buffer re-gather
    # allocates per rank weighs little against 36 layers of savings.
    for tp in (2, 4):
        for regather in (False, True):
            suffix = "-regather" if regather else ""
            q8 = Q8(num_layers=36, tensor_model_parallel_size=tp, **SP)
            e.append(run(f"lora-q8d36-tp{tp}-sp-s8k{suffix}", q8, peft=lora(regather), solo=tp == 2))
    return e


def _defaults() -> list[Entry]:
    """The fusions Megatron-LM and Megatron-Bridge turn on by default, run with Megatron's own
    CUDA kernels (built from apex's sources on the GPU machine): the fused scale-mask-softmax on
    both sides of its availability rule (sequence above 4096; heads per rank times micro-batch
    not a multiple of 4), the torch softmax in bf16, bias-activation fusion with dropout 0 (as the
    Llama and Qwen recipes run), native cross-entropy fusion on large vocabularies and
    gradient-accumulation fusion. Ids ``def-*``; their split follows the sha1 rule."""
    e = []
    msf = dict(attention_backend="unfused", masked_softmax_fusion=True)
    do0 = dict(hidden_dropout=0.0, attention_dropout=0.0)
    tp2sp = dict(tensor_model_parallel_size=2, **SP)
    ce = dict(cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="native")
    gaf = dict(gradient_accumulation_fusion=True)
    baf = dict(bias_activation_fusion=True)
    # Fused softmax kernel in effect (16 < s <= 4096, heads per rank x micro-batch % 4 == 0).
    e.append(run("def-l1b-tp1-msf-s2k", L1B(seq_length=2048, **msf), smoke=True))
    e.append(run("def-l1b-tp2-sp-msf-s4k", L1B(**msf, **tp2sp)))
    e.append(run("def-l8w-tp4-sp-msf-s4k", L8W(tensor_model_parallel_size=4, **SP, **msf)))
    e.append(run("def-l8w-tp8-sp-msf-s4k", L8W(tensor_model_parallel_size=8, **SP, **msf)))
    e.append(run("def-gpt-tp1-msf-s2k", GPT(**msf), smoke=True))
    e.append(run("def-gpt-tp2-sp-msf-do0", GPT(**msf, **do0, **tp2sp)))
    e.append(run("def-gpt-tp8-msf-mbs2", GPT(tensor_model_parallel_size=8, **msf), mbs=2))
    e.append(
        run(
            "def-gpt-tp2-msf-rc-coreattn",
            GPT(tensor_model_parallel_size=2, recompute_granularity="selective", **msf),
        )
    )
    e.append(
        run(
            "def-l1b-pp2-m2-msf-last",
            L1B(
                num_layers=8, pipeline_model_parallel_size=2, share_embeddings_and_output_weights=False, **msf
            ),
            microbatches=2,
            stage=-1,
        )
    )
    e.append(
        run(
            "def-g12-tp4-msf-mbs4",
            GPT(
                hidden_size=1536,
                num_attention_heads=12,
                ffn_hidden_size=6144,
                tensor_model_parallel_size=4,
                **msf,
            ),
            mbs=4,
        )
    )
    # Kernel not available: the torch softmax runs although fusion is asked for.
    e.append(run("def-gpt-tp8-msf-heads2", GPT(tensor_model_parallel_size=8, **msf), smoke=True))
    e.append(
        run(
            "def-g12-tp4-msf-heads3",
            GPT(
                hidden_size=1536,
                num_attention_heads=12,
                ffn_hidden_size=6144,
                tensor_model_parallel_size=4,
                **msf,
            ),
        )
    )
    e.append(
        run(
            "def-l8w-tp4-sp-msf-s8k",
            L8W(seq_length=8192, tensor_model_parallel_size=4, **SP, **msf),
            smoke=True,
        )
    )
    e.append(run("def-l1b-tp4-sp-msf-s8k", L1B(seq_length=8192, tensor_model_parallel_size=4, **SP, **msf)))
    # The torch softmax in bf16 (attention_softmax_in_fp32 off).
    e.append(
        run(
            "def-gpt-tp2-softmax-bf16",
            GPT(tensor_model_parallel_size=2, attention_backend="unfused", attention_softmax_in_fp32=False),
        )
    )
    e.append(
        run(
            "def-l1b-tp1-softmax-bf16-s2k",
            L1B(seq_length=2048, attention_backend="unfused", attention_softmax_in_fp32=False),
        )
    )
    e.append(
        run(
            "def-l8w-tp4-msf-s8k-softmax-bf16",
            L8W(seq_length=8192, tensor_model_parallel_size=4, attention_softmax_in_fp32=False, **msf),
        )
    )
    # Bias-activation fusion with dropout 0.
    e.append(run("def-l8w-tp2-sp-baf", L8W(**baf, **tp2sp), smoke=True))
    e.append(run("def-l1b-tp1-baf", L1B(**baf)))
    e.append(run("def-l8w-tp2-sp-baf-mbs2", L8W(seq_length=2048, **baf, **tp2sp), mbs=2))
    e.append(
        run("def-gpt-tp2-baf-do0", GPT(tensor_model_parallel_size=2, attention_backend="flash", **baf, **do0))
    )
    e.append(
        run(
            "def-mx-ep4-baf",
            MX(expert_model_parallel_size=4, moe_token_dispatcher_type="alltoall", **baf),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "def-qm-tp2-sp-ep4-baf",
            QM(expert_model_parallel_size=4, expert_tensor_parallel_size=1, **baf, **tp2sp),
            dp=4,
            distopt=True,
        )
    )
    # Native cross-entropy fusion on the last stage (Llama 3 and Qwen vocabularies).
    e.append(run("def-l8w-tp1-ce", L8W(**ce), dp=4, distopt=True, smoke=True))
    e.append(run("def-l8w-tp2-sp-ce", L8W(**ce, **tp2sp)))
    e.append(
        run(
            "def-l8w-pp2-m2-ce-v152k-last",
            L8W(num_layers=8, pipeline_model_parallel_size=2, vocab_size=151936, **ce, **tp2sp),
            microbatches=2,
            stage=-1,
        )
    )
    e.append(run("def-l1b-tp1-ce-tied", L1B(**ce)))
    e.append(run("def-gpt-tp1-ce", GPT(attention_backend="flash", **ce)))
    e.append(
        run(
            "def-l8w-tp4-sp-ce-mbs2-v152k",
            L8W(vocab_size=151936, tensor_model_parallel_size=4, **SP, **ce),
            mbs=2,
        )
    )
    # Gradient-accumulation fusion (fp32 and bf16 gradient buffers).
    e.append(run("def-l8w-tp2-sp-gaf", L8W(**gaf, **tp2sp), smoke=True))
    e.append(run("def-l8w-tp2-sp-gaf-gbf16", L8W(**gaf, **tp2sp), grad_fp32=False))
    e.append(
        run(
            "def-l1b-pp2-m2-gaf-first",
            L1B(
                num_layers=8, pipeline_model_parallel_size=2, share_embeddings_and_output_weights=False, **gaf
            ),
            microbatches=2,
        )
    )
    # Everything a Bridge Llama recipe turns on at once.
    e.append(run("def-l8w-tp2-sp-flash-all", L8W(**baf, **ce, **gaf, **tp2sp), dp=2, distopt=True))
    e.append(
        run(
            "def-l8w-tp4-sp-unfused-all",
            L8W(tensor_model_parallel_size=4, **SP, **msf, **baf, **ce, **gaf),
            dp=2,
            distopt=True,
        )
    )
    e.append(
        run(
            "def-qwen3-8b-tp2-sp-pp2-all-last",
            _model("qwen3-8b", seq_length=4096, pipeline_model_parallel_size=2, **tp2sp, **baf, **ce, **gaf),
            dp=4,
            microbatches=4,
            distopt=True,
            stage=-1,
            solo=True,
        )
    )
    # Deferred output-layer weight gradients cannot run on the local spec: megatron-core 0.19.2's
    # ColumnParallelLinear appends every layer's input to an embedding buffer only the output
    # layer has (memtune measure refuses it); the estimate models it from the source.
    # Token dropping at a capacity factor, with and without padding to capacity.
    a2a = dict(moe_token_dispatcher_type="alltoall")
    e.append(
        run(
            "def-mx-ep4-cap1-pad",
            MX(
                expert_model_parallel_size=4,
                moe_expert_capacity_factor=1.0,
                moe_pad_expert_input_to_capacity=True,
                **a2a,
            ),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "def-qm-ep4-cap1.5-pad",
            QM(
                expert_model_parallel_size=4,
                moe_expert_capacity_factor=1.5,
                moe_pad_expert_input_to_capacity=True,
                **a2a,
            ),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "def-qm-ep4-cap0.5-drop",
            QM(expert_model_parallel_size=4, moe_expert_capacity_factor=0.5, **a2a),
            dp=4,
            distopt=True,
        )
    )
    e.append(
        run(
            "def-mx-ep4-cap2-drop-position",
            MX(
                expert_model_parallel_size=4,
                moe_expert_capacity_factor=2.0,
                moe_token_drop_policy="position",
                **a2a,
            ),
            dp=4,
            distopt=True,
        )
    )
    return e


def _precision() -> list[Entry]:
    """fp32 and fp16 jobs (``prec-``): activations follow the weights' dtype
    (``Derived.activation_dtype``), dense and MoE, flash and unfused attention (fp32 runs are
    unfused: PyTorch's flash kernels need half precision), fp16 with its softmax cast and on a
    last pipeline stage. Defined before any was measured, split by the hash rule; the fp32 ones
    are measured, the fp16 ones (``-ls1``) not yet."""
    e = []
    fp32, fp16 = dict(bf16=False), dict(bf16=False, fp16=True)
    unfused_2k = dict(attention_backend="unfused", seq_length=2048)
    e.append(run("prec-gpt-tp1-fp32-unfused", GPT(**fp32)))
    e.append(
        run("prec-l1b-tp2-sp-fp32-unfused-s2k", L1B(tensor_model_parallel_size=2, **SP, **fp32, **unfused_2k))
    )
    e.append(
        run(
            "prec-qm-ep4-fp32-unfused-s2k",
            QM(expert_model_parallel_size=4, **fp32, **unfused_2k),
            dp=4,
            solo=True,
        )
    )
    pp2 = dict(num_layers=8, pipeline_model_parallel_size=2, pipeline_dtype="fp16", **fp16)
    # fp16 jobs start the loss scaler at 1: at Megatron's default, 2**32, every measured step
    # overflowed and was skipped, so Adam's state never existed (README.md, "fp16 runs left out";
    # those five runs' records are benchmarks/gpu/results/prec-fp16-no-step-h200.results.jsonl).
    scale_one = dict(initial_loss_scale=1.0)
    e.append(run("prec-l1b-tp1-fp16-s4k-ls1", L1B(**fp16), optimizer=scale_one))
    e.append(
        run(
            "prec-gpt-tp2-sp-fp16-unfused-ls1",
            GPT(tensor_model_parallel_size=2, **SP, **fp16),
            optimizer=scale_one,
        )
    )
    e.append(
        run(
            "prec-qm-ep4-fp16-ls1",
            QM(expert_model_parallel_size=4, **fp16),
            dp=4,
            solo=True,
            optimizer=scale_one,
        )
    )
    e.append(run("prec-mx-ep4-fp16-ls1", MX(expert_model_parallel_size=4, **fp16), dp=4, optimizer=scale_one))
    e.append(
        run(
            "prec-l8w-pp2-m4-fp16-last-ls1",
            L8W(**pp2),
            microbatches=4,
            stage=-1,
            solo=True,
            optimizer=scale_one,
        )
    )
    return e


def _lora_moe() -> list[Entry]:
    """LoRA on MoE models with adapters on attention only, on the experts only and on both
    (``lora-*``): frozen expert linears keep no input (megatron-core 0.19.2). Defined before any
    was measured, split by the hash rule; not yet measured (no GPU in the session that defined
    them). The four earlier LoRA-on-MoE runs (``_lora``) all adapt the experts too. MLA has no
    linear_qkv: there attention-only LoRA adapts linear_proj and the shared experts stay frozen."""
    tp2 = dict(tensor_model_parallel_size=2, **SP)
    shapes = {
        "mx-tp2-sp-ep2": (MX(expert_model_parallel_size=2, moe_token_dispatcher_type="alltoall", **tp2), 2),
        "qm-tp2-sp-ep4": (QM(expert_model_parallel_size=4, **tp2), 4),
        "dsl-tp2-sp-ep4": (DSL(expert_model_parallel_size=4, **tp2), 4),
    }
    targets = {
        "-attention": ATTENTION,
        "-experts": ["linear_fc1", "linear_fc2"],
        "-attention-fc2": [*ATTENTION, "linear_fc2"],
        "": None,  # every linear
    }
    chosen = {
        "mx-tp2-sp-ep2": ("-attention", "-experts", "-attention-fc2"),
        "qm-tp2-sp-ep4": ("-attention", "-experts", ""),
        "dsl-tp2-sp-ep4": ("-attention", "-experts"),
    }
    e = []
    for shape, suffixes in chosen.items():
        model, dp = shapes[shape]
        for suffix in suffixes:
            target = targets[suffix]
            peft = lora() if target is None else lora(target_modules=target)
            e.append(run(f"lora-{shape}{suffix}", model, dp=dp, peft=peft))
    return e


def _lora_scale() -> list[Entry]:
    """Where LoRA's alpha/dim multiplies (``lora-scale-*``): each shape twice, with the scale on
    the full-width output (``-output``, Megatron-Bridge before its PR #5906) and on the rank-sized
    bottleneck (``-bottleneck``, memtune.peft's default), at long sequences where the full-width
    transient the output position adds is large: TP 1 and TP 2 with SP (re-gather on and off),
    the widest adapter alone (fc1), micro-batch 2. Defined before any was measured, split by the
    hash rule (``split_of``)."""
    tp2 = dict(tensor_model_parallel_size=2, **SP)
    shapes = {
        "l8w-tp1-s16k": (L8W(seq_length=16384), {}),
        "l8w-tp2-sp-s16k": (L8W(seq_length=16384, **tp2), {}),
        "l8w-tp2-sp-s16k-regather": (L8W(seq_length=16384, **tp2), {"regather": True}),
        "l8w-tp1-s16k-fc1": (L8W(seq_length=16384), {"target_modules": ["linear_fc1"]}),
        "l1b-tp1-mbs2-s8k": (L1B(seq_length=8192), {}),
    }
    e = []
    for shape, (model, options) in shapes.items():
        for position in ("output", "bottleneck"):
            mbs = 2 if "mbs2" in shape else 1
            e.append(
                run(
                    f"lora-scale-{shape}-{position}",
                    model,
                    mbs=mbs,
                    peft=lora(scale_position=position, **options),
                )
            )
    return e


def _mla_recompute() -> list[Entry]:
    """Multi-latent attention under each recompute choice (``mla-``): none, ``mla_up_proj``
    (which frees q, k and v once the core attention has run), ``core_attn``, both, with ``moe``,
    full recompute (uniform and block), a query low-rank path, TP 2 with SP and a first
    pipeline stage. ``layernorm`` is left out: it fails on the local spec (check REC015).
    DeepSeek-V2-Lite-like, 6 layers (the first dense) where activations set the peak. Defined
    before any was measured, split by the hash rule; not yet measured (no GPU in the session
    that defined them)."""
    e = []
    six = dict(num_layers=6, moe_layer_freq=[0, 1, 1, 1, 1, 1], expert_model_parallel_size=4)

    def selective(*modules):
        return dict(recompute_granularity="selective", recompute_modules=list(modules))

    def mla(run_id, model, **kw):
        return run(run_id, model, dp=4, distopt=True, **kw)

    e.append(mla("mla-dsl6-ep4-rc-none", DSL(**six)))
    e.append(mla("mla-dsl6-ep4-rc-upproj", DSL(**six, **selective("mla_up_proj"))))
    e.append(mla("mla-dsl6-ep4-rc-coreattn", DSL(**six, **selective("core_attn"))))
    e.append(mla("mla-dsl6-ep4-rc-upproj-coreattn", DSL(**six, **selective("mla_up_proj", "core_attn"))))
    e.append(mla("mla-dsl6-ep4-rc-upproj-moe", DSL(**six, **selective("mla_up_proj", "moe"))))
    full = dict(recompute_granularity="full")
    e.append(
        mla(
            "mla-dsl6-ep4-rc-full-uniform1",
            DSL(**six, **full, recompute_method="uniform", recompute_num_layers=1),
        )
    )
    e.append(
        mla(
            "mla-dsl6-ep4-rc-full-block3",
            DSL(**six, **full, recompute_method="block", recompute_num_layers=3),
        )
    )
    e.append(mla("mla-dslq6-ep4-rc-upproj", DSL(**six, q_lora_rank=768, **selective("mla_up_proj"))))
    e.append(
        mla(
            "mla-dsl6-tp2-sp-ep4-rc-upproj",
            DSL(**six, tensor_model_parallel_size=2, **SP, **selective("mla_up_proj")),
        )
    )
    e.append(
        mla(
            "mla-dsl6-pp2-ep4-m4-rc-upproj-first",
            DSL(**six, pipeline_model_parallel_size=2, **selective("mla_up_proj")),
            microbatches=4,
        )
    )
    return e


def _microbatch_sweep() -> list[Entry]:
    """Micro-batch sizes 1 to 8 at one shape each (``mbs-``): the per-microbatch fixed cost and
    the GEMM efficiency at larger M that the step model's compute time must follow
    (benchmarks/compute_accuracy.py times them alone). Defined before any was measured, split by
    the hash rule."""
    e = []
    for mbs in (1, 2, 4, 8):
        e.append(run(f"mbs-l1b-tp1-s1k-mbs{mbs}", L1B(seq_length=1024), mbs=mbs))
    for mbs in (1, 4, 8):
        e.append(
            run(
                f"mbs-l8w-tp4-sp-s2k-mbs{mbs}",
                L8W(tensor_model_parallel_size=4, seq_length=2048, **SP),
                mbs=mbs,
            )
        )
    for mbs in (2, 8):
        e.append(
            run(
                f"mbs-gpt-tp2-unfused-s1k-mbs{mbs}",
                GPT(tensor_model_parallel_size=2, seq_length=1024),
                mbs=mbs,
            )
        )
    for mbs in (1, 4):
        e.append(
            run(f"mbs-qm-ep8-s1k-mbs{mbs}", QM(expert_model_parallel_size=8, seq_length=1024), dp=8, mbs=mbs)
        )
    return e


def _compute_timing() -> list[Entry]:
    """The step model's second set of compute timings (``ctime-``): dense and MoE shapes at
    MBS 1-8, every recompute choice, VPP chunks, the distributed optimizer, LoRA and both
    offloads, a Llama 3 70B width among them, each timed alone with forward+backward and the
    optimizer step recorded apart (benchmarks/compute_accuracy.py). Defined after the step
    model of commit a1d5dd8 and before any was measured, split by the hash rule."""
    e = []
    tp2, tp4 = dict(tensor_model_parallel_size=2, **SP), dict(tensor_model_parallel_size=4, **SP)
    full = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    block = dict(recompute_granularity="full", recompute_method="block", recompute_num_layers=2)

    def selective(*modules):
        return dict(recompute_granularity="selective", recompute_modules=list(modules))

    def l70w(**kw):
        return _model("llama3-70b", **{"num_layers": 2, "seq_length": 4096, **kw})

    e.append(run("ctime-l8w-tp1-s4k", L8W()))
    e.append(run("ctime-l8w-tp2-sp-s8k-mbs2", L8W(**tp2, seq_length=8192), mbs=2))
    e.append(run("ctime-l8w-tp4-sp-s4k-mbs4", L8W(**tp4), mbs=4))
    e.append(run("ctime-l8w-tp1-s2k-mbs8", L8W(seq_length=2048), mbs=8))
    e.append(run("ctime-l8w-tp2-sp-m4", L8W(**tp2), microbatches=4))
    e.append(run("ctime-l8w-tp2-sp-rc-mlp", L8W(**tp2, **selective("mlp"))))
    e.append(run("ctime-l8w-tp2-sp-rc-coreattn-m2", L8W(**tp2, **selective("core_attn")), microbatches=2))
    e.append(run("ctime-l8w-tp4-sp-rc-full-uniform1", L8W(**tp4, **full)))
    e.append(run("ctime-l8w-tp2-sp-rc-full-block2", L8W(**tp2, **block)))
    e.append(run("ctime-l1b-tp1-s8k-mbs2", L1B(seq_length=8192), mbs=2))
    e.append(run("ctime-l1b-tp2-sp-s4k-mbs4", L1B(**tp2), mbs=4))
    e.append(run("ctime-l1b-tp1-dp4-do-m4", L1B(), dp=4, distopt=True, microbatches=4))
    e.append(run("ctime-q8-tp2-sp-s4k", Q8(**tp2, seq_length=4096)))
    e.append(run("ctime-q8-tp4-sp-s8k-rc-coreattn", Q8(**tp4, **selective("core_attn"))))
    e.append(run("ctime-l70w-tp8-sp-s4k", l70w(tensor_model_parallel_size=8, **SP)))
    e.append(run("ctime-l70w-tp4-sp-s4k-m2", l70w(**tp4), microbatches=2))
    e.append(run("ctime-gpt-tp1-flash-s2k-mbs4", GPT(attention_backend="flash"), mbs=4))
    e.append(run("ctime-gpt-tp2-sp-unfused-s2k", GPT(**tp2)))
    pp2 = dict(num_layers=8, pipeline_model_parallel_size=2, **tp2)
    vpp = dict(num_layers=8, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2, **tp2)
    e.append(run("ctime-l8w-pp2-m4-first", L8W(**pp2), microbatches=4))
    e.append(run("ctime-l8w-pp2-vpp2-m4-last", L8W(**vpp), microbatches=4, stage=-1))
    e.append(
        run(
            "ctime-l8w-pp4-vpp2-m8-first",
            L8W(**{**vpp, "pipeline_model_parallel_size": 4, "num_layers": 16}),
            microbatches=8,
        )
    )
    a2a = dict(moe_token_dispatcher_type="alltoall")
    e.append(run("ctime-mx-ep4-s4k-mbs2", MX(expert_model_parallel_size=4, **a2a), dp=4, mbs=2))
    e.append(run("ctime-mx-tp2-sp-ep4", MX(expert_model_parallel_size=4, **tp2, **a2a), dp=4))
    e.append(run("ctime-qm-ep8-s4k-do", QM(expert_model_parallel_size=8, **a2a), dp=8, distopt=True))
    e.append(run("ctime-qm-ep4-rc-moe", QM(expert_model_parallel_size=4, **a2a, **selective("moe")), dp=4))
    e.append(run("ctime-dsl-ep8-mbs2", DSL(expert_model_parallel_size=8), dp=8, mbs=2))
    e.append(
        run(
            "ctime-dsl-tp2-sp-ep4-rc-upproj",
            DSL(expert_model_parallel_size=4, **tp2, **selective("mla_up_proj")),
            dp=4,
        )
    )
    e.append(run("ctime-lora-l8w-tp2-sp-s8k", L8W(**tp2, seq_length=8192), peft=lora()))
    e.append(run("ctime-lora-q8-tp1-s4k-regather", Q8(seq_length=4096), peft=lora(True)))
    e.append(
        run(
            "ctime-aoff-l8w-tp2-sp-all",
            L8W(
                **tp2,
                num_layers=8,
                vocab_size=32768,
                fine_grained_activation_offloading=True,
                offload_modules=["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"],
            ),
            dp=2,
            distopt=True,
            mbs=2,
        )
    )
    offloaded = run("ctime-ooff-l8w-tp2-sp-dp2-f05", L8W(**tp2), dp=2, distopt=True)
    config = copy.deepcopy(offloaded.config)
    config["optimizer"].update(
        use_precision_aware_optimizer=True, optimizer_cpu_offload=True, optimizer_offload_fraction=0.5
    )
    job = validate(config)
    e.append(Entry(offloaded.id, job.model_dump(mode="json", exclude_defaults=True), offloaded.rank))
    return e


def _compute_relations() -> list[Entry]:
    """The step model's compute relations that neither the shared H200 half
    (``/work/shared/reference/compute-time-h200``) nor the earlier families time (``crel-``):
    multi-token prediction of depth 0-2 (dense and MoE), VPP 1-8 on a middle stage, sequence
    2k-16k and micro-batch 1-8 at fixed tokens, Megatron's unfused attention (torch softmax
    path, with and without ``core_attn`` recompute) beside flash, bf16/fp16/fp32, the
    distributed optimizer's step over few and many tensors, selective recompute on host-bound
    ranks, and the output layer by vocabulary. Each timed alone with forward+backward and the
    optimizer step apart (``benchmarks/gpu/compute_relations.py``). Defined before any was
    measured, split by the hash rule. Not timed, because the local spec cannot build them on
    megatron-core 0.19.2 without Transformer Engine: selective ``layernorm`` and ``moe_act``
    recompute (output-discarding checkpoints call TE; ``moe_act`` also needs grouped-GEMM
    experts), and FP8 (Megatron-Core's FP8 paths are TE's)."""
    e = []
    tp2, tp8 = dict(tensor_model_parallel_size=2, **SP), dict(tensor_model_parallel_size=8, **SP)
    unfused = dict(attention_backend="unfused")

    def selective(*modules):
        return dict(recompute_granularity="selective", recompute_modules=list(modules))

    # multi-token prediction: depth 0, 1, 2 on a dense rank; 0 and 1 on a host-bound MoE rank
    for depth in (0, 1, 2):
        mtp = {"mtp_num_layers": depth} if depth else {}
        e.append(run(f"crel-mtp{depth}-l8w-tp2-sp-m2", L8W(**tp2, **mtp), microbatches=2))
    for depth in (0, 1):
        mtp = {"mtp_num_layers": depth} if depth else {}
        qm = QM(expert_model_parallel_size=8, seq_length=2048, **mtp)
        e.append(run(f"crel-mtp{depth}-qm-ep8-s2k-m2", qm, dp=8, microbatches=2))
    # VPP 1-8 on a middle stage of 8 layers (chunks of 8, 4, 2, 1 layers); a narrower model at 1 and 4
    for vpp in (1, 2, 4, 8):
        virtual = {"virtual_pipeline_model_parallel_size": vpp} if vpp > 1 else {}
        stack = dict(num_layers=32, pipeline_model_parallel_size=4, **virtual)
        e.append(run(f"crel-vpp{vpp}-l8w-pp4-mid-m8", L8W(**tp2, **stack), microbatches=8, stage=1))
    for vpp in (1, 4):
        virtual = {"virtual_pipeline_model_parallel_size": vpp} if vpp > 1 else {}
        stack = dict(num_layers=32, pipeline_model_parallel_size=4, **virtual)
        e.append(run(f"crel-vpp{vpp}-l1b-pp4-mid-m8", L1B(**stack), microbatches=8, stage=1))
    # sequence 2k-16k at 16,384 tokens per step (flash); micro-batch 1-8 at the same tokens, 2k
    for seq, m in ((2048, 8), (4096, 4), (8192, 2), (16384, 1)):
        e.append(run(f"crel-seq{seq // 1024}k-l8w-tp2-sp-m{m}", L8W(**tp2, seq_length=seq), microbatches=m))
    for mbs in (2, 4, 8):
        e.append(
            run(
                f"crel-mbs{mbs}-l8w-tp2-sp-s2k-m{8 // mbs}",
                L8W(**tp2, seq_length=2048),
                mbs=mbs,
                microbatches=8 // mbs,
            )
        )
    # unfused attention (Megatron's DotProductAttention, torch softmax in fp32) at 8,192 tokens
    # per step, flash beside it, core_attn recompute, fp16 and fp32, micro-batch 4
    for seq, m in ((1024, 8), (2048, 4), (4096, 2)):
        e.append(
            run(f"crel-unfused-l1b-s{seq // 1024}k-m{m}", L1B(seq_length=seq, **unfused), microbatches=m)
        )
    e.append(run("crel-flash-l1b-s2k-m4", L1B(seq_length=2048), microbatches=4))
    e.append(run("crel-unfused-l1b-s2k-mbs4", L1B(seq_length=2048, **unfused), mbs=4))
    e.append(
        run(
            "crel-unfused-rc-coreattn-l1b-s2k-m4",
            L1B(seq_length=2048, **unfused, **selective("core_attn")),
            microbatches=4,
        )
    )
    e.append(run("crel-unfused-l8w-tp2-sp-s4k-m2", L8W(**tp2, **unfused), microbatches=2))
    for name, precision, optimizer in (
        ("fp16", dict(bf16=False, fp16=True), {"initial_loss_scale": 1.0}),
        ("fp32", dict(bf16=False), None),
    ):
        e.append(
            run(
                f"crel-prec-{name}-l1b-s2k-m4",
                L1B(seq_length=2048, **unfused, **precision),
                microbatches=4,
                optimizer=optimizer,
            )
        )
    # the distributed optimizer's step: one shard of all (DP 1) or an eighth; many expert tensors
    e.append(run("crel-opt-l1b-do-dp1", L1B(seq_length=2048), distopt=True))
    e.append(run("crel-opt-l1b-do-dp8", L1B(seq_length=2048), dp=8, distopt=True))
    e.append(
        run("crel-opt-qm-ep2-do-dp8", QM(expert_model_parallel_size=2, seq_length=2048), dp=8, distopt=True)
    )
    # selective recompute on host-bound ranks: 16 sequential experts per layer; a TP-8 dense shard
    # (crel-mtp0-qm-ep8-s2k-m2 above is the MoE rank without recompute)
    qm = QM(expert_model_parallel_size=8, seq_length=2048, **selective("moe"))
    e.append(run("crel-rc-moe-qm-ep8-s2k-m2", qm, dp=8, microbatches=2))
    for rc, modules in (("none", ()), ("mlp", ("mlp",))):
        recompute = selective(*modules) if modules else {}
        e.append(
            run(f"crel-rc-{rc}-l8w-tp8-sp-s2k-m2", L8W(**tp8, seq_length=2048, **recompute), microbatches=2)
        )
    # the output layer and loss by vocabulary, two layers
    for vocab in (32000, 128256, 256000):
        e.append(
            run(
                f"crel-vocab{vocab // 1000}k-l8w-tp2-sp-l2-m2",
                L8W(**tp2, num_layers=2, vocab_size=vocab),
                microbatches=2,
            )
        )
    return e


def _compute_relations_check() -> list[Entry]:
    """A fresh check of the step model's relations at a frozen model (``cchk-``): new shapes for
    what the ``crel-`` runs fitted (MTP, VPP on first and last stages, unfused attention, sequence
    and micro-batch at fixed tokens, the distributed optimizer, selective recompute, fp16, the
    output layer), defined on 2026-12-06 after the model was frozen at 64db3cf and before any was
    measured, split by the hash rule. The tune runs of a batch only calibrate that batch's
    machine (its kernel factor, from their traced kernels): the device tool lends whichever GPU
    it has, and its kernels' speed inside a step is the machine's, not the model's."""
    e = []
    tp2, tp4 = dict(tensor_model_parallel_size=2, **SP), dict(tensor_model_parallel_size=4, **SP)
    unfused = dict(attention_backend="unfused")

    def selective(*modules):
        return dict(recompute_granularity="selective", recompute_modules=list(modules))

    e.append(run("cchk-mtp1-l1b-s2k-m4", L1B(seq_length=2048, mtp_num_layers=1), microbatches=4))
    e.append(run("cchk-mtp1-l8w-tp4-sp-m2", L8W(**tp4, mtp_num_layers=1), microbatches=2))
    e.append(run("cchk-mtp2-l1b-s2k-m4", L1B(seq_length=2048, mtp_num_layers=2), microbatches=4))
    for vpp, stage in ((1, 0), (2, 0), (4, 0), (1, -1), (2, -1), (4, -1)):
        virtual = {"virtual_pipeline_model_parallel_size": vpp} if vpp > 1 else {}
        stack = dict(num_layers=16, pipeline_model_parallel_size=2, **virtual)
        where = "first" if stage == 0 else "last"
        e.append(
            run(f"cchk-vpp{vpp}-l8w-tp2-pp2-{where}-m8", L8W(**tp2, **stack), microbatches=8, stage=stage)
        )
    e.append(run("cchk-unfused-l8w-tp2-sp-s2k-m4", L8W(**tp2, seq_length=2048, **unfused), microbatches=4))
    e.append(
        run(
            "cchk-unfused-rc-coreattn-l8w-tp2-sp-s4k-m2",
            L8W(**tp2, **unfused, **selective("core_attn")),
            microbatches=2,
        )
    )
    e.append(run("cchk-unfused-l1b-s3k-m2", L1B(seq_length=3072, **unfused), microbatches=2))
    for seq, m in ((1024, 16), (4096, 4), (8192, 2), (16384, 1)):
        e.append(run(f"cchk-seq{seq // 1024}k-l1b-m{m}", L1B(seq_length=seq), microbatches=m))
    for mbs in (2, 4):
        e.append(
            run(f"cchk-mbs{mbs}-l1b-s4k-m{4 // mbs}", L1B(seq_length=4096), mbs=mbs, microbatches=4 // mbs)
        )
    e.append(run("cchk-opt-l8w-tp2-sp-do-dp4", L8W(**tp2, seq_length=2048), dp=4, distopt=True))
    e.append(
        run("cchk-opt-qm-ep4-do-dp4", QM(expert_model_parallel_size=4, seq_length=2048), dp=4, distopt=True)
    )
    e.append(
        run("cchk-rc-mlp-l8w-tp2-sp-s2k-m2", L8W(**tp2, seq_length=2048, **selective("mlp")), microbatches=2)
    )
    e.append(
        run(
            "cchk-rc-moe-qm-ep4-s2k-m2",
            QM(expert_model_parallel_size=4, seq_length=2048, **selective("moe")),
            dp=4,
            microbatches=2,
        )
    )
    e.append(
        run(
            "cchk-prec-fp16-l8w-tp2-sp-s2k-m2",
            L8W(**tp2, seq_length=2048, bf16=False, fp16=True),
            microbatches=2,
            optimizer={"initial_loss_scale": 1.0},
        )
    )
    e.append(
        run(
            "cchk-vocab64k-l1b-l2-s2k-m4",
            L1B(num_layers=2, seq_length=2048, vocab_size=64000),
            microbatches=4,
        )
    )
    return e


def _compute_relations_check2() -> list[Entry]:
    """A second fresh check of the step model (``cchk2-``), defined on 2026-12-06 before any was
    measured and before the model it checks was frozen, split by the hash rule; its holdout is
    compared once, at the model frozen after the ``cchk-`` check's misses were worked on. New
    shapes across what the single-rank runs cover: flash attention at head dims 64 and 128 and
    sequences 2k-16k, VPP on first, middle and last stages of PP 2-4, host-bound MoE ranks, MTP
    on a dense and a MoE rank, micro-batch 2 and 8, unfused attention, full recompute, the
    optimizer step with and without the distributed optimizer, the output layer. As with
    ``cchk-``, the tune runs only calibrate the lent machine's kernel factor."""
    e = []
    tp2, tp4 = dict(tensor_model_parallel_size=2, **SP), dict(tensor_model_parallel_size=4, **SP)
    # flash attention: head dim 64 (L1B) and 128 (L8W) at long sequences
    e.append(run("cchk2-seq2k-l1b-m8", L1B(seq_length=2048), microbatches=8))
    e.append(run("cchk2-seq8k-l1b-mbs2", L1B(seq_length=8192), mbs=2))
    e.append(run("cchk2-seq12k-l1b-m1", L1B(seq_length=12288)))
    e.append(run("cchk2-seq8k-l8w-tp2-sp-m2", L8W(**tp2, seq_length=8192), microbatches=2))
    e.append(run("cchk2-seq16k-l8w-tp4-sp-m1", L8W(**tp4, seq_length=16384)))
    # VPP on first, middle and last stages
    for where, stage in (("first", 0), ("last", -1)):
        stack = dict(num_layers=16, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2)
        e.append(run(f"cchk2-vpp2-l8w-tp2-pp2-{where}-m4", L8W(**tp2, **stack), microbatches=4, stage=stage))
    for vpp, where, stage in ((2, "first", 0), (2, "last", -1), (1, "last", -1)):
        virtual = {"virtual_pipeline_model_parallel_size": vpp} if vpp > 1 else {}
        stack = dict(num_layers=16, pipeline_model_parallel_size=4, seq_length=2048, **virtual)
        e.append(run(f"cchk2-vpp{vpp}-l1b-pp4-{where}-m8", L1B(**stack), microbatches=8, stage=stage))
    stack = dict(num_layers=18, pipeline_model_parallel_size=3, virtual_pipeline_model_parallel_size=3)
    e.append(run("cchk2-vpp3-l8w-tp2-pp3-mid-m6", L8W(**tp2, **stack), microbatches=6, stage=1))
    # host-bound MoE ranks, MTP
    e.append(
        run(
            "cchk2-moe-qm-ep2-s2k-m2", QM(expert_model_parallel_size=2, seq_length=2048), dp=2, microbatches=2
        )
    )
    e.append(run("cchk2-moe-qm-ep4-s4k-m1", QM(expert_model_parallel_size=4), dp=4))
    e.append(run("cchk2-moe-mx-ep4-s4k-m2", MX(expert_model_parallel_size=4), dp=4, microbatches=2))
    e.append(
        run(
            "cchk2-mtp1-qm-ep4-s2k-m2",
            QM(expert_model_parallel_size=4, seq_length=2048, mtp_num_layers=1),
            dp=4,
            microbatches=2,
        )
    )
    e.append(
        run("cchk2-mtp1-l8w-tp2-sp-s2k-m4", L8W(**tp2, seq_length=2048, mtp_num_layers=1), microbatches=4)
    )
    # micro-batch, unfused attention, full recompute
    e.append(run("cchk2-mbs2-l8w-tp2-sp-s2k-m2", L8W(**tp2, seq_length=2048), mbs=2, microbatches=2))
    e.append(run("cchk2-mbs8-l1b-s1k-m1", L1B(seq_length=1024), mbs=8))
    e.append(
        run(
            "cchk2-unfused-l1b-s1k-mbs2-m2",
            L1B(seq_length=1024, attention_backend="unfused"),
            mbs=2,
            microbatches=2,
        )
    )
    full = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    e.append(run("cchk2-rc-full-l1b-s4k-m2", L1B(**full), microbatches=2))
    # the optimizer step, the output layer
    e.append(run("cchk2-opt-l1b-do-dp2", L1B(seq_length=2048), dp=2, distopt=True))
    e.append(run("cchk2-opt-l8w-tp4-sp-s2k", L8W(**tp4, seq_length=2048)))
    e.append(
        run(
            "cchk2-vocab152k-l1b-l2-s2k-m2",
            L1B(num_layers=2, seq_length=2048, vocab_size=152064),
            microbatches=2,
        )
    )
    return e


def _compute_relations_check3() -> list[Entry]:
    """A third fresh check of the step model (``cchk3-``), defined on 2026-12-06 before any was
    measured, after the model began pricing an H100 from the H100's own tables and before the
    model it checks was frozen; split by the hash rule, its holdout compared once. Shapes none of
    the earlier sets ran: a GPT-style block (LayerNorm, GeLU, biases, dropout) with flash and with
    unfused attention, TP 8 on a Llama 3 8B width, head dim 64 at 16k, micro-batches 4 at long and
    short sequences, VPP on a PP 2 first stage and a PP 2 last stage, a PP 4 middle stage without
    VPP, MTP of depth 2 and MTP on TP 4, MoE ranks of the three MoE shapes (EP 2-8, with TP, MLA),
    ``moe`` and ``core_attn`` selective recompute, full recompute by block, fp32 (unfused
    attention), the optimizer over many expert tensors, a 202k vocabulary. As with ``cchk-``, the
    tune runs only measure the lent machine (its kernels' and its flash attention's factors)."""
    e = []
    tp2, tp4, tp8 = ({"tensor_model_parallel_size": t, **SP} for t in (2, 4, 8))
    flash_gpt = dict(attention_backend="flash", hidden_dropout=0.0, attention_dropout=0.0)
    # dense blocks and shapes
    e.append(run("cchk3-gpt-flash-s2k-m4", GPT(**flash_gpt), microbatches=4))
    e.append(run("cchk3-gpt-tp2-sp-s4k-m2", GPT(**tp2, **flash_gpt, seq_length=4096), microbatches=2))
    e.append(run("cchk3-gpt-unfused-s1k-mbs4", GPT(seq_length=1024), mbs=4))
    e.append(run("cchk3-l8w-tp8-sp-s8k-m2", L8W(**tp8, seq_length=8192), microbatches=2))
    e.append(run("cchk3-l1b-s16k-mbs1-m2", L1B(seq_length=16384), microbatches=2))
    e.append(run("cchk3-l1b-s4k-mbs4-m2", L1B(), mbs=4, microbatches=2))
    e.append(run("cchk3-l8w-tp2-sp-s2k-mbs4-m4", L8W(**tp2, seq_length=2048), mbs=4, microbatches=4))
    # pipeline stages
    pp2v4 = dict(num_layers=16, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=4)
    e.append(run("cchk3-vpp4-l1b-pp2-first-m8", L1B(**pp2v4, seq_length=2048), microbatches=8, stage=0))
    pp2v2 = dict(num_layers=8, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2)
    e.append(run("cchk3-vpp2-l8w-tp4-pp2-last-m4", L8W(**tp4, **pp2v2), microbatches=4, stage=-1))
    pp4 = dict(num_layers=16, pipeline_model_parallel_size=4, seq_length=2048)
    e.append(run("cchk3-pp4-l8w-tp2-mid-m8", L8W(**tp2, **pp4), microbatches=8, stage=2))
    # MTP
    e.append(run("cchk3-mtp2-l1b-s2k-m4", L1B(seq_length=2048, mtp_num_layers=2), microbatches=4))
    e.append(run("cchk3-mtp1-l8w-tp4-sp-s4k-m2", L8W(**tp4, mtp_num_layers=1), microbatches=2))
    # MoE ranks
    e.append(run("cchk3-moe-qm-ep8-s4k-m2", QM(expert_model_parallel_size=8), dp=8, microbatches=2))
    e.append(
        run(
            "cchk3-moe-mx-tp2-sp-ep2-s2k-m2",
            MX(**tp2, expert_model_parallel_size=2, seq_length=2048),
            dp=2,
            microbatches=2,
        )
    )
    e.append(
        run(
            "cchk3-moe-dsl-ep4-s2k-m2",
            DSL(expert_model_parallel_size=4, seq_length=2048),
            dp=4,
            microbatches=2,
        )
    )
    e.append(run("cchk3-moe-qm-ep4-s2k-mbs2", QM(expert_model_parallel_size=4, seq_length=2048), dp=4, mbs=2))
    # recompute
    moe_rc = dict(recompute_granularity="selective", recompute_modules=["moe"])
    e.append(run("cchk3-rc-moe-qm-ep4-s4k-m1", QM(expert_model_parallel_size=4, **moe_rc), dp=4))
    attn_rc = dict(recompute_granularity="selective", recompute_modules=["core_attn"])
    e.append(run("cchk3-rc-coreattn-gpt-unfused-s2k-m2", GPT(**attn_rc), microbatches=2))
    block = dict(recompute_granularity="full", recompute_method="block", recompute_num_layers=2)
    e.append(run("cchk3-rc-block2-l8w-tp2-sp-s4k-m2", L8W(**tp2, **block), microbatches=2))
    # precision, the optimizer, the output layer
    e.append(
        run(
            "cchk3-prec-fp32-l1b-s1k-m2",
            L1B(bf16=False, seq_length=1024, attention_backend="unfused"),
            microbatches=2,
        )
    )
    e.append(
        run("cchk3-opt-mx-ep4-do-dp4", MX(expert_model_parallel_size=4, seq_length=2048), dp=4, distopt=True)
    )
    e.append(run("cchk3-opt-l8w-tp2-sp-do-dp8-s2k", L8W(**tp2, seq_length=2048), dp=8, distopt=True))
    e.append(
        run(
            "cchk3-vocab202k-l1b-l2-s2k-m2",
            L1B(num_layers=2, seq_length=2048, vocab_size=202048),
            microbatches=2,
        )
    )
    e.append(run("cchk3-l8w-tp4-sp-s2k-m8", L8W(**tp4, seq_length=2048), microbatches=8))
    return e


def _compute_relations_check4() -> list[Entry]:
    """A fourth fresh check of the step model (``cchk4-``), defined on 2026-12-06 before any
    was measured, with the model it checks frozen at the commit that adds it (LoRA's optimizer
    over the adapters, the adapters' host share and dropout backward priced); split by the hash
    rule, its holdout compared once. Shapes none of the earlier sets ran: Qwen3 8B's width at
    TP 2 and TP 4, Llama 3 8B's at TP 2 with sequence 8,192 and one microbatch, a 2,048-wide
    model at MBS 8 and at sequence 1,024, LoRA on Qwen3 8B's width at TP 2 (all four targets),
    on a 2,048-wide model with dropout, on Llama 3 8B's MLP alone; VPP 3 on a PP 3 middle stage,
    a PP 4 last stage at TP 2; MTP of depth 1 at sequence 8,192; MoE ranks at EP 2 with MBS 2,
    Mixtral's width at EP 8, the MLA+MoE shape at TP 2; ``mlp`` and ``core_attn``
    selective recompute, full recompute of one layer uniformly; the distributed optimizer at DP
    4 on a MoE rank; unfused attention at sequence 4,096; fine-grained offload of
    ``qkv_linear``. As with ``cchk-``, the tune runs only measure the lent machine (its kernels'
    and its flash attention's factors); every run records the host's launch speed."""
    e = []
    tp2, tp4 = ({"tensor_model_parallel_size": t, **SP} for t in (2, 4))
    # dense shapes
    e.append(run("cchk4-q8-tp2-sp-s4k-m2", Q8(**tp2, seq_length=4096), microbatches=2))
    e.append(run("cchk4-q8-tp4-sp-s8k-m1", Q8(**tp4)))
    e.append(run("cchk4-l8w-tp2-sp-s8k-m1", L8W(**tp2, seq_length=8192)))
    e.append(run("cchk4-l1b-s1k-mbs8-m1", L1B(seq_length=1024), mbs=8))
    e.append(run("cchk4-l1b-s1k-m8", L1B(seq_length=1024), microbatches=8))
    # LoRA
    e.append(run("cchk4-lora-q8-tp2-sp-s4k-m2", Q8(**tp2, seq_length=4096), microbatches=2, peft=lora()))
    e.append(
        run("cchk4-lora-l1b-drop-s4k-m2", L1B(), microbatches=2, peft=lora(dim=16, alpha=16, dropout=0.1))
    )
    e.append(
        run(
            "cchk4-lora-l8w-mlp-s4k-m2",
            L8W(),
            microbatches=2,
            peft=lora(target_modules=["linear_fc1", "linear_fc2"]),
        )
    )
    # pipeline stages
    pp3v3 = dict(num_layers=18, pipeline_model_parallel_size=3, virtual_pipeline_model_parallel_size=3)
    e.append(run("cchk4-vpp3-l1b-pp3-mid-m6", L1B(**pp3v3, seq_length=2048), microbatches=6, stage=1))
    pp4 = dict(num_layers=8, pipeline_model_parallel_size=4, seq_length=2048)
    e.append(run("cchk4-pp4-l8w-tp2-last-m8", L8W(**tp2, **pp4), microbatches=8, stage=-1))
    # MTP
    e.append(run("cchk4-mtp1-l1b-s8k-m1", L1B(seq_length=8192, mtp_num_layers=1)))
    # MoE ranks
    e.append(run("cchk4-moe-qm-ep2-s2k-mbs2", QM(expert_model_parallel_size=2, seq_length=2048), dp=2, mbs=2))
    e.append(run("cchk4-moe-mx-ep8-s4k-m1", MX(expert_model_parallel_size=8), dp=8))
    e.append(
        run(
            "cchk4-moe-dsl-tp2-sp-ep2-s4k-m2",
            DSL(**tp2, expert_model_parallel_size=2, seq_length=4096),
            dp=2,
            microbatches=2,
        )
    )
    # recompute
    mlp_rc = dict(recompute_granularity="selective", recompute_modules=["mlp"])
    e.append(run("cchk4-rc-mlp-q8-tp2-sp-s4k-m2", Q8(**tp2, **mlp_rc, seq_length=4096), microbatches=2))
    attn_rc = dict(recompute_granularity="selective", recompute_modules=["core_attn"])
    e.append(run("cchk4-rc-coreattn-l1b-s4k-m2", L1B(**attn_rc), microbatches=2))
    uniform = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    e.append(run("cchk4-rc-uniform1-l1b-s2k-m4", L1B(**uniform, seq_length=2048), microbatches=4))
    # the optimizer, attention, offload
    e.append(
        run("cchk4-opt-qm-ep4-do-dp4", QM(expert_model_parallel_size=4, seq_length=2048), dp=4, distopt=True)
    )
    e.append(run("cchk4-unfused-l1b-s4k-m1", L1B(attention_backend="unfused")))
    offload = dict(fine_grained_activation_offloading=True, offload_modules=["qkv_linear"])
    e.append(
        run("cchk4-offload-qkv-l8w-tp2-sp-m2", L8W(**tp2, **offload), dp=2, microbatches=2, distopt=True)
    )
    return e


def _compute_relations_check5() -> list[Entry]:
    """A fifth fresh check of the step model (``cchk5-``), defined on 2026-12-07 before any was
    measured, with the model it checks frozen at the commit that adds it (GEMMs of 1,024 rows or
    more never slower than fewer, FP8 attention priced, 4467e39); split by the hash rule, its
    holdout compared once. Meant as shapes no earlier set ran, but six repeat an earlier run's
    config exactly (found after the look, ``repeated_runs``: ``crel-mbs4-l8w-tp2-sp-s2k-m2``,
    ``cchk2-seq16k-l8w-tp4-sp-m1``, ``crel-mtp2-l8w-tp2-sp-m2``, ``cchk3-moe-qm-ep8-s4k-m2``,
    ``cchk3-rc-block2-l8w-tp2-sp-s4k-m2``, ``cchk3-opt-l8w-tp2-sp-do-dp8-s2k``), two of them held
    out here. The shapes: Qwen3 32B's width at TP 4 and
    Llama 3 70B's at TP 8 with sequence 8,192, Llama 3 8B's at TP 2 with MBS 4 and at TP 4 with
    sequence 16,384, a 2,048-wide model at MBS 2 over four microbatches; the GPT block at TP 2
    and sequence 4,096; VPP 4 on a PP 2 last stage; MTP of depth 2; MoE ranks: Mixtral's width
    at TP 2 EP 4 with MBS 2, the Qwen3 MoE at EP 8 and sequence 4,096 over two microbatches, the
    MLA+MoE shape at EP 4 with ``moe`` recompute (``moe_act`` needs grouped experts and
    ``layernorm`` an output-discarding checkpoint, both Transformer Engine's here); ``core_attn``
    and ``mlp`` recompute on Qwen3 8B's width, full recompute of two-layer blocks; the
    distributed optimizer at DP 8 and
    TP 2; fp16 with its loss scaler at 1; LoRA on Qwen3 32B's width. As with ``cchk-``, the tune
    runs only measure the lent machine (its kernels' and its flash attention's factors)."""
    e = []
    tp2, tp4, tp8 = ({"tensor_model_parallel_size": t, **SP} for t in (2, 4, 8))

    def q32w(**kw):
        return _model("qwen3-32b", **{"num_layers": 2, "seq_length": 4096, **kw})

    def l70w(**kw):
        return _model("llama3-70b", **{"num_layers": 2, **kw})

    # dense shapes
    e.append(run("cchk5-q32w-tp4-sp-s4k-m2", q32w(**tp4), microbatches=2))
    e.append(run("cchk5-l70w-tp8-sp-s8k-m1", l70w(**tp8, seq_length=8192)))
    e.append(run("cchk5-l8w-tp2-sp-s2k-mbs4-m2", L8W(**tp2, seq_length=2048), mbs=4, microbatches=2))
    e.append(run("cchk5-l8w-tp4-sp-s16k-m1", L8W(**tp4, seq_length=16384)))
    e.append(run("cchk5-l1b-s2k-mbs2-m4", L1B(seq_length=2048), mbs=2, microbatches=4))
    e.append(run("cchk5-gpt-tp2-sp-s4k-m2", GPT(**tp2, seq_length=4096), microbatches=2))
    # pipeline stages and MTP
    pp2v4 = dict(num_layers=16, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=4)
    e.append(run("cchk5-vpp4-l1b-pp2-last-m8", L1B(**pp2v4, seq_length=2048), microbatches=8, stage=-1))
    e.append(run("cchk5-mtp2-l8w-tp2-sp-m2", L8W(**tp2, mtp_num_layers=2), microbatches=2))
    # MoE ranks
    e.append(
        run(
            "cchk5-moe-mx-tp2-sp-ep4-s2k-mbs2",
            MX(**tp2, expert_model_parallel_size=4, seq_length=2048),
            dp=4,
            mbs=2,
        )
    )
    e.append(run("cchk5-moe-qm-ep8-s4k-m2", QM(expert_model_parallel_size=8), dp=8, microbatches=2))
    moe_rc = dict(recompute_granularity="selective", recompute_modules=["moe"])
    e.append(
        run("cchk5-rc-moe-dsl-ep4-m2", DSL(expert_model_parallel_size=4, **moe_rc), dp=4, microbatches=2)
    )
    # recompute
    attn_mlp = dict(recompute_granularity="selective", recompute_modules=["core_attn", "mlp"])
    e.append(run("cchk5-rc-attnmlp-q8-tp2-sp-s4k-m2", Q8(**tp2, **attn_mlp, seq_length=4096), microbatches=2))
    block2 = dict(recompute_granularity="full", recompute_method="block", recompute_num_layers=2)
    e.append(run("cchk5-rc-block2-l8w-tp2-sp-m2", L8W(**tp2, **block2), microbatches=2))
    # the optimizer, precision, LoRA
    e.append(run("cchk5-opt-l8w-tp2-sp-do-dp8", L8W(**tp2, seq_length=2048), dp=8, distopt=True))
    scale_one = {"initial_loss_scale": 1.0}
    fp16 = dict(bf16=False, fp16=True)
    e.append(
        run("cchk5-prec-l1b-fp16-s2k-m2", L1B(**fp16, seq_length=2048), microbatches=2, optimizer=scale_one)
    )
    e.append(run("cchk5-lora-q32w-tp4-sp-m2", q32w(**tp4), microbatches=2, peft=lora()))
    return e


def repeated_runs(family: list[Entry], earlier: list[Entry]) -> list[tuple[str, str]]:
    """The runs of ``family`` whose config and measured rank an ``earlier`` run already had, each
    as (its id, the earlier run's id): a fresh check counts only shapes nobody measured before."""
    seen = {(json.dumps(e.config, sort_keys=True), e.rank): e.id for e in earlier}
    keys = ((e.id, (json.dumps(e.config, sort_keys=True), e.rank)) for e in family)
    return [(run_id, seen[key]) for run_id, key in keys if key in seen]


def _compute_relations_check6() -> list[Entry]:
    """A sixth fresh check of the step model (``cchk6-``), defined on 2026-12-07 before any was
    measured, with the model it checks frozen at the commit that adds it (the model of 465f4f7,
    unchanged since); split by the hash rule, its holdout compared once. Unlike ``cchk5-``, no
    run here repeats an earlier run's config and rank (``repeated_runs`` finds none, and a test
    keeps it so). The shapes: Qwen3 8B's width at TP 1 with MBS 2, Llama 3 8B's at TP 8 and at
    TP 2 without sequence parallelism, six layers at TP 4 over three microbatches, Llama 3 70B's
    at TP 4 with MBS 2, Qwen3 32B's at TP 2, a 2,048-wide model at sequence 8,192 and at MBS 8 of
    1,024 tokens; the GPT block (Megatron's unfused attention) at TP 1 with MBS 2 and at TP 4
    with sequence 8,192; VPP 2 on a middle stage of PP 4, the first stage of PP 2 with and
    without VPP 3; MTP of depth 1 on the 2,048-wide model; MoE ranks: Mixtral's width at EP 8,
    the Qwen3 MoE at EP 4 with MBS 2, the MLA+MoE shape at EP 8; uniform full recompute of one
    layer, ``core_attn`` recompute at Llama 3 70B's width and TP 8, ``mla_up_proj`` at EP 2; the
    distributed optimizer on Qwen3 8B's width at DP 4 and on Mixtral's at EP 2, bf16 gradient
    buffers; fp16 at Llama 3 8B's width; LoRA at Llama 3 70B's width and TP 8, on Mixtral's
    attention at TP 2 EP 4, and of rank 8 with MBS 2. The tune runs only measure the lent
    machine (its kernels' and its flash attention's factors), as with ``cchk-``."""
    tp2, tp4, tp8 = ({"tensor_model_parallel_size": t, **SP} for t in (2, 4, 8))
    fp16 = dict(bf16=False, fp16=True)

    def q32w(**kw):
        return _model("qwen3-32b", **{"num_layers": 2, "seq_length": 4096, **kw})

    def l70w(**kw):
        return _model("llama3-70b", **{"num_layers": 2, "seq_length": 4096, **kw})

    e = []
    # dense shapes
    e.append(run("cchk6-q8-tp1-s2k-mbs2-m2", Q8(seq_length=2048), mbs=2, microbatches=2))
    e.append(run("cchk6-l8w-tp8-sp-m4", L8W(**tp8), microbatches=4))
    e.append(run("cchk6-l70w-tp4-sp-s2k-mbs2-m2", l70w(**tp4, seq_length=2048), mbs=2, microbatches=2))
    e.append(run("cchk6-q32w-tp2-sp-s2k-m2", q32w(**tp2, seq_length=2048), microbatches=2))
    e.append(run("cchk6-l1b-tp2-sp-s8k-m2", L1B(**tp2, seq_length=8192), microbatches=2))
    e.append(run("cchk6-l1b-s1k-mbs4-m2", L1B(seq_length=1024), mbs=4, microbatches=2))
    e.append(run("cchk6-gpt-tp1-mbs2-m2", GPT(), mbs=2, microbatches=2))
    e.append(run("cchk6-gpt-tp4-sp-s8k", GPT(**tp4, seq_length=8192)))
    e.append(run("cchk6-l8w-tp2-nosp-m2", L8W(tensor_model_parallel_size=2), microbatches=2))
    e.append(run("cchk6-l8w-l6-tp4-sp-m3", L8W(**tp4, num_layers=6), microbatches=3))
    # pipeline stages and MTP
    pp4v2 = dict(num_layers=16, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=2)
    e.append(run("cchk6-vpp2-l1b-pp4-mid-m8", L1B(**pp4v2, seq_length=2048), microbatches=8, stage=1))
    pp2 = dict(num_layers=8, pipeline_model_parallel_size=2)
    e.append(
        run("cchk6-pp2-q8-tp2-sp-s4k-first-m4", Q8(**tp2, **pp2, seq_length=4096), microbatches=4, stage=0)
    )
    pp2v3 = dict(num_layers=12, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=3)
    e.append(run("cchk6-vpp3-l1b-pp2-first-m6", L1B(**pp2v3, seq_length=2048), microbatches=6, stage=0))
    e.append(run("cchk6-mtp1-l1b-s2k-m2", L1B(mtp_num_layers=1, seq_length=2048), microbatches=2))
    # MoE ranks
    e.append(run("cchk6-moe-mx-ep8-s2k-mbs2", MX(expert_model_parallel_size=8, seq_length=2048), dp=8, mbs=2))
    qm_ep4 = QM(expert_model_parallel_size=4, seq_length=2048)
    e.append(run("cchk6-moe-qm-ep4-s2k-mbs2-m2", qm_ep4, dp=4, mbs=2, microbatches=2))
    dsl_ep8 = DSL(expert_model_parallel_size=8, seq_length=2048)
    e.append(run("cchk6-moe-dsl-ep8-s2k-m2", dsl_ep8, dp=8, microbatches=2))
    # recompute
    uniform1 = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    e.append(run("cchk6-rc-uniform1-l8w-tp2-sp-m2", L8W(**tp2, **uniform1), microbatches=2))
    attn = dict(recompute_granularity="selective", recompute_modules=["core_attn"])
    e.append(run("cchk6-rc-attn-l70w-tp8-sp-m2", l70w(**tp8, **attn), microbatches=2))
    up_proj = dict(recompute_granularity="selective", recompute_modules=["mla_up_proj"])
    dsl_ep2 = DSL(expert_model_parallel_size=2, **up_proj)
    e.append(run("cchk6-rc-mlaup-dsl-ep2-m2", dsl_ep2, dp=2, microbatches=2))
    # the optimizer, precision, LoRA
    e.append(run("cchk6-opt-q8-tp2-sp-do-dp4-s2k", Q8(**tp2, seq_length=2048), dp=4, distopt=True))
    mx_ep2 = MX(expert_model_parallel_size=2, seq_length=2048)
    e.append(run("cchk6-opt-mx-ep2-do-dp2", mx_ep2, dp=2, distopt=True))
    e.append(run("cchk6-opt-l8w-tp2-sp-bf16grads-m2", L8W(**tp2), microbatches=2, grad_fp32=False))
    scale_one = {"initial_loss_scale": 1.0}
    e.append(run("cchk6-prec-l8w-tp2-sp-fp16-m2", L8W(**tp2, **fp16), microbatches=2, optimizer=scale_one))
    e.append(run("cchk6-lora-l70w-tp8-sp-m2", l70w(**tp8), microbatches=2, peft=lora()))
    mx_attention = MX(**tp2, expert_model_parallel_size=4, seq_length=4096)
    e.append(
        run("cchk6-lora-mx-tp2-sp-ep4-attention", mx_attention, dp=4, peft=lora(target_modules=ATTENTION))
    )
    e.append(
        run(
            "cchk6-lora-l1b-r8-mbs2-m4",
            L1B(seq_length=2048),
            mbs=2,
            microbatches=4,
            peft=lora(dim=8, alpha=16),
        )
    )
    return e


def _compute_relations_check7() -> list[Entry]:
    """A seventh fresh check of the step model (``cchk7-``), of ranks whose step the GPU bounds:
    defined on 2026-12-07 before any was measured, with the model it checks frozen at the commit
    that adds it (the model of 465f4f7, unchanged since). The repeat passes and ``hostvar-``
    showed that a host-bound rank's time moves by about a tenth from one process to the next on
    a lent machine while a GPU-bound rank's stays within a few percent; a user's multi-GPU job
    is mostly GPU-bound. Rule fixed before measuring: shapes no earlier run measured
    (``repeated_runs`` finds none), each one whose host work the model puts at no more than 0.9
    of its kernels' time on the tables' machine (``compute_accuracy.planned``,
    ``predicted_host_s`` against ``predicted_device_s``); tests keep both. Drafts dropped by it
    before anything ran: the GPT block at TP 2 with MBS 2 and a VPP 2 first stage of Llama 3
    8B's width at TP 4 (host-bound by the model), Llama 3 8B's width at TP 8 and sequence 8,192
    and a 2,048-wide model at TP 2 with MBS 4 (measured before). Split by the hash rule; the
    tune runs measure the lent machine's kernels as before, the holdout is compared once. The
    shapes: Llama 3 8B's width over three layers at TP 1, at TP 2 and sequence 6,144, at TP 4
    with MBS 2 of 3,072 tokens, unfused at TP 2 and sequence 2,048; Qwen3 8B's over three layers
    at TP 2, at TP 1 with MBS 2 of 3,072 tokens, at TP 4 with MBS 2; Qwen3 32B's at TP 4 with
    MBS 2 and one layer at TP 2 and sequence 8,192; Llama 3 70B's at TP 8 and sequence 6,144, at
    TP 8 with MBS 2, one layer at TP 4; a 2,048-wide model over six layers with MBS 2; the GPT
    block at TP 1 and sequence 4,096; Mixtral's width at TP 2 EP 4 and at EP 8, sequence 4,096;
    the last stage of PP 2, a VPP 2 first stage and a PP 4 middle stage of Qwen3 8B's width;
    MTP at TP 2; ``mlp`` and ``core_attn`` recompute, two-layer blocks of full recompute at
    sequence 8,192; the distributed optimizer at Llama 3 70B's width at TP 8 and Qwen3 32B's at
    TP 4; fp32 at TP 4 (unfused attention: flash needs 16 bits); LoRA on Qwen3 32B's width at
    TP 2 and Llama 3 8B's at TP 1."""
    tp2, tp4, tp8 = ({"tensor_model_parallel_size": t, **SP} for t in (2, 4, 8))

    def q32w(**kw):
        return _model("qwen3-32b", **{"num_layers": 2, "seq_length": 4096, **kw})

    def l70w(**kw):
        return _model("llama3-70b", **{"num_layers": 2, "seq_length": 4096, **kw})

    e = []
    # dense shapes
    e.append(run("cchk7-l8w-l3-tp1-m2", L8W(num_layers=3), microbatches=2))
    e.append(run("cchk7-l8w-tp2-sp-s6k-m2", L8W(**tp2, seq_length=6144), microbatches=2))
    e.append(run("cchk7-l8w-tp4-sp-s3k-mbs2-m2", L8W(**tp4, seq_length=3072), mbs=2, microbatches=2))
    e.append(
        run(
            "cchk7-unfused-l8w-tp2-sp-s2k-m2",
            L8W(**tp2, attention_backend="unfused", seq_length=2048),
            microbatches=2,
        )
    )
    e.append(run("cchk7-q8-l3-tp2-sp-m1", Q8(**tp2, num_layers=3)))
    e.append(run("cchk7-q8-tp1-s3k-mbs2-m2", Q8(seq_length=3072), mbs=2, microbatches=2))
    e.append(run("cchk7-q32w-tp4-sp-mbs2-m2", q32w(**tp4), mbs=2, microbatches=2))
    e.append(run("cchk7-l70w-tp8-sp-s6k-m1", l70w(**tp8, seq_length=6144)))
    e.append(run("cchk7-l70w-l1-tp4-sp-m2", l70w(**tp4, num_layers=1), microbatches=2))
    e.append(run("cchk7-l1b-l6-s2k-mbs2-m2", L1B(num_layers=6, seq_length=2048), mbs=2, microbatches=2))
    e.append(run("cchk7-q8-tp4-sp-s4k-mbs2", Q8(**tp4, seq_length=4096), mbs=2))
    e.append(run("cchk7-q32w-l1-tp2-sp-s8k", q32w(**tp2, num_layers=1, seq_length=8192)))
    e.append(run("cchk7-l70w-tp8-sp-mbs2-m2", l70w(**tp8), mbs=2, microbatches=2))
    e.append(run("cchk7-gpt-tp1-s4k-m2", GPT(seq_length=4096), microbatches=2))
    # MoE ranks
    mx_ep4 = MX(**tp2, expert_model_parallel_size=4, seq_length=4096)
    e.append(run("cchk7-moe-mx-tp2-sp-ep4-m2", mx_ep4, dp=4, microbatches=2))
    e.append(
        run(
            "cchk7-moe-mx-ep8-s4k-m2", MX(expert_model_parallel_size=8, seq_length=4096), dp=8, microbatches=2
        )
    )
    # pipeline stages and MTP
    pp2 = dict(num_layers=6, pipeline_model_parallel_size=2)
    e.append(run("cchk7-pp2-l8w-tp2-sp-last-m4", L8W(**tp2, **pp2), microbatches=4, stage=-1))
    pp2v2 = dict(num_layers=8, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2)
    e.append(run("cchk7-vpp2-q8-tp2-sp-first-m4", Q8(**tp2, **pp2v2), microbatches=4, stage=0))
    pp4 = dict(num_layers=8, pipeline_model_parallel_size=4)
    e.append(run("cchk7-pp4-q8-tp2-sp-mid-m4", Q8(**tp2, **pp4), microbatches=4, stage=1))
    e.append(run("cchk7-mtp1-q8-tp2-sp-s4k-m2", Q8(**tp2, mtp_num_layers=1, seq_length=4096), microbatches=2))
    # recompute
    mlp = dict(recompute_granularity="selective", recompute_modules=["mlp"])
    e.append(run("cchk7-rc-mlp-l8w-tp2-sp-m2", L8W(**tp2, **mlp), microbatches=2))
    attn = dict(recompute_granularity="selective", recompute_modules=["core_attn"])
    e.append(run("cchk7-rc-attn-q8-tp2-sp-s8k", Q8(**tp2, **attn)))
    block2 = dict(recompute_granularity="full", recompute_method="block", recompute_num_layers=2)
    e.append(run("cchk7-rc-block2-l8w-tp4-sp-s8k-m1", L8W(**tp4, **block2, seq_length=8192)))
    # the optimizer, precision, LoRA
    e.append(run("cchk7-opt-l70w-tp8-sp-do-dp2", l70w(**tp8), dp=2, distopt=True))
    e.append(run("cchk7-opt-q32w-tp4-sp-do-dp2", q32w(**tp4), dp=2, distopt=True))
    fp32 = dict(bf16=False, attention_backend="unfused")
    e.append(run("cchk7-prec-fp32-l8w-tp4-sp-m2", L8W(**tp4, **fp32), microbatches=2))
    e.append(run("cchk7-lora-q32w-tp2-sp-m2", q32w(**tp2), microbatches=2, peft=lora()))
    e.append(run("cchk7-lora-l8w-s2k-mbs2-m2", L8W(seq_length=2048), mbs=2, microbatches=2, peft=lora()))
    return e


def small_m_kernels() -> list[Entry]:
    """Whether the GEMMs under 1,024 rows are priced right inside a step (``smallm-``): single
    ranks whose every GEMM runs at 256 or 512 rows (sequence 256 or 512, one sequence a
    microbatch), the narrow TP 4-8 shapes of Llama 3 70B's and 8B's widths the ``gemm_small_m``
    ratios priced, beside the same ranks at 1,024 and 2,048 rows as controls; every run traced
    (a component check of the kernels' price, read whole: all marked tune). Rule fixed before
    measuring: per run, the traced kernels' time outside attention over the step model's price
    for them at the tables' own machine, with the small-M ratios and without them (the 1,024-row
    rate, as before fd3ae07); the ratios are right if the small-M runs' median of that quotient
    sits closer to the controls' median with them than without them."""
    tp4, tp8 = ({"tensor_model_parallel_size": t, **SP} for t in (4, 8))

    def l70w(**kw):
        return _model("llama3-70b", **{"num_layers": 2, **kw})

    e = []
    for seq in (256, 512, 1024, 2048):
        e.append(run(f"smallm-l70w-tp8-sp-s{seq}-m4", l70w(**tp8, seq_length=seq), microbatches=4))
        e.append(run(f"smallm-l8w-tp4-sp-s{seq}-m4", L8W(**tp4, seq_length=seq), microbatches=4))
    for seq in (512, 2048):
        e.append(run(f"smallm-l70w-tp4-sp-s{seq}-m4", l70w(**tp4, seq_length=seq), microbatches=4))
        e.append(run(f"smallm-l8w-tp8-sp-s{seq}-m4", L8W(**tp8, seq_length=seq), microbatches=4))
    return e


def ci_attention_shape() -> list[Entry]:
    """What unfused attention costs a step at the Megatron-LM functional tests' GPT shape
    (``ciattn-``): the H100 golden values of two TP 1 PP 1 pairs that differ only by
    ``--attention-backend unfused`` log 49 and 53 ms a step with the default attention against
    83 and 86 ms unfused, where the step model adds about 7 ms (0.6 ms of kernels a layer) and
    prices all four at 84 ms (docs/plan.md). One rank of those jobs (12 layers, hidden 512, 8
    heads, sequence 1024, MBS 4, one microbatch, dropout 0.1, DP 8 under the distributed
    optimizer) on the local spec, flash and unfused, at 12 and 6 layers, and unfused at 12
    layers without attention dropout, and flash at 12 layers under full recompute (uniform, one
    layer a group: the recompute test of the same group logs 110 ms a step); 21 iterations,
    every one traced at the last (a component check, read whole: all marked tune). The local
    spec's unfused attention runs the torch softmax in fp32 (no fused kernel here), so it moves
    more bytes than Transformer Engine's.

    Rule fixed before measuring, per pass and then the mean over the passes: the unfused
    attention's cost a layer ``U = ((T12u - T6u) - (T12f - T6f)) / 6`` of forward+backward
    time, and its kernels' share ``Uk`` the same difference of the traced kernel time; the
    step model's ``U`` and ``Uk`` at the same runs beside them. Readings: the kernels' ``Uk``
    outside a factor of two of the model's means the relation's kernels are mispriced at this
    shape, and it is refitted with these runs among its tune runs
    (``benchmarks/fit_step_constants.py``); a measured ``U`` above 0.5 ms a layer where the
    model's is nil means the model's host floor hides kernels that show, at this shape. The
    full recompute's cost a layer ``R = (T12rc - T12f) / 12`` beside the model's: more than
    twice the model's means its replay is underpriced at this shape. None of these:
    the functional tests' 34 ms gap is not this relation's (Transformer Engine's unfused path or
    the tests' own machines) and no price changes."""
    e = []
    for backend in ("flash", "unfused"):
        for layers in (6, 12):
            model = GPT(num_layers=layers, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                        seq_length=1024, attention_backend=backend)  # fmt: skip
            e.append(run(f"ciattn-{backend}-l{layers}", model, dp=8, mbs=4, distopt=True))
    model = GPT(num_layers=12, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                seq_length=1024, attention_backend="unfused", attention_dropout=0.0)  # fmt: skip
    e.append(run("ciattn-unfused-nodrop-l12", model, dp=8, mbs=4, distopt=True))
    recompute = dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    model = GPT(num_layers=12, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                seq_length=1024, attention_backend="flash", **recompute)  # fmt: skip
    e.append(run("ciattn-flash-rcfull-l12", model, dp=8, mbs=4, distopt=True))
    return e


def host_profile_by_tensor_parallel() -> list[Entry]:
    """Where a TP rank's host time goes under the fake process group (``hostprof-``): the
    ``cchk7-`` tune runs at TP 2-8 came out host-bound with host work a median 1.88x the step
    model's, against 1.34x at TP 1, which the collectives' calls (70.7 us each) explain a
    tenth to two fifths of. Llama 3 8B's width at 4 layers, sequence 2048, two microbatches,
    at TP 1 and at TP 2, 4 and 8 with SP, the last iteration's host side profiled by Python's
    ``cProfile`` (``compute_relations.py run --host-profile``) instead of its kernels traced.
    A component measurement, read whole (all marked tune).

    Rule fixed before measuring: each profiled function's own time is put in one category by
    where it is defined (``benchmarks/host_profile.py``); per category, the own time per layer
    and microbatch at TP 8 less that at TP 1; the category holding the largest share of that
    excess is named as where the TP excess sits. No price follows from it alone."""
    e = []
    for tp in (1, 2, 4, 8):
        parallel = {"tensor_model_parallel_size": tp, **SP} if tp > 1 else {}
        name = f"hostprof-l8w-tp{tp}{'-sp' if tp > 1 else ''}-s2k-m2"
        e.append(run(name, L8W(seq_length=2048, **parallel), microbatches=2))
    return e


def host_profile_by_feature() -> list[Entry]:
    """Where unfused attention's and recompute's host time goes on a TP rank (``hostfeat-``):
    the host-bound ``cchk7-`` TP tune ranks under block recompute and unfused attention
    carry host work the fake group's calls cover only a fifth to a quarter of
    (``hostprof-``), and the step model prices no host work for unfused attention. Llama 3 8B's
    width at TP 2 with SP, 4 layers, sequence 2048, two microbatches: plain, unfused attention,
    full recompute (uniform, one layer a group) and selective recompute (``core_attn``), the
    last iteration's host side profiled by ``cProfile`` (``compute_relations.py run
    --host-profile``). A component measurement, read whole (all marked tune).

    Rule fixed before measuring (``benchmarks/host_features.py``): the categories of
    ``host_profile.py`` with the host's final wait for the GPU set apart; per feature, its own
    time per layer and microbatch by category less the plain run's, and the category with the
    largest share of that excess named. No price follows from it alone."""
    tp2 = {"tensor_model_parallel_size": 2, **SP}
    features = {
        "plain": {},
        "unfused": {"attention_backend": "unfused"},
        "rcfull": {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
        "rcsel": {"recompute_granularity": "selective", "recompute_modules": ["core_attn"]},
    }
    return [
        run(f"hostfeat-{name}-l8w-tp2-sp-s2k-m2", L8W(seq_length=2048, **tp2, **changes), microbatches=2)
        for name, changes in features.items()
    ]


def host_by_block() -> list[Entry]:
    """The host's work per layer by block style on the local spec (``hostblk-``): tiny shapes
    (hidden 512, sequence 256, eight microbatches), so that the GPU waits on the host, at 4 and
    8 layers, so that a layer's share is the difference; a Llama-style block (RMSNorm, gated
    SiLU, RoPE, no biases, GQA) and the same with one GPT-style feature at a time (LayerNorm,
    GeLU, learned positions, biases, no GQA), and the whole GPT-style block; and the
    Llama-style block at 4 layers with one and two multi-token-prediction layers, whose host
    work against a decoder layer's is what ``MTP_EXTRA_HOST_LAYERS`` counts (``hostblk-mtp``,
    added after the first ``hostblk-`` call). A component measurement like the kernel tables:
    every run is read, whatever its hash split says."""
    tiny = dict(hidden_size=512, num_attention_heads=8, num_query_groups=2, kv_channels=64,
                ffn_hidden_size=2048, seq_length=256, vocab_size=32768)  # fmt: skip
    styles = {
        "llama": {},
        "layernorm": dict(normalization="LayerNorm"),
        "gelu": dict(gated_linear_unit=False, activation_func="gelu", ffn_hidden_size=4096),
        "learned": dict(position_embedding_type="learned_absolute"),
        "bias": dict(add_bias_linear=True),
        "mha": dict(num_query_groups=8),
        "gpt": dict(
            normalization="LayerNorm",
            gated_linear_unit=False,
            activation_func="gelu",
            ffn_hidden_size=4096,
            position_embedding_type="learned_absolute",
            add_bias_linear=True,
            num_query_groups=8,
        ),
    }
    return [
        run(
            f"hostblk-{name}-l{layers}",
            _model("llama3-8b", **{**tiny, **style, "num_layers": layers}),
            microbatches=8,
        )
        for name, style in styles.items()
        for layers in (4, 8)
    ] + [
        run(
            f"hostblk-mtp{depth}-l4",
            _model("llama3-8b", **tiny, num_layers=4, mtp_num_layers=depth),
            microbatches=8,
        )
        for depth in (1, 2)
    ]


def offload_exposure() -> list[Entry]:
    """How much of fine-grained activation offload's copying a step shows (``aoffm-``): the
    same rank with no module, each module, and every module offloaded, at 4 microbatches of
    sequence 4,096 (8 layers of Llama 3 8B's width at TP 2 with SP; the same at sequence 8,192;
    a 2,048-wide model at TP 1, whose compute per copied byte is lower), and every module with
    ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (one hardware queue for the copy and compute streams).
    Defined before any was measured, split by the hash rule: the tune runs fit
    the exposure, the holdout runs check it."""
    small_vocab = dict(vocab_size=32768)
    every = ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"]
    modules = {
        "none": [],
        "attn-norm": ["attn_norm"],
        "mlp-norm": ["mlp_norm"],
        "qkv": ["qkv_linear"],
        "core-attn": ["core_attn", "attn_proj"],
        "all": every,
    }
    one_queue = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}

    def offload(names):
        return dict(fine_grained_activation_offloading=True, offload_modules=names) if names else {}

    def wide(names, **kw):
        return L8W(num_layers=8, tensor_model_parallel_size=2, **small_vocab, **SP, **offload(names), **kw)

    def narrow(names):
        return L1B(num_layers=8, **small_vocab, **offload(names))

    e = [
        run(f"aoffm-l8w-{name}", wide(names), dp=2, microbatches=4, mbs=2, distopt=True)
        for name, names in modules.items()
    ]
    for name in ("none", "qkv", "all"):
        e.append(
            run(
                f"aoffm-l8w-s8k-{name}",
                wide(modules[name], seq_length=8192),
                dp=2,
                microbatches=4,
                distopt=True,
            )
        )
    for name in ("none", "all"):
        e.append(run(f"aoffm-l1b-{name}", narrow(modules[name]), dp=2, microbatches=4, mbs=2, distopt=True))
    e.append(
        run("aoffm-l8w-all-one-queue", wide(every), dp=2, microbatches=4, mbs=2, distopt=True, env=one_queue)
    )
    e.append(
        run(
            "aoffm-l1b-all-one-queue", narrow(every), dp=2, microbatches=4, mbs=2, distopt=True, env=one_queue
        )
    )
    return e


def offload_exposure_check() -> list[Entry]:
    """A check of the offload exposure share (``aoffm2-``), defined after the model was frozen
    at c7a0520 and before any was measured: each offloading run beside its shape's run without
    offload, on shapes the ``aoffm-`` runs did not have (a first pipeline stage, which offloads
    every layer; a Qwen3-30B-A3B MoE rank offloading its experts' inputs; a 2,048-wide model at
    sequence 8,192 with one hardware queue, its baseline too; MBS 1 at 8 microbatches). Nothing
    is fitted on them: every pair is compared once (the hash rule's split is kept for the
    record)."""
    small_vocab = dict(vocab_size=32768)
    every = ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"]
    one_queue = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}

    def offload(names):
        return dict(fine_grained_activation_offloading=True, offload_modules=names) if names else {}

    def first_stage(names):
        return L8W(num_layers=8, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                   **small_vocab, **SP, **offload(names))  # fmt: skip

    def moe(names):
        return QM(expert_model_parallel_size=8, **offload(names))

    def long(names):
        return L1B(num_layers=8, seq_length=8192, **small_vocab, **offload(names))

    def mbs1(names):
        return L8W(num_layers=8, tensor_model_parallel_size=2, **small_vocab, **SP, **offload(names))

    e = []
    for name, names in (("none", []), ("all", every)):
        e.append(
            run(f"aoffm2-pp2-first-{name}", first_stage(names), dp=2, microbatches=8, mbs=2, distopt=True)
        )
        e.append(
            run(
                f"aoffm2-l1b-s8k-one-queue-{name}",
                long(names),
                dp=2,
                microbatches=4,
                distopt=True,
                env=one_queue,
            )
        )
    for name, names in (("none", []), ("experts", ["expert_fc1", "moe_act"])):
        e.append(run(f"aoffm2-qm-ep8-{name}", moe(names), dp=8, microbatches=4, mbs=2, distopt=True))
    for name, names in (("none", []), ("attn", ["qkv_linear", "core_attn", "attn_proj"])):
        e.append(run(f"aoffm2-l8w-mbs1-m8-{name}", mbs1(names), dp=2, microbatches=8, distopt=True))
    return e


def offload_copy_bound_check() -> list[Entry]:
    """A check of fine-grained offload where the copies outlast the compute (``aoffx-``),
    defined after the model was frozen at 5171162 and before any was measured: unfused
    attention keeps each layer's s x s probabilities, which ``core_attn``'s offload moves to the
    host, as in Megatron-LM's functional test with fine-grained offloading (whose 8-GPU step
    runs 2.5x its price). A 1,024-wide model with 32 heads of 128 (8 key/value groups) at TP 2
    with SP, sequence 4,096, 8 layers, 4 microbatches, one hardware queue as that test sets:
    nothing, ``core_attn`` alone and every module offloaded; every module with CUDA's default
    queues; and the first stage of PP 2 with 4 virtual stages, 8 microbatches. Nothing is
    fitted on them: every pair is compared once (the hash rule's split kept for the record)."""
    one_queue = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    every = ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"]

    def shape(names, **kw):
        offload = dict(fine_grained_activation_offloading=True, offload_modules=names) if names else {}
        return _model(
            "llama3-8b",
            num_layers=8,
            hidden_size=1024,
            num_attention_heads=32,
            num_query_groups=8,
            kv_channels=128,
            ffn_hidden_size=4096,
            vocab_size=32768,
            seq_length=4096,
            attention_backend="unfused",
            tensor_model_parallel_size=2,
            **SP,
            **offload,
            **kw,
        )

    e = [
        run(f"aoffx-u1k-{name}", shape(names), dp=2, microbatches=4, distopt=True, env=one_queue)
        for name, names in (("none", []), ("core-attn", ["core_attn"]), ("all", every))
    ]
    for name, names in (("none", []), ("all", every)):
        e.append(run(f"aoffx-u1k-default-{name}", shape(names), dp=2, microbatches=4, distopt=True))
        vpp = dict(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=4)
        e.append(
            run(
                f"aoffx-u1k-vpp-{name}",
                shape(names, **vpp),
                dp=2,
                microbatches=8,
                distopt=True,
                env=one_queue,
            )
        )
    return e


def lora_compute_check() -> list[Entry]:
    """A check of the LoRA adapters' priced work (``lorachk-``), defined after the model was
    frozen at d4e143e and before any was measured: single-rank LoRA steps on shapes no earlier
    LoRA run had (rank 16 with dropout at TP 1 and 8,192 tokens, the attention's adapters alone,
    a 2,048-wide model at MBS 4, TP 4 with re-gather at sequence 8,192, a Qwen3-30B-A3B MoE
    rank whose experts carry adapters, 8 microbatches at sequence 2,048). Nothing is fitted on
    them: every run is compared once (the hash rule's split kept for the record)."""
    tp2 = dict(tensor_model_parallel_size=2, **SP)
    tp4 = dict(tensor_model_parallel_size=4, **SP)
    return [
        run("lorachk-l8w-tp1-s8k-r16-drop", L8W(seq_length=8192), peft=lora(dim=16, alpha=16, dropout=0.1)),
        run("lorachk-l8w-tp2-attention", L8W(**tp2), peft=lora(target_modules=ATTENTION)),
        run("lorachk-l1b-tp1-mbs4", L1B(), mbs=4, peft=lora()),
        run("lorachk-l8w-tp4-s8k-regather", L8W(**tp4, seq_length=8192), peft=lora(True)),
        run("lorachk-qm-ep8-experts", QM(expert_model_parallel_size=8), dp=8, mbs=2, peft=lora()),
        run("lorachk-l8w-tp2-s2k-m8", L8W(**tp2, seq_length=2048), microbatches=8, peft=lora()),
    ]


def _tiny_lora_runs(prefix: str, names: tuple[str, ...], depths: tuple[int, int]) -> list[Entry]:
    """The host-bound tiny block (hidden 512, sequence 256, eight microbatches, so that the GPU
    waits on the host) at two depths, per adapter set by name: ``none`` (the base trained),
    ``all`` (rank-16 adapters on the four linears), ``qkv`` (on ``linear_qkv`` alone)."""
    tiny = dict(hidden_size=512, num_attention_heads=8, num_query_groups=2, kv_channels=64,
                ffn_hidden_size=2048, seq_length=256, vocab_size=32768)  # fmt: skip
    adapters = {
        "none": None,
        "all": lora(dim=16, alpha=16),
        "qkv": lora(dim=16, alpha=16, target_modules=["linear_qkv"]),
    }
    return [
        run(
            f"{prefix}-{name}-l{layers}",
            _model("llama3-8b", **tiny, num_layers=layers),
            microbatches=8,
            peft=adapters[name],
        )
        for name in names
        for layers in depths
    ]


def host_by_lora() -> list[Entry]:
    """The host's work of LoRA adapters (``hostlora-``), measured as ``host_by_block`` measures a
    layer's: the tiny Llama-style block (hidden 512, sequence 256, eight microbatches, so that
    the GPU waits on the host) at 4 and 8 layers, without adapters, with rank-16 adapters on
    the four linears, and on ``linear_qkv`` alone. A component measurement: every run is read,
    whatever its hash split says; defined before any was measured."""
    return _tiny_lora_runs("hostlora", ("none", "all", "qkv"), (4, 8))


def host_by_lora_repeat() -> list[Entry]:
    """The LoRA adapters' host work again (``hostlora2-``), for a constant the step model can
    take: ``hostlora-`` had five timed iterations a run and its two passes put the work per
    adapter 2.5x apart. The same tiny block at 4 and 12 layers (eight layers' difference, not
    four), adapters on the four linears and on ``linear_qkv`` alone, each run timed for
    ``compute_relations.py``'s ``REPEATED_ITERATIONS`` (21); the device runs the set twice, the
    second time in reverse order. Rule fixed before measuring: per adapter, layer and
    microbatch, forward and backward together, ``[(all_12 - all_4) - (qkv_12 - qkv_4)] / (8
    layers x 3 adapters x 8 microbatches)`` from each run's median forward+backward after the
    first iteration, the mean of the two passes. A component measurement: every run is read."""
    return _tiny_lora_runs("hostlora2", ("all", "qkv"), (4, 12))


def host_lora_shares() -> list[Entry]:
    """The LoRA layer's host work as shares of a trained layer's on the same machine
    (``hostlora3-``): ``hostlora2-`` gave the adapters' work in milliseconds, but a machine's
    host speed moves every host-bound step by up to 1.7x (``host_repeat.py``) and the step
    model prices a layer's host work from its loop's floor, so the shares are what carries to
    another machine; and a frozen base's backward launches no weight gradient and no DDP hook,
    which the floor of a trained layer does not know. The tiny block at 4 and 12 layers without
    adapters (the base trained), with adapters on ``linear_qkv`` alone and on the four linears,
    21 iterations a run, run twice (the second time in reverse order). Rule fixed before
    measuring, per pass from each run's median forward+backward after the first iteration, per
    layer and microbatch: ``T = (none_12 - none_4) / 64``, ``F1`` and ``F4`` likewise for
    ``qkv`` and ``all``; an adapter ``A = (F4 - F1) / 3``; the shares ``A / T`` (an adapter)
    and ``(F1 - A) / T`` (a frozen layer), the mean of the two passes. Every run is read."""
    return _tiny_lora_runs("hostlora3", ("none", "qkv", "all"), (4, 12))


def host_by_moe() -> list[Entry]:
    """The host's work of a MoE layer in the measure loop (``hostmoe-``): Megatron's DDP hooks,
    the schedule, the fake process group at the job's world size, none of which
    ``benchmarks/gpu/moe_host.py`` (a stack of layers alone at world size 1) has. The tiny
    Llama-style block of ``host_by_block`` (hidden 512, sequence 256, eight microbatches, so
    that the GPU waits on the host) at 4 layers, dense and with every layer MoE (top-2, expert
    width 512, sequential local experts), per dispatcher (``alltoall``, ``allgather``): 4 and 16
    experts at EP 1, 32 and 128 at EP 8 (4 and 16 local). Run once each with ``--jobs 1``.

    Rule fixed before measuring, from each run's median forward+backward after the first
    iteration, per layer and microbatch ``L = (moe - dense) / 32``, forward and backward
    together, per dispatcher: a MoE layer's host work taken as ``a`` per local expert, ``b``
    per expert of the model (the dispatcher's per-expert splits and sorts) and ``c`` per layer;
    ``s1 = (L16 - L4) / 12`` at EP 1 (``a + b``), ``s8 = (L128 - L32) / 12`` at EP 8
    (``a + 8b``), so ``b = (s8 - s1) / 7``, ``a = s1 - b``, ``c = L4 - 4 s1``. Raw data: at the
    next model freeze ``a`` and ``c`` (split between forward and backward as ``moe_host.py``
    splits them) and ``b`` replace ``SEQUENTIAL_EXPERT_*`` and the EP-1 host work of a MoE
    layer; nothing is fitted on them. A component measurement: every run is read."""
    tiny = dict(hidden_size=512, num_attention_heads=8, num_query_groups=2, kv_channels=64,
                ffn_hidden_size=2048, seq_length=256, vocab_size=32768, num_layers=4)  # fmt: skip
    found = [run("hostmoe-dense", _model("llama3-8b", **tiny), microbatches=8, solo=True)]
    for dispatcher in ("alltoall", "allgather"):
        for experts, ep in ((4, 1), (16, 1), (32, 8), (128, 8)):
            moe = dict(num_moe_experts=experts, moe_router_topk=2, moe_ffn_hidden_size=512,
                       moe_token_dispatcher_type=dispatcher, expert_model_parallel_size=ep)  # fmt: skip
            found.append(
                run(
                    f"hostmoe-{dispatcher}-e{experts}-ep{ep}",
                    _model("llama3-8b", **tiny, **moe),
                    dp=ep,
                    microbatches=8,
                    solo=True,
                )
            )
    return found


def host_by_microbatches() -> list[Entry]:
    """A MoE rank's fixed work per iteration (``hostnmb-``): the single-rank MoE tune runs of one
    microbatch are under-predicted by 27-46% (``compute_accuracy.py``: ``crel-opt-qm-ep2-do-dp8``,
    ``cchk4-moe-qm-ep2-s2k-mbs2``, ``cchk3-rc-moe-qm-ep4-s4k-m1``) where the same shapes at two
    microbatches come within a few percent (``cchk2-moe-qm-ep2-s2k-m2``), and their iterations
    spread by up to half their median. The Qwen3-MoE block of the ``crel-`` runs (4 layers, 128
    experts top-8, EP 4, sequential local experts, all-to-all, sequence 2048) and the dense
    Llama-3.2-1B block (4 layers, sequence 2048), each at 1, 2 and 4 microbatches of MBS 1,
    with Python's automatic collector and with ``train.manual_gc`` (Megatron-LM's --manual-gc:
    one collection, then the collector off), 21 iterations a run.

    Rule fixed before measuring, from each run's median forward+backward after the first
    iteration, per block and collector: the work per microbatch ``P = (T4 - T1) / 3`` and per
    iteration ``F = T1 - P``; what the MoE block's ``F`` exceeds the dense block's, with either
    collector. A component measurement: every run is read; the step model is compared with
    each run once its figures are written down."""
    found = []
    for block, model, dp in (("qm", QM(expert_model_parallel_size=4, seq_length=2048), 4),
                             ("l1b", L1B(seq_length=2048), 1)):  # fmt: skip
        for microbatches in (1, 2, 4):
            for collector in ("auto", "mgc"):
                entry = run(
                    f"hostnmb-{block}-m{microbatches}-{collector}", model, dp=dp, microbatches=microbatches
                )
                if collector == "mgc":
                    entry.config["train"]["manual_gc"] = True
                found.append(entry)
    return found


def host_by_tensor_parallel() -> list[Entry]:
    """The host's work per layer by tensor parallelism under the fake process group
    (``hosttp-``): a tiny Llama-style block (hidden 512, 8 heads of 64 with as many query
    groups, so that TP 8 divides them, sequence 256, eight microbatches, so that the GPU waits
    on the host) at 4 and 8 layers, at TP 1, TP 2 and 8 with sequence parallelism, and TP 8
    without. A component measurement: every run is read, whatever its hash split says; defined
    before any was measured, with its rule (``benchmarks/host_tensor_parallel.py``): each
    setting's host work per layer and microbatch, forward and backward together, is
    ``(T8 - T4) / (4 x 8)`` from the median forward+backward of its runs, the mean over the
    passes; a TP setting's excess over TP 1, divided by the collective calls a layer makes (SP:
    a gather and a reduce-scatter on each side, 8 in all; without SP an all-reduce on each side,
    4), is its host work per call, which checks ``fake_collective_host.py``'s figure inside a
    layer."""
    tiny = dict(hidden_size=512, num_attention_heads=8, num_query_groups=8, kv_channels=64,
                ffn_hidden_size=2048, seq_length=256, vocab_size=32768)  # fmt: skip
    settings = {
        "tp1": {},
        "tp2-sp": dict(tensor_model_parallel_size=2, **SP),
        "tp8-sp": dict(tensor_model_parallel_size=8, **SP),
        "tp8": dict(tensor_model_parallel_size=8),
    }
    return [
        run(f"hosttp-{name}-l{layers}", _model("llama3-8b", **tiny, **tp, num_layers=layers), microbatches=8)
        for name, tp in settings.items()
        for layers in (4, 8)
    ]


# The tune runs of earlier checks whose two passes on one machine differed most (``cchk2r``,
# ``cchk3a`` ... ``cchk6a``), all of which the model gives more host work than kernel time, and
# two it gives more kernel time, whose passes agreed within 1%.
HOST_VARIANCE_HOST_BOUND = (
    "cchk2-vpp2-l1b-pp4-first-m8", "cchk2-moe-qm-ep2-s2k-m2", "cchk2-mtp1-qm-ep4-s2k-m2",
    "cchk3-moe-dsl-ep4-s2k-m2", "cchk4-l1b-s1k-m8", "cchk4-vpp3-l1b-pp3-mid-m6",
    "cchk6-moe-qm-ep4-s2k-mbs2-m2", "cchk6-l8w-tp8-sp-m4",
)  # fmt: skip
HOST_VARIANCE_GPU_BOUND = ("cchk3-l1b-s4k-mbs4-m2", "cchk5-l8w-tp4-sp-s16k-m1")


def host_variance() -> list[Entry]:
    """Why a host-bound rank's time moves from one process to the next (``hostvar-``): the
    earlier checks' repeat passes put the GPU-bound tune runs within a few percent of each other
    and the host-bound ones 0.68-1.58x apart on one machine. Ten of those tune runs (none held
    out; ``HOST_VARIANCE_*``), each as ``hostvar-<its id>``, 21 iterations, in four passes on one
    machine: passes 1 and 3 as the checks ran them, passes 2 and 4 with the child process bound
    to two cores (``compute_relations.py run --pin-cpus``). A component measurement, every run
    read; defined before any was measured, with its rule (``benchmarks/host_variance.py``):

    - a run's time in a pass: its ``early`` median (iterations 2-5, the window the checks
      timed) and its ``steady`` one (iterations 12-21);
    - a condition's spread for a run: ``|ln(T / T')|`` between its two passes; over the
      host-bound runs, the median;
    - binding to cores is taken for later checks iff the host-bound runs' steady spread bound is
      at most half the unbound one and the two GPU-bound runs' bound steady times are within 3%
      of their unbound ones; the longer window iff the unbound steady spread is at most half the
      unbound early one."""
    checks = (
        _compute_relations_check2, _compute_relations_check3, _compute_relations_check4,
        _compute_relations_check5, _compute_relations_check6,
    )  # fmt: skip
    earlier = {e.id: e for family in checks for e in family()}
    return [
        replace(earlier[i], id=f"hostvar-{i}") for i in (*HOST_VARIANCE_HOST_BOUND, *HOST_VARIANCE_GPU_BOUND)
    ]


def entries() -> list[Entry]:
    found = (
        _dense()
        + _pipeline()
        + _moe()
        + _full_depth()
        + _fresh()
        + _fresh2()
        + _preflight()
        + _lora()
        + _defaults()
        + _precision()
        + _lora_moe()
        + _mla_recompute()
        + _lora_scale()
        + _microbatch_sweep()
        + _compute_timing()
        + _compute_relations()
        + _compute_relations_check()
        + _compute_relations_check2()
        + _compute_relations_check3()
        + _compute_relations_check4()
        + _compute_relations_check5()
        + _compute_relations_check6()
        + _compute_relations_check7()
        + host_by_block()
        + offload_exposure()
        + offload_exposure_check()
        + offload_copy_bound_check()
        + lora_compute_check()
        + host_by_lora()
        + host_by_lora_repeat()
        + host_lora_shares()
        + small_m_kernels()
        + ci_attention_shape()
        + host_profile_by_tensor_parallel()
        + host_profile_by_feature()
        + host_by_moe()
        + host_by_microbatches()
        + host_by_tensor_parallel()
        + host_variance()
    )
    ids = [x.id for x in found]
    assert len(ids) == len(set(ids)), "run ids must be unique"
    return found


def resume_run(run_id, model, fmt, *, distopt, load_optim=True, fully_parallel_load=False, ddp=None) -> Entry:
    """One ``memtune measure --resume`` run: train and save a checkpoint of the rank in format
    ``fmt``, load it back in a fresh process and run the first iteration (docs/resume.md)."""
    entry = run(run_id, model, distopt=distopt, ddp=ddp)
    checkpoint = {
        "load": "/checkpoint",  # the estimate's resume phase; measure saves to a directory of its own
        "ckpt_format": fmt,
        "load_optim": load_optim,
        "fully_parallel_load": fully_parallel_load,
    }
    job = validate({**entry.config, "checkpoint": checkpoint})
    return Entry(run_id, job.model_dump(mode="json", exclude_defaults=True), entry.rank)


def resume_entries() -> list[Entry]:
    """The resume runs: world size 1 (the distributed checkpoint does not run under the fake
    process group), each format with the distributed optimizer on and off where Megatron allows
    it (the legacy format's distributed optimizer needs Gloo; Megatron-FSDP needs fsdp_dtensor),
    with and without the optimizer state, dense (gated and plain MLP) and MoE. Defined before any
    of them was measured; split by the hash rule (``split_of``). Measured apart from ``entries()``
    with ``memtune measure CONFIG --rank 0 --resume --json``."""
    ogp = dict(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params")
    two = dict(num_layers=2)
    return [
        resume_run("resume-l1b-dist", L1B(), "torch_dist", distopt=False),
        resume_run("resume-l1b-dist-do", L1B(), "torch_dist", distopt=True),
        resume_run("resume-l1b-dist-do-fpl", L1B(), "torch_dist", distopt=True, fully_parallel_load=True),
        resume_run("resume-l1b-dist-do-nooptim", L1B(), "torch_dist", distopt=True, load_optim=False),
        resume_run("resume-l1b-torch", L1B(), "torch", distopt=False),
        resume_run("resume-l1b-torch-nooptim", L1B(), "torch", distopt=False, load_optim=False),
        resume_run("resume-l1b-fsdp-ogp", L1B(), "fsdp_dtensor", distopt=True, ddp=ogp),
        resume_run(
            "resume-l1b-fsdp-ogp-nooptim", L1B(), "fsdp_dtensor", distopt=True, ddp=ogp, load_optim=False
        ),
        resume_run("resume-gpt-dist", GPT(), "torch_dist", distopt=False),
        resume_run("resume-gpt-dist-do", GPT(), "torch_dist", distopt=True),
        resume_run("resume-gpt-torch", GPT(), "torch", distopt=False),
        resume_run("resume-qm2-dist", QM(**two), "torch_dist", distopt=False),
        resume_run("resume-qm2-dist-do", QM(**two), "torch_dist", distopt=True),
        resume_run("resume-qm2-dist-do-nooptim", QM(**two), "torch_dist", distopt=True, load_optim=False),
        resume_run("resume-qm2-torch", QM(**two), "torch", distopt=False),
        resume_run("resume-mx2-dist-do", MX(), "torch_dist", distopt=True),
        resume_run("resume-dsl-dist-do", DSL(), "torch_dist", distopt=True),
    ]


def save_run(run_id, model, fmt, *, distopt, ddp=None, **checkpoint) -> Entry:
    """One save run: train the rank and save a checkpoint of it in format ``fmt`` with the
    ``checkpoint`` options, measuring the save's device peak and host memory (docs/save.md)."""
    entry = run(run_id, model, distopt=distopt, ddp=ddp)
    job = validate({**entry.config, "checkpoint": {"save": "/checkpoint", "ckpt_format": fmt, **checkpoint}})
    return Entry(run_id, job.model_dump(mode="json", exclude_defaults=True), entry.rank)


def save_entries() -> list[Entry]:
    """The save runs: world size 1 (the distributed checkpoint does not run under the fake process
    group), every format and option of Megatron-LM's save_checkpoint that runs without
    Transformer Engine (torch_dist with the distributed optimizer's dp_reshardable and
    fully_reshardable layouts, the latter over NCCL and over Gloo, with and without fully
    parallel save, async through the persistent worker, without the optimizer state; the legacy
    format with and without the distributed optimizer; Megatron-FSDP's fsdp_dtensor), dense and
    MoE, with and without the distributed optimizer. Defined before any of them was measured;
    split by the hash rule (``split_of``). Measured with ``run_matrix.py plan --save``."""
    ogp = dict(use_megatron_fsdp=True, data_parallel_sharding_strategy="optim_grads_params")
    one = dict(num_layers=1)
    fully = dict(dist_ckpt_optim_fully_reshardable=True)
    persistent = dict(async_save=True, use_persistent_ckpt_worker=True)
    return [
        save_run("save-l1b-dist", L1B(), "torch_dist", distopt=False),
        save_run("save-l1b-dist-do", L1B(), "torch_dist", distopt=True),
        save_run("save-l1b-dist-do-fr", L1B(), "torch_dist", distopt=True, **fully),
        save_run(
            "save-l1b-dist-do-fr-gloo",
            L1B(),
            "torch_dist",
            distopt=True,
            **fully,
            distrib_optim_fully_reshardable_mem_efficient=True,
        ),
        save_run("save-l1b-dist-do-nofps", L1B(), "torch_dist", distopt=True, fully_parallel_save=False),
        save_run("save-l1b-dist-do-async", L1B(), "torch_dist", distopt=True, **persistent),
        save_run("save-l1b-dist-do-nooptim", L1B(), "torch_dist", distopt=True, save_optim=False),
        save_run("save-l1b-torch", L1B(), "torch", distopt=False),
        save_run("save-l1b-torch-do", L1B(), "torch", distopt=True),
        save_run("save-l1b-fsdp-ogp", L1B(), "fsdp_dtensor", distopt=True, ddp=ogp),
        save_run("save-gpt-dist-do-fr", GPT(), "torch_dist", distopt=True, **fully),
        save_run("save-gpt-torch-do", GPT(), "torch", distopt=True),
        save_run("save-qm1-dist", QM(**one), "torch_dist", distopt=False),
        save_run("save-qm1-dist-do", QM(**one), "torch_dist", distopt=True),
        save_run("save-qm1-dist-do-fr", QM(**one), "torch_dist", distopt=True, **fully),
        save_run("save-qm1-dist-do-async", QM(**one), "torch_dist", distopt=True, **persistent),
    ]
