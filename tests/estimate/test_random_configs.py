"""Random layouts never crash the estimator: it either refuses with check's messages or returns
non-negative components that add up to the peak."""

import math
import random

import pytest

from memtune.check import gate
from memtune.config import validate
from memtune.errors import InputError
from memtune.estimate import estimate


def random_job(rng: random.Random) -> dict:
    heads = rng.choice([8, 16, 32])
    moe = rng.random() < 0.4
    tp = rng.choice([1, 2, 4, 8])
    pp = rng.choice([1, 2, 4])
    model = {
        "num_layers": rng.choice([4, 8, 12, 16]),
        "hidden_size": heads * rng.choice([64, 128]),
        "num_attention_heads": heads,
        "num_query_groups": rng.choice([heads, heads // 4, 8]),
        "ffn_hidden_size": rng.choice([1024, 4096, 5632]),
        "vocab_size": rng.choice([32000, 50257, 128256]),
        "seq_length": rng.choice([1024, 2048, 4096]),
        "gated_linear_unit": rng.random() < 0.5,
        "activation_func": rng.choice(["silu", "gelu"]),
        "normalization": rng.choice(["LayerNorm", "RMSNorm"]),
        "share_embeddings_and_output_weights": rng.random() < 0.5,
        "add_bias_linear": rng.random() < 0.5,
        "hidden_dropout": rng.choice([0.0, 0.1]),
        "attention_dropout": rng.choice([0.0, 0.1]),
        "tensor_model_parallel_size": tp,
        "sequence_parallel": tp > 1 and rng.random() < 0.7,
        "pipeline_model_parallel_size": pp,
        "virtual_pipeline_model_parallel_size": rng.choice([None, 2]) if pp > 2 else None,
        "pipeline_dtype": "bf16",
        "bf16": True,
        "transformer_impl": rng.choice(["local", "transformer_engine"]),
        "attention_backend": rng.choice(["auto", "flash", "unfused"]),
        "recompute_granularity": rng.choice([None, "selective", "full"]),
    }
    if model["recompute_granularity"] == "full":
        model["recompute_method"] = rng.choice(["uniform", "block"])
        model["recompute_num_layers"] = 1
    elif model["recompute_granularity"] == "selective":
        model["recompute_modules"] = rng.sample(["core_attn", "mlp", "layernorm"], rng.randint(0, 2))
    if moe:
        model.update(
            num_moe_experts=8,
            moe_router_topk=2,
            moe_ffn_hidden_size=512,
            expert_model_parallel_size=rng.choice([1, 2, 4]),
            moe_token_dispatcher_type="alltoall",
        )
    dp = rng.choice([1, 2, 4])
    mbs = rng.choice([1, 2])
    return {
        "model": model,
        "train": {"micro_batch_size": mbs, "global_batch_size": mbs * dp * rng.choice([1, 4, 8])},
        "optimizer": {"use_distributed_optimizer": rng.random() < 0.5},
        "ddp": {"grad_reduce_in_fp32": rng.random() < 0.5},
        "cluster": {"num_gpus": tp * pp * dp, "gpu": "H100"},
    }


@pytest.mark.parametrize("seed", range(200))
def test_random_layout_is_refused_or_estimated(seed):
    data = random_job(random.Random(seed))
    data["ddp"]["use_distributed_optimizer"] = data["optimizer"]["use_distributed_optimizer"]
    job = validate(data)
    try:
        est = estimate(gate(job))
    except InputError as exc:
        assert all(line[:3].isalpha() and line[3:6].isdigit() for line in exc.problems)  # check codes
        return
    for rank in est.ranks:
        parts = [rank.state.weights, rank.state.grads, rank.state.optimizer, rank.activations, rank.transient]
        assert all(math.isfinite(p) and p >= 0 for p in parts)
        assert rank.peak_bytes == round(sum(parts))
        assert rank.peak_bytes > 0
