"""One regression test per root cause of issue 19 (hostile and broken input), with exact messages."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from memtune import limits
from memtune.config.loaders._shell import evaluate, parse_script
from memtune.diagnose import detectors, logscan
from memtune.diagnose.logscan import scan, scan_text
from memtune.diagnose.snapshot import load_plain_pickle, read_snapshot, summarise
from memtune.errors import InputError
from memtune.numbers import echo, float_or_none, int_or_none
from tests.hostile.conftest import run_cli

MODEL = "model:\n  num_layers: 4\n  hidden_size: 256\n  num_attention_heads: 4\n  vocab_size: 1000\n"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.10 GiB of which 1.00 GiB is free. Of the allocated memory 60.00 GiB is allocated by PyTorch, and "
    "17.00 GiB is reserved by PyTorch but unallocated."
)


def errors_of(capsys, *argv: str) -> tuple[int, list[str]]:
    status, _, err = run_cli(capsys, *argv)
    return status, err.splitlines()


@pytest.fixture
def write(tmp_path):
    def _write(name: str, content: str | bytes) -> str:
        path = tmp_path / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return str(path)

    return _write


# --- 1. catastrophic backtracking -------------------------------------------------------------


def test_dot_star_patterns_became_first_match_searches():
    """The per-rank memory, CPU-percent, NCCL narrative and lookahead-chain patterns now find their
    first anchor once; these are the lines that used to take minutes at 64 KiB."""
    assert detectors.rank_memory_report("[Rank 1] " + "memory (MB) | " * 4000 + "max reserved: 12.5") is None
    report = detectors.rank_memory_report(
        "[Rank 1] (after 5 iterations) memory (MB) | allocated: 1.5 | max allocated: 2.0 | reserved: 3.0 | "
        "max reserved: 12.5"
    )
    assert (report.rank, report.iteration, report.max_reserved) == (1, 5, round(12.5 * (1 << 20)))
    assert detectors._cpu_percent("CPU Virtual Memory: " + "percent = 1" * 5000 + "percent = 93.5%") == 93.5
    assert detectors._InOrder("NCCL WARN", "out of memory").search("NCCL WARN " * 6000) is False
    assert (
        detectors._AllOf("nccl_graph_register", "expandable_segments", ("assert",)).search(
            "NCCL_GRAPH_REGISTER " * 3000
        )
        is False
    )


def test_sizes_are_not_read_from_inside_a_digit_run():
    """A number starts after a non-digit and has at most 20 digits: a 64 KiB digit run is neither
    backtracked over from every position nor turned into a 4,300-digit int."""
    result = scan_text("CUDA out of memory. Tried to allocate " + "9" * 60000 + " GiB\n")
    assert [(f.kind, f.numbers) for f in result.failures] == [("allocator_oom_bare", None)]


# --- 2. trigger-dense and rank-heavy logs ------------------------------------------------------


def test_findings_per_kind_are_capped_overall_and_counted(monkeypatch):
    monkeypatch.setattr(logscan, "MAX_FINDINGS_PER_KIND", 50)
    text = "".join(
        f"[Rank {r}] (after 10 iterations) memory (MB) | allocated: 1.0 | max allocated: 2.0 | reserved: 3.0 | "
        f"max reserved: 4.0\n"
        for r in range(5000)
    )
    result = scan_text(text)
    assert sum(f.kind == "rank_memory" for f in result.facts) == 50
    assert result.suppressed["rank_memory"] == 4950


def test_follow_on_lines_are_not_decoded_for_a_complete_message():
    line = detectors.Line(OOM, detectors.Where("<t>", 1, None), lambda n: pytest.fail("decoded look-ahead"))
    assert [f.kind for f in detectors.detect(line)] == ["allocator_oom"]


def test_rank_heavy_log_json_finishes(capsys, write):
    text = "".join(f"[rank{r}]: {OOM}\n" for r in range(3000))
    status, out, err = run_cli(capsys, "diagnose", "--json", write("ranks.log", text))
    assert status == 0 and err == ""
    assert json.loads(out)["suppressed_findings"] == {"allocator_oom": 3000 - limits.MAX_FINDINGS_PER_KIND}


# --- 3. unbounded structures from tiny inputs -------------------------------------------------


def test_yaml_alias_bomb_is_refused(capsys, corpus):
    path = corpus / "yaml-alias-bomb.yaml"
    assert errors_of(capsys, "check", str(path)) == (
        2,
        [f"memtune check: {path}: more than 200000 values (aliases expanded); a config is far smaller"],
    )


def test_self_referencing_alias_is_refused(capsys, write):
    path = write("loop.yaml", "a: &a [*a]\n" + MODEL)
    status, lines = errors_of(capsys, "estimate", path)
    assert status == 2 and len(lines) == 1
    assert lines[0].startswith(f"memtune estimate: {path}: nested deeper than 64 levels at a[0][0]")
    assert lines[0].endswith("(or it contains itself)")


def test_too_many_alias_uses_are_refused(capsys, write):
    path = write("aliases.yaml", "x: &x 1\ny: [" + ", ".join(["*x"] * 1001) + "]\n" + MODEL)
    assert errors_of(capsys, "estimate", path) == (
        2,
        [f"memtune estimate: {path}: more than 1000 YAML aliases (*name); a config does not need that many"],
    )


def test_doubling_shell_variable_stops_at_the_cap():
    with pytest.raises(InputError) as exc:
        parse_script("A=xxxxxxxx\n" + "A=$A$A\n" * 40)
    assert exc.value.problems == [
        "logical line 14 is longer than 65536 characters once variables are expanded "
        "(a variable that keeps doubling itself?); memtune reads no further"
    ]


def test_list_arithmetic_is_capped():
    assert evaluate("([1]*100000)*100000") is None
    assert evaluate("[1]*100001") is None
    assert evaluate("[0]*3+[1]*2") == [0, 0, 0, 1, 1]
    assert evaluate("99999999*" * 20 + "1") is None  # beyond 2**63
    assert evaluate("+".join(["1"] * 100000)) is None  # longer than MAX_ARITHMETIC_CHARS


def test_absurd_layer_count_names_the_limit(capsys, write):
    path = write("huge.yaml", MODEL.replace("num_layers: 4", "num_layers: " + "1" + "0" * 30))
    assert errors_of(capsys, "estimate", path) == (
        2,
        [
            "memtune estimate: model.num_layers: must be at most 10000 (memtune's plausibility limit), "
            "got an integer of about 30 digits"
        ],
    )


def test_huge_strings_are_cut_when_echoed(capsys, write):
    path = write("gpu.yaml", MODEL + "cluster:\n  gpu: " + "x" * 200000 + "\n")
    status, lines = errors_of(capsys, "estimate", path)
    assert status == 2 and len(lines) == 1 and len(lines[0]) < 300
    assert lines[0].startswith("memtune estimate: unknown GPU 'xxxx") and "…" in lines[0]


def test_many_unknown_keys_give_a_bounded_report(capsys, corpus):
    status, lines = errors_of(capsys, "check", str(corpus / "yaml-unknown-keys.yaml"))
    assert status == 2 and len(lines) == limits.MAX_PROBLEM_LINES + 1
    assert lines[-1] == "memtune check: ... and 29980 more problems"


def test_in_flight_microbatches_need_no_per_microbatch_list():
    from memtune.estimate.schedule import chunk_counts

    assert chunk_counts(10**8, 1000, 1000, 2 * 10**6) == [2000] * 1000


# --- 4. untrusted numbers ----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["٣٢", "３２", "9" * 31, "1_000", "0x10", "", "+", " 1 2"])
def test_integers_from_text_are_plain_ascii_and_bounded(text):
    assert int_or_none(text) is None


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999", "9" * 400])
def test_floats_from_text_are_finite(text):
    assert float_or_none(text) is None


@pytest.mark.parametrize(
    ("yaml_line", "message"),
    [
        ("  num_layers: true", "model.num_layers: must be an integer, got True"),
        ("  num_layers: '4'", "model.num_layers: must be an integer, got '4'"),
        ("  num_layers: 4.0", "model.num_layers: must be an integer, got 4.0"),
    ],
)
def test_integer_fields_are_strict(capsys, write, yaml_line, message):
    path = write("strict.yaml", MODEL.replace("  num_layers: 4", yaml_line))
    assert errors_of(capsys, "estimate", path) == (2, [f"memtune estimate: {message}"])


def test_non_finite_sizes_are_refused(capsys, write):
    path = write("inf.yaml", MODEL + "cluster:\n  gpu_memory_gib: .inf\n")
    assert errors_of(capsys, "estimate", path) == (
        2,
        ["memtune estimate: cluster.gpu_memory_gib: must be a finite number, got inf"],
    )


def test_moe_imbalance_nan_is_one_line(capsys):
    example = str(Path(__file__).parents[2] / "examples" / "llama3-8b-lora.yaml")
    assert errors_of(capsys, "estimate", example, "--moe-imbalance", "nan") == (
        2,
        ["memtune estimate: --moe-imbalance: must be from 1.0 (balanced routing) to 1e+06, got nan"],
    )


def test_numbers_beyond_the_digit_limit_in_configs_are_one_line(capsys, corpus):
    for name in ("yaml-5000-digit-int.yaml", "json-5000-digit-int.json"):
        status, lines = errors_of(capsys, "estimate", str(corpus / name))
        assert status == 2 and len(lines) == 1 and "4300 digits" in lines[0]


def test_unicode_digits_in_a_launch_script_are_not_numbers(capsys, corpus):
    status, lines = errors_of(capsys, "estimate", str(corpus / "shell-unicode-digits.sh"))
    assert status == 2
    assert "memtune estimate: model.num_layers: must be an integer, got '٣٢'" in lines


def test_log_numbers_are_bounded(capsys, corpus):
    for name in (
        "log-rank-prefix-digits.log",
        "log-pid-digits.log",
        "log-world-size.log",
        "log-oom-size-400-digits.log",
    ):
        status, _, err = run_cli(capsys, "diagnose", "--json", str(corpus / name))
        assert status in (0, 1) and err == "", (name, err)


def test_echo_describes_huge_values_instead_of_printing_them():
    assert echo(10**5000 - 1) == "an integer of about 5000 digits"
    assert echo(list(range(100))) == "a list of 100 entries"
    assert echo("y" * 500) == "'" + "y" * 78 + "…"


# --- 5. loaders that trust field types --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("hf-model-type-list.json", "model_type must be a string, got ['llama']"),
        ("hf-architectures-int.json", "architectures must be a list of class names, got 7"),
        ("hf-sparse-step-zero.json", "decoder_sparse_step must be an integer from 1 to 1099511627776, got 0"),
        ("hf-string-layers.json", "num_hidden_layers must be an integer from 1 to 10000, got '48'"),
        ("hf-huge-layers.json", "num_hidden_layers must be an integer from 1 to 10000, got 1000000000000"),
        (
            "hf-activation-list.json",
            "activation ['silu'] is not supported; supported: silu, swish, gelu, gelu_new, gelu_pytorch_tanh",
        ),
        ("hf-mlp-only-dicts.json", "mlp_only_layers must be a list of integers, got [{'a': 1}]"),
    ],
)
def test_hf_fields_of_the_wrong_type(capsys, name, message, corpus):
    path = corpus / name
    assert errors_of(capsys, "estimate", str(path)) == (2, [f"memtune estimate: {path}: {message}"])


def test_bridge_keys_must_be_strings(capsys, corpus):
    path = corpus / "bridge-int-keys.yaml"
    assert errors_of(capsys, "estimate", str(path)) == (
        2,
        [f"memtune estimate: {path}: model: keys must be strings, got int key"],
    )


@pytest.mark.parametrize("name", ["json-deep.json", "yaml-deep.yaml", "yaml-deep-mapping.yaml"])
def test_deep_nesting_is_one_line(capsys, name, corpus):
    status, lines = errors_of(capsys, "check", str(corpus / name))
    assert status == 2 and len(lines) == 1
    assert "nested deeper than 64 levels" in lines[0] or "exceeded maximum nesting depth" in lines[0]


def test_deep_override_value_is_refused(capsys):
    example = str(Path(__file__).parents[2] / "examples" / "llama3-8b-lora.yaml")
    status, lines = errors_of(capsys, "estimate", example, "model.x=" + "[" * 100 + "]" * 100)
    assert status == 2 and len(lines) == 1 and "nested deeper than 64 levels" in lines[0]


def test_arithmetic_with_100000_terms_stays_literal():
    script = parse_script("N=$((" + "+".join(["1"] * 20000) + "))\n")
    assert str(script.variables["N"]).startswith("$((1+1+")


def test_here_document_bodies_are_not_commands(capsys, corpus):
    status, out, err = run_cli(capsys, "estimate", "--json", str(corpus / "shell-heredoc.sh"))
    assert status == 0, err
    assert json.loads(out)["ranks"][0]["layers"] == 2


# --- 6. snapshots --------------------------------------------------------------------------------


def test_huge_memo_index_is_refused_before_unpickling():
    with pytest.raises(InputError) as exc:
        load_plain_pickle(b"\x80\x04r\xff\xff\xff\x7fN.", "memo.pickle")
    assert exc.value.problems == [
        "memo.pickle: not a readable pickle (UnpicklingError: memo index beyond 10000000; truncated or corrupt?)"
    ]


def test_code_running_pickles_are_still_refused():
    with pytest.raises(InputError, match="references os.system"):
        load_plain_pickle(b"cos\nsystem\n(Vtrue\ntR.", "evil")
    with pytest.raises(InputError, match="STACK_GLOBAL opcode"):
        load_plain_pickle(b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R.", "evil")


def test_devices_and_pipes_are_read_with_a_cap(tmp_path):
    with pytest.raises(InputError, match="/dev/zero: not a pickle"):
        read_snapshot("/dev/zero")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen([sys.executable, "-c", f"open({str(fifo)!r}, 'wb').write(bytes(9))"])
    with pytest.raises(InputError, match="not a pickle"):
        read_snapshot(fifo)
    writer.wait()


def test_shared_references_are_summarised_once():
    block = {"size": 512, "state": "active_allocated", "frames": []}
    segment = {"total_size": 1 << 21, "blocks": [block] * 1000}
    summary = summarise({"segments": [segment] * 1000}, "shared")
    assert (summary.segments, summary.reserved, summary.allocated) == (1, 1 << 21, 512)


def test_absurd_snapshot_sizes_are_refused():
    with pytest.raises(InputError, match="a size or time stamp of about 603 digits; the file is corrupt"):
        summarise({"segments": [{"total_size": 2**2000, "blocks": []}]}, "huge")


def test_json_output_is_safe_for_any_legal_value(capsys, corpus):
    status, out, err = run_cli(
        capsys, "diagnose", "--json", "--snapshot", str(corpus / "snap-odd-values.pickle")
    )
    assert status == 0, err
    settings = json.loads(out)["snapshot"]["allocator_settings"]
    assert settings == {"x": "<bytes>", "s": "<set>", "<tuple key>": "tuple key", "self": "<dict>"}


# --- 7. files and output channels -------------------------------------------------------------


def run_subprocess(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memtune", *argv], check=False, capture_output=True, text=True, **kwargs
    )


def test_over_long_file_name_is_one_line(capsys, tmp_path):
    name = str(tmp_path / ("a" * 300 + ".log"))
    status, lines = errors_of(capsys, "diagnose", name)
    assert status == 2 and len(lines) == 1 and lines[0].endswith(": File name too long")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("missing/p.png", "directory {dir}/missing does not exist"),
        ("p", "the file name must end in .png, .pdf, .svg (the extension picks the format)"),
        ("p.xyz", "the file name must end in .png, .pdf, .svg (the extension picks the format)"),
    ],
)
def test_plot_target_is_checked_first(capsys, tmp_path, target, message):
    example = str(Path(__file__).parents[2] / "examples" / "llama3-8b-lora.yaml")
    path = str(tmp_path / target)
    assert errors_of(capsys, "estimate", example, "--plot", path) == (
        2,
        [f"memtune estimate: --plot {path}: {message.format(dir=tmp_path)}"],
    )


def test_stdout_on_a_full_device_is_one_line_and_status_2():
    example = str(Path(__file__).parents[2] / "examples" / "llama3-8b-lora.yaml")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "memtune", "check", example],
            check=False,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert done.returncode == 2
    assert done.stderr == "memtune: cannot write the output (No space left on device)\n"


def test_closed_reader_keeps_the_exit_status_meaning():
    example = str(Path(__file__).parents[2] / "examples" / "broken-llama3-8b.yaml")
    shell = f"{sys.executable} -m memtune check {example} | head -c 1 >/dev/null; echo ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "1" and "Traceback" not in done.stderr


def test_closed_stdin_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", None)
    assert errors_of(capsys, "diagnose", "-") == (2, ["memtune diagnose: -: standard input is closed"])


def test_ascii_terminal_gets_escapes_not_a_traceback():
    example = str(Path(__file__).parents[2] / "examples" / "llama3-70b-sft.yaml")
    done = run_subprocess("estimate", example, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and done.stderr == ""


def test_a_few_nul_bytes_do_not_make_a_log_binary(write):
    result = scan([write("nul.log", b"\x00\x00" + OOM.encode() + b"\n\x00\n")])
    assert [f.kind for f in result.failures] == ["allocator_oom"]


def test_truncated_gzip_keeps_what_was_read(write):
    # hard-to-compress text after the OOM line without a letter in it, so that no pattern can
    # match in what the cut leaves of it (os.urandom's bytes spelled an OOM phrase now and then)
    symbols = "0123456789 !#$%&()*+,-./:;<=>?@[]^_{|}~\n"
    noise = "".join(random.Random(0).choices(symbols, k=200000)).encode()
    data = gzip.compress(("filler line\n" * 50000 + OOM + "\n").encode() + noise)
    result = scan([write("cut.log.gz", data[: len(data) - 100000])])
    assert [f.kind for f in result.failures] == ["allocator_oom"]
    assert result.sources[0].note.startswith("truncated or corrupt compressed data after ")


def test_logs_are_read_when_the_process_has_no_stdin(monkeypatch, write):
    """Found by benchmarks/fuzz.py: closing a log file compared it with sys.stdin.buffer."""
    monkeypatch.setattr(sys, "stdin", None)
    assert [f.kind for f in scan([write("oom.log", OOM + "\n")]).failures] == ["allocator_oom"]
