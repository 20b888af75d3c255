"""Megatron-Bridge's flat performance recipes (memtune/catalog/data/perf_recipes.yaml)."""

import pytest

from memtune.catalog.recipes import find_recipe, list_recipes
from memtune.check import gate
from memtune.cli import main
from memtune.config import derive, load_job
from memtune.errors import InputError
from memtune.estimate import estimate

PERF = [r for r in list_recipes() if r.kind == "perf"]


def test_perf_recipes_cover_each_gpu_the_catalog_has():
    assert len(PERF) >= 100
    assert {r.gpu for r in PERF} == {"H100-80GB", "B200", "GB200", "B300", "GB300"}
    assert all(r.label == f"perf:{r.name}" and r.base in {x.name for x in list_recipes()} for r in PERF)


@pytest.mark.parametrize("label", [r.label for r in PERF])
def test_every_perf_recipe_estimates_or_is_refused_with_the_recorded_message(label):
    recipe = find_recipe(label)
    if recipe.refused is None:
        loaded = load_job(None, recipe=label)
        assert loaded.ignored == [] and loaded.job.cluster.gpu == recipe.gpu
        assert estimate(gate(loaded.job)).ranks
    else:  # Megatron refuses the layout as written (validation or the check's gate)
        with pytest.raises(InputError) as refused:
            gate(load_job(None, recipe=label).job)
        assert str(refused.value) == recipe.refused


def test_a_name_both_kinds_have_is_the_library_recipe_unless_prefixed():
    name = "llama3_70b_sft_32gpu_h100_bf16_config"
    assert find_recipe(name).kind == "library"
    assert find_recipe(f"perf:{name}").kind == "perf"
    assert find_recipe("llama3_8b_pretrain_8gpu_h100_bf16").kind == "perf"  # only perf has it
    with pytest.raises(
        InputError, match="unknown Megatron-Bridge recipe 'perf:llama3_8b_pretrain_2gpu_h100_bf16'"
    ):
        find_recipe("perf:llama3_8b_pretrain_2gpu_h100_bf16")  # a library recipe only


def test_llama3_70b_fp8cs_h100_matches_the_bridge_source():
    # src/megatron/bridge/perf_recipes/llama/h100/llama3.py llama3_70b_pretrain_64gpu_h100_fp8cs_config
    job = load_job(None, recipe="perf:llama3_70b_pretrain_64gpu_h100_fp8cs_config").job
    m = job.model
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size) == (4, 8)
    assert (m.virtual_pipeline_model_parallel_size, m.context_parallel_size) == (5, 1)
    assert m.pipeline_model_parallel_layout == "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"
    assert m.sequence_parallel and m.seq_length == 8192
    assert (job.train.micro_batch_size, job.train.global_batch_size) == (1, 256)
    assert (m.fp8, m.fp8_recipe, m.fp8_param_gather) == (
        "hybrid",
        "tensorwise",
        True,
    )  # _perf_precision("fp8_cs")
    assert not job.ddp.grad_reduce_in_fp32  # _perf_precision and _benchmark_common turn it off
    assert (
        m.vocab_size == 128256 and m.make_vocab_size_divisible_by == 128
    )  # provider vocab, should_pad_vocab
    assert job.env.PYTORCH_CUDA_ALLOC_CONF == "expandable_segments:True"
    assert job.cluster.num_gpus == 64 and derive(job).dp == 2


def test_deepseek_v3_h100_bf16_perf_matches_the_bridge_source():
    # src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py deepseek_v3_pretrain_1024gpu_h100_bf16_config
    job = load_job(None, recipe="perf:deepseek_v3_pretrain_1024gpu_h100_bf16_config").job
    m = job.model
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size) == (2, 8)
    assert (m.virtual_pipeline_model_parallel_size, m.expert_model_parallel_size) == (4, 64)
    assert m.pipeline_model_parallel_layout == "Et|(tt|)*30mL"
    assert m.recompute_granularity == "selective" and m.recompute_modules == ["mla_up_proj", "mlp"]
    assert m.moe_router_force_load_balancing  # deepseek/common.py _deepseek_v3_common
    assert job.train.global_batch_size == 16384 and not job.ddp.overlap_grad_reduce
    assert job.optimizer.use_precision_aware_optimizer and job.optimizer.exp_avg_dtype == "bf16"


def test_qwen3_30b_a3b_b200_mxfp8_perf_matches_the_bridge_source():
    # src/megatron/bridge/perf_recipes/qwen/b200/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx_config
    recipe = find_recipe("qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx")
    job = load_job(None, recipe=recipe.label).job
    m = job.model
    assert recipe.precision == "bf16_with_mxfp8_mixed" and m.fp8_recipe == "mxfp8"
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.expert_model_parallel_size) == (
        1,
        1,
        8,
    )
    assert job.cluster.gpu == "B200" and job.cluster.num_gpus == 8


@pytest.mark.parametrize(
    "wrapper, recipe",
    [
        ("llama31_405b_pretrain_512gpu_h100_bf16_config", "llama31_405b_pretrain_1024gpu_h100_bf16_config"),
        ("qwen3_30b_a3b_pretrain_64gpu_h100_bf16_config", "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"),
        ("qwen3_30b_a3b_pretrain_32gpu_gb300_fp8cs_config", "qwen3_30b_a3b_pretrain_8gpu_gb300_fp8cs_config"),
    ],
)
def test_a_recipe_that_only_rescales_another_keeps_its_overlap_and_dispatcher(wrapper, recipe):
    # Bridge's `cfg = _with_global_batch_size(recipe(), n)` changes the global batch alone; these
    # entries once lost the TP and EP overlap settings and the flex dispatcher's backend.
    outer, inner = (load_job(None, recipe=f"perf:{name}").job for name in (wrapper, recipe))
    assert outer.train.global_batch_size != inner.train.global_batch_size
    assert outer.model.tp_comm_overlap and outer.model.tp_comm_overlap == inner.model.tp_comm_overlap
    assert outer.model.tp_comm_overlap_cfg == inner.model.tp_comm_overlap_cfg
    assert outer.model.overlap_moe_expert_parallel_comm == inner.model.overlap_moe_expert_parallel_comm
    assert outer.model.moe_flex_dispatcher_backend == inner.model.moe_flex_dispatcher_backend


def test_recipes_command_prints_a_perf_recipe_with_its_gpu(capsys):
    assert main(["recipes", "perf:gpt_oss_120b_pretrain_64gpu_h100_bf16_config"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "# perf:gpt_oss_120b_pretrain_64gpu_h100_bf16_config: pretrain of openai/gpt-oss-120b on H100-80GB"
    )
    assert main(["estimate", "--recipe", "perf:gpt_oss_120b_pretrain_64gpu_h100_bf16_config"]) == 0
