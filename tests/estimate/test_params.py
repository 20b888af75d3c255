from memtune.config import derive
from memtune.estimate.params import chunk_params, total_parameters


def test_llama3_8b_parameter_count_by_hand(job_factory):
    job = job_factory(
        model={
            "num_layers": 32,
            "hidden_size": 4096,
            "ffn_hidden_size": 14336,
            "num_attention_heads": 32,
            "num_query_groups": 8,
            "vocab_size": 128256,
            "seq_length": 8192,
        }
    )
    h, f, v = 4096, 14336, 128256
    per_layer = (32 + 2 * 8) * 128 * h + 32 * 128 * h + 3 * f * h + 2 * h
    assert total_parameters(job) == 32 * per_layer + h + 2 * v * h  # 8,030,261,248
    assert total_parameters(job) == 8_030_261_248


def test_tiny_chunk_params_split_over_tp_and_pipeline(job_factory):
    job = job_factory(
        model={"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "pipeline_dtype": "bf16"},
        cluster={"num_gpus": 4},
    )
    d = derive(job)
    h, f = 64, 256
    qkv = (4 + 2 * 2) * 16 * h  # heads 4, groups 2, kv_channels 16
    proj = 4 * 16 * h
    mlp = 3 * f * h
    padded_vocab = 1008  # ceil(1000 / (8 * 2)) * 16
    first = chunk_params(d, d.chunks[0][0])
    last = chunk_params(d, d.chunks[1][0])
    assert first.dense == 2 * (qkv + proj + mlp) / 2 + padded_vocab * h / 2
    assert first.replicated == 2 * 2 * h  # two RMSNorms per layer, not split by TP
    assert last.dense == 2 * (qkv + proj + mlp) / 2 + padded_vocab * h / 2  # untied output layer
    assert last.replicated == 2 * 2 * h + h  # plus the final norm


def test_moe_experts_split_over_ep_and_etp(job_factory):
    job = job_factory(
        model={
            "num_moe_experts": 8,
            "moe_router_topk": 2,
            "moe_ffn_hidden_size": 32,
            "expert_model_parallel_size": 4,
            "moe_token_dispatcher_type": "alltoall",
        },
        cluster={"num_gpus": 4},
    )
    d = derive(job)
    local = chunk_params(d, d.chunks[0][0])
    assert local.expert == 4 * 8 * (3 * 32 * 64) / 4
    assert local.replicated == 4 * (2 * 64 + 64 * 8) + 64  # norms + router per layer, final norm
