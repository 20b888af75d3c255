"""What Megatron-FSDP (``optim_grads_params``) costs, from its bytes: the worked example of
docs/plan.md.

    python benchmarks/fsdp_price.py

Llama 3 70B (sequence 8,192) and GPT-3 175B (sequence 2,048) on 32, 256 and 1,536 H100s (DGX
H100 fabric: NVLink inside the node, eight 400 Gb/s adapters per node, rail-optimised), TP 1 and
TP 8 with sequence parallelism, PP 1, micro-batch 1, 8 microbatches per step, bf16. Per GPU and
microbatch: the bytes Megatron-FSDP moves (each layer's weights gathered before its forward and
again before its backward, its gradients reduce-scattered after it), the DP group's span and the
bus bandwidth NCCL's ring reaches on it, one layer's collectives, the communication against the
compute it hides behind, what stays exposed, and the step against the same job with the
distributed optimizer (``memtune/perf/sharding.py``, ``memtune/perf/step.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.config.derived import Derived
from memtune.estimate.params import chunk_params
from memtune.perf.collectives import Op, bus_bandwidth, collective
from memtune.perf.sharding import chunk_work, gather_bytes_per_param, groups
from memtune.perf.step import predict_step
from memtune.plan.query import Query, base_job

GPT3_175B = [
    "model.num_layers=96",
    "model.hidden_size=12288",
    "model.ffn_hidden_size=49152",
    "model.num_attention_heads=96",
    "model.num_query_groups=null",
    "model.kv_channels=128",
    "model.vocab_size=50257",
    "model.gated_linear_unit=false",
    "model.activation_func=gelu",
    "model.normalization=LayerNorm",
    "model.add_bias_linear=true",
    "model.position_embedding_type=learned_absolute",
    "model.share_embeddings_and_output_weights=true",
]
MODELS = {"Llama 3 70B": ("llama3-70b", 8192, []), "GPT-3 175B": ("llama3-70b", 2048, GPT3_175B)}
FSDP = [
    "ddp.use_megatron_fsdp=true",
    "ddp.data_parallel_sharding_strategy=optim_grads_params",
    "ddp.use_distributed_optimizer=false",
    "optimizer.use_distributed_optimizer=false",
]
DIST_OPT = ["ddp.use_distributed_optimizer=true", "optimizer.use_distributed_optimizer=true"]


def job(model: str, gpus: int, tp: int, sharding: list[str]) -> Derived:
    preset, seq, shape = MODELS[model]
    base = base_job(Query(preset, gpus, "H100-80GB", 8, seq, 8 * gpus // tp, "pretrain"))
    changes = shape + sharding
    changes += [
        f"model.tensor_model_parallel_size={tp}",
        f"model.sequence_parallel={'true' if tp > 1 else 'false'}",
        "train.micro_batch_size=1",
        "ddp.overlap_grad_reduce=true",
        "ddp.overlap_param_gather=true",
    ]
    return gate(with_changes(base, [Change.parse(c) for c in changes])).derived


def row(model: str, gpus: int, tp: int) -> str:
    d = job(model, gpus, tp, FSDP)
    chunk = d.chunks[0][0]
    held = chunk_params(d, chunk)
    params = held.dense + held.replicated
    layers = len(chunk.layers)
    dense, _ = groups(d)
    gpu = "H100-80GB"
    weight = gather_bytes_per_param(d) * params
    moved = 2 * weight + 2 * params  # two gathers and one bf16 reduce-scatter, as full tensors
    work = chunk_work(d, d.network, gpu, held.dense + held.replicated, held.expert, layers, None)
    layer_gather = collective(Op.ALL_GATHER, weight / layers, dense, d.network, gpu)
    fsdp, dist = predict_step(d), predict_step(job(model, gpus, tp, DIST_OPT))
    sim = fsdp.simulated
    compute = (sim.stage_compute_s[0] - sim.stage_optimizer_s[0]) / d.num_microbatches
    exposed_s = (sim.stage_exposed_comm_s[0]) / d.num_microbatches
    comm = work.forward_s + work.backward_s
    nodes, members = dense.domains(d.network), dense.per_domain(d.network)
    return (
        f"{model:11} {gpus:>5} {tp:>3} {d.dp:>4} {nodes:>4}x{members:<2} {moved / 1e9:>7.1f}"
        f" {bus_bandwidth(dense, d.network) / 1e9:>6.0f} {layer_gather.seconds * 1e3:>7.2f}"
        f" {comm:>7.2f} {compute:>7.2f} {exposed_s:>7.2f}"
        f" {fsdp.tokens_per_s_per_gpu / dist.tokens_per_s_per_gpu - 1:>+7.1%}"
    )


def main() -> None:
    print(
        f"{'model':11} {'GPUs':>5} {'TP':>3} {'DP':>4} {'span':>7} {'GB/mb':>7} {'GB/s':>6}"
        f" {'AG ms':>7} {'comm s':>7} {'comp s':>7} {'expo s':>7} {'vs DO':>7}"
    )
    for model in MODELS:
        for tp in (1, 8):
            for gpus in (32, 256, 1536):
                print(row(model, gpus, tp))


if __name__ == "__main__":
    main()
