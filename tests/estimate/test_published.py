"""The Transformer Engine path against published measurements.

NVIDIA's Megatron-LM functional tests record the steady-state peak of the last global rank
(`mem-max-allocated-bytes`, decimal GB) of GPT-3 7B on 8 H100s:
``tests/functional_tests/test_cases/gpt/gpt3_7b_tp4_pp1_memory_speed`` (57.144 GB) and
``gpt3_7b_tp1_pp4_memory_speed`` (60.721 GB); see the project's Megatron-LM notes, section 6.2.
These runs use the TE spec with fused attention, which this project cannot measure itself.
Megatron-Bridge's `moe-hardware-configs` skill reports Qwen3-30B-A3B on 16 H100s (TP1 EP16,
MBS 1, GBS 1024, sequence 4096, precision-aware optimizer with fp32 states, bf16 gradients) at a
rank-0 peak of 62.166 GiB allocated; that run also captured TE CUDA graphs of the router and used
HybridEP, whose buffers memtune does not model, so it is held to a looser bound.
"""

import pytest

from memtune.check import gate
from memtune.config import validate
from memtune.estimate import estimate

GPT3_7B = {
    "num_layers": 32,
    "hidden_size": 4096,
    "ffn_hidden_size": 16384,
    "num_attention_heads": 32,
    "num_query_groups": 8,
    "vocab_size": 131073,
    "seq_length": 8192,
    "share_embeddings_and_output_weights": False,
    "bf16": True,
    "transformer_impl": "transformer_engine",
    "attention_backend": "auto",
    "deallocate_pipeline_outputs": True,  # Megatron-LM training always deallocates; dropout and biases stay at their defaults
}


def _peak_of_last_rank(model, train):
    job = validate(
        {
            "model": {**GPT3_7B, **model},
            "train": train,
            "optimizer": {"use_distributed_optimizer": True},
            "ddp": {
                "use_distributed_optimizer": True,
                "grad_reduce_in_fp32": True,
                "overlap_grad_reduce": True,
                "overlap_param_gather": True,
            },
            "cluster": {"num_gpus": 8, "gpu": "H100"},
        }
    )
    est = estimate(gate(job))
    return est.rank(7).peak_bytes


def test_gpt3_7b_tp4_within_five_percent_of_published():
    peak = _peak_of_last_rank(
        {"tensor_model_parallel_size": 4}, {"micro_batch_size": 2, "global_batch_size": 8}
    )
    assert peak == pytest.approx(57.144e9, rel=0.05)


def test_gpt3_7b_pp4_vpp8_within_five_percent_of_published():
    peak = _peak_of_last_rank(
        {
            "pipeline_model_parallel_size": 4,
            "virtual_pipeline_model_parallel_size": 8,
            "pipeline_dtype": "bf16",
        },
        {"micro_batch_size": 1, "global_batch_size": 8},
    )
    assert peak == pytest.approx(60.721e9, rel=0.05)


def test_qwen3_30b_a3b_ep16_within_five_percent_of_published():
    job = validate(
        {
            "model": {
                "num_layers": 48,
                "hidden_size": 2048,
                "ffn_hidden_size": 6144,
                "num_attention_heads": 32,
                "num_query_groups": 4,
                "kv_channels": 128,
                "vocab_size": 151936,
                "seq_length": 4096,
                "gated_linear_unit": True,
                "activation_func": "silu",
                "normalization": "RMSNorm",
                "qk_layernorm": True,
                "share_embeddings_and_output_weights": False,
                "add_bias_linear": False,
                "hidden_dropout": 0.0,
                "attention_dropout": 0.0,
                "num_moe_experts": 128,
                "moe_router_topk": 8,
                "moe_ffn_hidden_size": 768,
                "moe_grouped_gemm": True,
                "moe_token_dispatcher_type": "flex",
                "expert_model_parallel_size": 16,
                "bias_activation_fusion": True,
                "bf16": True,
                "transformer_impl": "transformer_engine",
            },
            "train": {"micro_batch_size": 1, "global_batch_size": 1024},
            "optimizer": {"use_distributed_optimizer": True, "use_precision_aware_optimizer": True},
            "ddp": {"use_distributed_optimizer": True, "grad_reduce_in_fp32": False},
            "cluster": {"num_gpus": 16, "gpu": "H100"},
        }
    )
    assert estimate(gate(job)).rank(0).peak_bytes == pytest.approx(62.166 * 2**30, rel=0.05)
