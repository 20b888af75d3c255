"""The page's HTML, formatted from its data document alone (memtune/page/cli.py builds it).

Self-contained: inline CSS and SVG, no script runs, nothing is fetched; the data document is
embedded as ``application/json``. Every figure is a ``<span data-json=PATH data-format=F>``
whose text is the document's value at PATH in format F (:data:`FORMATS`), and every bar
carries ``data-bytes`` of the value it draws, so a test can hold each against the document.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import Any

GIB = 2**30
FORMATS: dict[str, Callable[[Any], str]] = {
    "gib": lambda v: f"{v / GIB:.2f}",
    "pct": lambda v: f"{v * 100:+.1f}%",
    "share": lambda v: f"{v * 100:.1f}%",
    "s": lambda v: f"{v:.3f}",
    "int": lambda v: f"{v:,}",
    "rate": lambda v: f"{v:,.0f}",
    "text": str,
}
COMPONENT_COLOURS = {
    "weights": "#4c72b0",
    "grads": "#55a868",
    "optimizer": "#c44e52",
    "activations": "#8172b2",
    "transient": "#ccb974",
    "non_pytorch": "#64b5cd",
}
EVENT_COLOURS = {
    "forward": "#4c72b0",
    "backward": "#55a868",
    "output wgrad": "#8172b2",
    "optimizer": "#937860",
    "exposed comm": "#c44e52",
    "send": "#c44e52",
    "grad reduce": "#dd8452",
    "param gather": "#dd8452",
}
VERDICT_CLASS = {"fits": "ok", "tight": "warn", "does not fit": "bad"}
SVG_WIDTH = 640
BARS_WIDTH = 440  # the memory chart: narrow, so its labels stay legible on a phone

CSS = """
:root{color-scheme:light;--ink:#1d2330;--dim:#5b6475;--line:#d8dce4;--ok:#1e7b34;--warn:#a25c00;--bad:#b3261e}
*{box-sizing:border-box}
body{margin:0 auto;max-width:62rem;padding:1rem;font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--ink)}
h1{font-size:1.35rem;margin:.2rem 0 .6rem;overflow-wrap:anywhere}
h2{font-size:1.1rem;margin:1.6rem 0 .5rem;border-bottom:1px solid var(--line);padding-bottom:.2rem}
p,li{overflow-wrap:anywhere}
.dim{color:var(--dim);font-size:.88rem}
.badge{display:inline-block;padding:.1rem .55rem;border-radius:1rem;font-weight:600;color:#fff}
.ok{background:var(--ok)}.warn{background:var(--warn)}.bad{background:var(--bad)}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{text-align:left;padding:.3rem .45rem;border-bottom:1px solid var(--line);vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font-size:.82rem;overflow-wrap:anywhere}
dl.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(9.5rem,1fr));gap:.4rem .8rem;margin:0}
dl.facts div{border:1px solid var(--line);border-radius:.4rem;padding:.35rem .5rem}
dl.facts dt{font-size:.75rem;color:var(--dim)}dl.facts dd{margin:0;font-weight:600}
svg{width:100%;height:auto;display:block}
svg text{font:11px system-ui,sans-serif;fill:var(--ink)}
.legend span{display:inline-block;margin-right:.8rem;font-size:.8rem}
.legend i{display:inline-block;width:.8rem;height:.8rem;margin-right:.25rem;vertical-align:-1px;border-radius:2px}
td{overflow-wrap:break-word}
td code{overflow-wrap:anywhere}
.chart svg{min-width:34rem}
svg.bars{max-width:46rem}
@media (max-width:600px){body{padding:.6rem;font-size:14px}
 table.cards,table.cards tbody,table.cards tr,table.cards td{display:block;width:100%}
 table.cards tr:first-child{display:none}
 table.cards tr{border:1px solid var(--line);border-radius:.4rem;margin:.5rem 0;padding:.3rem .5rem}
 table.cards td{border:0;padding:.12rem 0;text-align:left}
 table.cards td::before{content:attr(data-label);display:inline-block;min-width:8.5rem;color:var(--dim);font-size:.8rem}}
@media print{body{max-width:none;padding:0}.scroll{overflow:visible}.chart svg{min-width:0}section{break-inside:avoid-page}
 *{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""


def value_at(doc: Any, path: str) -> Any:
    node = doc
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


class _Page:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.out: list[str] = []

    def fig(self, path: str, fmt: str) -> str:
        text = FORMATS[fmt](value_at(self.doc, path))
        return f'<span data-json="{path}" data-format="{fmt}">{html.escape(text)}</span>'

    def add(self, text: str) -> None:
        self.out.append(text)

    def table(self, headers: list[str], rows: list[list[str]]) -> None:
        """A table; a header ending in ``#`` (other than ``#`` itself) is a numeric column,
        right-aligned. On a phone each row becomes a card whose cells are labelled by their headers."""
        numeric = [len(h) > 1 and h.endswith("#") for h in headers]
        names = [h[:-1] if n else h for h, n in zip(headers, numeric)]
        head = "".join(f"<th{' class=n' if n else ''}>{html.escape(h)}</th>" for h, n in zip(names, numeric))
        self.add(f"<div class=scroll><table class=cards><tr>{head}</tr>")
        for row in rows:
            cells = "".join(
                f'<td{" class=n" if n else ""} data-label="{html.escape(h)}">{c}</td>'
                for h, n, c in zip(names, numeric, row)
            )
            self.add(f"<tr>{cells}</tr>")
        self.add("</table></div>")


def render_html(doc: dict[str, Any]) -> str:
    page = _Page(doc)
    est = doc.get("estimate")
    verdict = est["verdict"] if est else "refused"
    page.add(
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>memtune: {html.escape(doc['source'])}</title><style>{CSS}</style></head><body>"
    )
    badge = VERDICT_CLASS.get(verdict, "bad")
    page.add(
        f"<header><h1>memtune report: {page.fig('source', 'text')}</h1>"
        f'<p><span class="badge {badge}">{page.fig("estimate.verdict", "text") if est else "refused by check"}</span> '
        f"<span class=dim>memtune {page.fig('memtune_version', 'text')}; sizes in GiB (2<sup>30</sup> bytes)</span></p></header>"
    )
    _job(page)
    if est:
        _memory(page)
    _findings(page)
    if doc.get("fix"):
        _fix(page)
    if doc.get("plan"):
        _plan(page)
    if doc.get("timeline"):
        _timeline(page)
    if est:
        page.add("<section><h2>Assumptions</h2><ul>")
        for i, _ in enumerate(est["assumptions"]):
            page.add(f"<li class=dim>{page.fig(f'estimate.assumptions.{i}', 'text')}</li>")
        page.add("</ul></section>")
    data = json.dumps(doc, separators=(",", ":")).replace("</", "<\\/")
    page.add(f'<script type="application/json" id="memtune-data">{data}</script></body></html>\n')
    return "".join(page.out)


def _job(page: _Page) -> None:
    page.add("<section><h2>The job</h2><dl class=facts>")
    facts = [("input", "job.format", "text"), ("layers", "job.num_layers", "int")]
    facts += [("hidden size", "job.hidden_size", "int"), ("sequence", "job.seq_length", "int")]
    facts += [
        ("global batch", "job.global_batch_size", "int"),
        ("micro-batch", "job.micro_batch_size", "int"),
    ]
    facts += [("GPUs", "job.num_gpus", "int"), ("GPU", "job.gpu", "text")]
    est = page.doc.get("estimate")
    if est:
        facts += [(k.upper(), f"estimate.parallelism.{k}", "int") for k in est["parallelism"]]
        facts += [("microbatches", "estimate.num_microbatches", "int")]
        if est["throughput"]["step_time_s"] is not None:
            facts += [("step, s", "estimate.throughput.step_time_s", "s")]
            facts += [("tokens/s per GPU", "estimate.throughput.tokens_per_s_per_gpu", "rate")]
    for label, path, fmt in facts:
        if value_at(page.doc, path) is not None:
            page.add(f"<div><dt>{label}</dt><dd>{page.fig(path, fmt)}</dd></div>")
    page.add("</dl></section>")


def _memory(page: _Page) -> None:
    est = page.doc["estimate"]
    ranks = est["ranks"]
    top = max([est["capacity_bytes"], *(r["needed_bytes"] for r in ranks)]) * 1.04
    scale = (BARS_WIDTH - 140) / top  # px per byte; 140 px for the labels
    row, height = 26, 26 * len(ranks) + 30
    page.add("<section><h2>Memory per pipeline rank</h2><div class=scroll>")
    page.add(
        f'<svg class=bars viewBox="0 0 {BARS_WIDTH} {height}" role=img aria-label="peak memory per pipeline rank" '
        f'data-scale="{scale!r}">'
    )
    for i, rank in enumerate(ranks):
        y, x = 8 + i * row, 60.0
        page.add(f'<text x=0 y="{y + 14}">PP rank {rank["pp_rank"]}</text>')
        parts = [*rank["components"].items(), ("non_pytorch", rank["non_pytorch_bytes"])]
        for name, size in parts:
            width = size * scale
            page.add(
                f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="18" fill="{COMPONENT_COLOURS.get(name, "#999")}" '
                f'data-bytes="{size}"><title>{html.escape(name)}</title></rect>'
            )
            x += width
        verdict = rank["verdict"]
        page.add(f'<text x="{x + 6:.2f}" y="{y + 14}">{html.escape(verdict)}</text>')
    cap = 60 + est["capacity_bytes"] * scale
    page.add(
        f'<line x1="{cap:.2f}" x2="{cap:.2f}" y1="2" y2="{height - 16}" stroke="#000" stroke-dasharray="4 3" '
        f'data-bytes="{est["capacity_bytes"]}"/>'
        f'<text x="{cap - 4:.2f}" y="{height - 4}" text-anchor=end>capacity</text></svg></div>'
    )
    page.add("<p class=legend>")
    for name, colour in COMPONENT_COLOURS.items():
        page.add(f'<span><i style="background:{colour}"></i>{name.replace("_", " ")}</span>')
    page.add("</p>")
    names = list(ranks[0]["components"])
    headers = ["PP rank", *(f"{n}#" for n in names), "outside PyTorch#", "peak#", "needed#", "verdict"]
    rows = []
    for i in range(len(ranks)):
        cells = [page.fig(f"estimate.ranks.{i}.pp_rank", "int")]
        cells += [page.fig(f"estimate.ranks.{i}.components.{n}", "gib") for n in names]
        cells += [
            page.fig(f"estimate.ranks.{i}.{k}", "gib")
            for k in ("non_pytorch_bytes", "peak_bytes", "needed_bytes")
        ]
        rows.append([*cells, page.fig(f"estimate.ranks.{i}.verdict", "text")])
    page.table(headers, rows)
    page.add(
        f"<p class=dim>capacity {page.fig('estimate.capacity_bytes', 'gib')} GiB of "
        f"{page.fig('estimate.gpu', 'text')}; needed = peak with the verdict's margin plus memory outside PyTorch.</p></section>"
    )


def _findings(page: _Page) -> None:
    found = page.doc["check"]["findings"]
    page.add("<section><h2>Check</h2>")
    if not found:
        page.add("<p>No findings.</p></section>")
        return
    rows = []
    for i, finding in enumerate(found):
        fix = (
            f"<br><span class=dim>fix: {page.fig(f'check.findings.{i}.fix', 'text')}</span>"
            if finding["fix"]
            else ""
        )
        rows.append(
            [
                page.fig(f"check.findings.{i}.code", "text"),
                page.fig(f"check.findings.{i}.severity", "text"),
                page.fig(f"check.findings.{i}.message", "text") + fix,
            ]
        )
    page.table(["code", "severity", "finding and fix"], rows)
    page.add("</section>")


def _fix(page: _Page) -> None:
    fix = page.doc["fix"]
    page.add("<section><h2>Fix: ranked options</h2>")
    if fix.get("diagnosis"):
        page.add(f"<p>The logs show: {page.fig('fix.diagnosis', 'text')}</p>")
    rows = []
    for i, s in enumerate(fix["suggestions"]):
        keys = "<br>".join(
            f"<code>{page.fig(f'fix.suggestions.{i}.overrides.{j}', 'text')}</code>"
            for j in range(len(s["overrides"]))
        )
        rows.append(
            [
                str(i + 1),
                f"{page.fig(f'fix.suggestions.{i}.title', 'text')}<br>{keys}",
                *_tried_cells(page, f"fix.suggestions.{i}", s),
            ]
        )
    headers = ["saves, GiB#", "peak after, GiB#", "verdict after", "throughput#"]
    page.table(["#", "change", *headers], rows)
    if fix["not_chosen"]:
        page.add("<details><summary>not chosen</summary>")
        rows = [
            [page.fig(f"fix.not_chosen.{i}.title", "text"), *_tried_cells(page, f"fix.not_chosen.{i}", t)]
            for i, t in enumerate(fix["not_chosen"])
        ]
        page.table(["change", *headers], rows)
        page.add("</details>")
    if fix["not_tried"]:
        page.add("<details><summary>not tried</summary><ul>")
        for i, _ in enumerate(fix["not_tried"]):
            page.add(
                f"<li>{page.fig(f'fix.not_tried.{i}.change', 'text')}: {page.fig(f'fix.not_tried.{i}.why', 'text')}</li>"
            )
        page.add("</ul></details>")
    page.add("</section>")


def _tried_cells(page: _Page, path: str, tried: dict[str, Any]) -> list[str]:
    """A tried remedy's saving, peak after, verdict and price; what the gate said where it was
    not admitted, and why there is no price where the step model gives none."""
    if tried["saved_bytes"] is None:
        return ["", "", page.fig(f"{path}.reason", "text"), ""]
    price = (
        page.fig(f"{path}.unpriced", "text")
        if tried["throughput_change"] is None
        else page.fig(f"{path}.throughput_change", "pct")
    )
    return [
        page.fig(f"{path}.saved_bytes", "gib"),
        page.fig(f"{path}.peak_after_bytes", "gib"),
        page.fig(f"{path}.verdict_after", "text"),
        price,
    ]


def _plan(page: _Page) -> None:
    plan = page.doc["plan"]
    page.add("<section><h2>Plan: the fastest layouts that fit</h2>")
    if not plan["layouts"]:
        page.add("<p>No layout fits.</p></section>")
        return
    rows = []
    for i, layout in enumerate(plan["layouts"]):
        at = f"plan.layouts.{i}"
        rate = page.fig(f"{at}.tokens_per_s_per_gpu", "rate") if layout["tokens_per_s_per_gpu"] else ""
        share = (
            page.fig(f"{at}.relative_throughput", "share")
            if layout["relative_throughput"] is not None
            else ""
        )
        rows.append(
            [
                page.fig(f"{at}.rank", "int"),
                page.fig(f"{at}.layout", "text"),
                page.fig(f"{at}.recompute", "text"),
            ]
            + [page.fig(f"{at}.optimizer", "text"), page.fig(f"{at}.needed_bytes", "gib")]
            + [page.fig(f"{at}.headroom_bytes", "gib"), rate, share]
        )
    headers = [
        "#",
        "layout",
        "recompute",
        "optimizer",
        "needed, GiB#",
        "free, GiB#",
        "tokens/s per GPU#",
        "vs #1#",
    ]
    page.table(headers, rows)
    page.add("</section>")


def _timeline(page: _Page) -> None:
    timeline = page.doc["timeline"]
    stages = len(timeline["stages"])
    lane, height = 30, 30 * stages + 26
    scale = (SVG_WIDTH - 60) / timeline["step_time_s"]
    page.add(
        f"<section><h2>The simulated step</h2><p>{page.fig('timeline.step_time_s', 's')} s per step as configured; "
        "gaps are idle time (the pipeline bubble).</p>"
    )
    if timeline["events"] is None:
        page.add(f"<p class=dim>Not drawn: {page.fig('timeline.not_drawn', 'text')}</p></section>")
        return
    page.add(
        f'<div class="scroll chart"><svg viewBox="0 0 {SVG_WIDTH} {height}" role=img aria-label="simulated step per pipeline stage">'
    )
    for r in range(stages):
        page.add(f'<text x=0 y="{r * lane + 16}">stage {r}</text>')
    for stage, stream, kind, start, end in timeline["events"]:
        y = stage * lane + (21 if stream == "dp" else 4)
        h = 5 if stream == "dp" else 16
        page.add(
            f'<rect x="{60 + start * scale:.1f}" y="{y}" width="{max((end - start) * scale, 0.3):.1f}" height="{h}" '
            f'fill="{EVENT_COLOURS.get(kind, "#999")}"/>'
        )
    page.add(
        f'<text x="60" y="{height - 4}">0 s</text><text x="{SVG_WIDTH}" y="{height - 4}" text-anchor=end>end of step</text></svg></div><p class=legend>'
    )
    for kind in ("forward", "backward", "exposed comm", "grad reduce", "optimizer"):
        page.add(f'<span><i style="background:{EVENT_COLOURS[kind]}"></i>{kind}</span>')
    page.add("</p></section>")
