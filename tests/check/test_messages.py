"""Exact messages, hand-computed numbers and the version boundaries of version-dependent rules."""

from __future__ import annotations

import pytest

from memtune.check import run_checks
from memtune.config.changes import Change
from tests.check.check_fixtures import make_job

SELECTIVE = "model.recompute_granularity=selective"
REGATHER = "peft.sequence_parallel_input_regather=true"


def finding(code: str, *overrides: str):
    found = [f for f in run_checks(make_job(*overrides)) if f.code == code]
    return found[0] if found else None


def test_pp_with_cpu_offloading_quotes_megatron():
    f = finding("OFF001", "model.cpu_offloading=true", "model.cpu_offloading_num_layers=4")
    assert f.upstream == "Currently there is no support for Pipeline parallelism with CPU offloading"
    assert f.message == "model.cpu_offloading=true with model.pipeline_model_parallel_size=2"


def test_middle_rank_vpp_message_keeps_megatron_spelling():
    # 30 layers, 6 + 6 on the edges: 18 over 2 middle stages = 9 per rank, VPP 2.
    f = finding(
        "PIP008",
        "model.pipeline_model_parallel_size=4",
        "model.virtual_pipeline_model_parallel_size=2",
        "model.num_layers=30",
        "model.num_layers_in_first_pipeline_stage=6",
        "model.num_layers_in_last_pipeline_stage=6",
    )
    assert f.upstream == (
        "number of layers on each middle pipeline rank:9 must be divisible by virtualpipeline "
        "parallel degree 2"
    )


def test_interleaved_schedule_reports_microbatch_count():
    # DP = 16 / (TP2 x PP2) = 4; GBS 4 / (MBS 1 x DP 4) = 1 microbatch < PP 2.
    f = finding("PIP010", "model.virtual_pipeline_model_parallel_size=2", "train.global_batch_size=4")
    assert (
        f.upstream
        == "The number of contiguous micro-batches in a virtual pipeline stageshould range in [PP=2 , M=1]"
    )


def test_full_recompute_range_is_per_pipeline_stage():
    f = finding(
        "REC002",
        "model.recompute_granularity=full",
        "model.recompute_method=block",
        "model.recompute_num_layers=17",
    )
    assert f.upstream.endswith("num_layers_per_pipeline_rank: 16")


@pytest.mark.parametrize(
    "version, groups, tp, fires",
    [
        ("0.15.2", 8, 16, True),  # divisor only: refused up to 0.15
        ("0.16.0", 8, 16, False),  # accepted from 0.16
        ("0.16.0", 6, 4, True),  # neither multiple nor divisor
        ("0.13.0", 16, 8, False),  # a multiple is always fine
    ],
)
def test_query_groups_rule_follows_megatron_version(version, groups, tp, fires):
    f = finding(
        "PAR004",
        f"env.megatron_core_version={version}",
        f"model.num_query_groups={groups}",
        f"model.tensor_model_parallel_size={tp}",
        "cluster.num_gpus=32",
    )
    assert (f is not None) == fires


def test_query_groups_on_old_megatron_suggests_upgrade():
    f = finding(
        "PAR004",
        "env.megatron_core_version=0.15.0",
        "model.tensor_model_parallel_size=16",
        "cluster.num_gpus=32",
    )
    assert f.upstream == "num_query_groups (8) must be a multiple of tensor_model_parallel_size (16)."
    assert "megatron-core >= 0.16" in f.fix


@pytest.mark.parametrize(
    "version, module, fires",
    [
        ("0.18.0", "gdn_norm_out", True),
        ("0.19.2", "gdn_norm_out", False),
        ("0.19.2", "mhc", True),
        ("0.20.0", "mhc", False),
    ],
)
def test_recompute_module_names_follow_megatron_version(version, module, fires):
    f = finding(
        "REC006", SELECTIVE, f"model.recompute_modules=[{module}]", f"env.megatron_core_version={version}"
    )
    assert (f is not None) == fires


def test_unknown_recompute_module_lists_allowed_set():
    f = finding("REC006", SELECTIVE, "model.recompute_modules=[core_atn]", "env.megatron_core_version=0.13.0")
    assert f.upstream == (
        "Invalid choices for recompute_modules: {'core_atn'}. Allowed modules are: "
        "{'core_attn', 'layernorm', 'mla_up_proj', 'mlp', 'moe', 'moe_act'}"
    )


@pytest.mark.parametrize(
    "version, impl, upstream",
    [
        ("0.15.0", "full_iteration", "recompute_granularity must not be full when CUDA Graphs are enabled."),
        ("0.16.0", "local", "full recompute is only supported with full iteration CUDA graph."),
        ("0.16.0", "full_iteration", None),
    ],
)
def test_full_recompute_with_graphs_message_by_version(version, impl, upstream):
    f = finding(
        "ENV009",
        f"env.megatron_core_version={version}",
        f"model.cuda_graph_impl={impl}",
        "model.recompute_granularity=full",
        "model.recompute_method=uniform",
        "model.recompute_num_layers=1",
    )
    assert (f.upstream if f else None) == upstream


@pytest.mark.parametrize(
    "version, gpu, fires",
    [
        ("0.17.0", "H100-80GB", True),  # CudaGraphManager asserted below compute capability 10
        ("0.17.0", "B200-180GB", False),
        ("0.19.2", "H100-80GB", False),  # removed from the local implementation
    ],
)
def test_local_graph_guard_versions(version, gpu, fires):
    f = finding(
        "ENV003",
        "model.cuda_graph_impl=local",
        "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        f"env.megatron_core_version={version}",
        f"cluster.gpu={gpu}",
    )
    assert (f is not None) == fires


def test_te_graphs_with_expandable_quote_megatron():
    f = finding(
        "ENV003",
        "model.cuda_graph_impl=transformer_engine",
        "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,graph_capture_record_stream_reuse:True",
    )
    assert f.upstream == (
        "Setting NCCL_GRAPH_REGISTER=0 to avoid illegal memory access when using CUDA Graph with "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
    )
    assert f.message == (
        "model.cuda_graph_impl=transformer_engine with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "and NCCL_GRAPH_REGISTER not set"
    )


def test_distribute_saved_activations_names_what_it_needs():
    f = finding("REC014", "model.distribute_saved_activations=true", "model.sequence_parallel=false")
    assert f.message == (
        "model.distribute_saved_activations=true does nothing: model.recompute_granularity not set (needs full)"
    )


def test_new_alloc_name_on_old_torch_is_ignored_not_a_bypass():
    found = {
        f.code
        for f in run_checks(
            make_job(
                "model.cuda_graph_impl=transformer_engine",
                "env.PYTORCH_ALLOC_CONF=expandable_segments:True",
                "env.torch_version=2.9.1",
            )
        )
    }
    assert "ENV006" in found and "ENV005" not in found and "ENV003" not in found


def test_unknown_allocator_option_quotes_torch():
    f = finding("ENV012", "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segment:True")
    assert f.upstream == "Unrecognized key 'expandable_segment' in CUDA allocator config."


def test_sequence_parallel_saving_is_computed():
    # 10 * s * b * h * (1 - 1/t) = 10 * 8192 * 1 * 4096 * 1/2 bytes = 160 MiB.
    f = finding("SEQ004", "model.sequence_parallel=false")
    assert "about 160 MiB" in f.message


def test_regather_saving_is_computed():
    # s * b * h * 2 * (1 - 1/t) = 8192 * 1 * 4096 * 2 * 1/2 bytes = 32 MiB, for the two column-parallel adapters.
    f = finding("PFT003", "peft.dim=16")
    assert "about 32 MiB" in f.message
    assert f.message.endswith("for linear_qkv, linear_fc1")


def test_regather_fallback_names_each_adapter_and_reason():
    f = finding(
        "PFT001",
        REGATHER,
        "model.cuda_graph_impl=transformer_engine",
        "peft.target_modules=[linear_qkv,linear_proj]",
    )
    assert f.message == (
        "peft.sequence_parallel_input_regather=true engages for no adapter: "
        "linear_qkv (CUDA graphs are enabled); linear_proj (the adapter is row-parallel)"
    )


def test_regather_under_the_all_to_all_path_says_why():
    f = finding("PFT001", REGATHER, "peft.a2a_experimental=true", "peft.target_modules=[linear_qkv]")
    assert f.message == (
        "peft.sequence_parallel_input_regather=true engages for no adapter: "
        "linear_qkv (all-to-all adapters use a separate path)"
    )


def test_the_all_to_all_path_without_a_row_adapter_says_so():
    f = finding("PFT004", "peft.a2a_experimental=true", "peft.target_modules=[linear_qkv,linear_fc1]")
    assert f.message == (
        "peft.a2a_experimental=true changes nothing: no row-parallel adapter (linear_proj, linear_fc2) is targeted"
    )
    f = finding("PFT004", "peft.a2a_experimental=true", "model.sequence_parallel=false")
    assert f.message == "peft.a2a_experimental=true changes nothing: sequence parallelism is off"


def test_regather_at_tp1_says_why():
    f = finding(
        "PFT001",
        REGATHER,
        "model.tensor_model_parallel_size=1",
        "model.sequence_parallel=false",
        "peft.target_modules=[linear_fc1]",
    )
    assert (
        "linear_fc1 (sequence-parallel communication is disabled: tensor parallel size is one)" in f.message
    )


def test_regather_with_experts_falls_back_for_routed_experts_only():
    f = finding("PFT002", REGATHER, "model.num_moe_experts=8", "model.add_bias_linear=false")
    assert f.message == (
        "peft.sequence_parallel_input_regather engages for linear_qkv but falls back for "
        "linear_fc1 (routed experts) (expert adapters never receive the flag)"
    )


def test_regather_after_full_recompute_and_offload_reports_first_reason():
    f = finding(
        "PFT001",
        REGATHER,
        "model.recompute_granularity=full",
        "model.recompute_method=uniform",
        "model.recompute_num_layers=1",
        "peft.target_modules=[linear_qkv]",
    )
    assert "linear_qkv (full-layer activation recompute already covers the adapter)" in f.message


def test_global_batch_message_suggests_neighbours():
    f = finding("BAT001", "train.global_batch_size=62")
    assert (
        f.upstream
        == "global batch size (62) is not divisible by micro batch size (1) times data parallel size (4)"
    )
    assert f.fix == "set train.global_batch_size to a multiple of 4, e.g. 60 or 64"


def test_core_attn_default_is_called_out():
    f = finding("REC011", SELECTIVE)
    assert "core_attn (the default)" in f.message


def test_layernorm_recompute_counts_in_moe_models():
    assert finding("REC012", SELECTIVE, "model.recompute_modules=[layernorm]") is not None
    assert (
        finding("REC012", SELECTIVE, "model.recompute_modules=[layernorm]", "model.num_moe_experts=8") is None
    )


def test_megatron_default_recompute_list_is_not_flagged():
    # Megatron-Bridge dumps recompute_modules: [core_attn] even with recompute off.
    assert finding("REC005", "model.recompute_modules=[core_attn]") is None
    assert finding("REC005", "model.recompute_modules=[core_attn,mlp]").message == (
        "model.recompute_modules=['core_attn', 'mlp'] is ignored while model.recompute_granularity is not set"
    )
    full = (
        "model.recompute_granularity=full",
        "model.recompute_method=uniform",
        "model.recompute_num_layers=1",
    )
    assert finding("REC005", *full, "model.recompute_modules=[mlp]").message == (
        "model.recompute_modules=['mlp'] is ignored with model.recompute_granularity=full"
    )


@pytest.mark.parametrize("fraction, fires", [(0.0, False), (1.0, False), (0.25, True)])
def test_offload_fraction_defaults_are_not_flagged(fraction, fires):
    assert (finding("OFF008", f"optimizer.optimizer_offload_fraction={fraction}") is not None) == fires


def test_tp_without_sp_in_a_lora_job_counts_only_what_sp_shards():
    # 10·s·b·h·(1-1/t) = 10 * 8192 * 4096 / 2 bytes = 160 MiB; LoRA without re-gather keeps the
    # inputs of linear_qkv and linear_fc1 whole under SP too: 2 * 32 MiB less = 96 MiB.
    plain = finding("SEQ004", "model.sequence_parallel=false")
    assert "about 160 MiB" in plain.message
    lora = finding("SEQ004", "model.sequence_parallel=false", "peft.dim=16")
    assert "about 96 MiB" in lora.message
    assert lora.message.endswith(
        "(LoRA: the inputs of linear_qkv, linear_fc1 stay whole or unkept either way)"
    )
    regather = finding("SEQ004", "model.sequence_parallel=false", "peft.dim=16", REGATHER)
    assert "about 160 MiB" in regather.message and "LoRA" not in regather.message


def test_fine_grained_offload_names_the_unknown_module_and_the_missing_core_attn():
    on = "model.fine_grained_activation_offloading=true"
    unknown = finding("OFF009", on, "model.offload_modules=[core_attn,mlp]")
    assert unknown.message == (
        "model.offload_modules=['core_attn', 'mlp'] with model.fine_grained_activation_offloading=true: unknown mlp"
    )
    assert unknown.upstream == "Invalid choices for offload_modules: {'mlp'}."
    assert finding("OFF009", on).message.endswith(": no module named")
    alone = finding("OFF009", on, "model.offload_modules=[attn_proj]")
    assert alone.message == "model.offload_modules has attn_proj without core_attn"
    both = finding("OFF009", on, "model.offload_modules=[core_attn]", "model.cpu_offloading=true")
    assert both.upstream == "fine_grained_activation_offloading cannot be enabled with cpu_offloading."


def test_fine_grained_offload_failures_megatron_raises_later():
    on = "model.fine_grained_activation_offloading=true"
    full = (
        "model.recompute_granularity=full",
        "model.recompute_method=uniform",
        "model.recompute_num_layers=1",
    )
    local = "model.transformer_impl=local"
    norm = finding("OFF009", on, "model.offload_modules=[attn_norm]", *full, local)
    assert norm.upstream == "The tensor has a non-zero number of elements, but its data is not allocated yet."
    assert norm.message.startswith(
        "model.offload_modules has attn_norm with model.recompute_granularity=full"
    )
    # The Transformer Engine spec fuses the input norm into the QKV linear: no attn_norm group.
    te = ("model.transformer_impl=transformer_engine", "model.attention_backend=flash")
    assert finding("OFF009", on, "model.offload_modules=[attn_norm]", *full, *te) is None
    assert finding("OFF009", on, "model.offload_modules=[core_attn]", *full, local) is None


def test_megatron_lm_accepts_fine_grained_offload_only_with_transformer_engine():
    on = ("model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn]")
    local = finding("OFF009", *on, "model.transformer_impl=local", "defaults=megatron-lm")
    assert (
        local.upstream
        == "Fine-grained activation offloading is only supported with transformer_engine implementation"
    )
    assert finding("OFF009", *on, "model.transformer_impl=local") is None  # Megatron-Core has no such check
    assert finding("OFF009", *on, "model.transformer_impl=transformer_engine", "defaults=megatron-lm") is None


def test_fine_grained_offload_with_vpp_and_full_recompute_quotes_the_chunk_mismatch():
    on = ("model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn]")
    full = (
        "model.recompute_granularity=full",
        "model.recompute_method=uniform",
        "model.recompute_num_layers=1",
    )
    vpp = "model.virtual_pipeline_model_parallel_size=2"
    f = finding("OFF010", *on, vpp, *full)
    assert f.upstream == "Chunk mismatch"
    assert f.message.startswith(
        "model.fine_grained_activation_offloading=true with 2 virtual pipeline stages per rank and "
        "model.recompute_granularity=full"
    )
    assert f.changes == (Change("model.fine_grained_activation_offloading", False),)
    # Each pair alone runs in megatron-core 0.19.2.
    assert finding("OFF010", *on, *full) is None
    assert finding("OFF010", *on, vpp) is None
    assert finding("OFF010", vpp, *full) is None


def test_layernorm_recompute_on_the_local_spec_keeps_the_other_modules():
    local = ("model.transformer_impl=local", "model.attention_backend=flash")
    selective = "model.recompute_granularity=selective"
    f = finding("REC015", *local, selective, "model.recompute_modules=[layernorm,mlp]")
    assert f.upstream == "name 'FP8GlobalStateManager' is not defined"
    assert f.changes == (Change("model.recompute_modules", ["mlp"]),)
    several = finding("REC015", *local, selective, "model.recompute_modules=[core_attn,layernorm,mlp]")
    assert several.fix == "remove layernorm from model.recompute_modules, or install Transformer Engine"
    assert finding("REC015", *local, selective, "model.recompute_modules=[mlp]") is None
    # Without selective granularity no module is recomputed.
    assert finding("REC015", *local, "model.recompute_modules=[layernorm]") is None


def test_fp32_training_says_what_the_estimate_counts():
    f = finding("OPT011", "model.bf16=false")
    assert f.message == (
        "model.bf16 and model.fp16 are both false: weights and activations are fp32, twice as wide as bf16 "
        "except what a bf16 job keeps in fp32 already (the loss's softmax, norm statistics), so the saved "
        "activations grow by up to 2x; the model state stays about the same (Adam keeps no separate fp32 "
        "copy)"
    )
    assert finding("OPT011", "model.bf16=false", "model.fp16=true") is None


def test_cp_all_to_all_names_the_heads_on_a_tp_rank_and_quotes_transformer_engine():
    # 32 query and 8 key/value heads at TP 2: 16 and 4 per rank; an all-to-all over CP 8 splits neither
    f = finding("SEQ005", "model.context_parallel_size=8", "model.cp_comm_type=a2a", "cluster.num_gpus=32")
    assert f.message == (
        "model.cp_comm_type=a2a: 16 query and 4 key/value heads per TP rank do not split over "
        "model.context_parallel_size (8)"
    )
    assert f.fix == "use an all-to-all group that divides 4, or model.cp_comm_type=p2p"
    assert f.upstream == (
        "cp_comm_type='a2a' requires num_heads % cp_size == 0 for Q, K, V. Found num_heads_q = 16, "
        "num_heads_kv = 4, cp_size = 8."
    )
    # under a2a+p2p only the first (all-to-all) group splits the heads: [8, 1] does not, [4, 2] does
    hierarchy = ("model.context_parallel_size=8", "model.cp_comm_type=a2a+p2p", "cluster.num_gpus=32")
    f = finding("SEQ005", *hierarchy, "model.hierarchical_context_parallel_sizes=[8,1]")
    assert "do not split over the first hierarchical CP group (8)" in f.message
    assert finding("SEQ005", *hierarchy, "model.hierarchical_context_parallel_sizes=[4,2]") is None


def test_cp_hierarchy_messages_by_stack_and_shape():
    cp4 = ("model.context_parallel_size=4", "model.cp_comm_type=a2a+p2p")
    assert finding("SEQ006", *cp4).upstream == (
        "CP implementation a2a+p2p requires cp_group = [a2a_cp_group, p2p_cp_group]!"
    )
    assert finding("SEQ006", "defaults=megatron-lm", *cp4).upstream == (
        "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm"
    )
    f = finding("SEQ006", *cp4, "model.hierarchical_context_parallel_sizes=[2,4]")
    assert f.message == (
        "model.hierarchical_context_parallel_sizes=[2, 4] multiply to 8, not model.context_parallel_size=4"
    )
    f = finding("SEQ006", *cp4, "model.hierarchical_context_parallel_sizes=[2,1,2]")
    assert f.message == (
        "model.hierarchical_context_parallel_sizes=[2, 1, 2]: a2a+p2p takes two levels, the all-to-all group "
        "and the ring"
    )


def test_cp_with_a_sliding_window_or_sinks_quotes_transformer_engine():
    cp2 = ("model.context_parallel_size=2", "cluster.num_gpus=32")
    f = finding("SEQ007", "model.window_size=[127,0]", *cp2)
    assert f.message == (
        "model.window_size=[127, 0] with model.context_parallel_size=2 and model.cp_comm_type=p2p: "
        "the ring has no sliding window"
    )
    assert (
        f.upstream == "Context parallelism does not support sliding window attention with cp_comm_type='p2p'!"
    )
    # a window on no layer (every layer full: the list form) is no sliding window
    assert (
        finding(
            "SEQ007",
            "model.window_size=[127,0]",
            f"model.window_attn_skip_freq=[{','.join(['0'] * 32)}]",
            *cp2,
        )
        is None
    )
    f = finding("SEQ008", "model.softmax_type=learnable", "model.cp_comm_type=all_gather", *cp2)
    assert (
        f.upstream == "Context parallelism only supports softmax_type='learnable' with cp_comm_type = 'a2a'!"
    )
    assert f.fix == "set model.cp_comm_type=a2a"


def test_sinks_with_the_flash_backend_quote_transformer_engines_no_backend_error():
    f = finding("SEQ009", "model.softmax_type=off-by-one", "model.attention_backend=flash")
    assert f.message == (
        "model.softmax_type=off-by-one with model.attention_backend=flash: Transformer Engine's FlashAttention "
        "has no softmax offset, and the flash setting turns its other backends off"
    )
    assert f.upstream.startswith("No dot product attention backend is available for the provided inputs.")
    # the local spec's flash is memtune's SDPA stand-in, which memtune measure refuses on its own
    assert (
        finding(
            "SEQ009",
            "model.softmax_type=learnable",
            "model.attention_backend=flash",
            "model.transformer_impl=local",
        )
        is None
    )
