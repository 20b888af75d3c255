from functools import partial

import pytest

from tests.jobs import build_job

# Hand-computed expectations use Megatron-Core's own defaults (memtune/config/stacks.py).
TINY = {
    "defaults": "megatron-core",
    "model": {
        "num_layers": 4,
        "hidden_size": 64,
        "ffn_hidden_size": 256,
        "num_attention_heads": 4,
        "num_query_groups": 2,
        "vocab_size": 1000,
        "make_vocab_size_divisible_by": 8,
        "seq_length": 128,
        "gated_linear_unit": True,
        "activation_func": "silu",
        "normalization": "RMSNorm",
        "share_embeddings_and_output_weights": False,
        "add_bias_linear": False,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "bf16": True,
        "transformer_impl": "local",
        "attention_backend": "unfused",
    },
    "train": {"micro_batch_size": 2, "global_batch_size": 16},
    "cluster": {"num_gpus": 2, "gpu": "H200"},
}


make_job = partial(build_job, TINY)


@pytest.fixture
def job_factory():
    return make_job
