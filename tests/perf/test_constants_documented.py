"""Every constant of the step model has its value's source in docs/plan.md (issue 38: "docs/plan.md
lists every constant with its source"), as every rule has its page in docs/rules.md."""

from __future__ import annotations

from pathlib import Path

from memtune.perf import constants as K

PLAN = Path(__file__).resolve().parents[2] / "docs" / "plan.md"


def test_every_constant_is_in_a_constants_table_of_the_plan_docs() -> None:
    text = PLAN.read_text(encoding="utf-8")
    tables = text[
        text.index("### Constants of the communication and scale terms") : text.index("### Agreement")
    ]
    names = [name for name in dir(K) if name.isupper()]
    assert len(names) > 20  # the module is read, not an empty namespace
    assert [name for name in names if f"`{name}`" not in tables] == []


def test_the_blackwell_factor_row_gives_the_constants_value() -> None:
    """The fitted factor's row quotes the value the code holds (it once lagged a refit)."""
    text = PLAN.read_text(encoding="utf-8")
    by_value: dict[float, list[str]] = {}
    for gpu, value in K.BLACKWELL_KERNEL_FACTOR.items():
        by_value.setdefault(value, []).append(gpu)
    quoted = "; ".join(f"{value:.2f} ({', '.join(gpus)})" for value, gpus in by_value.items())
    assert quoted == "1.22 (B200, GB200); 1.08 (B300, GB300)"
    assert f"| `BLACKWELL_KERNEL_FACTOR` | {quoted} |" in text
