import json

import pytest

from memtune.catalog.recipes import bridge_commit, find_recipe, list_recipes
from memtune.check import gate
from memtune.cli import main
from memtune.config import derive, load_job
from memtune.errors import InputError
from memtune.estimate import estimate


def test_catalog_records_the_bridge_commit_and_has_at_least_twenty_recipes():
    assert len(bridge_commit()) == 40
    assert len(list_recipes()) >= 20


@pytest.mark.parametrize("name", [r.name for r in list_recipes() if r.kind == "library"])
def test_every_recipe_builds_a_job_memtune_estimates_with_nothing_ignored(name):
    loaded = load_job(None, recipe=name)
    assert loaded.ignored == []
    assert loaded.format == "recipe"
    assert loaded.job.defaults == "megatron-bridge"
    assert estimate(gate(loaded.job)).ranks


def test_llama3_70b_pretrain_matches_the_bridge_source():
    # src/megatron/bridge/recipes/llama/h100/llama3.py llama3_70b_pretrain_32gpu_h100_bf16_config
    job = load_job(None, recipe="llama3_70b_pretrain_32gpu_h100_bf16_config").job
    m = job.model
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size) == (4, 4)
    assert (m.virtual_pipeline_model_parallel_size, m.context_parallel_size) == (5, 2)
    assert m.sequence_parallel and m.seq_length == 8192 and m.pipeline_dtype == "bf16"
    assert (job.train.micro_batch_size, job.train.global_batch_size) == (1, 512)
    assert m.num_layers == 80 and m.hidden_size == 8192  # meta-llama/Meta-Llama-3-70B
    assert m.vocab_size == 32000  # NullTokenizer, recipes/utils/tokenizer_utils.py
    d = derive(job)
    assert d.use_distributed_optimizer and d.world_size == 32 and d.dp == 1
    assert job.ddp.grad_reduce_in_fp32  # bf16_mixed, training/mixed_precision.py


def test_qwen3_30b_a3b_pretrain_matches_the_bridge_source():
    # src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config
    m = load_job(None, recipe="qwen3_30b_a3b_pretrain_8gpu_h100_bf16").job.model  # `_config` may be left out
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size) == (4, 2)
    assert (m.expert_model_parallel_size, m.expert_tensor_parallel_size) == (4, 1)
    assert m.sequence_parallel and m.seq_length == 4096
    assert (m.recompute_granularity, m.recompute_method, m.recompute_num_layers) == ("full", "uniform", 1)
    # DeepEP on H100 through apply_flex_dispatcher_backend: the flex dispatcher, no shared-expert overlap
    assert m.moe_token_dispatcher_type == "flex" and not m.moe_shared_expert_overlap


def test_gpt_oss_120b_peft_matches_the_bridge_source():
    # src/megatron/bridge/recipes/gpt_oss/h100/gpt_oss.py gpt_oss_120b_peft_8gpu_h100_bf16_config
    job = load_job(None, recipe="gpt_oss_120b_peft_8gpu_h100_bf16_config").job
    m = job.model
    assert (m.tensor_model_parallel_size, m.expert_model_parallel_size, m.seq_length) == (1, 8, 2048)
    assert not m.sequence_parallel and m.recompute_granularity is None
    assert (job.train.micro_batch_size, job.train.global_batch_size) == (1, 128)
    # _peft_common's LoRA (recipes/common.py): dim 32, alpha 32, all four linear layers
    assert job.peft is not None and (job.peft.dim, job.peft.alpha) == (32, 32)
    assert job.peft.target_modules == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    assert not job.ddp.overlap_grad_reduce


def test_deepseek_v3_pretrain_places_layers_as_its_pipeline_layout_does():
    # src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py: PP 16, embedding + 4 decoder layers
    # first, 4 on each of the next 14 stages, one decoder layer with MTP and the loss last
    d = derive(load_job(None, recipe="deepseek_v3_pretrain_1024gpu_h100_bf16_config").job)
    assert (d.tp, d.pp, d.vpp, d.ep, d.etp) == (2, 16, 1, 64, 1)
    assert d.layers_per_stage == (4,) * 15 + (1,)
    assert [chunks[0].mtp_layers for chunks in d.chunks] == [0] * 15 + [1]


def test_override_file_and_dotted_overrides_lay_over_a_recipe(tmp_path):
    override = tmp_path / "override.yaml"
    # a Bridge override: ConfigContainer sections, keys memtune does not use listed as ignored
    override.write_text(
        "model: {tensor_model_parallel_size: 8}\n"
        "train: {global_batch_size: 64, train_iters: 100}\n"
        "mixed_precision: bf16_with_fp8_current_scaling_mixed\n"
    )
    loaded = load_job(
        None,
        ["train.micro_batch_size=2"],
        recipe="llama3_70b_sft_32gpu_h100_bf16_config",
        layers=[str(override)],
    )
    job = loaded.job
    assert job.model.tensor_model_parallel_size == 8 and job.model.pipeline_model_parallel_size == 4
    assert (job.train.micro_batch_size, job.train.global_batch_size) == (2, 64)
    assert job.model.fp8 == "hybrid" and job.model.fp8_recipe == "tensorwise"
    assert loaded.ignored == ["train.train_iters"]


def test_a_file_may_name_its_recipe(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("recipe: llama3_8b_peft_config\npeft: {dim: 8}\ncluster: {gpu: H200}\n")
    job = load_job(path).job
    assert job.peft is not None and (job.peft.dim, job.peft.alpha) == (8, 16)  # alpha: recipe's 16
    assert job.cluster.gpu == "H200" and job.model.num_layers == 32


def test_model_preset_works_as_a_dotted_override_and_inside_bridge_files(tmp_path):
    job = load_job(None, ["model.preset=qwen3-8b"], recipe="llama3_8b_pretrain_config").job
    assert job.model.num_layers == 36 and job.model.qk_layernorm  # Qwen3-8B
    assert job.model.vocab_size == 32000  # the recipe's own key stays on top of the preset
    dump = tmp_path / "bridge.yaml"
    dump.write_text(
        "model: {preset: llama3-8b, tensor_model_parallel_size: 2}\ncheckpoint: {save_interval: 100}\n"
    )
    loaded = load_job(dump)
    assert loaded.format == "bridge" and loaded.job.model.hidden_size == 4096
    assert loaded.job.model.tensor_model_parallel_size == 2
    assert loaded.ignored == ["checkpoint.save_interval"]


def test_bridge_override_file_lays_over_a_hugging_face_config(tmp_path):
    hf = tmp_path / "config.json"
    hf.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 4,
                "hidden_size": 256,
                "intermediate_size": 512,
                "num_attention_heads": 4,
                "vocab_size": 1000,
            }
        )
    )
    override = tmp_path / "override.yaml"
    override.write_text("model: {tensor_model_parallel_size: 2}\ndataset: {seq_length: 2048}\n")
    job = load_job(hf, layers=[str(override)]).job
    assert (job.model.num_layers, job.model.tensor_model_parallel_size, job.model.seq_length) == (4, 2, 2048)


def test_unknown_recipe_is_one_line_with_close_names():
    with pytest.raises(
        InputError, match=r"unknown Megatron-Bridge recipe 'llama3_8b_pretrain_9gpu'; did you mean"
    ):
        find_recipe("llama3_8b_pretrain_9gpu")


def test_every_command_that_takes_a_config_takes_recipe(capsys):
    assert main(["estimate", "--recipe", "llama3_8b_peft_config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema_version"] == 1
    assert main(["check", "--recipe", "llama3_8b_peft_config", "cluster.gpu=H200"]) == 0
    capsys.readouterr()
    assert main(["recipes", "llama3_8b_peft_config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recipe"]["name"] == "llama3_8b_peft_1gpu_h100_bf16_config"


def test_recipes_lists_every_recipe(capsys):
    assert main(["recipes", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["bridge_commit"] == bridge_commit()
    assert [r["name"] for r in listed["recipes"]] == [r.label for r in list_recipes()]
