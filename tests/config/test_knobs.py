"""The one layout value: read from a job, applied to a job, validated when built."""

from dataclasses import replace

import pytest

from memtune.config import derive, load_job
from memtune.config.knobs import Knobs, KnobSubset, Recompute
from memtune.errors import InputError
from tests.config.test_one_home import EXAMPLE


def _knobs(**changed):
    base = Knobs(4, 4, 5, 1, 1, 4, 1, True, Recompute("full", layers=1), "distopt", 0.0, 0, False)
    return replace(base, **changed)


def test_knobs_of_the_example_job():
    # examples/llama3-70b-sft.yaml: TP4 PP4 VPP5, SP, full recompute of 1 layer (block), dist-opt.
    assert derive(load_job(EXAMPLE).job).knobs == _knobs()


def test_a_view_with_its_own_knobs_is_the_job():
    d = derive(load_job(EXAMPLE).job)
    view = d.with_knobs(d.knobs)
    assert view.knobs == d.knobs
    assert (view.dp, view.num_microbatches, view.layers_per_stage) == (
        d.dp,
        d.num_microbatches,
        d.layers_per_stage,
    )


def test_a_view_derives_every_layout_fact_from_the_knobs():
    d = derive(load_job(EXAMPLE).job)  # 32 GPUs, GBS 32 (examples/llama3-70b-sft.yaml)
    uniform = Recompute("full", layers=3, method="uniform")
    view = d.with_knobs(_knobs(tp=8, etp=8, pp=2, vpp=1, mbs=2, recompute=uniform))
    # DP = 32 / (TP8 x PP2) = 2, expert DP = 32 / (ETP8 x EP1 x PP2) = 2, 32 / (MBS2 x DP2) = 8 microbatches
    assert (view.dp, view.edp, view.num_microbatches) == (2, 2, 8)
    assert view.layers_per_stage == (40, 40)
    # uniform: every layer of a chunk sits in a checkpoint (groups of 3: 13 x 3 + 1)
    assert view.full_recompute_groups(40) == [(3, True)] * 13 + [(1, True)]
    assert view.recomputed_layers_per_chunk == 40
    block = d.with_knobs(_knobs(recompute=Recompute("full", layers=3)))
    assert block.full_recompute_groups(4) == [(1, True)] * 3 + [(1, False)]
    assert block.recomputed_layers_per_chunk == 3  # 80 layers / (4 stages x 5 chunks) = 4 per chunk
    assert not d.with_knobs(_knobs(tp=1)).sequence_parallel


@pytest.mark.parametrize(
    "changed, message",
    [
        ({"tp": 0}, "layout knobs: parallel sizes and the micro-batch must be >= 1, got tp 0"),
        ({"sharding": "zero3"}, "layout knobs: sharding must be one of ddp, distopt, fsdp, got 'zero3'"),
        ({"offload": 1.5}, "layout knobs: the optimizer offload fraction must be in [0, 1], got 1.5"),
        ({"act_offload": -1}, "layout knobs: activation-offload layers must be >= 0, got -1"),
        (
            {"split": "diagonal"},
            "layout knobs: split must be one of even, accounted, uneven, layout, got 'diagonal'",
        ),
        (
            {"split": "uneven"},
            "layout knobs: first/last stage layers must be >= 0, and one of them > 0 exactly with split "
            "uneven; got 0/0 with uneven",
        ),
        (
            {"first_stage_layers": 4},
            "layout knobs: first/last stage layers must be >= 0, and one of them > 0 exactly with split "
            "uneven; got 4/0 with even",
        ),
        ({"split": "layout"}, "layout knobs: a pipeline layout goes with split layout exactly, got layout"),
        (
            {"fsdp_strategy": "optim"},
            "layout knobs: fsdp_strategy must be one of no_shard, optim, optim_grads, optim_grads_params, "
            "and differ from optim_grads_params only with sharding fsdp; got 'optim' with distopt",
        ),
    ],
)
def test_a_knob_no_job_can_hold_is_refused_with_one_line(changed, message):
    with pytest.raises(InputError) as caught:
        _knobs(**changed)
    assert str(caught.value) == message


def test_recompute_settings_must_match_the_granularity():
    with pytest.raises(InputError, match="modules only with selective"):
        Recompute("full", ("core_attn",), layers=1)
    with pytest.raises(InputError, match="layers >= 1"):
        Recompute("full")
    assert Recompute("full", layers=2, method="uniform").label() == "full-uniform:2"


def test_a_knob_subset_names_only_knobs():
    assert KnobSubset("tp", "pipelined").key(_knobs(pp=1)) == (4, False)
    with pytest.raises(ValueError, match="dp"):
        KnobSubset("tp", "dp")
