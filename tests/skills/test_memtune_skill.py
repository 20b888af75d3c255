"""The agent skill (skills/memtune-memory-tuning/): each eval's ground truth comes out of the
memtune commands its answer prescribes, and the files follow the seed's format (Megatron-Bridge
skills/nemo-mbridge-perf-memory-tuning/ at 067f987: SKILL.md front matter, card.yaml,
evals/evals.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from memtune.cli import main

ROOT = Path(__file__).resolve().parents[2]
SKILL = ROOT / "skills" / "memtune-memory-tuning"
EVALS = json.loads((SKILL / "evals" / "evals.json").read_text())
SEED_KEYS = {"id", "question", "expected_skill", "expected_script", "ground_truth", "expected_behavior"}


def _flat(text: str) -> str:
    """Output with line wrapping and table borders undone: words separated by one space."""
    return re.sub(r"[\s│]+", " ", text)


@pytest.mark.parametrize("case", EVALS, ids=[e["id"] for e in EVALS])
def test_each_evals_facts_appear_in_the_output_of_its_commands(case, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    for step in case["memtune"]:
        capsys.readouterr()
        status = main(step["command"])
        out = capsys.readouterr()
        assert status in (0, 1), (step["command"], out.err)
        shown = _flat(out.out + out.err)
        for fact in step["facts"]:
            assert _flat(fact) in shown, (step["command"], fact)


def test_the_evals_cover_what_the_issue_asks_and_keep_the_seeds_keys():
    assert len(EVALS) >= 8
    assert all(case.keys() >= SEED_KEYS and case["expected_skill"] == SKILL.name for case in EVALS)
    ids = " ".join(case["id"] for case in EVALS)
    for topic in (
        "seed",
        "moe-minimum",
        "fragmentation",
        "resume",
        "lora-regather",
        "snapshot",
        "cpu-offload",
        "plan",
    ):
        assert topic in ids
    for case in EVALS:  # every fact is checked by a command, every command's files exist
        assert case["memtune"] and all(step["facts"] for step in case["memtune"])
        for step in case["memtune"]:
            for word in step["command"]:
                if "/" in word and "=" not in word:
                    assert (ROOT / word).exists(), word


def test_skill_md_and_card_follow_the_seed_format():
    text = (SKILL / "SKILL.md").read_text()
    front = yaml.safe_load(text.split("---")[1])
    assert front["name"] == SKILL.name
    assert {"description", "license", "when_to_use"} <= front.keys()
    card = yaml.safe_load((SKILL / "card.yaml").read_text())
    for key in ("title", "validated_on", "summary", "enable_when", "avoid_when", "recommended_path"):
        assert key in card
    for key in ("failure_modes", "known_constraints", "known_limitations", "evidence"):
        assert card[key]
