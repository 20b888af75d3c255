"""What arithmetic prunes is exactly what memtune check refuses, with the same code."""

from memtune.check import run_checks
from memtune.check.finding import ERROR
from memtune.config.changes import Change, job_data, with_changes
from memtune.config.derived import derive
from memtune.config.knobs import Knobs, Recompute
from memtune.config.validation import validate
from memtune.errors import InputError
from memtune.plan.query import Query, base_job
from memtune.plan.space import changes_of, pruned


def _error_codes(job):
    return {f.code for f in run_checks(job) if f.severity == ERROR}


def test_every_pruned_candidate_is_refused_by_that_check(dense_base, moe_lora_base, sample):
    checked = 0
    for base in (dense_base, moe_lora_base):
        d = derive(base)
        for c in sample(base, 40, seed=7, want_pruned=True):
            code = pruned(d, c, d.global_batch_size)
            try:
                job = with_changes(base, changes_of(base, c))
            except InputError:
                continue
            assert code in _error_codes(job), (c.label(), code)
            checked += 1
    assert checked >= 60


def test_unpruned_layouts_pass_the_layout_checks(dense_base, sample):
    """The converse on a sample: nothing the pruning lets through trips the rules it mirrors."""
    mirrored = {
        "PAR001",
        "PAR002",
        "PAR003",
        "PAR004",
        "PAR005",
        "MOE002",
        "MOE004",
        "SEQ001",
        "SEQ002",
        "SEQ003",
        "PIP001",
        "PIP002",
        "PIP009",
        "BAT001",
        "PIP010",
        "PIP012",
        "REC002",
        "OFF001",
    }
    for c in sample(dense_base, 60, seed=9):
        assert not (_error_codes(with_changes(dense_base, changes_of(dense_base, c))) & mirrored), c.label()


def test_world_size_pruning_names_par001():
    base = base_job(Query("llama3-8b", 12, "H100-80GB", 8, 4096, 48, "pretrain"))
    c = Knobs(8, 1, 1, 1, 1, 8, 1, True, Recompute(), "distopt", 0.0, 0, False)
    assert pruned(derive(base), c, 48) == "PAR001"


def test_a_layout_with_cp_gives_gpt_oss_attention_the_all_to_all_exchange():
    # GPT-OSS (a 128-key window on every other layer, learned sinks) at CP 2: Transformer
    # Engine's ring refuses both, so the planner's candidate exchanges heads all-to-all; at CP 1
    # the job's own type stays
    base = base_job(Query("gpt-oss-120b", 64, "H100-80GB", 8, 8192, 128, "pretrain"))
    assert base.model.cp_comm_type == "p2p" and base.model.softmax_type == "learnable"
    cp2 = Knobs(1, 4, 1, 2, 8, 1, 1, False, Recompute(), "distopt", 0.0, 0, False)
    job = with_changes(base, changes_of(base, cp2))
    assert job.model.cp_comm_type == "a2a"
    assert not _error_codes(job) & {"SEQ005", "SEQ007", "SEQ008"}
    cp1 = Knobs(1, 4, 1, 1, 8, 1, 1, False, Recompute(), "distopt", 0.0, 0, False)
    assert with_changes(base, changes_of(base, cp1)).model.cp_comm_type == "p2p"


def test_a_layout_keeps_a_hierarchical_exchanges_all_to_all_group_and_grows_its_ring():
    from memtune.config.changes import Change

    base = with_changes(
        base_job(Query("llama3-8b", 32, "H100-80GB", 8, 8192, 64, "pretrain")),
        [
            Change.parse("model.context_parallel_size=2"),
            Change.parse("model.cp_comm_type=a2a+p2p"),
            Change.parse("model.hierarchical_context_parallel_sizes=[2,1]"),
        ],
    )
    cp4 = Knobs(1, 1, 1, 4, 1, 1, 1, False, Recompute(), "distopt", 0.0, 0, False)
    job = with_changes(base, changes_of(base, cp4))
    assert (job.model.cp_comm_type, job.model.hierarchical_context_parallel_sizes) == ("a2a+p2p", [2, 2])
    assert "SEQ006" not in _error_codes(job)
    # a CP the all-to-all group does not divide keeps the job's sizes (at CP 1 nothing reads them)
    cp1 = Knobs(1, 1, 1, 1, 1, 1, 1, False, Recompute(), "distopt", 0.0, 0, False)
    assert with_changes(base, changes_of(base, cp1)).model.hierarchical_context_parallel_sizes == [2, 1]


def test_a_layout_without_sequence_parallelism_turns_tp_comm_overlap_off():
    # Megatron-LM asserts TP communication overlap needs sequence parallelism (check SEQ010): a
    # candidate keeps the job's overlap where its layout has SP over a TP group, drops it elsewhere
    preset = job_data(base_job(Query("llama3-8b", 8, "H100-80GB", 8, 4096, 32, "pretrain")))
    base = with_changes(
        validate({**preset, "defaults": "megatron-lm"}),
        [Change.parse(t) for t in ("model.tensor_model_parallel_size=2", "model.sequence_parallel=true",
                                   "model.tp_comm_overlap=true")],
    )  # fmt: skip
    d = derive(base)
    for tp, sp, overlap in ((2, True, True), (1, False, False), (2, False, False)):
        knobs = Knobs(tp, 1, 1, 1, 1, tp, 1, sp, Recompute(), "distopt", 0.0, 0, False)
        job = with_changes(base, changes_of(base, knobs))
        assert job.model.tp_comm_overlap is overlap
        assert "SEQ010" not in {f.code for f in run_checks(job)}
    assert d.userbuffer_overlap
