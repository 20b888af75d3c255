"""Collect the step times Megatron-LM's GPT and MoE functional tests publish, for the throughput model.

Each test case under ``tests/functional_tests/test_cases/{gpt,moe}/`` logs ``iteration-time`` (seconds
per iteration, Megatron-LM's ``elapsed time per iteration`` averaged over the log interval) in
its ``golden_values_dev_<platform>.json``. The published figure kept here is the median of the
logged values from the second one on (the first includes start-up and compilation).

    python benchmarks/published/collect_megatron_ci_speed.py MEGATRON_LM_GIT_DIR OUT_DIR [--platform dgx_h100]

writes ``OUT_DIR/<prefix>-<test case>.yaml`` per training run whose flags the memory
collector (``collect_megatron_ci.py``, beside this file) translates, with the same memtune
config, plus a ``group``: runs of one model shape (layers, width, heads, FFN, sequence,
vocabulary) on one GPU count, whose order by throughput (tokens per second: global batch times
sequence over the step time) a layout model must get right; an MoE group also names its experts
and top-k. ``gpt/`` cases are ``<prefix>-<case>``, ``moe/`` cases ``<prefix>-moe-<case>``.

Platforms (``PLATFORMS``):

- ``dgx_h100`` (prefix ``mlm-ci-speed``, ``benchmarks/published/layouts/megatron-lm-ci``): every
  case on one DGX H100 node of 8 GPUs (``WORLD_SIZE``); the cluster is memtune's default DGX H100.
- ``dgx_gb200`` (prefix ``mlm-ci-speed-gb200``, ``benchmarks/published/layouts/megatron-lm-ci-gb200``):
  a case's GPU count is ``spec.nodes`` x ``spec.gpus`` of the recipe under
  ``tests/test_utils/recipes/gb200/`` that lists it (``products``) for platform ``dgx_gb200`` and
  environment ``dev``; a case no recipe lists that way, or that recipes of different sizes list,
  is skipped with that reason. The cluster is written as the other GB200 runs of the collected
  sets write it (``layouts/bridge-summary.yaml``): ``gpu: GB200`` and ``gpus_per_node`` the
  recipe's ``spec.gpus`` (4: a GB200 compute tray, one node, holds 4 GPUs), the network left to
  the catalog's system of that GPU (``gb200-nvl72``, ``memtune/catalog/data/networks.yaml``: one
  NVLink domain of 72 GPUs, so a case on two trays still talks over NVLink; a DGX GB200 is an
  NVL72 rack, and the recipes do not say otherwise). Its groups end in ``-GB200`` so that they
  never merge with an H100 group of the same shape and GPU count; memtune scores them as a set of
  their own (``CI_GB200_SOURCE`` of ``memtune/bench/plan.py``).
  The recipes of one GB200 node (``spec.nodes: 1``) are skipped (``Platform.unsteady_sizes``): their
  logged step times measure that machine, not the configuration. At ``d98e8a64dd`` all 47 of
  their cases log 0.4-3.1 s per step whatever the layout, with an interquartile range of 15-58%
  of the median (consecutive steps differ up to 4x), where the same cases on two nodes log
  0.06-0.45 s with a median interquartile range of 1.8%: a case on one node of 4 GPUs does at
  most twice the per-GPU work of the same case on two nodes, not 4-18 times.

A case that passes ``--tp-comm-overlap-cfg`` (Transformer Engine's userbuffer overlap settings, a
YAML file in the repository) gets its priced fields as ``model.tp_comm_overlap_cfg``
(``overlap_cfg``).

Each skipped case is printed with its reason, then the count per reason. Recipes are read as YAML
data; nothing of the Megatron-LM repository is executed.
Reserved cases: in ``moe/``, a case whose name's SHA-1 hex digest starts with 8-f is held back for
verification by others; this script reads nothing of it, on any platform
(``collect_megatron_ci.allowed``, applied to the recipes' case lists and to the case folders
before any file of a case is listed or read), and does not name it.
The tune/holdout split is the published memory set's rule, by ``id``
(``benchmarks/published/layouts/README.md``).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from collect_megatron_ci import CASES, IGNORED_PREFIXES, WORLD_SIZE, Skip, _git, allowed, translate


@dataclass(frozen=True, order=True)
class Size:
    """The nodes and GPUs per node a case runs on."""

    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Platform:
    """How the runs of one CI platform are named and sized."""

    gpu: str  # memtune's catalog name
    id_prefix: str
    recipes: str | None  # the recipe folder that sizes each case; None: one node of WORLD_SIZE GPUs
    # recipe sizes whose logged step times are not a steady-state measurement of the case
    unsteady_sizes: frozenset[Size] = frozenset()


PLATFORMS = {
    "dgx_h100": Platform("H100-80GB", "mlm-ci-speed", None),
    "dgx_gb200": Platform(
        "GB200", "mlm-ci-speed-gb200", "tests/test_utils/recipes/gb200", frozenset({Size(1, 4)})
    ),
}
H100_GPU = PLATFORMS["dgx_h100"].gpu
SCHEMA_GPUS_PER_NODE = 8  # memtune's default of cluster.gpus_per_node, which the H100 files leave unstated


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
TEST_TYPES = ("regular", "ckpt-resume", "frozen-resume")  # training runs; the others start no training loop
Reader = Callable[..., str]  # git arguments -> their output, in the Megatron-LM git directory


def group_of(config: dict) -> str:
    m = config["model"]
    cluster = config["cluster"]
    experts = f"-e{m['num_moe_experts']}k{m['moe_router_topk']}" if m.get("num_moe_experts") else ""
    # The H100 groups predate the other GPUs and keep their names; another GPU's groups name it.
    kind = "" if cluster["gpu"] == H100_GPU else f"-{cluster['gpu']}"
    return (
        f"L{m['num_layers']}-h{m['hidden_size']}-a{m['num_attention_heads']}"
        f"-f{m.get('ffn_hidden_size', 4 * m['hidden_size'])}{experts}-s{m['seq_length']}-v{m['vocab_size']}"
        f"-gpus{cluster['num_gpus']}{kind}"
    )


def run_id(platform: Platform, family: str, name: str) -> str:
    return f"{platform.id_prefix}-{name}" if family == "gpt" else f"{platform.id_prefix}-{family}-{name}"


def recipe_sizes(recipes: list[dict], platform: str) -> dict[tuple[str, str], set[Size]]:
    """(family, case name) -> the sizes of the recipes that list the case for ``platform`` and
    environment dev. A recipe's family is its ``spec.model`` (the test-case folder it runs from);
    reserved cases are left out here, so nothing further of them is ever looked up."""
    sizes: dict[tuple[str, str], set[Size]] = {}
    for recipe in recipes:
        spec = recipe.get("spec") or {}
        family = str(spec.get("model"))
        size = Size(int(spec["nodes"]), int(spec["gpus"]))
        for entry in recipe.get("products") or []:
            if not any(
                "dev" in product.get("environment", []) and platform in product.get("platforms", [])
                for product in entry.get("products") or []
            ):
                continue
            for name in entry.get("test_case") or []:
                if allowed(family, name):
                    sizes.setdefault((family, name), set()).add(size)
    return sizes


def read_recipes(read: Reader, folder: str) -> list[dict]:
    """The recipes of ``folder``, parsed as YAML (data only: nothing of them is run)."""
    paths = [p for p in read("ls-tree", "--name-only", "HEAD", f"{folder}/").split() if p.endswith(".yaml")]
    return [yaml.safe_load(read("show", f"HEAD:{path}")) for path in sorted(paths)]


def case_size(platform: Platform, sizes: dict[tuple[str, str], set[Size]], family: str, name: str) -> Size:
    """The nodes a case ran on: one H100 node, or what its platform's recipes say (Skip when they
    do not say it, or say it differently)."""
    if platform.recipes is None:
        return Size(1, WORLD_SIZE)
    found = sorted(sizes.get((family, name), set()))
    if not found:
        raise Skip(f"listed by no recipe of {platform.recipes} for this platform and environment dev")
    if len(found) > 1:
        listed = ", ".join(f"{s.nodes} x {s.gpus_per_node}" for s in found)
        raise Skip(f"listed by recipes of different sizes (nodes x GPUs: {listed})")
    [size] = found
    if size in platform.unsteady_sizes:
        raise Skip(
            f"runs on {size.nodes} x {size.gpus_per_node} GPUs, whose logged step times are not steady"
        )
    return size


def hardware(platform_name: str, size: Size) -> str:
    nodes = "one node" if size.nodes == 1 else f"{size.nodes} nodes of {size.gpus_per_node}"
    return f"{platform_name} ({size.gpus} GPUs, {nodes})"


def place(config: dict, gpu: str, size: Size) -> None:
    """Put the translated job on the platform's cluster."""
    cluster = config["cluster"]
    cluster["num_gpus"] = size.gpus
    cluster["gpu"] = gpu
    if size.gpus_per_node != SCHEMA_GPUS_PER_NODE:
        cluster["gpus_per_node"] = size.gpus_per_node


# What memtune prices of a userbuffer overlap file's GEMM entries (schema.UserbufferGemmConfig);
# the rest (aggregate, cga_size, ...) is not priced.
PRICED_OVERLAP_FIELDS = {"method": str, "num_sm": int, "set_sm_margin": bool, "num_splits": int}


def overlap_cfg(read: Reader, path: str) -> dict[str, dict[str, object]]:
    """The priced fields of the userbuffer overlap file a case passes as --tp-comm-overlap-cfg
    (Transformer Engine's ub_cfgs, read as YAML data from the repository)."""
    cfg = yaml.safe_load(read("show", f"HEAD:{path}")) or {}
    return {
        gemm: {k: cast(fields[k]) for k, cast in PRICED_OVERLAP_FIELDS.items() if k in fields}
        for gemm, fields in cfg.items()
    }


def record_of(read: Reader, commit: str, platform_name: str, family: str, case: str, size: Size) -> dict:
    """The run file of one allowed case with golden values for the platform (Skip: no run of it)."""
    platform = PLATFORMS[platform_name]
    name = case.rsplit("/", 1)[1]
    golden_path = f"{case}/golden_values_dev_{platform_name}.json"
    measured = step_time_s(json.loads(read("show", f"HEAD:{golden_path}")))
    if measured is None:
        raise Skip("fewer than two iteration times logged")
    spec = yaml.safe_load(read("show", f"HEAD:{case}/model_config.yaml"))
    args = spec.get("MODEL_ARGS") or {}
    if spec.get("TEST_TYPE") not in TEST_TYPES:
        raise Skip(f"test type {spec.get('TEST_TYPE')}")
    config = translate(args)
    if config["model"].get("tp_comm_overlap") and "--tp-comm-overlap-cfg" in args:
        config["model"]["tp_comm_overlap_cfg"] = overlap_cfg(read, str(args["--tp-comm-overlap-cfg"]))
    place(config, platform.gpu, size)
    seconds, samples = measured
    return {
        "id": run_id(platform, family, name),
        "source": {
            "repository": "NVIDIA/Megatron-LM",
            "commit": commit,
            "model_config": f"{case}/model_config.yaml",
            "golden_values": golden_path,
        },
        "hardware": hardware(platform_name, size),
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


def collect(read: Reader, out: Path, platform_name: str) -> Counter[str]:
    """Write the platform's runs to ``out``; the skipped cases, counted by reason."""
    platform = PLATFORMS[platform_name]
    commit = read("rev-parse", "HEAD").strip()
    sizes = recipe_sizes(read_recipes(read, platform.recipes), platform_name) if platform.recipes else {}
    out.mkdir(parents=True, exist_ok=True)
    skipped: Counter[str] = Counter()
    written = 0
    for family, case in _cases(read, f"golden_values_dev_{platform_name}.json"):
        name = case.rsplit("/", 1)[1]
        try:
            # sized first: a case its recipes do not size is skipped before anything of it is read
            size = case_size(platform, sizes, family, name)
            record = record_of(read, commit, platform_name, family, case, size)
        except Skip as exc:
            print(f"skip {name}: {exc}")
            skipped[str(exc)] += 1
            continue
        (out / f"{record['id']}.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
        written += 1
    for reason, count in sorted(skipped.items(), key=lambda item: (-item[1], item[0])):
        print(f"skipped {count}: {reason}")
    print(f"{written} runs -> {out}", file=sys.stderr)
    return skipped


def _cases(read: Reader, golden_name: str) -> list[tuple[str, str]]:
    """(family, case directory) of every case with golden values for the platform; a reserved
    case's directory is never listed below its name."""
    found = []
    for family in FAMILIES:
        for case in sorted(read("ls-tree", "-d", "--name-only", "HEAD", f"{CASES}/{family}/").split()):
            if not allowed(family, case.rsplit("/", 1)[1]):
                continue
            if f"{case}/{golden_name}" in read("ls-tree", "--name-only", "HEAD", f"{case}/").split():
                found.append((family, case))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("repo", help="a Megatron-LM git directory (bare is fine)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--platform", default="dgx_h100", choices=sorted(PLATFORMS))
    args = parser.parse_args()
    collect(functools.partial(_git, args.repo), args.out, args.platform)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
