"""Property tests: generated configs, logs, shell scripts and pickles never make memtune raise
anything but InputError, and the linear-time rewrites agree with what they replaced."""

from __future__ import annotations

import io
import json
import os
import pickle
import re

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtune.check import gate
from memtune.config import load_job
from memtune.config.loaders import megatron_args
from memtune.config.loaders._guards import check_tree, load_yaml
from memtune.diagnose import detectors, logscan
from memtune.diagnose.evidence import Where
from memtune.diagnose.logscan import scan_text
from memtune.diagnose.snapshot import load_plain_pickle, summarise
from memtune.errors import InputError
from memtune.estimate import estimate
from memtune.estimate.schedule import chunk_counts, forward_order
from memtune.numbers import float_or_none, int_or_none

SETTINGS = settings(
    max_examples=int(os.environ.get("MEMTUNE_PROPERTY_EXAMPLES", "60")),
    deadline=3000,
    derandomize=os.environ.get("MEMTUNE_PROPERTY_EXAMPLES") is None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# --- configs ---------------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(min_value=-4, max_value=64),
    st.sampled_from([0, 1, 2, 8, 10**4, 10**6, 10**9, 10**30, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
)
SCALARS = st.one_of(
    NUMBERS, st.sampled_from(["bf16", "selective", "full", "silu", "auto", "٣٢", "３２", "1e999"])
)
KEYS = st.sampled_from(
    [
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "vocab_size",
        "seq_length",
        "ffn_hidden_size",
        "num_query_groups",
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size",
        "context_parallel_size",
        "expert_model_parallel_size",
        "num_moe_experts",
        "moe_layer_freq",
        "moe_router_topk",
        "recompute_granularity",
        "recompute_num_layers",
        "mtp_num_layers",
        "hidden_dropout",
        "bf16",
        "unknown_key",
    ]
)
SECTIONS = st.fixed_dictionaries(
    {
        "model": st.dictionaries(KEYS, st.one_of(SCALARS, st.lists(NUMBERS, max_size=4)), max_size=12).map(
            lambda m: {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 128, **m}
        )
    },
    optional={
        "train": st.dictionaries(st.sampled_from(["micro_batch_size", "global_batch_size"]), NUMBERS),
        "cluster": st.dictionaries(
            st.sampled_from(["num_gpus", "gpu_memory_gib", "gpu", "gpus_per_node"]), SCALARS
        ),
        "env": st.dictionaries(st.sampled_from(["torch_version", "megatron_core_version"]), SCALARS),
    },
)


@SETTINGS
@given(data=SECTIONS)
def test_any_config_is_estimated_or_refused_with_input_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("cfg") / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        estimate(gate(load_job(path).job))
    except InputError as exc:
        assert exc.problems and all(len(p) < 2000 for p in exc.problems)


YAML_ATOMS = st.sampled_from(
    ["a: &x [1, 2]\n", "b: *x\n", "c: [*x, *x, *x]\n", "- ", "{", "}", "[", "]", "&y ", "*y ", "!!python/name:os.system ",
     "num_layers: ", "9" * 50, ".inf", ".nan", "true", "\n", "  ", ": ", "? ", "'", '"', "\t", "\x00", "%YAML 1.1\n", "---\n"]
)  # fmt: skip


@SETTINGS
@given(parts=st.lists(YAML_ATOMS, max_size=40))
def test_any_yaml_text_loads_or_is_refused_in_one_line(parts):
    try:
        data = load_yaml("".join(parts), "<text>")
    except InputError as exc:
        assert len(exc.problems) == 1
        return
    check_tree(data, "<text>")  # what load_yaml returns already passed the guards


# --- numbers ---------------------------------------------------------------------------------


@SETTINGS
@given(text=st.text(max_size=40))
def test_numbers_from_text_are_ascii_bounded_and_finite(text):
    value = int_or_none(text)
    if value is not None:
        assert re.fullmatch(r"\s*[+-]?[0-9]{1,30}\s*", text)
    number = float_or_none(text)
    assert number is None or (number == number and abs(number) != float("inf"))


# --- logs --------------------------------------------------------------------------------------

LOG_ATOMS = st.sampled_from(
    [t.decode() for t in detectors.TRIGGERS]
    + ["CUDA out of memory. Tried to allocate ", "2.00 GiB", "GPU 0 has a total capacity of ", "[rank3]: ",
       "[Rank 7] ", "memory (MB) | max reserved: ", "NCCL WARN ", "out of memory", "fragmentation ", "not ",
       "inactive ", "reserved ", "PYTORCH_CUDA_ALLOC_CONF=", "expandable_segments:True", "torch ", "2.11.0",
       "exitcode: -9", "Killed", "percent = ", "CPU Virtual Memory: ", "9" * 30, " " * 30, "\n", "\x00",
       "\x1b[31m", "memory summary\n| Allocated memory | 1 GiB | 2 GiB |\nCUDA OOMs: 1\n", "but unallocated"]
)  # fmt: skip


@SETTINGS
@given(parts=st.lists(LOG_ATOMS, max_size=60))
def test_any_log_text_scans_without_error(parts):
    result = scan_text("".join(parts))
    assert result.sources[0].lines >= 0


@SETTINGS
@given(parts=st.lists(LOG_ATOMS.filter(lambda a: "\n" not in a), max_size=30))
def test_needle_gate_changes_no_detection(monkeypatch, parts):
    text = "".join(parts).strip()
    line = detectors.Line(text, Where("<t>", 1, None), ["2.00 GiB but unallocated"])
    gated = detectors.detect(line)
    with monkeypatch.context() as patch:  # undone per example: the fixture lives for all of them
        patch.setattr(detectors, "NEEDLES", {})
        ungated = detectors.detect(detectors.Line(text, Where("<t>", 1, None), ["2.00 GiB but unallocated"]))
    assert [(x.kind, getattr(x, "value", None)) for x in gated] == [
        (x.kind, getattr(x, "value", None)) for x in ungated
    ]


# Lines of a repetitive log: a few templates whose numbers change, each repeated, so that the
# scanner's search by line shape (digits as 0) runs as well as its plain search per trigger.
REPORT_LINES = st.tuples(
    st.sampled_from(["", "[rank{n}]: ", "[rank3]: ", "[1,{n}]<stdout>: ", "{n}: ", "\x1b[1m", " "]),
    st.sampled_from(
        [
            "[Rank {n}] (after {n} iterations) memory (MB) | allocated: 1.5 | max allocated: 2.{n} | "
            "reserved: 3.0 | max reserved: {n}.5",
            "[Rank {n}] memory (MB) | allocated: {n}.{n}.{n}",
        ]
    ),
).map("".join)
LOG_LINES = st.lists(
    st.tuples(
        REPORT_LINES
        | st.lists(LOG_ATOMS.filter(lambda a: "\n" not in a) | st.sampled_from(["{n}", "status {n}", "[1,{n}]<stdout>: "]),
                   max_size=8).map("".join),
        st.lists(st.integers(0, 999), min_size=1, max_size=6),
    ).map(lambda t: [t[0].replace("{n}", str(n)) for n in t[1]]),
    max_size=12,
).map(lambda groups: [line for group in groups for line in group])  # fmt: skip


def _plain_trigger_lines(data: bytes, limit: int) -> list[tuple[int, int]]:
    found, offset = [], 0
    for index, line in enumerate(data[:limit].split(b"\n")):
        if any(t in line for t in detectors.TRIGGERS):
            found.append((offset, index))
        offset += len(line) + 1
    return found


@SETTINGS
@given(lines=LOG_LINES, block=st.integers(1, 400), cut=st.integers(0, 50), share=st.sampled_from([0.5, 1.0]))
def test_search_by_shape_finds_the_lines_that_hold_a_trigger(monkeypatch, lines, block, cut, share):
    monkeypatch.setattr(logscan, "BLOCK_BYTES", block)
    monkeypatch.setattr(logscan, "MOSTLY_DISTINCT", share)  # 1.0: search by shape whatever the lines
    data = "\n".join(lines).encode()
    limit = max(0, len(data) - cut)
    blocks = list(logscan.trigger_lines(data, limit))
    assert [(at, before) for hits, _ in blocks for at, before, _ in hits] == _plain_trigger_lines(data, limit)
    assert sum(lines for _, lines in blocks) == data.count(b"\n", 0, limit)


@SETTINGS
@given(lines=LOG_LINES, cap=st.integers(0, 3))
def test_reading_by_shape_changes_no_finding(monkeypatch, lines, cap):
    """The same findings and counts as when every triggered line is read in full (the plain
    search gives no shapes), also once the caps on Megatron's memory reports are reached."""
    monkeypatch.setattr(logscan, "MAX_FINDINGS_PER_KIND", 2 * cap)
    monkeypatch.setattr(logscan, "KEEP_PER_KIND", cap)
    monkeypatch.setattr(logscan, "BLOCK_BYTES", 256)
    monkeypatch.setattr(logscan, "MOSTLY_DISTINCT", 1.0)
    text = "\n".join(lines)

    def findings():
        result = scan_text(text, "rank_5.log")
        return result.failures, result.facts, result.suppressed, result.kept, result.sources[0].lines

    by_shape = findings()
    with monkeypatch.context() as patch:  # undone per example: the fixture lives for all of them
        patch.setattr(logscan, "_block_trigger_lines", logscan._search_each_trigger)
        assert by_shape == findings()


@SETTINGS
@given(
    prefix=st.sampled_from(["", "[rank3]: ", "[1,3]<stdout>: ", "[2,3]<stdout>: ", "17: ", "\x1b[3m", " "]),
    parts=st.lists(st.sampled_from(["[Rank ", "7", "0", "12", "] ", "(after 9 iterations) ", "memory (MB)", " | ",
                                    "allocated: ", "max allocated: ", "reserved: ", "max reserved: ", ".", "5.25",
                                    "9" * 31, " "]), max_size=24),
)  # fmt: skip
def test_a_memory_report_shape_is_read_as_its_lines_are(prefix, parts):
    raw = (prefix + "".join(parts)).encode()
    shape = logscan._report_shape(raw.translate(logscan._DIGITS_AS_ZERO))
    assert shape in (logscan._NOT_A_REPORT, logscan._report_shape(raw))


@SETTINGS
@given(text=st.text(alphabet="ab NCLOM", max_size=30))
def test_in_order_matches_what_a_dot_star_pattern_matched(text):
    assert detectors._InOrder("NC", "OM").search(text) == bool(re.search("NC.*OM", text))


@SETTINGS
@given(
    rank=st.integers(0, 10**6),
    label=st.text(alphabet="ab ()|0123456789", max_size=12),
    values=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=4, max_size=4),
)
def test_rank_memory_reads_what_the_backtracking_pattern_read(rank, label, values):
    a, b, c, d = (f"{v:.1f}" for v in values)
    text = f"[Rank {rank}] {label} memory (MB) | allocated: {a} | max allocated: {b} | reserved: {c} | max reserved: {d}"
    old = re.search(
        r"\[Rank (\d+)\]\s*(.*?)\s*memory \(MB\)\s*\|\s*allocated:\s*([\d.]+)\s*\|\s*max allocated:\s*([\d.]+)"
        r"\s*\|\s*reserved:\s*([\d.]+)\s*\|\s*max reserved:\s*([\d.]+)",
        text,
    )
    report = detectors.rank_memory_report(text)
    assert (report.rank, report.label, report.max_reserved) == (
        int(old.group(1)),
        old.group(2),
        round(float(old.group(6)) * (1 << 20)),
    )


# --- shell scripts ----------------------------------------------------------------------------

SHELL_ATOMS = st.sampled_from(
    ["A=x\n", "A=$A$A\n", "B=(${A[@]} ${A[@]})\n", "N=$((", "))", "1+", "2*", "[1]*", "${A:-", "}", "<<EOF\n",
     "EOF\n", "<<-'END'\n", "\tEND\n", "'", '"', "\\\n", "(", ")", "# comment\n", "export ", "WORLD_SIZE=",
     "٣", "9" * 40, "torchrun --nproc-per-node 8 pretrain_gpt.py ", "--num-layers ", "--moe-layer-freq ",
     "--hidden-size ", "4 ", "$N ", "--bf16 ", "\n"]
)  # fmt: skip


@SETTINGS
@given(parts=st.lists(SHELL_ATOMS, max_size=60))
def test_any_shell_script_reads_or_is_refused(tmp_path_factory, parts):
    path = tmp_path_factory.mktemp("sh") / "train.sh"
    text = "".join(parts) + "\ntorchrun pretrain_gpt.py --num-layers 2\n"
    try:
        megatron_args.read(path, text)
    except InputError as exc:
        assert exc.problems


# --- pickles -----------------------------------------------------------------------------------

PLAIN = st.recursive(
    st.one_of(
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=8),
        st.binary(max_size=8),
        st.none(),
        st.booleans(),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(
            st.one_of(st.text(max_size=6), st.integers(), st.tuples(st.integers())), inner, max_size=4
        ),
        st.frozensets(st.integers(), max_size=3),
    ),
    max_leaves=20,
)
SNAPSHOTS = st.fixed_dictionaries(
    {
        "segments": st.lists(
            st.fixed_dictionaries(
                {
                    "total_size": st.one_of(st.integers(0, 2**40), PLAIN),
                    "blocks": st.one_of(
                        PLAIN,
                        st.lists(
                            st.fixed_dictionaries(
                                {
                                    "size": st.one_of(st.integers(-(2**70), 2**70), PLAIN),
                                    "state": st.sampled_from(["active_allocated", "inactive", "x"]),
                                    "frames": PLAIN,
                                }
                            ),
                            max_size=4,
                        ),
                    ),
                }
            ),
            max_size=4,
        )
    },
    optional={"allocator_settings": PLAIN, "device_traces": PLAIN},
)


@SETTINGS
@given(snap=SNAPSHOTS, protocol=st.integers(0, pickle.HIGHEST_PROTOCOL), flip=st.integers(0, 10**6))
def test_any_pickle_loads_and_summarises_or_is_refused(snap, protocol, flip):
    data = pickle.dumps(snap, protocol=protocol)
    mutated = bytearray(data)
    if flip % 3 == 0 and mutated:  # one corrupted byte in a third of the cases
        mutated[flip % len(mutated)] ^= 0xFF
    try:
        loaded = load_plain_pickle(bytes(mutated), "<pickle>")
        if isinstance(loaded, dict) and isinstance(loaded.get("segments"), list):
            summary = summarise(loaded, "<pickle>")
            json.dumps(summary.allocator_settings)
    except InputError as exc:
        assert exc.problems


@SETTINGS
@given(value=PLAIN)
def test_plain_values_round_trip_through_the_restricted_unpickler(value):
    data = pickle.dumps(value, protocol=4)
    assert load_plain_pickle(data, "<p>") == pickle.Unpickler(io.BytesIO(data)).load()


# --- schedule -------------------------------------------------------------------------------


@SETTINGS
@given(
    microbatches=st.integers(1, 40),
    chunks=st.integers(1, 6),
    group=st.integers(1, 10),
    held=st.integers(0, 300),
)
def test_closed_form_chunk_counts_match_the_forward_order(microbatches, chunks, group, held):
    held = min(held, microbatches * chunks)
    order = forward_order(microbatches, chunks, group)[:held]
    assert chunk_counts(microbatches, chunks, group, held) == [
        sum(c == k for _, c in order) for k in range(chunks)
    ]
