"""No change `fix` or `plan --top 5` proposes is refused or called useless by memtune check once
applied, on the bundled examples and on 20 recipes across dense, MoE, MLA, LoRA, fine-tuning and
long-context jobs (benchmarks/advice_walk.py walks every recipe). The walk reruns the rules
itself rather than trusting the gate that chose the proposals."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from memtune.config import load_job
from memtune.config.changes import Change

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "advice_walk.py"
spec = importlib.util.spec_from_file_location("advice_walk", SCRIPT)
walk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(walk)

RECIPES = [
    # dense pre-training and fine-tuning
    "llama3_8b_pretrain_2gpu_h100_bf16",
    "llama3_8b_sft_2gpu_h100_bf16",
    "qwen3_8b_pretrain_4gpu_h100_bf16",
    "qwen3_8b_sft_4gpu_h100_bf16",
    "qwen3_32b_pretrain_16gpu_h100_bf16",
    "llama3_70b_pretrain_32gpu_h100_bf16",
    "perf:llama3_70b_sft_32gpu_h100_fp8cs",
    # long context
    "llama3_8b_pretrain_16gpu_h100_bf16_16k",
    "llama3_8b_pretrain_32gpu_h100_bf16_64k",
    "llama3_70b_pretrain_32gpu_h100_bf16_16k",
    # LoRA
    "llama3_8b_peft_1gpu_h100_bf16",
    "qwen3_8b_peft_1gpu_h100_bf16",
    "llama3_70b_peft_8gpu_h100_bf16",
    "qwen3_30b_a3b_peft_4gpu_h100_bf16",
    # MoE
    "qwen3_30b_a3b_pretrain_8gpu_h100_bf16",
    "qwen3_30b_a3b_sft_8gpu_h100_bf16",
    "gpt_oss_20b_pretrain_16gpu_h100_bf16",
    # multi-latent attention
    "deepseek_v2_lite_pretrain_8gpu_h100_bf16",
    "moonlight_16b_pretrain_8gpu_h100_bf16",
    "moonlight_16b_peft_2gpu_h100_bf16",
]


@pytest.mark.parametrize("example", walk.EXAMPLES, ids=lambda p: p.name)
def test_the_examples_proposals_pass_memtune_check(example):
    job = load_job(example).job
    checked, problems = walk.walk_fix(example.name, job)
    assert checked and problems == []
    checked, problems = walk.walk_plan(example.name, [str(example)], job)
    assert checked and problems == []


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_recipes_proposals_pass_memtune_check(recipe):
    job = load_job(None, recipe=recipe).job
    checked, problems = walk.walk_fix(recipe, job)
    assert checked and problems == []
    checked, problems = walk.walk_plan(recipe, ["--recipe", recipe], job)
    assert problems == []


def test_the_walk_finds_a_proposal_memtune_check_warns_useless():
    """The walk's own check is not a formality: a change adding core_attn recompute under flash
    attention (check REC011) is reported."""
    job = load_job(walk.ROOT / "examples" / "llama3-70b-sft.yaml").job
    changes = [
        Change("model.recompute_granularity", "selective"),
        Change("model.recompute_modules", ["core_attn"]),
        Change("model.recompute_method", None),
        Change("model.recompute_num_layers", None),
    ]
    problems = walk.problems_of(job, changes, "core_attn")
    assert len(problems) == 1 and problems[0].startswith("core_attn: warned: REC011")
