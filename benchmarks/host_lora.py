"""The LoRA adapters' host work from the ``hostlora2-`` and ``hostlora3-`` runs, by the rules in
their docstrings (benchmarks/measured/matrix.py ``host_by_lora_repeat``, ``host_lora_shares``),
each fixed before the runs were measured; raw ``benchmarks/gpu/results/hostlora{2,3}-h100-pass*``.

    python benchmarks/host_lora.py

Per pass, from each run's median forward+backward after the first iteration, per layer and
microbatch: ``hostlora2-`` the milliseconds per adapter; ``hostlora3-`` an adapter's share of a
trained layer's host work and a frozen layer's (less its one adapter), and their means over the
passes (``LORA_ADAPTER_HOST_SHARE`` in memtune/perf/constants.py is the adapter's).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "results"
MICROBATCHES = 8


def medians(family: str, n: int) -> dict[str, float]:
    """Run id -> the median forward+backward seconds after the first iteration, of pass ``n``."""
    out = {}
    for line in (RESULTS / f"{family}-h100-pass{n}.results.jsonl").read_text().splitlines():
        run = json.loads(line)
        out[run["id"]] = statistics.median(
            i["forward_backward_seconds"] for i in run["measured"]["iterations"][1:]
        )
    return out


def per_layer(runs: dict[str, float], family: str, name: str, deep: int) -> float:
    """Seconds per layer and microbatch: the deep run less the 4-layer one."""
    return (runs[f"{family}-{name}-l{deep}"] - runs[f"{family}-{name}-l4"]) / ((deep - 4) * MICROBATCHES)


def main() -> int:
    adapters_ms = []
    for n in (1, 2):
        runs = medians("hostlora2", n)
        adapter = (per_layer(runs, "hostlora2", "all", 12) - per_layer(runs, "hostlora2", "qkv", 12)) / 3
        adapters_ms.append(adapter * 1e3)
        print(f"hostlora2 pass {n}: {adapter * 1e3:.3f} ms per adapter, layer and microbatch")
    print(f"hostlora2 mean: {statistics.mean(adapters_ms):.3f} ms")
    shares, frozen = [], []
    for n in (1, 2):
        runs = medians("hostlora3", n)
        trained, one, four = (per_layer(runs, "hostlora3", name, 12) for name in ("none", "qkv", "all"))
        adapter = (four - one) / 3
        shares.append(adapter / trained)
        frozen.append((one - adapter) / trained)
        print(
            f"hostlora3 pass {n}: trained layer {trained * 1e3:.2f} ms, adapter {adapter * 1e3:.2f} ms "
            f"= {adapter / trained:.3f} of it, frozen layer {(one - adapter) / trained:.2f} of it"
        )
    print(
        f"hostlora3 means: adapter share {statistics.mean(shares):.3f}, frozen layer {statistics.mean(frozen):.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
