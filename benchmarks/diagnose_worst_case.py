"""Every diagnose pattern against adversarial lines of the scanner's maximum length (64 KiB).

A regular expression of the form ``A.*B`` (or a chain of lookaheads, or ``\\s\\s*`` next to each
other) rescans the rest of the line from every place it could start, which is quadratic in the
line length; one such 64 KiB line used to hang ``memtune diagnose``. This script builds, for each
pattern, lines made of the pattern's own pieces repeated (its literals, the whitespace and digit
runs it backtracks over), runs every detector and every message parser on each, and reports the
slowest. Two bars: no line takes more than 250 ms (the quadratic patterns took seconds to minutes
on such lines), and for the ten slowest, a line 4x longer takes at most 8x longer (linear work
grows 4x, quadratic 16x).

Run:  python benchmarks/diagnose_worst_case.py
"""

from __future__ import annotations

import re
import sys
import time

from memtune.diagnose import detectors, messages
from memtune.diagnose.evidence import Where
from memtune.limits import MAX_LINE_BYTES

BUDGET_S = 0.25
MAX_GROWTH = 8.0


def _pieces() -> list[str]:
    """Literal fragments of every pattern: the words they anchor on."""
    sources = [p.pattern for p in _all_patterns()]
    words = set()
    for source in sources:
        words.update(w for w in re.findall(r"[A-Za-z_][A-Za-z_ ]{2,}", source) if len(w) < 40)
    words.update(n for needles in detectors.NEEDLES.values() for n in needles)
    words.update(t.decode() for t in detectors.TRIGGERS)
    words.update(["[Rank 1] ", "memory (MB) ", "max reserved: ", "percent = ", "CPU Virtual Memory: "])
    return sorted(words)


def _all_patterns() -> list[re.Pattern[str]]:
    found = []
    for module in (detectors, messages):
        for value in vars(module).values():
            if isinstance(value, re.Pattern):
                found.append(value)
            elif isinstance(value, dict):
                found.extend(v for v in value.values() if isinstance(v, re.Pattern))
    for entry in detectors._SIMPLE + detectors._NARRATIVE:
        found.extend(x for x in entry if isinstance(x, re.Pattern))
    return found


def worst_lines(n: int = MAX_LINE_BYTES) -> dict[str, str]:
    lines = {
        "spaces": "out of memory" + " " * n,
        "digits": "Tried to allocate " + "9" * n,
        "digits-dots": "1." * (n // 2),
        "tabs-and-spaces": "exit" + " \t" * (n // 2) + "code",
        "dots": "torch" + "." * n,
        "colons": "world size" + ":" * n,
        "brackets": "[Rank " + "[" * n,
    }
    for word in _pieces():
        lines[f"repeat {word!r}"] = (word * (n // len(word) + 1))[:n]
        lines[f"repeat {word!r} + space"] = ((word + " ") * (n // (len(word) + 1) + 1))[:n]
        lines[f"{word!r} + spaces"] = (word + " " * n)[:n]
    return lines


def time_line(text: str) -> float:
    line = detectors.Line(text, Where("<worst>", 1, None), lambda n: [text[:4096]] * n)
    start = time.perf_counter()
    detectors.detect(line)
    messages.parse_allocator_message(text)
    messages.parse_async_message(text)
    return time.perf_counter() - start


def main() -> int:
    lines = worst_lines()
    quarter = worst_lines(MAX_LINE_BYTES // 4)
    timings = sorted(((time_line(text), name) for name, text in lines.items()), reverse=True)
    slowest, name = timings[0]
    total = sum(t for t, _ in timings)
    print(f"{len(lines)} worst-case lines of {MAX_LINE_BYTES} characters, all detectors and message parsers")
    print(
        f"slowest: {slowest * 1e3:.1f} ms ({name}); mean {total / len(lines) * 1e3:.2f} ms; budget {BUDGET_S * 1e3:.0f} ms"
    )
    worst_growth = 0.0
    for seconds, label in timings[:10]:
        small = min(time_line(quarter[label]) for _ in range(3))
        again = min(time_line(lines[label]) for _ in range(3))
        growth = again / max(small, 1e-6)
        worst_growth = max(worst_growth, growth)
        print(f"  {seconds * 1e3:8.2f} ms  {label}  (x{growth:.1f} for 4x the length)")
    print(
        f"largest growth for 4x the length: x{worst_growth:.1f} (linear ~4, quadratic ~16; bar {MAX_GROWTH:.0f})"
    )
    return 0 if slowest <= BUDGET_S and worst_growth <= MAX_GROWTH else 1


if __name__ == "__main__":
    sys.exit(main())
