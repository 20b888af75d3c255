"""The step of a job as configured: properties the simulated model must have."""

from __future__ import annotations

import pytest

from memtune.check import gate
from memtune.config.changes import Change, with_changes
from memtune.perf import constants as K
from memtune.perf.step import predict_step
from memtune.plan.query import Query, base_job


def job(*overrides: str):  # type: ignore[no-untyped-def]
    base = base_job(Query("llama3-8b", 8, "H100-80GB", 8, 4096, 32, "pretrain"))
    return gate(with_changes(base, [Change.parse(o) for o in overrides])).derived


def test_throughput_is_tokens_over_step() -> None:
    d = job("model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "train.micro_batch_size=1")
    p = predict_step(d)
    tokens = 32 * 4096
    assert p.tokens_per_s_per_gpu == pytest.approx(tokens / p.step_time_s / 8)
    sim = p.simulated
    for compute, exposed, idle in zip(
        sim.stage_compute_s, sim.stage_exposed_comm_s, sim.stage_idle_s, strict=True
    ):
        assert compute + exposed + idle == pytest.approx(p.step_time_s)


def test_overlap_flags_are_read_from_the_job_not_assumed() -> None:
    plain = predict_step(job("model.tensor_model_parallel_size=1", "ddp.overlap_grad_reduce=false"))
    overlapped = predict_step(job("model.tensor_model_parallel_size=1", "ddp.overlap_grad_reduce=true"))
    assert overlapped.step_time_s < plain.step_time_s


def test_pipeline_adds_a_bubble() -> None:
    flat = predict_step(job("model.pipeline_model_parallel_size=1", "train.micro_batch_size=1"))
    piped = predict_step(job("model.pipeline_model_parallel_size=4", "train.micro_batch_size=1"))
    assert min(piped.simulated.stage_idle_s) > 0
    assert piped.simulated.bubble_fraction > flat.simulated.bubble_fraction


def test_small_layers_hit_the_host_floor() -> None:
    # A 512-wide layer's kernels at 4,096 tokens take far less than the host's launch work, and a
    # 1,024-token vocabulary leaves no large kernel for the host to run ahead under: each layer
    # costs the loop's floor, so the step grows with layers at that floor x (1 + backward factor)
    # for each of the rank's 4 microbatches (GBS 32 over DP 8, MBS 1).
    small = ["model.hidden_size=512", "model.ffn_hidden_size=2048", "model.num_attention_heads=8",
             "model.num_query_groups=8", "model.kv_channels=64", "model.vocab_size=1024",
             "train.micro_batch_size=1", "ddp.overlap_grad_reduce=false"]  # fmt: skip
    twelve = predict_step(job(*small, "model.num_layers=12")).step_time_s
    six = predict_step(job(*small, "model.num_layers=6")).step_time_s
    per_layer = K.MEGATRON_LM_LOOP.layer_fwd_s * (1 + K.MEGATRON_LM_LOOP.backward_factor)
    assert twelve - six == pytest.approx(4 * 6 * per_layer, rel=0.05)


def test_a_pass_takes_the_longer_of_host_and_device_work() -> None:
    from memtune.perf.step import _pass_time

    # the host runs ahead under a long kernel wherever it sits in the pass
    assert _pass_time([(0.0, 10.0), (1.0, 0.1), (1.0, 0.1)]) == pytest.approx(10.2)
    assert _pass_time([(1.0, 0.1), (1.0, 0.1), (0.0, 10.0)]) == pytest.approx(10.2)
    # small kernels only: the GPU waits for the launches
    assert _pass_time([(1.0, 0.1), (1.0, 0.1)]) == pytest.approx(2.0)


def test_fp8_gemms_are_measured_for_tensorwise_and_blockwise_and_reported_for_mxfp8() -> None:
    tensorwise = predict_step(job("model.fp8=hybrid", "model.fp8_recipe=tensorwise"))
    assert not any("FP8" in u for u in tensorwise.unmeasured)
    blockwise = predict_step(job("model.fp8=hybrid", "model.fp8_recipe=blockwise"))
    assert not any("FP8" in u for u in blockwise.unmeasured)
    mxfp8 = predict_step(job("model.fp8=hybrid", "model.fp8_recipe=mxfp8"))
    assert "mxfp8 FP8 GEMMs at the measured tensorwise fraction" in mxfp8.unmeasured
    # both recipes cast each GEMM input once (FP8_CAST_BYTES_PER_ELEMENT): only the tables differ,
    # and block scales cost the H200 about an eighth of the tensorwise throughput
    delayed = predict_step(job("model.fp8=hybrid", "model.fp8_recipe=delayed"))
    assert blockwise.step_time_s > delayed.step_time_s


def test_current_scaling_pays_its_amax_pass() -> None:
    # tensorwise (current) scaling reads each GEMM input once more than delayed scaling casts it
    delayed = predict_step(job("model.fp8=hybrid", "model.fp8_recipe=delayed")).step_time_s
    current = predict_step(job("model.fp8=hybrid", "model.fp8_recipe=tensorwise")).step_time_s
    assert current > delayed


def test_layer_wise_activation_offload_costs_its_exposed_host_copies() -> None:
    # TP 1, PP 1, DP 8, GBS 32: 4 microbatches of 4,096 tokens. A layer's activations at the
    # analytic model's 17 bytes per token and hidden unit in bf16 are 2 x 4,096 x 4,096 x 17 =
    # 570 MB, down and back over PCIe at 50 GB/s: 22.8 ms per layer and microbatch at most.
    common = [
        "model.tensor_model_parallel_size=1",
        "train.micro_batch_size=1",
        "ddp.overlap_grad_reduce=false",
    ]
    plain = predict_step(job(*common)).step_time_s
    offload = ["model.cpu_offloading=true", "model.cpu_offloading_num_layers=16"]
    offloaded = predict_step(job(*common, *offload)).step_time_s
    transfer = 2 * 2 * 4096 * 4096 * 17 / 50e9
    assert 0 < offloaded - plain <= 4 * 16 * transfer


def test_an_fp32_job_runs_its_matmuls_on_the_fp32_units() -> None:
    # H100 SXM: 989.5 bf16 against 67 fp32 TFLOP/s (datasheet): the same job in fp32 is many
    # times slower, and the prediction says what it assumed
    bf16 = predict_step(job("model.tensor_model_parallel_size=2", "model.sequence_parallel=true"))
    fp32 = predict_step(
        job("model.tensor_model_parallel_size=2", "model.sequence_parallel=true", "model.bf16=false")
    )
    assert fp32.step_time_s > 5 * bf16.step_time_s
    assert "fp32 matmuls at the bf16 tables' fraction of the fp32 peak" in fp32.unmeasured


def local(*overrides: str):  # type: ignore[no-untyped-def]
    return job("model.transformer_impl=local", "model.attention_backend=flash", *overrides)


def test_the_optimizer_step_is_adams_kernel_and_megatrons_bytes_around_it() -> None:
    from memtune.estimate.params import chunk_params
    from memtune.perf.kernels import eager_kernels

    for d, kernel in ((local(), "foreach"), (job("model.transformer_impl=transformer_engine"), "fused")):
        assert d.adam_kernel == kernel
        # each of the 8 ranks holds its whole stage (PP 1) and DP shards it (distributed optimizer)
        held = sum(chunk_params(d, c).total for c in d.chunks[0])
        shard = held / d.dp if d.use_distributed_optimizer else held
        hbm = 3.35e12 * K.HBM_FRACTION  # the H100's catalog bandwidth
        per_param = 4.8 / 3.35 / eager_kernels().adam_params_per_s[kernel]  # timed on the H200
        per_param += K.OPTIMIZER_STEP_BYTES_PER_PARAM[d.use_distributed_optimizer] / hbm
        expected = shard * per_param + K.MEGATRON_LM_LOOP.step_s
        assert predict_step(d).simulated.stage_optimizer_s[0] == pytest.approx(expected)


def test_a_stage_with_both_ends_holds_the_embedding_and_an_untied_output_layer() -> None:
    from memtune.perf.kernels import eager_kernels

    tied = predict_step(job("model.share_embeddings_and_output_weights=true")).simulated
    d = job("model.share_embeddings_and_output_weights=false")
    untied = predict_step(d).simulated
    output_layer = d.padded_vocab_size * d.model.hidden_size / d.tp
    if d.use_distributed_optimizer:
        output_layer /= d.dp
    per_param = 4.8 / 3.35 / eager_kernels().adam_params_per_s["fused"]
    per_param += K.OPTIMIZER_STEP_BYTES_PER_PARAM[d.use_distributed_optimizer] / (3.35e12 * K.HBM_FRACTION)
    difference = untied.stage_optimizer_s[0] - tied.stage_optimizer_s[0]
    assert difference == pytest.approx(output_layer * per_param)


def test_local_spec_elementwise_work_comes_from_the_eager_tables() -> None:
    # the local spec's norms, RoPE, SwiGLU and residual additions are PyTorch's eager kernels,
    # timed slower than Transformer Engine's fused ones are priced (HBM passes)
    from memtune.catalog.gpus import get_gpu
    from memtune.perf.kernels import eager_kernels
    from memtune.perf.step import _Pricer

    d = local("model.tensor_model_parallel_size=1")
    fwd, _ = _Pricer(d, get_gpu("H100-80GB"), K.MEGATRON_LM_LOOP).eager_elementwise(is_moe=False)

    curves = eager_kernels().elementwise
    T, h, f = 4096, 4096, 14336
    on_h200 = (
        2 * curves["rmsnorm fwd"].seconds(T * h)
        + 2 * curves["bias dropout add"].seconds(T * h)
        + curves["rope"].seconds(T * (32 + 8) * 128)
        + curves["swiglu fwd"].seconds(T * 2 * f)
    )
    assert fwd == pytest.approx(on_h200 * 4.8 / 3.35)
    assert d.eager_elementwise and not job("model.transformer_impl=transformer_engine").eager_elementwise


def test_mla_on_the_sdpa_stand_in_runs_the_memory_efficient_kernel() -> None:
    mla = ["model.multi_latent_attention=true", "model.q_lora_rank=null", "model.kv_lora_rank=512",
           "model.qk_head_dim=128", "model.qk_pos_emb_head_dim=64", "model.v_head_dim=128"]  # fmt: skip
    assert local(*mla).memory_efficient_sdpa
    assert not job("model.transformer_impl=transformer_engine", *mla).memory_efficient_sdpa
    assert not local(*mla[:-1], "model.v_head_dim=192").memory_efficient_sdpa
    assert not local().memory_efficient_sdpa


def test_only_rotary_embeddings_rotate_q_and_k() -> None:
    assert job("model.position_embedding_type=rope").rotary_embeddings
    assert job("model.position_embedding_type=yarn").rotary_embeddings
    assert not job("model.position_embedding_type=learned_absolute").rotary_embeddings


def test_lora_adapters_pay_their_own_tensor_parallel_collectives() -> None:
    from memtune.catalog.gpus import get_gpu
    from memtune.peft.model import adapters_in_layer, regathers
    from memtune.perf.collectives import Group, Op, collective
    from memtune.perf.step import _Pricer

    base = base_job(Query("llama3-8b", 8, "H100-80GB", 8, 4096, 32, "lora"))

    def lora(*more: str):  # type: ignore[no-untyped-def]
        changes = ["model.tensor_model_parallel_size=2", "model.sequence_parallel=true", *more]
        return gate(with_changes(base, [Change.parse(c) for c in changes])).derived

    te, local = lora(), lora("model.transformer_impl=local")
    regather = lora("peft.sequence_parallel_input_regather=true")
    assert te.transformer_engine and te.lora_input_gathered_by_te and not local.lora_input_gathered_by_te
    gpu = get_gpu("H100-80GB")

    def price(op: Op, nbytes: float) -> float:
        return collective(op, nbytes, Group(2), te.network, gpu.name).seconds + K.COLLECTIVE_LAUNCH_S

    def collectives(d):  # type: ignore[no-untyped-def]
        return _Pricer(d, gpu, K.MEGATRON_LM_LOOP).adapter_collectives(False, Group(2))

    full = 2 * 4096 * 4096  # a [T, h] bf16 activation: MBS 1, sequence 4,096, hidden 4,096
    bottleneck = 2 * 4096 * te.job.peft.dim  # LoRA-A's output
    # two row adapters (linear_proj, linear_fc2) all-reduce LoRA-A's output and gather LoRA-B's,
    # and under SP gather the gradient of their sequence shard
    row_fwd = price(Op.ALL_REDUCE, bottleneck) + price(Op.ALL_GATHER, full)
    row_bwd = price(Op.ALL_REDUCE, bottleneck) + price(Op.ALL_GATHER, full)
    # two column adapters (linear_qkv, linear_fc1) gather LoRA-A's output; under TE the input
    # arrives gathered, on the local spec each gathers it and reduce-scatters its gradient
    column_fwd = price(Op.ALL_GATHER, bottleneck)
    column_bwd = price(Op.ALL_REDUCE, bottleneck)
    gather = price(Op.ALL_GATHER, full)
    scatter = price(Op.REDUCE_SCATTER, full)
    expected = {
        "te": (column_fwd, column_bwd),
        "local": (column_fwd + gather, column_bwd + scatter),
        # a re-gathering adapter gathers its shard itself, again in the backward, and scatters back
        "regather": (column_fwd + gather, column_bwd + gather + scatter),
    }
    for name, d in {"te": te, "local": local, "regather": regather}.items():
        fwd, bwd, mlp_fwd = collectives(d)
        col_fwd, col_bwd = expected[name]
        assert fwd == pytest.approx(2 * col_fwd + 2 * row_fwd), name
        assert bwd == pytest.approx(2 * col_bwd + 2 * row_bwd), name
        assert mlp_fwd == pytest.approx(col_fwd + row_fwd), name  # linear_fc1 and linear_fc2
    assert sum(regathers(regather, a) for a in adapters_in_layer(regather, False)) == 2
    # nothing hides the adapters' collectives: re-gathering costs what they add
    assert predict_step(regather).step_time_s > predict_step(te).step_time_s
    # and what the step model leaves out of a LoRA job, it says
    assert "LoRA adapters' own GEMMs, dropout and additions: not priced" in predict_step(te).unmeasured
