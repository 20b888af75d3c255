"""The catalogue itself: stable codes, complete documentation, examples that really trigger."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from memtune.check.registry import FAMILIES, catalogue, find_rule
from memtune.check.report import catalogue_markdown
from memtune.config.changes import with_changes
from memtune.config.validation import validate
from memtune.estimate import check_with_estimate
from tests.check.check_fixtures import BASE

RULES = catalogue()
SECTIONS = ("## What it does", "## Why it matters", "## Example", "## Fix")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


def _merge(base: dict, change: dict) -> dict:
    merged = copy.deepcopy(base)
    for key, value in change.items():
        merged[key] = _merge(merged.get(key, {}), value) if isinstance(value, dict) else value
    return merged


def test_codes_are_unique_well_formed_and_in_their_family():
    codes = [r.code for r in RULES]
    assert len(codes) == len(set(codes))
    for rule in RULES:
        assert re.fullmatch(r"[A-Z]{3}\d{3}", rule.code)
        assert rule.code.startswith(rule.family.prefix)
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    assert len({r.name for r in RULES}) == len(RULES)


def test_every_family_has_rules():
    assert {r.family.prefix for r in RULES} == {f.prefix for f in FAMILIES}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_explain_has_all_sections_in_order(rule):
    assert rule.summary.endswith(".")
    positions = [rule.explain.find(section) for section in SECTIONS]
    assert -1 not in positions and positions == sorted(positions)
    for section, body in zip(SECTIONS, re.split(r"^## .*$", rule.explain, flags=re.M)[1:]):
        assert body.strip(), f"{rule.code}: empty {section}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_documented_example_triggers_the_rule(rule):
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", rule.explain, re.S).group(1))
    job = validate(_merge(BASE, example))
    assert rule.code in {f.code for f in check_with_estimate(job)}


def test_find_rule_by_code_or_name():
    assert find_rule("off001").code == "OFF001"
    assert find_rule("cpu-offload-with-pp").code == "OFF001"
    assert find_rule("XYZ999") is None


def test_docs_rules_md_is_current():
    """docs/rules.md is generated; regenerate with
    python -c "from memtune.check.report import catalogue_markdown as m; open('docs/rules.md','w').write(m())"."""
    assert DOCS.read_text(encoding="utf-8") == catalogue_markdown()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_a_findings_changes_clear_it(rule):
    """Where a fix is spelled out as dotted changes, applying them makes the finding go away."""
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", rule.explain, re.S).group(1))
    job = validate(_merge(BASE, example))
    finding = next(f for f in check_with_estimate(job) if f.code == rule.code)
    if not finding.changes:
        pytest.skip(f"{rule.code}'s fix is not a plain set of key changes: {finding.fix}")
    fixed = with_changes(job, finding.changes)
    assert rule.code not in {f.code for f in check_with_estimate(fixed)}
