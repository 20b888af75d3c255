"""A valid Llama-3-8B-like job on 16 GPUs (TP2 SP, PP2) that triggers no rule; tests change it
with the same dotted overrides the CLI takes."""

from __future__ import annotations

from functools import partial

from tests.jobs import build_job

BASE = {
    "defaults": "megatron-core",  # the rules as Megatron-Core applies them
    "model": {
        "num_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_query_groups": 8,
        "ffn_hidden_size": 14336,
        "vocab_size": 128256,
        "seq_length": 8192,
        "bf16": True,
        "tensor_model_parallel_size": 2,
        "sequence_parallel": True,
        "pipeline_model_parallel_size": 2,
        "pipeline_dtype": "bf16",
    },
    "train": {"micro_batch_size": 1, "global_batch_size": 64},
    "cluster": {"num_gpus": 16},
}


make_job = partial(build_job, BASE)  # BASE plus dotted overrides
