"""One config that triggers each rule and one near miss that does not, as overrides on BASE."""

from __future__ import annotations

import pytest

from memtune.check.registry import catalogue
from memtune.estimate import check_with_estimate
from tests.check.check_fixtures import make_job

PP1 = "model.pipeline_model_parallel_size=1"
MOE8 = "model.num_moe_experts=8"
SHARED = "model.moe_shared_expert_intermediate_size=1024"
SELECTIVE = "model.recompute_granularity=selective"
FULL = ("model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1")
OFFLOAD4 = ("model.cpu_offloading=true", "model.cpu_offloading_num_layers=4")
DISTOPT = ("optimizer.use_distributed_optimizer=true", "ddp.use_distributed_optimizer=true")
EXPANDABLE = "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
NEW_EXPANDABLE = "env.PYTORCH_ALLOC_CONF=expandable_segments:True"
TE_GRAPHS = "model.cuda_graph_impl=transformer_engine"
REGISTER_OFF = 'env.NCCL_GRAPH_REGISTER="0"'
REGATHER = "peft.sequence_parallel_input_regather=true"
VPP2 = "model.virtual_pipeline_model_parallel_size=2"
LOCAL = ("model.transformer_impl=local", "model.attention_backend=flash")
FSDP = "ddp.use_megatron_fsdp=true"
FP8_ATTENTION = ("model.fp8=hybrid", "model.fp8_recipe=delayed", "model.fp8_dot_product_attention=true")

# code: (overrides that trigger it, overrides that come close but do not)
CASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "PAR001": (("cluster.num_gpus=14",), ("cluster.num_gpus=24",)),
    "PAR002": (
        (
            MOE8,
            "model.expert_model_parallel_size=8",
            "model.expert_tensor_parallel_size=1",
            "cluster.num_gpus=12",
        ),
        (
            MOE8,
            "model.expert_model_parallel_size=8",
            "model.expert_tensor_parallel_size=1",
            "cluster.num_gpus=16",
        ),
    ),
    "PAR003": (
        ("model.tensor_model_parallel_size=8", "model.num_attention_heads=36", "model.num_query_groups=4"),
        ("model.tensor_model_parallel_size=4", "model.num_attention_heads=36", "model.num_query_groups=4"),
    ),
    "PAR004": (
        ("model.tensor_model_parallel_size=16", "cluster.num_gpus=32", "env.megatron_core_version=0.15.0"),
        ("model.tensor_model_parallel_size=16", "cluster.num_gpus=32", "env.megatron_core_version=0.16.0"),
    ),
    "PAR005": (("model.ffn_hidden_size=14335",), ("model.ffn_hidden_size=14334",)),
    "PAR006": (("model.pipeline_dtype=null",), ("model.pipeline_dtype=null", PP1)),
    "PIP001": (("model.num_layers=31",), ("model.num_layers=30",)),
    "PIP002": (
        ("model.virtual_pipeline_model_parallel_size=3",),
        ("model.virtual_pipeline_model_parallel_size=4",),
    ),
    "PIP003": (
        ("model.num_layers_in_first_pipeline_stage=0",),
        ("model.num_layers_in_first_pipeline_stage=16",),
    ),
    "PIP004": (
        ("model.num_layers_in_first_pipeline_stage=16", "model.account_for_loss_in_pipeline_split=true"),
        ("model.num_layers_in_first_pipeline_stage=16",),
    ),
    "PIP005": (
        ("model.virtual_pipeline_model_parallel_size=2", "model.num_layers_in_first_pipeline_stage=15"),
        ("model.virtual_pipeline_model_parallel_size=2", "model.num_layers_in_first_pipeline_stage=16"),
    ),
    "PIP006": (
        ("model.num_layers_in_first_pipeline_stage=15", "model.num_layers_in_last_pipeline_stage=15"),
        ("model.num_layers_in_first_pipeline_stage=16", "model.num_layers_in_last_pipeline_stage=16"),
    ),
    "PIP007": (
        ("model.pipeline_model_parallel_size=4", "model.num_layers_in_first_pipeline_stage=7"),
        ("model.pipeline_model_parallel_size=4", "model.num_layers_in_first_pipeline_stage=8"),
    ),
    "PIP008": (
        (
            "model.pipeline_model_parallel_size=4",
            "model.virtual_pipeline_model_parallel_size=2",
            "model.num_layers=30",
            "model.num_layers_in_first_pipeline_stage=6",
            "model.num_layers_in_last_pipeline_stage=6",
        ),
        (
            "model.pipeline_model_parallel_size=4",
            "model.virtual_pipeline_model_parallel_size=2",
            "model.num_layers=32",
            "model.num_layers_in_first_pipeline_stage=6",
            "model.num_layers_in_last_pipeline_stage=6",
        ),
    ),
    "PIP009": ((PP1, "model.virtual_pipeline_model_parallel_size=2"), (PP1,)),
    "PIP010": (
        ("model.virtual_pipeline_model_parallel_size=2", "train.global_batch_size=4"),
        ("model.virtual_pipeline_model_parallel_size=2", "train.global_batch_size=8"),
    ),
    "PIP011": (("model.virtual_pipeline_model_parallel_size=2",), ()),
    "PIP012": (
        ("model.virtual_pipeline_model_parallel_size=2", "train.global_batch_size=12"),
        ("model.virtual_pipeline_model_parallel_size=2", "train.global_batch_size=16"),
    ),
    "SEQ001": (
        ("model.tensor_model_parallel_size=1",),
        ("model.tensor_model_parallel_size=1", "model.sequence_parallel=false"),
    ),
    "SEQ002": (
        ("model.context_parallel_size=2", "model.seq_length=8190"),
        ("model.context_parallel_size=2",),
    ),
    "SEQ003": (("model.seq_length=8191",), ("model.seq_length=8190",)),
    "SEQ004": (("model.sequence_parallel=false",), ()),
    "SEQ005": (
        ("model.context_parallel_size=8", "model.cp_comm_type=a2a", "cluster.num_gpus=32"),
        ("model.context_parallel_size=4", "model.cp_comm_type=a2a"),
    ),
    "SEQ006": (
        ("model.context_parallel_size=4", "model.cp_comm_type=a2a+p2p"),
        (
            "model.context_parallel_size=4",
            "model.cp_comm_type=a2a+p2p",
            "model.hierarchical_context_parallel_sizes=[2,2]",
        ),
    ),
    "SEQ007": (
        ("model.window_size=[127,0]", "model.context_parallel_size=2", "cluster.num_gpus=32"),
        (
            "model.window_size=[127,0]",
            "model.context_parallel_size=2",
            "model.cp_comm_type=all_gather",
            "cluster.num_gpus=32",
        ),
    ),
    "SEQ008": (
        ("model.softmax_type=learnable", "model.context_parallel_size=2", "cluster.num_gpus=32"),
        (
            "model.softmax_type=learnable",
            "model.context_parallel_size=2",
            "model.cp_comm_type=a2a",
            "cluster.num_gpus=32",
        ),
    ),
    "SEQ009": (
        ("model.softmax_type=learnable", "model.attention_backend=flash"),
        ("model.softmax_type=learnable", "model.attention_backend=auto"),
    ),
    "SEQ010": (
        ("defaults=megatron-lm", "model.tp_comm_overlap=true", "model.sequence_parallel=false"),
        ("defaults=megatron-lm", "model.tp_comm_overlap=true", "model.sequence_parallel=true"),
    ),
    "SEQ011": (
        ("model.tp_comm_overlap_cfg={proj_fprop: {method: ring_exchange}}",),
        ("model.tp_comm_overlap_cfg={proj_fprop: {method: ring_exchange}}", "model.tp_comm_overlap=true"),
    ),
    "SEQ012": (
        ("model.qk_layernorm=true", "model.test_mode=true"),
        ("model.qk_layernorm=false", "model.test_mode=true"),
    ),
    "SEQ013": (
        ("model.normalization=RMSNorm", "model.qk_layernorm=true", "model.test_mode=true"),
        ("model.normalization=LayerNorm", "model.qk_layernorm=true", "model.test_mode=true"),
    ),
    "SEQ014": (
        (*FP8_ATTENTION, "model.attention_backend=flash"),
        (*FP8_ATTENTION, "model.attention_backend=fused"),
    ),
    "SEQ015": (
        (*FP8_ATTENTION, "model.fp8_recipe=tensorwise"),
        (*FP8_ATTENTION, "model.fp8_recipe=tensorwise", "cluster.gpu=B200"),
    ),
    "SEQ016": (
        (*FP8_ATTENTION, "model.fp8_recipe=blockwise"),
        FP8_ATTENTION,
    ),
    "MOE001": (("model.expert_model_parallel_size=2",), (MOE8, "model.expert_model_parallel_size=2")),
    "MOE002": (
        ("model.num_moe_experts=6", "model.expert_model_parallel_size=4"),
        ("model.num_moe_experts=8", "model.expert_model_parallel_size=4"),
    ),
    "MOE003": (
        (MOE8, "model.expert_model_parallel_size=2", "model.sequence_parallel=false"),
        (MOE8, "model.expert_model_parallel_size=2"),
    ),
    "MOE004": ((MOE8, "model.moe_ffn_hidden_size=1407"), (MOE8, "model.moe_ffn_hidden_size=1408")),
    "MOE005": (
        (MOE8, SHARED, "model.moe_shared_expert_overlap=true"),
        (MOE8, SHARED, "model.moe_shared_expert_overlap=true", "model.moe_token_dispatcher_type=alltoall"),
    ),
    "MOE006": (("model.moe_grouped_gemm=true",), (MOE8, "model.moe_grouped_gemm=true")),
    "MOE007": ((MOE8,), (MOE8, "model.add_bias_linear=false")),
    "REC001": (("model.recompute_granularity=full", "model.recompute_num_layers=1"), FULL),
    "REC002": ((*FULL[:2], "model.recompute_num_layers=17"), (*FULL[:2], "model.recompute_num_layers=16")),
    "REC003": ((SELECTIVE, "model.recompute_num_layers=2"), (SELECTIVE,)),
    "REC004": (("model.recompute_method=uniform",), FULL),
    "REC005": (("model.recompute_modules=[mlp]",), (SELECTIVE, "model.recompute_modules=[mlp]")),
    "REC006": (
        (SELECTIVE, "model.recompute_modules=[shared_experts]", "env.megatron_core_version=0.13.1"),
        (SELECTIVE, "model.recompute_modules=[shared_experts]", "env.megatron_core_version=0.14.0"),
    ),
    "REC007": (
        (MOE8, SELECTIVE, "model.recompute_modules=[moe_act]"),
        (MOE8, SELECTIVE, "model.recompute_modules=[moe_act]", "model.moe_grouped_gemm=true"),
    ),
    "REC008": (
        (SELECTIVE, "model.recompute_modules=[mla_up_proj]"),
        (SELECTIVE, "model.recompute_modules=[mla_up_proj]", "model.multi_latent_attention=true"),
    ),
    "REC009": (
        (
            MOE8,
            SHARED,
            "model.moe_token_dispatcher_type=alltoall",
            "model.moe_shared_expert_overlap=true",
            SELECTIVE,
            "model.recompute_modules=[shared_experts]",
        ),
        (
            MOE8,
            SHARED,
            "model.moe_token_dispatcher_type=alltoall",
            SELECTIVE,
            "model.recompute_modules=[shared_experts]",
        ),
    ),
    "REC010": (
        ("model.fp8=hybrid", SELECTIVE, "model.recompute_modules=[layernorm]"),
        ("model.fp8=hybrid", "model.fp8_recipe=tensorwise", SELECTIVE, "model.recompute_modules=[layernorm]"),
    ),
    "REC011": ((SELECTIVE,), (SELECTIVE, "model.attention_backend=unfused")),
    "REC012": ((SELECTIVE, "model.recompute_modules=[moe]"), (SELECTIVE, "model.recompute_modules=[mlp]")),
    "REC013": (
        ("model.distribute_saved_activations=true",),
        ("model.distribute_saved_activations=true", "model.sequence_parallel=false", *FULL),
    ),
    "REC015": (
        (*LOCAL, SELECTIVE, "model.recompute_modules=[layernorm]"),
        ("model.transformer_impl=transformer_engine", SELECTIVE, "model.recompute_modules=[layernorm]"),
    ),
    "REC014": (
        ("model.distribute_saved_activations=true", "model.sequence_parallel=false"),
        ("model.distribute_saved_activations=true", "model.sequence_parallel=false", *FULL),
    ),
    "OFF001": (OFFLOAD4, (*OFFLOAD4, PP1)),
    "OFF002": ((*OFFLOAD4, PP1, SELECTIVE), (*OFFLOAD4, PP1)),
    "OFF003": ((*OFFLOAD4, PP1, TE_GRAPHS), (*OFFLOAD4, PP1, "model.cuda_graph_impl=full_iteration")),
    "OFF004": (
        (PP1, "model.cpu_offloading=true", "model.cpu_offloading_num_layers=32"),
        (PP1, "model.cpu_offloading=true", "model.cpu_offloading_num_layers=31"),
    ),
    "OFF005": ((PP1, "model.cpu_offloading=true"), (*OFFLOAD4, PP1)),
    "OFF006": (
        ("optimizer.optimizer_cpu_offload=true", "optimizer.use_precision_aware_optimizer=true"),
        ("optimizer.optimizer_cpu_offload=true", "optimizer.use_precision_aware_optimizer=true", *DISTOPT),
    ),
    "OFF007": (
        ("optimizer.optimizer_cpu_offload=true", *DISTOPT),
        ("optimizer.optimizer_cpu_offload=true", *DISTOPT, "optimizer.use_precision_aware_optimizer=true"),
    ),
    "OFF008": (
        ("optimizer.optimizer_offload_fraction=0.5",),
        ("optimizer.optimizer_offload_fraction=0.5", "optimizer.optimizer_cpu_offload=true"),
    ),
    "OFF009": (
        ("model.fine_grained_activation_offloading=true", "model.offload_modules=[attn_proj]"),
        ("model.fine_grained_activation_offloading=true", "model.offload_modules=[attn_proj,core_attn]"),
    ),
    "OFF010": (
        ("model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn]", VPP2, *FULL),
        ("model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn]", *FULL),
    ),
    "ENV001": (
        (EXPANDABLE, "env.use_nccl_ub=true", "env.torch_version=2.10.0"),
        (EXPANDABLE, "env.use_nccl_ub=true", "env.torch_version=2.11.0"),
    ),
    "ENV002": (
        (EXPANDABLE, "env.use_nccl_ub=true", "env.torch_version=2.11.0"),
        (EXPANDABLE, "env.torch_version=2.11.0"),
    ),
    "ENV003": ((TE_GRAPHS, EXPANDABLE), (TE_GRAPHS, EXPANDABLE, REGISTER_OFF)),
    "ENV004": (
        ("model.cuda_graph_impl=local", EXPANDABLE, "env.megatron_core_version=0.15.0"),
        ("model.cuda_graph_impl=local", EXPANDABLE, "env.megatron_core_version=0.16.0", REGISTER_OFF),
    ),
    "ENV005": ((TE_GRAPHS, NEW_EXPANDABLE), (TE_GRAPHS, NEW_EXPANDABLE, REGISTER_OFF)),
    "ENV006": ((NEW_EXPANDABLE, "env.torch_version=2.9.1"), (NEW_EXPANDABLE, "env.torch_version=2.11.0")),
    "ENV007": (
        ("env.PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync,expandable_segments:True",),
        ("env.PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync",),
    ),
    "ENV008": ((EXPANDABLE,), (NEW_EXPANDABLE, "env.torch_version=2.9.1")),
    "ENV009": ((TE_GRAPHS, *FULL), ("model.cuda_graph_impl=full_iteration", *FULL)),
    "ENV010": (("model.cuda_graph_scope=[attn]",), ("model.cuda_graph_scope=[attn]", TE_GRAPHS)),
    "ENV011": ((TE_GRAPHS,), (TE_GRAPHS, PP1)),
    "ENV012": (("env.PYTORCH_CUDA_ALLOC_CONF=expandable_segment:True",), (EXPANDABLE,)),
    # the base job needs 44.58 GiB with the 8% fragmentation margin, 42.30 GiB with 2%
    "ENV014": (("cluster.gpu_memory_gib=46",), ("cluster.gpu_memory_gib=46", EXPANDABLE)),
    "ENV013": (
        ("defaults=megatron-lm", 'env.CUDA_DEVICE_MAX_CONNECTIONS="32"'),
        ("defaults=megatron-lm", 'env.CUDA_DEVICE_MAX_CONNECTIONS="32"', "cluster.gpu=B200"),
    ),
    "OPT001": (("optimizer.use_distributed_optimizer=true",), DISTOPT),
    "OPT002": (
        ("ddp.use_megatron_fsdp=true",),
        ("ddp.use_megatron_fsdp=true", "ddp.data_parallel_sharding_strategy=optim_grads_params"),
    ),
    "OPT003": (
        ("ddp.data_parallel_sharding_strategy=optim",),
        ("ddp.data_parallel_sharding_strategy=optim", "ddp.use_megatron_fsdp=true"),
    ),
    "OPT004": (("ddp.overlap_param_gather=true",), ("ddp.overlap_param_gather=true", *DISTOPT)),
    "OPT005": (
        ("model.fp8=hybrid", "model.fp8_param_gather=true"),
        ("model.fp8=hybrid", "model.fp8_param_gather=true", *DISTOPT),
    ),
    "OPT006": (
        ("model.fp8_param_gather=true", *DISTOPT),
        ("model.fp8_param_gather=true", *DISTOPT, "model.fp8=hybrid"),
    ),
    "OPT007": (
        ("optimizer.use_precision_aware_optimizer=true",),
        ("optimizer.use_precision_aware_optimizer=true", *DISTOPT),
    ),
    "OPT008": (
        ("optimizer.use_precision_aware_optimizer=true", *DISTOPT, "optimizer.optimizer=sgd"),
        ("optimizer.use_precision_aware_optimizer=true", *DISTOPT),
    ),
    "OPT009": (
        ("optimizer.exp_avg_dtype=bf16",),
        ("optimizer.exp_avg_dtype=bf16", "optimizer.use_precision_aware_optimizer=true", *DISTOPT),
    ),
    "OPT010": (("model.fp16=true",), ("model.fp16=true", "model.bf16=false")),
    "OPT011": (("model.bf16=false",), ("model.bf16=false", "model.fp16=true")),
    # Megatron-Bridge ties the format to FSDP only when the job loads or saves a checkpoint.
    "OPT012": (
        ("defaults=megatron-bridge", FSDP, "checkpoint.load=/ckpt"),
        ("defaults=megatron-bridge", FSDP),
    ),
    "OPT013": (
        (
            "defaults=megatron-lm",
            FSDP,
            "checkpoint.ckpt_format=fsdp_dtensor",
            'env.CUDA_DEVICE_MAX_CONNECTIONS="1"',
        ),
        ("defaults=megatron-core", FSDP, 'env.CUDA_DEVICE_MAX_CONNECTIONS="1"'),
    ),
    "OPT014": (
        ("defaults=megatron-lm", "checkpoint.ckpt_format=fsdp_dtensor"),
        ("defaults=megatron-lm", "checkpoint.ckpt_format=fsdp_dtensor", FSDP),
    ),
    "OPT015": (
        ("model.fp8=hybrid", "model.disable_parameter_transpose_cache=true"),
        (
            *DISTOPT,
            "model.fp8=hybrid",
            "model.fp8_param_gather=true",
            "model.disable_parameter_transpose_cache=true",
        ),
    ),
    "PFT001": (
        (REGATHER, "model.tensor_model_parallel_size=1", "model.sequence_parallel=false"),
        (REGATHER,),
    ),
    "PFT002": ((REGATHER, SELECTIVE, "model.recompute_modules=[mlp]"), (REGATHER,)),
    "PFT003": (("peft.dim=16",), (REGATHER,)),
    "PFT004": (
        ("peft.a2a_experimental=true", "peft.target_modules=[linear_qkv,linear_fc1]"),
        ("peft.a2a_experimental=true",),
    ),
    "BAT001": (("train.global_batch_size=62",), ("train.global_batch_size=60",)),
    "BAT002": (("cluster.num_gpus=null",), ()),
}


def test_base_config_is_clean():
    assert check_with_estimate(make_job()) == []


def test_tp_comm_overlap_without_sp_is_a_warning_where_the_stack_turns_it_off():
    # Megatron-Bridge disables the overlap with a warning; Megatron-Core's TE layers leave it off
    for stack, upstream in (("megatron-bridge", "Disabling tensor parallel communication overlap due to "
                             "sequence_parallel=False."), ("megatron-core", None)):  # fmt: skip
        job = make_job(f"defaults={stack}", "model.tp_comm_overlap=true", "model.sequence_parallel=false")
        (finding,) = [f for f in check_with_estimate(job) if f.code == "SEQ010"]
        assert (finding.severity, finding.upstream) == ("warning", upstream)
        assert (
            finding.message
            == f"model.tp_comm_overlap=true with model.sequence_parallel=false: {stack} leaves the overlap off"
        )


def test_every_rule_has_a_case():
    assert set(CASES) == {r.code for r in catalogue()}


@pytest.mark.parametrize("code", sorted(CASES))
def test_rule_fires_on_trigger(code):
    trigger, _ = CASES[code]
    findings = [f for f in check_with_estimate(make_job(*trigger)) if f.code == code]
    assert len(findings) == 1
    rule = next(r for r in catalogue() if r.code == code)
    assert findings[0].severity == rule.severity
    assert findings[0].message and "\n" not in findings[0].message
    assert findings[0].fix and "\n" not in findings[0].fix


@pytest.mark.parametrize("code", sorted(CASES))
def test_rule_silent_on_near_miss(code):
    _, clean = CASES[code]
    assert code not in {f.code for f in check_with_estimate(make_job(*clean))}


def test_test_mode_counts_the_host_reads_of_a_step():
    # 8 GPUs at TP 4: DP 2, so 4 x (2 + 4) = 24 comparisons an attention forward; GBS 32 of MBS 4
    # over DP 2 is 4 microbatches through 12 layers: 24 x 12 x 4 = 1,152 a step
    job = make_job(
        "model.num_layers=12", "model.tensor_model_parallel_size=4", "model.pipeline_model_parallel_size=1",
        "model.sequence_parallel=false", "model.qk_layernorm=true", "model.test_mode=true",
        "train.micro_batch_size=4", "train.global_batch_size=32", "cluster.num_gpus=8",
    )  # fmt: skip
    (finding,) = [f for f in check_with_estimate(job) if f.code == "SEQ012"]
    assert finding.message == (
        "model.test_mode=true with model.qk_layernorm=true: each attention forward reads 24 "
        "consistency comparisons on the host, 1,152 a step on a pipeline rank of 12 layers, each a "
        "wait for the GPU"
    )


def test_test_mode_on_rmsnorm_qk_norms_is_the_first_forwards_attribute_error():
    job = make_job("model.normalization=RMSNorm", "model.qk_layernorm=true", "model.test_mode=true")
    (finding,) = [f for f in check_with_estimate(job) if f.code == "SEQ013"]
    assert (finding.severity, finding.upstream) == (
        "error",
        "AttributeError: 'RMSNorm' object has no attribute 'bias'",
    )


def test_env014_says_how_much_a_job_that_fits_has_to_spare_against_its_fragmentation_margin() -> None:
    def env014(capacity_gib: int) -> list[str]:
        job = make_job(f"cluster.gpu_memory_gib={capacity_gib}")
        return [f.message for f in check_with_estimate(job) if f.code == "ENV014"]

    # the job needs 44.58 GiB with the 8% margin of expandable segments off, 42.30 GiB with them on
    assert env014(44) == [
        "expandable segments are off and the job is tight (needs 44.58 of 44.00 GiB); with them it needs 42.30 GiB"
    ]
    assert env014(46) == [
        "expandable segments are off and the job fits with 1.42 GiB to spare, less than the 3.04 GiB "
        "its fragmentation margin allows; with them it needs 42.30 GiB"
    ]
    assert env014(48) == []
