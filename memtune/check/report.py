"""Rendering of findings and of the rule catalogue: rich for people, JSON and Markdown for tools."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console, Group
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from memtune.check.finding import ERROR, INFO, SEVERITIES, UNIGNORABLE, WARNING, Finding
from memtune.check.registry import FAMILIES, Rule, catalogue
from memtune.output import SCHEMA_VERSION
from memtune.tables import print_lines, print_text

SEVERITY_STYLE = {ERROR: "bold red", WARNING: "yellow", INFO: "cyan"}


def exit_status(findings: list[Finding], strict: bool) -> int:
    """1 when an error is found (or, with ``strict``, a warning), 0 otherwise."""
    failing = {ERROR, WARNING} if strict else {ERROR}
    return int(any(f.severity in failing for f in findings))


def summary_line(findings: list[Finding]) -> str:
    counts = Counter(f.severity for f in findings)
    parts = [f"{counts[s]} {s}{'' if counts[s] == 1 else 's'}" for s in SEVERITIES]
    return ", ".join(parts)


# --- report -----------------------------------------------------------------------------
def render_report(
    console: Console, source: str, findings: list[Finding], ignored: list[str], hidden_info: int = 0
) -> None:
    console.print(Text.assemble(("memtune check ", "bold"), source))
    del ignored  # listed on stderr by memtune.config.report_ignored, like every command does
    by_family: dict[str, list[Finding]] = {}
    for finding in findings:
        by_family.setdefault(finding.code[:3], []).append(finding)
    for family in FAMILIES:
        group = by_family.get(family.prefix)
        if not group:
            continue
        console.print()
        console.print(Text(f"{family.title} ({family.prefix})", style="bold underline"))
        print_lines(console, _family_table(group))
    console.print()
    style = "bold red" if any(f.severity == ERROR for f in findings) else "bold green"
    verdict = "no problems found" if not findings else summary_line(findings)
    if hidden_info:
        verdict += f" ({hidden_info} info hidden; --show-info shows them)"
    print_lines(console, Text(verdict, style=style))


def _family_table(findings: list[Finding]) -> Table:
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True, min_width=len(WARNING))
    table.add_column(overflow="fold")  # a long key=value goes on, never "…"
    for f in findings:
        details = [Text(f.message), Text.assemble(("fix: ", "green"), f.fix)]
        if f.deselected:
            details.append(Text(f"ignored, but still fails: {UNIGNORABLE}", style="bold red"))
        if f.upstream:
            details.append(Text(f"raises: {f.upstream}", style="dim"))
        table.add_row(
            Text(f.code, style="bold"), Text(f.severity, style=SEVERITY_STYLE[f.severity]), Group(*details)
        )
    return table


def findings_json(
    source: str, findings: list[Finding], ignored: list[str], hidden_info: int = 0
) -> dict[str, Any]:
    counts = Counter(f.severity for f in findings)
    return {
        "schema_version": SCHEMA_VERSION,
        "config": source,
        "summary": {s: counts[s] for s in SEVERITIES},
        "hidden_info": hidden_info,
        "findings": [
            {
                "code": f.code,
                "severity": f.severity,
                "message": f.message,
                "fix": f.fix,
                "upstream": f.upstream,
                "changes": [{"key": c.key, "value": c.value} for c in f.changes],
                "deselected": f.deselected,
            }
            for f in findings
        ],
        "ignored_keys": ignored,
    }


# --- catalogue --------------------------------------------------------------------------
def render_explain(console: Console, rule: Rule) -> None:
    console.print(
        Text.assemble(
            (f"{rule.code} ", "bold"),
            (f"({rule.name}) ", "bold"),
            (rule.severity, SEVERITY_STYLE[rule.severity]),
            f" · {rule.family.title}",
            f" · applies to {rule.applies}" if rule.applies else "",
        )
    )
    print_lines(console, Text(rule.summary))
    console.print()
    print_lines(console, Markdown(rule.explain))


# The narrowest a rule's summary is wrapped to before the name column gives way (the code is
# what --explain and --select take, so it stays).
_SUMMARY_MIN_WIDTH = 40


def render_list(console: Console) -> None:
    rules = catalogue()
    name_width = max(len(r.name) for r in rules)  # align the columns across families
    with_names = console.width - (6 + len(WARNING) + name_width + 3) >= _SUMMARY_MIN_WIDTH
    for family in FAMILIES:
        console.print(Text(f"{family.title} ({family.prefix})", style="bold underline"))
        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True, min_width=len(WARNING))
        if with_names:
            table.add_column(no_wrap=True, min_width=name_width)
        table.add_column(overflow="fold")
        for rule in (r for r in rules if r.family is family):
            name = [rule.name] if with_names else []
            table.add_row(
                Text(rule.code, style="bold"),
                Text(rule.severity, style=SEVERITY_STYLE[rule.severity]),
                *name,
                rule.summary,
            )
        print_lines(console, table)
        console.print()
    if not with_names:
        print_text(
            console, f"[dim]rule names (for --select and --ignore) not shown at {console.width} columns[/dim]"
        )


def catalogue_json() -> list[dict[str, Any]]:
    return [
        {
            "code": r.code,
            "name": r.name,
            "severity": r.severity,
            "family": r.family.title,
            "summary": r.summary,
            "applies": str(r.applies) if r.applies else None,
        }
        for r in catalogue()
    ]


def catalogue_markdown() -> str:
    """docs/rules.md: every rule's documentation, generated from the rule docstrings."""
    lines = [
        "# memtune check: rule catalogue",
        "",
        "Generated from the rule docstrings (`memtune check --explain CODE` prints the same text).",
        "Severity: **error** — the run would fail; **warning** — it runs, but a setting is wasted or",
        "harmful; **info** — worth knowing before launch.",
        "",
    ]
    rules = catalogue()
    for family in FAMILIES:
        members = [r for r in rules if r.family is family]
        lines += [
            f"## {family.title} ({family.prefix})",
            "",
            "| code | name | severity | checks |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| [{r.code}](#{r.code.lower()}) | {r.name} | {r.severity} | {r.summary} |" for r in members
        ]
        lines.append("")
        for r in members:
            body = r.explain.replace("## ", "#### ")
            applies = f" · applies to {r.applies}" if r.applies else ""
            lines += [f"### {r.code}", "", f"`{r.name}` · {r.severity}{applies} · {r.summary}", "", body, ""]
    return "\n".join(lines).rstrip() + "\n"
