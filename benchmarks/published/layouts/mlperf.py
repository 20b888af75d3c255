"""Reading NVIDIA's MLPerf Training submissions (mlcommons/training_results_vX.Y) from their git
directories: what the ``collect_mlperf_*.py`` collectors share.

A submission is a system directory name (``eos-dfw_n64_ngc25.01_nemo``) under
``NVIDIA/results/<system>/<benchmark>/`` (the logs, ``result_<i>.txt``) and
``NVIDIA/benchmarks/<benchmark>/implementations/<system>/`` (the code and its
``config_<SYSTEM>_<nodes>x<gpus>x...sh`` launch settings), described by
``NVIDIA/systems/<system>.json``. Nothing here is executed: the launch scripts are read as text
(their ``export`` and ``: "${VAR:=default}"`` lines), the logs as MLLOG lines.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MIRRORS = Path("/work/.mirror")
VERSIONS = ("v3.0", "v3.1", "v4.0", "v4.1", "v5.0", "v5.1")
SUBMITTER = "NVIDIA"
STEP_TIME_KEYS = ("train_step_time", "train_step_timing")


def git_dir(version: str, mirrors: Path = MIRRORS) -> Path:
    return mirrors / f"mlcommons+training_results_{version}" / "repo"


def show(repo: Path, path: str) -> str:
    """One file of the repository's HEAD, as text ('' where it is not there)."""
    done = subprocess.run(
        ["git", f"--git-dir={repo}", "show", f"HEAD:{path}"], capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else ""


def listing(repo: Path, prefix: str) -> list[str]:
    """Every file path of HEAD under ``prefix``."""
    done = subprocess.run(
        ["git", f"--git-dir={repo}", "ls-tree", "-r", "--name-only", "HEAD", "--", prefix],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()


_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_DEFAULT = re.compile(r"""^\s*:\s+"?\$\{([A-Za-z_][A-Za-z0-9_]*):?=([^}]*)\}"?\s*$""")
_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def exports(*scripts: str) -> dict[str, str]:
    """The variables launch scripts set, later scripts and lines over earlier ones: ``export
    NAME=VALUE`` (quotes and a trailing comment dropped, ``$NAME`` / ``${NAME}`` of a variable
    already set substituted) and ``: "${NAME:=VALUE}"`` where NAME is still unset. Lines inside
    ``if`` blocks count like any other: read what a collector takes with care."""
    found: dict[str, str] = {}
    for script in scripts:
        for line in script.splitlines():
            if m := _EXPORT.match(line):
                name, value = m.group(1), m.group(2)
            elif m := _DEFAULT.match(line):
                name, value = m.group(1), m.group(2)
                if name in found:
                    continue
            else:
                continue
            value = value.split(" #")[0].strip().strip("'\"")
            found[name] = _REFERENCE.sub(lambda r: found.get(r.group(1), r.group(0)), value)
    return found


@dataclass
class ResultLog:
    """What one ``result_<i>.txt`` says of the run's speed."""

    global_batch_size: int | None
    step_times_s: list[float] = field(default_factory=list)  # tracked_stats train_step_time, in order
    samples_per_s: list[float] = field(default_factory=list)  # tracked_stats throughput (v4.0-v4.1)
    # (seconds, tokens) of each training block between evaluations: GPT-3's logs count tokens
    blocks: list[tuple[float, int]] = field(default_factory=list)
    keys: dict[str, Any] = field(default_factory=dict)  # the first value of every other MLLOG key

    @property
    def median_step_s(self) -> float | None:
        """The median logged step time, the first left out (it carries warm-up); where the log
        gives throughput in samples/s instead, the global batch over its median, the first
        left out likewise; None with fewer than three values."""
        steady = self.step_times_s[1:]
        if len(steady) >= 2:
            return statistics.median(steady)
        rates = self.samples_per_s[1:]
        if len(rates) >= 2 and self.global_batch_size:
            return self.global_batch_size / statistics.median(rates)
        return self._block_step_s()

    def _block_step_s(self) -> float | None:
        """Where the log has neither, each training block's time over its steps: a block's
        ``epoch_count`` is tokens where it is a whole number of global batches of
        ``max_sequence_length`` tokens (GPT-3 at v4.0-v4.1); the first block left out."""
        seq = self.keys.get("max_sequence_length")
        if not (self.global_batch_size and isinstance(seq, int)):
            return None
        per_step = self.global_batch_size * seq
        steady = [
            seconds / (tokens // per_step) for seconds, tokens in self.blocks[1:] if tokens % per_step == 0
        ]
        return statistics.median(steady) if len(steady) >= 2 else None


# srun --label's prefix on partners' logs (`` 0: :::MLLOG ...``): rank 0's lines are read
_RANK_LABEL = re.compile(r"^\s*(\d+): (?=:::MLLOG )")


def read_log(text: str) -> ResultLog:
    log = ResultLog(None)
    opened: float | None = None
    for line in text.splitlines():
        if m := _RANK_LABEL.match(line):
            if m.group(1) != "0":
                continue
            line = line[m.end() :]
        if not line.startswith(":::MLLOG "):
            continue
        try:
            event = json.loads(line[len(":::MLLOG ") :])
        except json.JSONDecodeError:
            continue
        key, value = event.get("key"), event.get("value")
        if key == "block_start":
            opened = event["time_ms"]
        elif key == "block_stop" and opened is not None:
            log.blocks.append(
                ((event["time_ms"] - opened) / 1000, int(event["metadata"].get("epoch_count", 0)))
            )
            opened = None
        # the step time's name: train_step_timing up to v4.1's GPT-3, train_step_time since
        timing = (
            next((value[k] for k in STEP_TIME_KEYS if k in value), None) if isinstance(value, dict) else None
        )
        if key == "tracked_stats" and timing is not None:
            log.step_times_s.append(float(timing))
        elif key == "tracked_stats" and isinstance(value, dict) and "throughput" in value:
            log.samples_per_s.append(float(value["throughput"]))
        elif key == "global_batch_size" and log.global_batch_size is None:
            log.global_batch_size = int(value)
        elif key not in log.keys:
            log.keys[key] = value
    return log


@dataclass(frozen=True)
class Submission:
    version: str
    benchmark: str
    submitter: str  # the top-level directory: NVIDIA, or a partner running NVIDIA's code
    system: str  # the system directory name
    system_json: dict[str, Any]
    logs: tuple[str, ...]  # result_<i>.txt paths
    implementation: str  # NVIDIA/benchmarks/<benchmark>/implementations/<system>

    @property
    def nodes(self) -> int:
        return int(self.system_json["number_of_nodes"])

    @property
    def gpus_per_node(self) -> int:
        return int(self.system_json["accelerators_per_node"])

    @property
    def accelerator(self) -> str:
        return str(self.system_json["accelerator_model_name"])


def submitters(version: str, mirrors: Path = MIRRORS) -> list[str]:
    """Every submitter directory of ``version``."""
    repo = git_dir(version, mirrors)
    if not repo.exists():
        return []
    done = subprocess.run(
        ["git", f"--git-dir={repo}", "ls-tree", "-d", "--name-only", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [name for name in done.stdout.split() if not name.startswith(".")]


def submissions(
    version: str, benchmark: str, mirrors: Path = MIRRORS, submitter: str = SUBMITTER
) -> list[Submission]:
    """``submitter``'s submissions of ``benchmark`` in ``version`` (NVIDIA's unless told), each
    with its logs and code."""
    repo = git_dir(version, mirrors)
    if not repo.exists():
        return []
    logs: dict[str, list[str]] = {}
    for path in listing(repo, f"{submitter}/results"):
        parts = path.split("/")
        if len(parts) == 5 and parts[3] == benchmark and re.fullmatch(r"result_\d+\.txt", parts[4]):
            logs.setdefault(parts[2], []).append(path)
    found = []
    for system, paths in sorted(logs.items()):
        described = show(repo, f"{submitter}/systems/{system}.json")
        if not described:
            continue
        found.append(
            Submission(
                version,
                benchmark,
                submitter,
                system,
                json.loads(described),
                tuple(sorted(paths)),
                f"{submitter}/benchmarks/{benchmark}/implementations/{system}",
            )
        )
    return found


def measured_step(repo: Path, sub: Submission) -> tuple[float, int, int] | None:
    """The submission's step time, global batch and how many logs gave it: the median over its
    logs of each log's median step time (``ResultLog.median_step_s``); None where no log has one,
    or where the logs disagree on the global batch."""
    medians, batches = [], set()
    for path in sub.logs:
        log = read_log(show(repo, path))
        if log.median_step_s is not None and log.global_batch_size:
            medians.append(log.median_step_s)
            batches.add(log.global_batch_size)
    if not medians or len(batches) != 1:
        return None
    return statistics.median(medians), batches.pop(), len(medians)


class Skip(Exception):
    """A submission left out, with the reason."""


def blob(repo: Path, path: str) -> str:
    """The git object id of one file of HEAD ('' where it is not there)."""
    done = subprocess.run(
        ["git", f"--git-dir={repo}", "rev-parse", f"HEAD:{path}"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else ""


_LAUNCHER = re.compile(r"^:::DLPAL .* (\S+)$", re.M)  # run.sub's line: ... <DGXSYSTEM>


def logged_script(repo: Path, sub: Submission) -> str | None:
    """The launch script the logs name (run.sub's ``:::DLPAL`` line ends with DGXSYSTEM, the
    script's name without ``config_`` and ``.sh``), None where they name none."""
    names = {m for path in sub.logs for m in _LAUNCHER.findall(show(repo, path))}
    if len(names) > 1:
        raise Skip(f"its logs name different launch scripts: {', '.join(sorted(names))}")
    return f"config_{names.pop()}.sh" if names else None


def log_body(repo: Path, path: str) -> str:
    """A log without its ``:::SYSJSON`` lines (a republished result differs only there)."""
    return "\n".join(line for line in show(repo, path).splitlines() if not line.startswith(":::SYSJSON"))


def repeat_of(seen: dict[frozenset[str], str], repo: Path, sub: Submission) -> str | None:
    """The submission whose logs this one's repeat (seen before it), None where they are new."""
    name = f"{sub.version} {sub.submitter} {sub.system}"
    first = seen.setdefault(frozenset(log_body(repo, p) for p in sub.logs), name)
    return None if first == name else first


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def write_sets(out: str, header: list[str], sets: list[dict[str, Any]]) -> None:
    """A collector's output: its header as comment lines, then the sets (a model shared by
    several sets written out in each, not as a YAML alias)."""
    with open(out, "w", encoding="utf-8") as f:
        f.write("".join(f"# {line}\n" for line in header))
        yaml.dump({"sets": sets}, f, Dumper=_NoAliases, sort_keys=False, width=120)


# NeMo's choice of a userbuffer overlap file (``optional override tp_overlap@model.
# ub_tp_comm_overlap_cfg: ${oc.env:GPU_ARCH,h}100tp${oc.env:TP}...mbs${oc.env:MBS}`` in its config)
OVERLAP_SELECTOR = re.compile(r"tp_overlap@model\.ub_tp_comm_overlap_cfg:\s*(\S+)")
_OC_VALUE = re.compile(r"\$\{oc\.env:(\w+)(?:,([^${}]*))?\}")
_OC_DECODE = re.compile(r"\$\{oc\.decode:([^${}]*)\}")
_OC_IF = re.compile(r"\$\{if:([^${},]*),([^${},]*),([^${},]*)\}")
# What memtune prices of a userbuffer overlap file's GEMM entries (schema.UserbufferGemmConfig)
PRICED_OVERLAP_FIELDS = {"method": str, "num_sm": int, "set_sm_margin": bool, "num_splits": int}


def interpolated(text: str, env: dict[str, str]) -> str:
    """NeMo's interpolations in a tp_overlap file and its selector, innermost first:
    ``${oc.env:VAR,default}`` as the launch sets VAR (else the default), ``${oc.decode:X}`` as X,
    ``${if:X,A,B}`` as A where X is true, else B."""

    def env_value(m: re.Match[str]) -> str:
        return env.get(m.group(1)) or (m.group(2) or "").strip()

    def choose(m: re.Match[str]) -> str:
        chosen = m.group(2) if m.group(1).strip().lower() in ("true", "1") else m.group(3)
        return chosen.strip().strip("'\"")

    text = _OC_VALUE.sub(env_value, text)
    text = _OC_DECODE.sub(lambda m: m.group(1).strip(), text)
    return _OC_IF.sub(choose, text)


def overlap_file(
    repo: Path, directory: str, selector: str, env: dict[str, str]
) -> dict[str, dict[str, Any]] | None:
    """The fields memtune prices of the overlap file ``selector`` names under ``directory``'s
    ``conf/tp_overlap/``, its values as the launch sets them; None where the file is absent
    (Transformer Engine's defaults, as Hydra's ``optional`` leaves them)."""
    text = show(repo, f"{directory}/conf/tp_overlap/{interpolated(selector, env)}.yaml")
    if not text:
        return None
    settings = yaml.safe_load(interpolated(text, env)) or {}
    return {
        gemm: {k: cast(fields[k]) for k, cast in PRICED_OVERLAP_FIELDS.items() if k in fields}
        for gemm, fields in settings.items()
    }
