"""Every example loads; the README's main example is the job its comments describe."""

from pathlib import Path

import pytest

from memtune.config import derive, load_job

EXAMPLES = Path(__file__).parents[2] / "examples"
FORMATS = {
    "llama3-70b-sft.yaml": "memtune",
    "qwen3-30b-a3b-ep8.yaml": "memtune",
    "llama3-8b-lora.yaml": "memtune",
    "broken-llama3-8b.yaml": "memtune",
    "bridge-llama3-70b-lora.yaml": "bridge",
    "megatron-lm-llama3-8b.sh": "megatron-args",
}


def test_examples_folder_holds_the_listed_files():
    assert sorted(p.name for p in EXAMPLES.iterdir()) == sorted(FORMATS)


@pytest.mark.parametrize("name", FORMATS)
def test_example_loads_in_its_format(name):
    assert load_job(EXAMPLES / name).format == FORMATS[name]


def test_main_example_layout():
    d = derive(load_job(EXAMPLES / "llama3-70b-sft.yaml").job)
    assert (d.tp, d.pp, d.vpp, d.cp, d.dp, d.world_size) == (4, 4, 5, 1, 2, 32)
    assert d.num_microbatches == 16  # GBS 32 / (MBS 1 x DP 2)
    assert d.sequence_parallel and d.job.ddp.grad_reduce_in_fp32 is False
    assert [len(c.layers) for c in d.chunks[0]] == [4] * 5


def test_moe_example_layout():
    d = derive(load_job(EXAMPLES / "qwen3-30b-a3b-ep8.yaml").job)
    assert (d.ep, d.etp, d.dp, d.edp) == (8, 1, 16, 2)
    assert d.recompute_modules == ("moe_act",)


def test_broken_example_holds_the_problems_check_should_find():
    job = load_job(EXAMPLES / "broken-llama3-8b.yaml").job
    assert job.model.cpu_offloading and job.model.pipeline_model_parallel_size > 1
    assert job.model.sequence_parallel and job.model.tensor_model_parallel_size == 1
    assert "expandable_segments:True" in job.env.PYTORCH_CUDA_ALLOC_CONF and job.env.use_nccl_ub
