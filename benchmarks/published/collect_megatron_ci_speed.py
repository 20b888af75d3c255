"""Collect the step times Megatron-LM's GPT and MoE functional tests publish, for the throughput model.

Each test case under ``tests/functional_tests/test_cases/{gpt,moe}/`` logs ``iteration-time`` (seconds
per iteration, Megatron-LM's ``elapsed time per iteration`` averaged over the log interval) in
its ``golden_values_dev_<platform>.json``. The published figure kept here is the median of the
logged values from the second one on (the first includes start-up and compilation).

    python benchmarks/published/collect_megatron_ci_speed.py MEGATRON_LM_GIT_DIR OUT_DIR [--platform dgx_h100]

writes ``OUT_DIR/mlm-ci-speed-<test case>.yaml`` per training run whose flags the memory
collector (``collect_megatron_ci.py``, beside this file) translates, with the same memtune
config, plus a ``group``: runs of one model shape (layers, width, heads, FFN, sequence,
vocabulary) on one GPU count, whose order by throughput (tokens per second: global batch times
sequence over the step time) a layout model must get right; an MoE group also names its experts
and top-k. ``gpt/`` cases are ``mlm-ci-speed-<case>``, ``moe/`` cases ``mlm-ci-speed-moe-<case>``.
Reserved cases: in ``moe/``, a case whose name's SHA-1 hex digest starts with 8-f is held back for
verification by others; this script reads nothing of it (``collect_megatron_ci.allowed``).
The tune/holdout split is the published memory set's rule, by ``id``
(``benchmarks/published/layouts/README.md``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import yaml
from collect_megatron_ci import CASES, IGNORED_PREFIXES, WORLD_SIZE, Skip, _git, allowed, translate

HARDWARE = {"dgx_h100": "H100-80GB", "dgx_a100": "A100-80GB", "dgx_gb200": "GB200"}


def step_time_s(golden: dict) -> tuple[float, int] | None:
    """Median of the logged iteration times after the first, and how many there were."""
    series = golden.get("iteration-time") if isinstance(golden, dict) else None
    values = series.get("values", {}) if isinstance(series, dict) else {}
    logged = [
        float(v) for _, v in sorted((int(k), v) for k, v in values.items()) if isinstance(v, int | float)
    ]
    if len(logged) < 2:
        return None
    return statistics.median(logged[1:]), len(logged) - 1


FAMILIES = ("gpt", "moe")


def group_of(config: dict) -> str:
    m = config["model"]
    experts = f"-e{m['num_moe_experts']}k{m['moe_router_topk']}" if m.get("num_moe_experts") else ""
    return (
        f"L{m['num_layers']}-h{m['hidden_size']}-a{m['num_attention_heads']}"
        f"-f{m.get('ffn_hidden_size', 4 * m['hidden_size'])}{experts}-s{m['seq_length']}-v{m['vocab_size']}"
        f"-gpus{config['cluster']['num_gpus']}"
    )


def collect(repo: str, out: Path, platform: str) -> int:
    commit = _git(repo, "rev-parse", "HEAD").strip()
    golden_name = f"golden_values_dev_{platform}.json"
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for family, case in _cases(repo, golden_name):
        name = case.rsplit("/", 1)[1]
        measured = step_time_s(json.loads(_git(repo, "show", f"HEAD:{case}/{golden_name}")))
        if measured is None:
            print(f"skip {name}: fewer than two iteration times logged")
            continue
        spec = yaml.safe_load(_git(repo, "show", f"HEAD:{case}/model_config.yaml"))
        args = spec.get("MODEL_ARGS") or {}
        if spec.get("TEST_TYPE") not in ("regular", "ckpt-resume", "frozen-resume"):
            print(f"skip {name}: test type {spec.get('TEST_TYPE')}")
            continue
        try:
            config = translate(args)
        except Skip as exc:
            print(f"skip {name}: {exc}")
            continue
        config["cluster"]["gpu"] = HARDWARE[platform]
        seconds, samples = measured
        record = {
            "id": f"mlm-ci-speed-{name}" if family == "gpt" else f"mlm-ci-speed-{family}-{name}",
            "source": {
                "repository": "NVIDIA/Megatron-LM",
                "commit": commit,
                "model_config": f"{case}/model_config.yaml",
                "golden_values": f"{case}/{golden_name}",
            },
            "hardware": f"{platform} ({WORLD_SIZE} GPUs, one node)",
            "group": group_of(config),
            "published": {
                "metric": "iteration-time, median of the logged values from the 2nd on",
                "step_time_s": round(seconds, 6),
                "samples": samples,
            },
            "environment": {k: str(v) for k, v in (spec.get("ENV_VARS") or {}).items()},
            "megatron_lm_args": {
                k: v for k, v in args.items() if not k.startswith(IGNORED_PREFIXES) or k == "--vocab-file"
            },
            "config": config,
        }
        (out / f"{record['id']}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
        written += 1
    print(f"{written} runs -> {out}", file=sys.stderr)
    return 0


def _cases(repo: str, golden_name: str) -> list[tuple[str, str]]:
    """(family, case directory) of every case with golden values for the platform; a reserved
    case's directory is never listed below its name."""
    found = []
    for family in FAMILIES:
        for case in sorted(_git(repo, "ls-tree", "-d", "--name-only", "HEAD", f"{CASES}/{family}/").split()):
            if not allowed(family, case.rsplit("/", 1)[1]):
                continue
            if f"{case}/{golden_name}" in _git(repo, "ls-tree", "--name-only", "HEAD", f"{case}/").split():
                found.append((family, case))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("repo", help="a Megatron-LM git directory (bare is fine)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--platform", default="dgx_h100", choices=sorted(HARDWARE))
    args = parser.parse_args()
    return collect(args.repo, args.out, args.platform)


if __name__ == "__main__":
    raise SystemExit(main())
