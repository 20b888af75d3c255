"""How ``memtune bisect --good --bad`` judges one commit from its command's exit status and output:

- good: the command exited 0;
- bad: it failed (or ran past ``--timeout``) and ``memtune diagnose`` reads its output as an
  out-of-memory of kind K;
- skip: any other failure (an ImportError, a crash, an OOM of another kind, a command that cannot
  be started), which says nothing about the regression being chased.
"""

from __future__ import annotations

from dataclasses import dataclass

from memtune.diagnose.classify import Verdict, expandable_state, verdict
from memtune.diagnose.evidence import CAPACITY, FRAGMENTATION, HOST_OOM, OUTSIDE_PYTORCH
from memtune.diagnose.logscan import ScanResult

KINDS = {
    FRAGMENTATION: (FRAGMENTATION,),
    CAPACITY: (CAPACITY,),
    "any": (FRAGMENTATION, CAPACITY, OUTSIDE_PYTORCH, HOST_OOM),
}


@dataclass(frozen=True)
class Outcome:
    outcome: str  # good | bad | skip
    exit_status: int | None  # None: the command could not be started
    label: str | None  # diagnose's verdict on the output, None when it found no failure
    reasons: tuple[str, ...]
    timed_out: bool = False  # stopped after --timeout seconds


def classify(exit_status: int | None, output: ScanResult, kind: str, timed_out: bool = False) -> Outcome:
    """Good, bad or skip, from the command's exit status and its scanned output."""
    if exit_status == 0 and not timed_out:
        return Outcome("good", 0, None, ())
    if exit_status is None:
        return Outcome("skip", None, None, ())
    found = read_verdict(output)
    outcome = "bad" if found.label in KINDS[kind] else "skip"
    return Outcome(outcome, exit_status, found.label, tuple(found.reasons), timed_out)


def read_verdict(scanned: ScanResult) -> Verdict:
    """``memtune diagnose``'s verdict on a command's output, from the log alone (no config or
    snapshot, and no fixes, which would need the config stack at every commit)."""
    formats = [f.numbers.format for f in scanned.failures if f.numbers is not None]
    return verdict(scanned.failures, scanned.facts, expandable_state(scanned.facts, None, None, formats))


def kind_words(kind: str) -> str:
    """The out-of-memory ``--kind`` chases, as a user would say it."""
    return "an out-of-memory" if kind == "any" else f"a {kind} out-of-memory"


def describe(outcome: Outcome) -> str:
    if outcome.exit_status is None:
        return "could not start -> skip"
    status = "timed out" if outcome.timed_out else f"exit {outcome.exit_status}"
    if outcome.outcome == "good":
        return f"{status} -> good"
    what = f"{outcome.label} failure" if outcome.label else "no out-of-memory found in the output"
    return f"{status}, {what} -> {outcome.outcome}"
