"""The job -> Megatron-Core translation that `memtune measure` hands its subprocess."""

from __future__ import annotations

import json

import pytest

from memtune.check import gate
from memtune.config import validate
from memtune.errors import InputError
from memtune.measure.plan import plan_measurement
from tests.jobs import build_job

BASE = {
    "defaults": "megatron-core",
    "model": dict(
        num_layers=8,
        hidden_size=1024,
        num_attention_heads=16,
        num_query_groups=4,
        vocab_size=50257,
        seq_length=2048,
        gated_linear_unit=True,
        activation_func="silu",
        normalization="RMSNorm",
        bf16=True,
        transformer_impl="local",
        attention_backend="flash",
    ),
}


def job(model=None, **sections):
    return build_job(BASE, model=model or {}, **sections)


def test_dense_tensor_parallel_keys_are_megatrons_after_derivation():
    plan = plan_measurement(gate(job({"tensor_model_parallel_size": 2, "sequence_parallel": True})), rank=1)
    tc = plan.transformer_config
    assert tc["ffn_hidden_size"] == 4096  # 4 * hidden_size, Megatron's default
    assert tc["kv_channels"] == 64  # 1024 / 16 heads
    assert tc["num_query_groups"] == 4
    assert tc["sequence_parallel"] is True
    assert tc["params_dtype"] == tc["pipeline_dtype"] == "bfloat16"
    assert tc["variable_seq_lengths"] is False
    assert tc["virtual_pipeline_model_parallel_size"] is None
    assert tc["activation_func"] == "silu"
    # 50257 padded to a multiple of 128 * TP 2 = 256: ceil(50257 / 256) * 256
    assert plan.model["vocab_size"] == 50432
    assert plan.world_size == 2 and plan.pp_rank == 0


def test_a_job_with_check_errors_never_reaches_the_gpu():
    # Regression: measure used to plan this and quietly turn SP off.
    with pytest.raises(InputError) as exc:
        gate(job({"sequence_parallel": True}))
    assert exc.value.problems == [
        "SEQ001 model.sequence_parallel=true with model.tensor_model_parallel_size=1"
    ]


def test_interleaved_pipeline_rank_gets_its_own_virtual_chunks():
    # TP2 x PP2 x DP4 = 16 ranks; order tp-cp-ep-dp-pp puts ranks 8..15 on stage 1.
    j = job(
        {
            "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 2,
            "virtual_pipeline_model_parallel_size": 2,
            "pipeline_dtype": "bf16",
        },
        train={"micro_batch_size": 1, "global_batch_size": 16},
        cluster={"num_gpus": 16},
    )
    plan = plan_measurement(gate(j), rank=8)
    assert plan.pp_rank == 1
    # 8 layers over 2 stages x 2 virtual stages: stage 1 builds layers 2-3 and 6-7, and only
    # its last virtual stage holds the output layer.
    assert [(c.vp_stage, c.pre_process, c.post_process, c.num_layers) for c in plan.chunks] == [
        (0, False, False, 2),
        (1, False, True, 2),
    ]
    assert plan.schedule == {
        "num_microbatches": 4,
        "seq_length": 2048,
        "micro_batch_size": 1,
    }  # 16 / (1 * DP 4)
    assert plan.parallel_state["virtual_pipeline_model_parallel_size"] == 2
    assert plan_measurement(gate(j), rank=7).pp_rank == 0


def test_moe_routing_is_forced_balanced_and_expert_parallel_sizes_pass_through():
    j = job(
        {
            "num_moe_experts": 8,
            "moe_router_topk": 2,
            "moe_ffn_hidden_size": 512,
            "expert_model_parallel_size": 4,
            "moe_token_dispatcher_type": "alltoall",
        }
    )
    plan = plan_measurement(gate(j), rank=3)
    tc = plan.transformer_config
    assert tc["moe_router_force_load_balancing"] is True
    assert tc["moe_aux_loss_coeff"] == 0.0
    assert tc["moe_token_dispatcher_type"] == "alltoall"
    assert tc["moe_ffn_hidden_size"] == 512
    assert plan.parallel_state["expert_model_parallel_size"] == 4
    assert plan.parallel_state["expert_tensor_parallel_size"] == 1  # ETP defaults to TP
    assert plan.world_size == 4  # the smallest world holding EP 4


@pytest.mark.parametrize(
    ("impl", "backend", "core"),
    [
        ("local", "flash", "sdpa"),
        ("local", "fused", "sdpa"),
        ("local", "unfused", "megatron_dot_product"),
        ("local", "auto", "megatron_dot_product"),
        ("transformer_engine", "auto", "transformer_engine"),
    ],
)
def test_core_attention_follows_backend(impl, backend, core):
    plan = plan_measurement(gate(job({"transformer_impl": impl, "attention_backend": backend})), rank=0)
    assert plan.core_attention == core
    assert plan.layer_spec == ("transformer_engine" if impl == "transformer_engine" else "local")


def test_distributed_optimizer_and_grad_dtype_reach_ddp_and_optimizer():
    j = job(
        optimizer={"use_distributed_optimizer": True}, ddp={"grad_reduce_in_fp32": True, "bucket_size": 1000}
    )
    plan = plan_measurement(gate(j), rank=0)
    assert plan.ddp["use_distributed_optimizer"] is True
    assert plan.optimizer["use_distributed_optimizer"] is True
    assert plan.ddp["grad_reduce_in_fp32"] is True
    assert plan.ddp["bucket_size"] == 1000
    assert plan.optimizer["bf16"] is True and plan.optimizer["params_dtype"] == "bfloat16"


def test_allocator_settings_go_to_the_subprocess_environment():
    plan = plan_measurement(gate(job(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})), rank=0)
    assert plan.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert plan_measurement(gate(job()), rank=0).env == {}


def test_plan_is_json_and_its_config_reloads_to_the_same_job():
    j = job({"tensor_model_parallel_size": 2}, train={"micro_batch_size": 2, "global_batch_size": 8})
    plan = plan_measurement(gate(j), rank=0)
    assert json.loads(json.dumps(plan.to_json()))["rank"] == 0
    assert validate(plan.config) == j


@pytest.mark.parametrize(
    ("model", "sections", "rank", "iterations", "message"),
    [
        ({}, {}, 1, 3, "--rank 1: must be between 0 and 0 (world size 1)"),
        ({}, {}, 0, 1, "--iters 1: needs at least 2 (Adam creates its state at the first step)"),
        (
            {"context_parallel_size": 2},
            {},
            0,
            3,
            "model.context_parallel_size > 1: the local layer spec has no context-parallel attention",
        ),
        (
            {"bf16": False},
            {},
            0,
            3,
            "model.attention_backend flash: PyTorch's flash kernels need bf16 or fp16; use unfused for fp32",
        ),
        (
            {"recompute_granularity": "selective", "recompute_modules": ["layernorm", "mlp"]},
            {},
            0,
            3,
            "model.recompute_modules ['layernorm']: megatron-core 0.19.2's output-discarding checkpoint "
            "calls Transformer Engine, so these fail on the local spec",
        ),
        (
            {"pipeline_model_parallel_size": 2, "pipeline_dtype": "bf16", "num_layers": 4},
            {
                "ddp": {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads"},
                "cluster": {"num_gpus": 4},
            },
            0,
            3,
            "ddp.use_megatron_fsdp with pipeline_model_parallel_size > 1: megatron-core 0.19.2's Megatron-FSDP "
            "lays its device mesh over the whole world as (dp_cp, ep, tp) and fails with PP",
        ),
        (
            {"window_size": [127, 0]},
            {},
            0,
            3,
            "model.window_size / model.softmax_type: memtune's SDPA attention has no sliding window or softmax "
            "offset; use attention_backend: unfused (Megatron's DotProductAttention has both)",
        ),
        (
            {"cpu_offloading": True, "cpu_offloading_num_layers": 1},
            {},
            0,
            3,
            "model.cpu_offloading: megatron-core 0.19.2's layer-wise offload context needs Transformer Engine; "
            "use fine_grained_activation_offloading",
        ),
        (
            {"tensor_model_parallel_size": 2},
            {"cluster": {"num_gpus": 3}},
            0,
            3,
            "PAR001 cluster.num_gpus=3 is not divisible by TP×PP×CP = 2×1×1 = 2",
        ),
    ],
)
def test_refusals_are_one_line_each(model, sections, rank, iterations, message):
    with pytest.raises(InputError) as exc:
        plan_measurement(gate(job(model, **sections)), rank=rank, iterations=iterations)
    assert message in exc.value.problems


def test_sliding_window_and_sinks_reach_the_transformer_config():
    attention = {"attention_backend": "unfused", "window_size": [127, 0], "window_attn_skip_freq": 2}
    config = plan_measurement(
        gate(job({**attention, "softmax_type": "learnable"})), rank=0
    ).transformer_config
    assert (config["window_size"], config["window_attn_skip_freq"], config["softmax_type"]) == (
        (127, 0),
        2,
        "learnable",
    )
    plain = plan_measurement(gate(job({"attention_backend": "unfused"})), rank=0).transformer_config
    assert "window_size" not in plain and "softmax_type" not in plain


def test_mtp_layers_reach_the_transformer_config():
    plan = plan_measurement(gate(job({"mtp_num_layers": 2})), rank=0)
    assert plan.transformer_config["mtp_num_layers"] == 2
    assert "mtp_num_layers" not in plan_measurement(gate(job()), rank=0).transformer_config


def test_megatron_fsdp_is_planned_with_its_strategy_and_the_distributed_optimizer():
    ddp = {"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"}
    plan = plan_measurement(gate(job(ddp=ddp, cluster={"num_gpus": 4})), rank=0)
    assert plan.ddp["use_megatron_fsdp"] is True
    assert plan.ddp["data_parallel_sharding_strategy"] == "optim_grads_params"
    assert plan.ddp["use_distributed_optimizer"] is True
    assert plan.optimizer["use_distributed_optimizer"] is True


def test_optimizer_offload_is_planned_with_the_precision_aware_optimizer():
    optimizer = {
        "use_distributed_optimizer": True,
        "use_precision_aware_optimizer": True,
        "optimizer_cpu_offload": True,
        "optimizer_offload_fraction": 0.5,
        "overlap_cpu_optimizer_d2h_h2d": True,
    }
    plan = plan_measurement(gate(job(optimizer=optimizer)), rank=0)
    assert plan.optimizer["optimizer_cpu_offload"] is True
    assert plan.optimizer["optimizer_offload_fraction"] == 0.5
    assert plan.optimizer["overlap_cpu_optimizer_d2h_h2d"] is True
    assert plan.optimizer["use_precision_aware_optimizer"] is True


def test_manual_gc_reaches_the_runner():
    assert plan_measurement(gate(job(train={"manual_gc": True})), rank=0).manual_gc is True
    assert plan_measurement(gate(job()), rank=0).manual_gc is False


def test_fine_grained_activation_offloading_reaches_megatron_with_its_settings():
    offload = {
        "fine_grained_activation_offloading": True,
        "offload_modules": ["attn_norm", "core_attn"],
        "min_offloaded_tensor_size": 4096,
        "activation_offload_fraction": 0.5,
    }
    plan = plan_measurement(gate(job(offload)), rank=0)
    assert {key: plan.transformer_config[key] for key in offload} == offload
    assert "offload_modules" not in plan_measurement(gate(job()), rank=0).transformer_config


def test_the_runner_stands_in_for_transformer_engines_offload_flag_only_when_it_is_absent(monkeypatch):
    import sys
    import types

    from memtune.measure.runner import _stand_in_for_te_offload_flag

    extension = types.ModuleType("megatron.core.extensions.transformer_engine")
    extension.cpu_offload = None  # what megatron-core sets when Transformer Engine is missing
    package = types.ModuleType("megatron.core.extensions")
    package.transformer_engine = extension
    monkeypatch.setitem(sys.modules, "megatron.core.extensions", package)
    monkeypatch.setitem(sys.modules, "megatron.core.extensions.transformer_engine", extension)
    offloading = {"transformer_config": {"fine_grained_activation_offloading": True}}
    assert _stand_in_for_te_offload_flag({"transformer_config": {}}) is False
    assert extension.cpu_offload is None
    assert _stand_in_for_te_offload_flag(offloading) is True
    assert extension.cpu_offload.CPUOffloadEnabled is False
    real = extension.cpu_offload = types.SimpleNamespace(CPUOffloadEnabled=False)
    assert _stand_in_for_te_offload_flag(offloading) is False
    assert extension.cpu_offload is real


def test_lora_jobs_plan_memtune_peft_with_the_jobs_lora_settings():
    lora = {
        "dim": 16,
        "alpha": 32,
        "target_modules": ["linear_qkv", "linear_fc1"],
        "sequence_parallel_input_regather": True,
    }
    plan = plan_measurement(
        gate(job({"tensor_model_parallel_size": 2, "sequence_parallel": True}, peft=lora)), rank=0
    )
    assert plan.peft == {**lora, "dropout": 0.0, "scale_position": "bottleneck", "a2a_experimental": False}
    assert plan_measurement(gate(job()), rank=0).peft is None


def test_the_runner_builds_lora_with_the_planned_keyword_arguments():
    from memtune.peft.lora import LoRA

    plan = plan_measurement(gate(job(peft={"dim": 8})), rank=0)
    assert LoRA(**{**plan.peft, "target_modules": tuple(plan.peft["target_modules"])}).dim == 8


def test_fusions_reach_megatron_and_name_the_extensions_they_need():
    from memtune.measure.runner import _needed_extensions

    fused = {
        "attention_backend": "unfused",
        "masked_softmax_fusion": True,
        "gradient_accumulation_fusion": True,
        "cross_entropy_loss_fusion": True,
    }
    plan = plan_measurement(gate(job(fused)), rank=0).to_json()
    tc = plan["transformer_config"]
    assert (tc["masked_softmax_fusion"], tc["gradient_accumulation_fusion"]) == (True, True)
    assert (tc["cross_entropy_loss_fusion"], tc["cross_entropy_fusion_impl"]) == (True, "native")
    assert _needed_extensions(plan) == [
        "scaled_upper_triang_masked_softmax_cuda",
        "scaled_masked_softmax_cuda",
        "fused_weight_gradient_mlp_cuda",
    ]
    # Flash attention never reaches the softmax kernel; fp32 scores fail its first test.
    flash = plan_measurement(gate(job({**fused, "attention_backend": "flash"})), rank=0).to_json()
    assert _needed_extensions(flash) == ["fused_weight_gradient_mlp_cuda"]


def test_te_cross_entropy_is_refused_on_the_local_spec():
    with pytest.raises(InputError, match="cross_entropy_fusion_impl te: needs transformer_impl"):
        plan_measurement(
            gate(job({"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "te"})), rank=0
        )


def test_deferred_embedding_wgrad_is_refused_on_the_local_spec():
    # Measured on the H200: all five runs failed in ColumnParallelLinear.forward (embedding buffer None).
    model = {
        "pipeline_model_parallel_size": 2,
        "pipeline_dtype": "bf16",
        "defer_embedding_wgrad_compute": True,
    }
    with pytest.raises(InputError, match="model.defer_embedding_wgrad_compute: megatron-core 0.19.2's local"):
        plan_measurement(gate(job(model, cluster={"num_gpus": 2})), rank=1)


def test_a_clamped_activation_reaches_the_transformer_config():
    clamped = {"activation_func": "quick_gelu", "activation_func_clamp_value": 7.0}
    config = plan_measurement(gate(job(clamped)), rank=0).transformer_config
    assert config["activation_func_clamp_value"] == 7.0
    assert "activation_func_clamp_value" not in plan_measurement(gate(job({})), rank=0).transformer_config
