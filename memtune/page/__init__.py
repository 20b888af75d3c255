"""``memtune page``: one self-contained HTML file that bundles what estimate, check, fix and plan
say about a job, with its simulated step, for a ticket or a pull-request comment.

:mod:`memtune.page.cli` gathers the commands' own ``--json`` documents into one (the page's
data, also printed by ``memtune page --json``); :mod:`memtune.page.html` only formats that
document: every figure on the page is a value of it, marked with the path it comes from.
"""
