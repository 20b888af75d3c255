from memtune.check import gate
from memtune.config import derive
from memtune.estimate import activations as act
from memtune.estimate import estimate
from memtune.estimate.core import CUBLAS_WORKSPACE, Segment, persistent_buffers, worst_extra
from memtune.estimate.flavour import flavour_of
from memtune.estimate.params import ParamCounts
from memtune.estimate.state import model_state
from memtune.peft.model import AdapterParams

MiB = 2**20


def test_worst_extra_walks_forward_then_backward():
    # kept 10, 20, 30 (total 60). Forward peaks at the last segment: 60 + 5. Backward of the
    # first segment replays 40 (a checkpoint) beside nothing else kept: 40 + 10 - 60 < 5.
    segments = [Segment(10, 40, 0, 10), Segment(20, 20, 0, 0), Segment(30, 30, 5, 2)]
    assert worst_extra(segments) == 5
    # A larger backward working set in the middle segment: 10 + 20 + 50 - 60 = 20.
    segments[1] = Segment(20, 20, 0, 50)
    assert worst_extra(segments) == 20


def test_selective_mlp_recompute_keeps_the_input_and_replays_the_rest(job_factory):
    d = derive(job_factory(model={"recompute_granularity": "selective", "recompute_modules": ["mlp"]}))
    x, fl = act.dims_of(d), flavour_of(d)
    kept = act.dense_mlp(d, x, fl)
    d_full = derive(job_factory())
    full = act.dense_mlp(d_full, act.dims_of(d_full), flavour_of(d_full))
    assert kept.tensors == {"linear_fc1.input": 2 * 256 * 64}
    assert kept.bwd_transient == full.total - kept.total + full.bwd_transient


def test_persistent_buffers_count_two_cublas_workspaces_scores_and_pipeline_receives(job_factory):
    # Unfused attention: the global buffer holds one bf16 score matrix (2 x 4 heads x 128 x 128).
    d = derive(job_factory(model={"pipeline_model_parallel_size": 2, "pipeline_dtype": "bf16"}))
    fl = flavour_of(d)
    scores = 2 * 2 * 4 * 128 * 128
    assert persistent_buffers(d, fl, d.chunks[0]) == 2 * CUBLAS_WORKSPACE + scores
    # The second stage receives its input: one activation and one gradient buffer of [s, b, h].
    assert persistent_buffers(d, fl, d.chunks[1]) == 2 * CUBLAS_WORKSPACE + scores + 2 * (2 * 256 * 64)


def test_adam_step_temporaries_follow_megatrons_param_groups(job_factory):
    # Local spec => torch's foreach AdamW: one fp32 sqrt(v) per param group at a time. Routed
    # experts are a group of their own only under the expert process groups (EP > 1 or ETP != TP,
    # megatron/core/tensor_parallel/layers.py); at EP 1 they step with the dense parameters. With
    # bf16 gradients every fp32 gradient copy exists at once.
    counts = ParamCounts(dense=600.0, replicated=0.0, expert=1000.0)
    moe = {"num_moe_experts": 8, "moe_ffn_hidden_size": 32}
    bf16_grads = {"grad_reduce_in_fp32": False}
    d = derive(job_factory(model=moe, ddp=bf16_grads))
    assert not d.experts_use_expert_groups
    state = model_state(d, counts, lora=AdapterParams())
    assert state.optimizer_step_transient == 4 * 1600 + 4 * 1600
    assert state.weights == 2 * 1600 and state.grads == 2 * 1600
    assert state.optimizer == 12 * 1600
    d = derive(job_factory(model={**moe, "expert_model_parallel_size": 2}, ddp=bf16_grads))
    assert d.experts_use_expert_groups
    state = model_state(d, counts, lora=AdapterParams())
    assert state.optimizer_step_transient == 4 * 1600 + 4 * max(600, 1000)


def test_loss_keeps_fp32_softmax_and_adds_bf16_logits_at_its_peak(job_factory):
    d = derive(job_factory())
    x = act.dims_of(d)
    out = act.output_and_loss(d, x)
    vocab = d.padded_vocab_size  # 1000 padded to a multiple of 8
    assert vocab == 1000
    assert out.tensors["loss.softmax_fp32"] == 4 * 256 * vocab
    assert out.fwd_transient == 2 * 256 * vocab
    assert out.bwd_transient == max(
        2 * 256 * vocab, 2 * 256 * vocab + 2 * vocab * 64 + 2 * 256 * 64 - 4 * 256 * vocab
    )


def test_rank_json_for_a_global_rank(job_factory):
    job = job_factory(
        model={"pipeline_model_parallel_size": 2, "pipeline_dtype": "bf16"}, cluster={"num_gpus": 4}
    )
    est = estimate(gate(job))
    # world 4, PP 2: ranks 0-1 are stage 0, ranks 2-3 stage 1 (order tp-cp-ep-dp-pp)
    assert [est.pp_rank_of(r) for r in range(4)] == [0, 0, 1, 1]
    r = est.rank(3)
    assert r.peak_bytes == round(r.state.total + r.activations + r.transient)


def test_cpu_offload_removes_only_the_offloaded_layers(job_factory):
    from memtune.estimate.core import EstimateOptions, chunk_activations

    base = derive(job_factory(model={"attention_backend": "flash"}))
    off = derive(
        job_factory(
            model={"attention_backend": "flash", "cpu_offloading": True, "cpu_offloading_num_layers": 1}
        )
    )
    full = chunk_activations(base, base.chunks[0][0], EstimateOptions())
    less = chunk_activations(off, off.chunks[0][0], EstimateOptions())
    layer = act.transformer_layer(base, act.dims_of(base), flavour_of(base), False, 1.0).total
    assert full.total - less.total == layer  # one of four layers leaves the device


def test_a_tied_output_weight_gradient_stays_until_the_embedding_backward():
    # output backward leaves 8 behind; the middle layer's backward then sees it: 10 + 30 + 8 - 60.
    segments = [Segment(20, 20, 0, 0), Segment(30, 30, 0, 10), Segment(10, 10, 0, 0, bwd_residue=8)]
    assert worst_extra(segments) == 8
    segments[2] = Segment(10, 10, 0, 0)
    assert worst_extra(segments) == 0


def test_unfused_backward_keeps_three_fp32_score_buffers_beside_the_softmax(job_factory):
    d = derive(job_factory())  # unfused, no dropout: keeps fp32 softmax + bf16 probs
    att = act.attention(d, act.dims_of(d), flavour_of(d), recompute_core=False)
    scores = 2 * 4 * 128 * 128
    kept = att.tensors["core_attention.softmax_fp32"] + att.tensors["core_attention.probs_bf16"]
    assert kept == 6 * scores
    assert kept + att.bwd_transient == 16 * scores


def test_cuda_graphs_add_instantiated_graph_memory_outside_pytorch(job_factory):
    from memtune.estimate.overhead import CUDA_GRAPH_EXEC, non_pytorch_bytes

    plain = derive(job_factory())
    graphed = derive(job_factory(model={"cuda_graph_impl": "transformer_engine"}))
    assert non_pytorch_bytes(graphed) - non_pytorch_bytes(plain) == CUDA_GRAPH_EXEC == 2**30
