from pathlib import Path

import pytest

from memtune.config import load_job
from memtune.config.loaders import read_raw
from memtune.errors import InputError

DUMP = Path(__file__).parents[2] / "examples" / "bridge-llama3-70b-lora.yaml"


def test_bridge_dump_maps_the_keys_memtune_uses():
    loaded = load_job(DUMP, ["cluster.num_gpus=32"])
    m, job = loaded.job.model, loaded.job
    assert loaded.format == "bridge"
    assert (
        m.tensor_model_parallel_size,
        m.pipeline_model_parallel_size,
        m.virtual_pipeline_model_parallel_size,
    ) == (4, 4, 5)
    assert m.sequence_parallel and m.context_parallel_size == 1
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_query_groups, m.vocab_size) == (
        80,
        8192,
        28672,
        8,
        128256,
    )
    assert m.activation_func == "silu" and m.gated_linear_unit  # {_target_: torch.nn.functional.silu}
    assert m.pipeline_dtype == "bf16"  # {_target_: torch.bfloat16}
    assert m.attention_backend == "auto"  # enum dumped with _name_
    assert m.bf16 and m.seq_length == 4096
    assert job.train.micro_batch_size == 1 and job.train.global_batch_size == 32
    assert job.optimizer.use_distributed_optimizer and job.ddp.use_distributed_optimizer
    assert job.optimizer.exp_avg_dtype == "fp32"
    assert job.ddp.grad_reduce_in_fp32 is False and job.ddp.overlap_grad_reduce
    assert job.env.use_nccl_ub is False
    assert job.train.manual_gc is True  # train.manual_gc: true in the dump
    lora = job.peft
    assert (lora.dim, lora.alpha, lora.dropout, lora.sequence_parallel_input_regather) == (16, 32, 0.1, False)
    assert lora.target_modules == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    assert job.cluster.num_gpus == 32


def test_bridge_comm_overlap_reaches_the_model_as_bridge_sets_it_up():
    # megatron/bridge/training/comm_overlap.py copies these three onto the model config
    model = load_job(DUMP, ["cluster.num_gpus=32"]).job.model
    assert (model.tp_comm_overlap, model.overlap_moe_expert_parallel_comm, model.delay_wgrad_compute) == (
        True,
        False,
        False,
    )


def test_bridge_dump_reports_what_it_ignores_once():
    ignored = read_raw(DUMP).ignored
    assert len(ignored) == len(set(ignored))
    for key in (
        "model.rotary_base",
        "model.should_pad_vocab",
        "optimizer.lr",
        "peft.lora_A_init_method",
        "comm_overlap.tp_comm_overlap_cfg.proj_fprop.cga_size",
        "comm_overlap.tp_comm_overlap_cfg.fc1_fprop.aggregate",
        "logger",
        "dataset",
        "checkpoint.save_interval",
        "tokenizer",
        "scheduler",
    ):
        assert key in ignored
    # Bookkeeping keys, nulls and the keys memtune reads are not "ignored".
    assert not [
        k for k in ignored if "_target_" in k or k in ("ft", "profiling", "model.num_layers", "ddp.nccl_ub")
    ]


def test_bridge_dump_keeps_its_userbuffer_overlap_settings():
    # the dump's TransformerLayerTPOverlapCfg: the priced fields of each GEMM it sets, over
    # Transformer Engine's defaults for the others
    from memtune.config.derived import UserbufferGemm, derive

    d = derive(load_job(DUMP, ["cluster.num_gpus=32"]).job)
    assert d.userbuffer_gemm("proj_fprop") == UserbufferGemm("pipeline", 24, 4)
    assert d.userbuffer_gemm("fc1_dgrad") == UserbufferGemm("bulk", 0, 4)
    assert d.userbuffer_gemm("fc2_fprop") == UserbufferGemm("pipeline", 16, 4)  # not in the dump
    assert d.userbuffer_gemm("qkv_fprop") == UserbufferGemm("ring_exchange", 0, d.tp)


def test_mixed_precision_recipe_name_overrides_the_sections(write):
    path = write(
        "dump.yaml",
        "model:\n  num_layers: 2\n  hidden_size: 8\n  num_attention_heads: 2\n  vocab_size: 64\n"
        "  bf16: false\nddp:\n  grad_reduce_in_fp32: false\nmixed_precision: bf16_mixed\n",
    )
    job = load_job(path).job
    assert job.model.bf16 and job.model.pipeline_dtype == "bf16"
    assert job.ddp.grad_reduce_in_fp32  # bf16_mixed reduces gradients in fp32

    path.write_text(path.read_text().replace("bf16_mixed", "bf16-with-fp8-current-scaling-mixed"))
    m = load_job(path).job.model
    assert (m.fp8, m.fp8_recipe, m.fp8_param_gather) == ("hybrid", "tensorwise", True)


@pytest.mark.parametrize(
    "section, key",
    [
        # MixedPrecisionConfig.setup copies it onto the model config
        # (megatron/bridge/training/mixed_precision.py at 067f987)
        (
            "mixed_precision:\n  bf16: true\n  fp8: hybrid\n  fp8_recipe: delayed\n",
            "fp8_dot_product_attention",
        ),
        # Megatron-Core's TransformerConfig field, set by Bridge's Llama 3 perf recipes
        ("", "disable_parameter_transpose_cache"),
    ],
)
def test_transformer_config_fields_bridge_sets_are_taken(write, section, key):
    """Each reaches memtune's model section, not the ignored list."""
    model = "model:\n  num_layers: 2\n  hidden_size: 8\n  num_attention_heads: 2\n  vocab_size: 64\n"
    text = model + section + f"  {key}: true\n"  # under the section, else under model
    loaded = load_job(write("dump.yaml", text))
    assert getattr(loaded.job.model, key)
    assert not any(key in ignored for ignored in loaded.ignored)


def test_dtypes_functions_fallbacks_and_appended_memtune_sections(write):
    path = write(
        "dump.yaml",
        """
_target_: megatron.bridge.training.config.ConfigContainer
model:
  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider
  num_layers: 2
  hidden_size: 8
  num_attention_heads: 2
  vocab_size: null
  activation_func: {_target_: megatron.core.activations.squared_relu, _call_: false}
  distribute_saved_activations: null
  q_lora_rank: null
optimizer:
  use_precision_aware_optimizer: true
  exp_avg_dtype: {_target_: torch.bfloat16, _call_: false}
  exp_avg_sq_dtype: {_target_: torch.uint8, _call_: false}
dataset:
  seq_length: 2048
tokenizer:
  vocab_size: 32000
comm_overlap:
  overlap_grad_reduce: true
  tp_comm_overlap: false
cluster:
  num_gpus: 8
""",
    )
    job = load_job(path).job
    assert job.model.activation_func == "squared_relu"
    assert job.model.seq_length == 2048 and job.model.vocab_size == 32000
    assert job.model.q_lora_rank is None  # a null the schema accepts is kept, not defaulted
    assert job.model.distribute_saved_activations is False
    assert (job.optimizer.exp_avg_dtype, job.optimizer.exp_avg_sq_dtype) == ("bf16", "fp8")
    assert job.ddp.overlap_grad_reduce
    assert job.cluster.num_gpus == 8


def test_unknown_function_target_reaches_the_schema_by_name(write):
    path = write(
        "dump.yaml",
        "model:\n  _target_: x\n  num_layers: 2\n  hidden_size: 8\n  num_attention_heads: 2\n"
        "  vocab_size: 64\n  activation_func: {_target_: torch.nn.functional.mish, _call_: false}\n",
    )
    with pytest.raises(InputError) as exc:
        load_job(path)
    assert exc.value.problems == [
        "model.activation_func: must be one of 'gelu', 'silu', 'squared_relu', 'quick_gelu' or 'relu', "
        "got 'torch.nn.functional.mish'"
    ]


def test_bridge_comm_overlap_decides_the_data_parallel_overlaps_by_the_dp_size():
    # comm_overlap.py _get_optimizer_overlap_cfgs (067f987df03b): with the distributed optimizer,
    # a CommOverlapConfig that sets no DP overlap turns the gradient reduce and parameter gather
    # overlaps on where DP > 1, with 128 Mi-parameter buckets, and aligns the gathers under an
    # interleaved pipeline; where DP = 1 it turns them off, over what the ddp section says.
    from memtune.config.derived import derive

    def facts(*overrides: str) -> tuple[bool, bool, bool, int | None]:
        d = derive(load_job(DUMP, ["cluster.num_gpus=32", *overrides]).job)
        return d.overlap_grad_reduce, d.overlap_param_gather, d.align_param_gather, d.bucket_size

    assert load_job(DUMP, ["cluster.num_gpus=32"]).job.ddp.overlap_by_data_parallel_size
    # TP4 PP4 VPP5 on 32 GPUs: DP 2
    assert facts() == (True, True, True, 128 * 1024 * 1024)
    assert facts("ddp.overlap_param_gather=false") == (True, True, True, 128 * 1024 * 1024)
    assert facts("model.virtual_pipeline_model_parallel_size=null") == (True, True, False, 128 * 1024 * 1024)
    # on 16 GPUs DP is 1: all off, even where the ddp section turns them on
    assert facts("cluster.num_gpus=16", "ddp.overlap_grad_reduce=true") == (False, False, False, None)
    # without the distributed optimizer Bridge leaves the ddp section as it is
    plain = ["ddp.use_distributed_optimizer=false", "optimizer.use_distributed_optimizer=false"]
    assert facts(*plain, "ddp.overlap_param_gather=false")[:3] == (True, False, False)


def test_a_comm_overlap_that_sets_a_data_parallel_overlap_keeps_the_ddp_section(write):
    path = write(
        "dump.yaml",
        "model: {num_layers: 2, hidden_size: 8, num_attention_heads: 2, vocab_size: 64}\n"
        "ddp: {use_distributed_optimizer: true, overlap_param_gather: false}\n"
        "comm_overlap: {tp_comm_overlap: false, overlap_grad_reduce: true}\n"
        "cluster: {num_gpus: 8}\n",
    )
    job = load_job(path).job
    assert not job.ddp.overlap_by_data_parallel_size
    assert job.ddp.overlap_grad_reduce and not job.ddp.overlap_param_gather
