"""Every change memtune proposes is one memtune check accepts when applied: walk `fix` and
`plan --top 5` over jobs and check each proposal independently of the gate that chose it.

    python benchmarks/advice_walk.py                 # every bundled example and every recipe
    python benchmarks/advice_walk.py --recipes A B   # some recipes only
    python benchmarks/advice_walk.py --no-plan       # fix only (plan searches take seconds each)

For each job: `fix` (a job that fits is asked for 5% of the GPU beyond what it has to spare, so
that it proposes changes), then
`plan --top 5` on the job's own model, GPUs, batch and sequence. Each proposal is applied to the
job and checked with `memtune check`'s rules: it must raise no error and bring no warning the job
did not have (the gate for advice, `memtune.check.admit`, is what fix and plan use; this walk
reruns the rules itself). Prints one line per problem, then the counts and the CPU seconds;
exit status 1 when a proposal fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memtune.catalog.recipes import list_recipes  # noqa: E402
from memtune.check import (  # noqa: E402
    ERROR,
    WARNING,
    gate,
    run_checks,
)
from memtune.cli import main  # noqa: E402
from memtune.config import derive, load_job  # noqa: E402
from memtune.config.changes import Change, with_changes  # noqa: E402
from memtune.config.schema import JobConfig  # noqa: E402
from memtune.errors import InputError  # noqa: E402
from memtune.estimate import estimate  # noqa: E402
from memtune.fix.search import find_fixes  # noqa: E402

EXAMPLES = sorted(p for p in (ROOT / "examples").iterdir() if p.name != "broken-llama3-8b.yaml")
# Headroom asked of a job that fits, so that fix proposes changes: what it has to spare and this
# share of the GPU more.
HEADROOM_SHARE = 0.05


def problems_of(job: JobConfig, changes: list[Change], what: str) -> list[str]:
    """Why ``changes`` applied to ``job`` would not pass memtune check, one line each."""
    try:
        changed = with_changes(job, changes)
    except InputError as exc:
        return [f"{what}: the schema refuses it: {exc.problems[0]}"]
    before = {f.code for f in run_checks(job) if f.severity == WARNING}
    found = run_checks(changed)
    errors = [f"{what}: refused: {f.code} {f.message}" for f in found if f.severity == ERROR]
    warned = [
        f"{what}: warned: {f.code} {f.message}"
        for f in found
        if f.severity == WARNING and f.code not in before
    ]
    return errors + warned


def walk_fix(name: str, job: JobConfig) -> tuple[int, list[str]]:
    """(proposals checked, problems) of ``fix`` on ``job``."""
    est = estimate(gate(job))
    headroom = 0
    if est.verdict() == "fits":
        spare = est.capacity_bytes - est.needed_bytes(est.verdict_rank)
        headroom = spare + round(HEADROOM_SHARE * est.capacity_bytes)
    result = find_fixes(job, headroom=headroom)
    problems = []
    for s in result.suggestions:
        problems += problems_of(job, list(s.changes), f"{name}: fix: {s.title}")
    return len(result.suggestions), problems


def walk_plan(name: str, words: list[str], job: JobConfig) -> tuple[int, list[str]]:
    """(layouts checked, problems) of ``plan --top 5`` on the job's own question."""
    out = StringIO()
    # a job that names no GPU count is planned on the one its layout assumes (DP 1)
    gpus = [] if job.cluster.num_gpus else ["--gpus", str(derive(job).world_size)]
    with redirect_stdout(out), redirect_stderr(StringIO()):
        status = main(["plan", *words, *gpus, "--top", "5", "--json", "--workers", "1"])
    if status not in (0, 1):
        return 0, [f"{name}: plan: exit {status}"]
    doc = json.loads(out.getvalue())
    allocator = [Change.parse(text) for text in doc.get("allocator", [])]
    problems = []
    for layout in doc["layouts"]:
        changes = allocator + [Change.parse(text) for text in layout["overrides"]]
        problems += problems_of(job, changes, f"{name}: plan #{layout['rank']} {layout['layout']}")
    return len(doc["layouts"]), problems


def jobs(recipes: list[str] | None) -> list[tuple[str, list[str]]]:
    """(name, the words that load it) of each job walked."""
    named = [(p.name, [str(p)]) for p in EXAMPLES] if recipes is None else []
    names = recipes if recipes is not None else [r.label for r in list_recipes()]
    return named + [(n, ["--recipe", n]) for n in names]


def main_(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", metavar="NAME", help="these recipes only")
    parser.add_argument("--no-plan", action="store_true", help="walk fix only")
    args = parser.parse_args(argv)
    started = time.process_time()
    counts = {"jobs": 0, "fix": 0, "plan": 0, "refused jobs": 0}
    problems: list[str] = []
    for name, words in jobs(args.recipes):
        try:
            job = load_job(Path(words[0])).job if len(words) == 1 else load_job(None, recipe=words[1]).job
            gate(job)
        except InputError:
            counts["refused jobs"] += 1  # memtune check refuses the job itself: nothing is proposed
            continue
        counts["jobs"] += 1
        checked, found = walk_fix(name, job)
        counts["fix"] += checked
        problems += found
        if not args.no_plan:
            checked, found = walk_plan(name, words, job)
            counts["plan"] += checked
            problems += found
    for line in problems:
        print(line)
    print(
        f"{counts['jobs']} jobs ({counts['refused jobs']} refused as written), {counts['fix']} fix proposals, "
        f"{counts['plan']} plan layouts: {len(problems)} refused or warned; {time.process_time() - started:.1f} CPU-s"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main_())
