"""Uneven first/last stages, explicit layouts and expert TP sizes in the search."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memtune.check import gate
from memtune.config.changes import with_changes
from memtune.config.derived import derive
from memtune.config.layout import balanced_layout, parse_layout
from memtune.plan.query import Query, base_job
from memtune.plan.search import search
from memtune.plan.space import Split, default_space, expert_tensor_sizes, layouts, splits

# Megatron-Bridge's DeepSeek-V3 performance recipe on 1,024 H100s (BF16 and FP8-CS alike):
# TP 2, PP 8, VPP 4, CP 1, EP 64, SP, MBS 1, GBS 16,384 and the layout below; its
# ``deepseek_v3_pretrain_config`` (recipes/deepseek/h100/deepseek_v3.py) sets ETP 1.
# NVIDIA-NeMo/Megatron-Bridge 067f987df03b8355b03192d88d70f1709fedf51a,
# src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py,
# deepseek_v3_pretrain_1024gpu_h100_bf16_config.
NVIDIA_LAYOUT = "Et|(tt|)*30mL"


@pytest.fixture(scope="module")
def deepseek():
    return derive(base_job(Query("deepseek-v3", 1024, "H100-80GB", 8, 4096, 16384, "pretrain")))


def test_bridge_layout_rule_gives_nvidias_deepseek_layout():
    # 61 layers over 32 virtual stages: 2 per middle stage, 1 after the embedding, none before
    # the MTP layer and the loss
    assert balanced_layout(61, 1, 32) == NVIDIA_LAYOUT
    assert [stage.count("decoder") for stage in parse_layout(NVIDIA_LAYOUT)] == [1] + [2] * 30 + [0]
    # Bridge's own map for PP 16 without VPP: 4 layers per stage, the last keeps 1
    assert balanced_layout(61, 1, 16) == "Et*4|(t*4|)*14tmL"
    assert balanced_layout(61, 1, 2) is None and balanced_layout(61, 1, 64) is None


def test_61_layers_split_over_8_and_16_stages(deepseek):
    # neither 61 nor 63 divides by 8: the layout only, as uneven stages of 8 and 5 layers do not
    # split into 4 chunks (PIP005)
    assert splits(deepseek, 8, 4) == [Split("layout", pipeline_layout=NVIDIA_LAYOUT)]
    # without VPP: 8 layers on each middle stage, 8 on the first and 5 on the last; the layout of
    # the same rule builds the same chunks and is not searched twice
    assert splits(deepseek, 8, 1) == [Split("uneven", 8, 5)]
    # PP 16: 4 per middle stage, 4 first, 1 last
    assert splits(deepseek, 16, 1) == [Split("uneven", 4, 1)]
    assert splits(deepseek, 1, 1) == [Split("even")]


def test_an_even_split_is_not_searched_unevenly():
    d = derive(base_job(Query("llama3.1-405b", 1024, "H100-80GB", 8, 8192, 1536, "pretrain")))
    # 126 layers: 126 + 2 = 128 divide over 8 stages of 4 chunks
    assert splits(d, 8, 4) == [Split("accounted")]


def test_expert_tensor_sizes_are_the_powers_of_two_up_to_tp(deepseek):
    assert expert_tensor_sizes(deepseek, 8) == [1, 2, 4, 8]
    dense = derive(base_job(Query("llama3-8b", 16, "H100-80GB", 8, 4096, 64, "pretrain")))
    assert expert_tensor_sizes(dense, 8) == [8]


def test_nvidias_deepseek_layout_is_among_the_candidates(deepseek):
    heads = {
        g.head
        for g in layouts(deepseek, default_space(deepseek))
        if (g.head.tp, g.head.pp, g.head.vpp, g.head.cp, g.head.ep, g.head.etp, g.head.mbs)
        == (2, 8, 4, 1, 64, 1, 1)
    }
    assert {(h.sp, h.split, h.pipeline_layout) for h in heads} == {
        (False, "layout", NVIDIA_LAYOUT),
        (True, "layout", NVIDIA_LAYOUT),
    }


def test_plan_scores_nvidias_deepseek_layout(deepseek):
    base = deepseek.job
    space = replace(default_space(deepseek), tp=(2,), pp=(8,), vpp=(4,), cp=(1,), ep=(64,), mbs=(1,))
    result = search(
        base, space, top=3, keep=lambda c: c.etp == 1 and c.sp and c.sharding == "distopt" and not c.offload
    )
    assert result.layouts and all(p.candidate.pipeline_layout == NVIDIA_LAYOUT for p in result.layouts)
    best = result.layouts[0]
    # gated as Megatron would run it, and priced by the simulated step
    assert best.checked.derived.layers_per_stage == (7, 8, 8, 8, 8, 8, 8, 6)
    assert best.step is not None and best.step.tokens_per_s_per_gpu > 0
    assert gate(with_changes(base, best.changes)).derived.stage_layout is not None


def test_pinned_first_and_last_stage_sizes_are_searched_wherever_the_gate_accepts_them():
    from memtune.config.changes import Change
    from memtune.plan.query import pin_filter

    pins = (
        Change("model.num_layers_in_first_pipeline_stage", 4),
        Change("model.num_layers_in_last_pipeline_stage", 4),
    )
    base = base_job(Query("llama3-8b", 16, "H100-80GB", 8, 4096, 64, "pretrain", pins))
    d = derive(base)
    # 32 layers, 4 on each edge: 24 in the middle, over 2 stages of 12 at PP 4 (and at VPP 2
    # and 4: 12 and 4 divide), 14 stages at PP 16 do not take 24 evenly (PIP007)
    assert Split("uneven", 4, 4) in splits(d, 4, 4)
    assert Split("uneven", 4, 4) not in splits(d, 16, 1)
    space = replace(default_space(d), tp=(1,), cp=(1,), mbs=(1,), pp=(4,), vpp=(4,))
    result = search(base, space, top=1, keep=pin_filter(base, pins))
    assert result.layouts[0].checked.derived.layers_per_stage == (4, 12, 12, 4)
