"""`memtune plan` ranks its answer by the step model, the one model it also prunes with."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from memtune.check import admit, gate
from memtune.cli import main
from memtune.config.changes import Change, with_changes
from memtune.perf.step import predict_step
from memtune.plan.query import Query, base_job
from memtune.plan.search import search
from memtune.plan.space import changes_of


@pytest.fixture(scope="module")
def pipelined():
    """Llama-3 8B on 16 H100s, pinned to PP 2 and TP 2: small enough to search in a test."""
    base = base_job(Query("llama3-8b", 16, "H100-80GB", 8, 4096, 64, "pretrain"))
    pins = [
        Change("model.tensor_model_parallel_size", 2),
        Change("model.pipeline_model_parallel_size", 2),
    ]
    keep = _pinned(base, pins)
    return base, search(base, top=5, keep=keep)


def _pinned(base, pins):
    from memtune.plan.query import pin_filter

    return pin_filter(base, tuple(pins))


def test_shown_layouts_are_ordered_by_the_simulated_step_of_the_gated_job(pipelined):
    base, result = pipelined
    rates = [p.tokens_per_s_per_gpu for p in result.layouts]
    assert len(rates) == 5 and rates == sorted(rates, reverse=True)
    for p in result.layouts:
        # the figure shown is the step model's on the job exactly as gated, nothing else
        job = with_changes(base, p.changes)
        assert p.step is not None
        assert p.tokens_per_s_per_gpu == predict_step(gate(job).derived).tokens_per_s_per_gpu
    assert result.layouts[0].relative == 1.0
    # every layout left out was priced slower, or bounded slower than the fifth, or is one the
    # gate for advice refuses
    fifth = result.layouts[-1].step_time_s
    for s in result.scored:
        if s.candidate not in {p.candidate for p in result.layouts}:
            faster = s.step_s < fifth and s.bound_s <= fifth
            assert (
                not faster or admit(with_changes(base, changes_of(base, s.candidate)), base).checked is None
            )
    assert result.counts["bounded out"] > 0


def _plan(capsys, monkeypatch, args):
    monkeypatch.setenv("COLUMNS", "80")
    code = main(
        [
            "plan",
            "llama3-8b",
            "--gpus",
            "16",
            "--seq",
            "4096",
            "--gbs",
            "64",
            "--pin",
            "model.tensor_model_parallel_size=2",
            "--pin",
            "model.pipeline_model_parallel_size=2",
            "--workers",
            "1",
            *args,
        ]
    )
    return code, capsys.readouterr().out.splitlines()


def test_explain_shows_the_simulated_step_of_each_stage_beside_the_first(capsys, monkeypatch):
    code, lines = _plan(capsys, monkeypatch, ["--explain", "2", "--top", "2"])
    assert code == 0 and all(len(line) <= 80 and line == line.rstrip() for line in lines)
    header = lines.index(next(line for line in lines if line.startswith("stage  compute s")))
    assert lines[header].split() == ["stage", "compute", "s", "exposed", "comm", "s", "idle", "(bubble)", "s"]
    assert [line.split()[0] for line in lines[header + 2 : header + 4]] == ["0", "1"]
    busiest = next(i for i, line in enumerate(lines) if line.startswith("busiest stage"))
    names = [line.rsplit(None, 3)[0] for line in lines[busiest + 2 : busiest + 6]]
    assert names == ["step", "compute", "exposed communication", "idle (bubble)"]


def test_explain_with_plot_draws_the_gantt_chart_of_that_layout(capsys, monkeypatch, tmp_path):
    path = Path(tmp_path) / "step.png"
    code, lines = _plan(capsys, monkeypatch, ["--explain", "1", "--top", "1", "--plot", str(path)])
    assert code == 0 and "plot written to" in " ".join(lines)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_answer_does_not_depend_on_the_worker_count(pipelined):
    # workers estimate every candidate for the frontier (--pareto, --plot)
    base, one = pipelined
    pins = [
        Change("model.tensor_model_parallel_size", 2),
        Change("model.pipeline_model_parallel_size", 2),
    ]
    two = search(base, top=5, keep=_pinned(base, pins), workers=2, pareto=True)
    alone = search(base, top=5, keep=_pinned(base, pins), workers=1, pareto=True)
    assert [(p.candidate, p.tokens_per_s_per_gpu) for p in two.layouts] == [
        (p.candidate, p.tokens_per_s_per_gpu) for p in one.layouts
    ]
    assert [(p.candidate, p.step) for p in two.pareto] == [(p.candidate, p.step) for p in alone.pareto]
    assert two.counts == alone.counts


def test_the_frontier_shown_is_a_frontier_of_the_step_model(pipelined):
    base, _ = pipelined
    pins = [
        Change("model.tensor_model_parallel_size", 2),
        Change("model.pipeline_model_parallel_size", 2),
    ]
    result = search(base, top=1, pareto=True, keep=_pinned(base, pins))
    needed = [p.estimate.needed_bytes(p.estimate.worst) for p in result.pareto]
    rates = [p.tokens_per_s_per_gpu for p in result.pareto]
    # less memory first, and each further layout faster by the simulated step than every one before
    assert len(rates) >= 2 and needed == sorted(needed)
    assert all(later > earlier for earlier, later in itertools.pairwise(rates))
    assert all(p.step is not None for p in result.pareto)


def test_a_layout_the_old_analytic_pruning_lost_is_found():
    """Llama 3 70B LoRA on 8 H100s: the analytic pruning model ranked 32 TP 2 layouts first (it
    priced the adapters' TP traffic more kindly than the step model), and only a rule that
    re-priced the best of every TP size found the step model's fastest, a TP 1 layout far down
    its order. With one model the bound finds it directly."""
    base = base_job(Query("llama3-70b", 8, "H100-80GB", 8, 4096, 32, "lora"))
    result = search(base, top=3)
    assert result.layouts[0].candidate.tp == 1
    assert all(p.step is not None for p in result.layouts)
