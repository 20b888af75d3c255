"""Collect every row of Megatron-Bridge's performance summary tables, every release.

Reads ``docs/performance-summary.md`` and ``docs/performance-summary-archive.md`` at every commit
of a Megatron-Bridge git directory that changed them (up to COMMIT), so rows a later edit removed
(the SFT and LoRA tables, releases dropped from the archive) are kept; where a row was edited, the
newest figure is kept and its commit cited. Each row is one run: a model, system, GPU count,
precision, batch, sequence and layout (FSDP, TP, PP, CP, VP, EP, MBS) with its measured tokens/s
and model TFLOP/s per GPU.

Runs are grouped by **release, task and system** (one table of one software release on one kind of
machine): the group's runs differ by model, GPU count, precision and layout, and a throughput model
must order them by model TFLOP/s per GPU. Predictions are compared in the publisher's FLOP
convention (``memtune/bench/plan.py``: the published FLOPs per token times the predicted tokens/s).

Each run starts from the Bridge performance recipe of its model, task, GPU, precision and GPU count
(``memtune/catalog/data/perf_recipes.yaml``, read from Bridge 067f987df03b; the nearest GPU count
where that count has none) with the row's own layout, batch and sequence over it; a model without
a recipe for that GPU starts from its preset with the settings every Bridge perf recipe shares.
Then the settings of the row's own release (``../bridge-release-settings.yaml``, read from the
Bridge tag its container shipped, ``RELEASE_TAGS``) where they differ from the job's, and
sequence parallelism where the row's TP is above 1, as every release's runner sets it.

Rows left out, counted in the file's header: NVFP4 precision, token-dropping MoE runs, the 25.09 tables (they do not state the precision),
models without a memtune preset (Nemotron 3 hybrids, Kimi-K2, DeepSeek-V4).

    python benchmarks/published/layouts/collect_bridge_summary.py GIT_DIR COMMIT OUT.yaml
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from memtune.bench.plan import run_job
from memtune.config.layout import balanced_layout

FILES = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
SYSTEMS = {
    "DGX-H100": ("H100-80GB", 8, "h100"),
    "DGX-B200": ("B200", 8, "b200"),
    "DGX-GB200": ("GB200", 4, "gb200"),
    "DGX-B300": ("B300", 8, "b300"),
    "DGX-GB300": ("GB300", 4, "gb300"),
}
PRESETS = {
    "LLAMA3_8B": "llama3-8b",
    "LLAMA3_70B": "llama3-70b",
    "LLAMA3.1_405B": "llama3.1-405b",
    "DeepSeekV3": "deepseek-v3",
    "GPT OSS 120B": "gpt-oss-120b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b",
    "Qwen3_235B_a22B": "qwen3-235b-a22b",
}
# Bridge's perf recipe family of each model (perf_recipes/<family>/<gpu>/*.py function names).
FAMILIES = {
    "LLAMA3_8B": "llama3_8b",
    "LLAMA3_70B": "llama3_70b",
    "LLAMA3.1_405B": "llama31_405b",
    "DeepSeekV3": "deepseek_v3",
    "GPT OSS 120B": "gpt_oss_120b",
    "Qwen3_30B_a3B": "qwen3_30b_a3b",
    "Qwen3_235B_a22B": "qwen3_235b_a22b",
}
PRECISIONS = {
    "FP8": "fp8-cs",
    "FP8-CS": "fp8-cs",
    "MXFP8": "mxfp8",
    "FP8-MX": "mxfp8",
    "BF16": "bf16",
}
RECIPE_PRECISION = {"fp8-cs": "fp8cs", "mxfp8": "fp8mx", "bf16": "bf16"}
PRECISION_OVERRIDES = {
    "fp8-cs": ["model.fp8=hybrid", "model.fp8_recipe=tensorwise"],
    "mxfp8": ["model.fp8=hybrid", "model.fp8_recipe=mxfp8"],
    "bf16": ["model.fp8=null"],
}
MODES = {"Pre-Training Performance": "pretrain", "SFT Performance": "finetune", "LoRA Performance": "lora"}
RECIPE_TASK = {"pretrain": "pretrain", "finetune": "sft", "lora": "peft"}
COLUMNS = {
    "#-GPUs": "gpus",
    "Precision": "precision",
    "GBS": "gbs",
    "MBS": "mbs",
    "Sequence Length": "seq",
    "FSDP": "fsdp",
    "TP": "tp",
    "PP": "pp",
    "CP": "cp",
    "VP": "vp",
    "EP": "ep",
    "Tokens / sec / GPU": "tokens",
    "Model TFLOP / sec / GPU": "tflops",
    "Model": "model",
    "System": "system",
}
# How Bridge's recipes split layers that do not divide by the stages (Megatron-Bridge at the
# commit read): Qwen3-235B and Llama 3.1 405B count the embedding and loss as layers (their perf
# recipes' account_for_*_in_pipeline_split, kept from the recipe); DeepSeek-V3 takes an explicit
# layout per (PP, VP) (recipes/deepseek/h100/deepseek_v3.py, _get_deepseek_v3_pipeline_layout),
# memtune's balanced_layout (memtune/config/layout.py), which writes the same rule.
DEEPSEEK_V3_LAYERS = 61
# The split keys a recipe sets for its own layout only, reset before the row's split is applied.
SPLIT_RESET = [
    "model.pipeline_model_parallel_layout=null",
    "model.num_layers_in_first_pipeline_stage=null",
    "model.num_layers_in_last_pipeline_stage=null",
]
# What every Bridge perf recipe sets (perf_recipes/_common.py), for a model without a recipe.
COMMON = [
    "ddp.use_distributed_optimizer=true",
    "optimizer.use_distributed_optimizer=true",
    "ddp.overlap_grad_reduce=true",
    "ddp.overlap_param_gather=true",
    "model.sequence_parallel=true",
]


def pipeline_split(name: str, pp: int, vp: int) -> list[str]:
    base = name.split(" (")[0].strip()
    if base == "Qwen3_235B_a22B" and pp > 1:
        return [
            "model.account_for_embedding_in_pipeline_split=true",
            "model.account_for_loss_in_pipeline_split=true",
        ]
    if base == "DeepSeekV3":
        layout = balanced_layout(DEEPSEEK_V3_LAYERS, 0 if "w/o MTP" in name else 1, pp * vp)
        if layout:
            return [f"model.pipeline_model_parallel_layout={layout}"]
    return []


ALTERNATIVE = re.compile(r"^(?P<main>[^()]*?)\s*\((?P<alt>[^()]*)\)\s*$")


def cells(line: str) -> list[str]:
    return [re.sub(r"\[\^[^\]]*\]", "", c).strip() for c in line.strip().strip("|").split("|")]


def split_alternatives(row: dict[str, str]) -> list[dict[str, str]]:
    """A cell 'a (b)' publishes a second run: the row with every b in place of its a."""
    if not any(ALTERNATIVE.match(v) for k, v in row.items() if k not in ("model", "system")):
        return [row]
    main, alt = {}, {}
    for key, value in row.items():
        m = ALTERNATIVE.match(value) if key not in ("model", "system") else None
        main[key], alt[key] = (m["main"], m["alt"]) if m else (value, value)
    return [main, alt]


def rows(text: str, file: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    release = section = heading_model = heading_system = ""
    header: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            release, header = line[3:].replace(" NeMo Container", "").strip(), None
        elif line.startswith("### "):
            section, header = line[4:].strip(), None
        elif line.startswith("#### Model:"):
            heading_model, heading_system, header = line.split(":", 1)[1].strip(), "", None
        elif line.startswith("#### System:"):
            heading_system, heading_model, header = line.split(":", 1)[1].strip(), "", None
        elif line.startswith("|") and header is None:
            header = [COLUMNS.get(c, c) for c in cells(line)]
        elif line.startswith("|") and not line.startswith("|--") and header is not None:
            values = cells(line)
            if len(values) != len(header):
                # a row with a cell missing or extra (a typo a later commit corrected)
                out.append({"malformed": "yes"})
                continue
            row = dict(zip(header, values, strict=True))
            row.setdefault("model", heading_model)
            row.setdefault("system", heading_system)
            for r in split_alternatives(row):
                out.append({**r, "release": release, "section": section, "file": file})
    return out


def number(text: str) -> int:
    return 1 if text in ("n/a", "", "-") else int(text)


def _git(git_dir: str, *args: str) -> subprocess.CompletedProcess[str]:
    # a file missing at an older commit is expected: the caller reads the return code
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=False, capture_output=True, text=True)


def every_row(git_dir: str, commit: str) -> list[dict[str, str]]:
    """Every row ever published up to ``commit``, each with the newest commit that shows it."""
    log = _git(git_dir, "log", "--format=%H", commit, "--", *FILES)
    log.check_returncode()
    kept: dict[tuple[str, ...], dict[str, str]] = {}
    for sha in log.stdout.split():  # newest first
        for file in FILES:
            shown = _git(git_dir, "show", f"{sha}:{file}")
            if shown.returncode:
                continue
            for r in rows(shown.stdout, file):
                if "malformed" in r:
                    kept.setdefault(("malformed", sha, file, str(len(kept))), r)
                    continue
                key = tuple(
                    r.get(k, "")
                    for k in (
                        "release",
                        "section",
                        "model",
                        "system",
                        "gpus",
                        "precision",
                        "gbs",
                        "mbs",
                        "seq",
                    )
                ) + tuple(
                    r.get(k, "0" if k == "fsdp" else "1") for k in ("fsdp", "tp", "pp", "cp", "vp", "ep")
                )
                kept.setdefault(key, {**r, "commit": sha})
    return list(kept.values())


def skip_reason(r: dict[str, str]) -> str | None:
    if "malformed" in r:
        return "row whose cells do not match its table's header (a typo a later commit corrected)"
    name = r["model"]
    base = name.split(" (")[0].strip()
    if "precision" not in r:
        return "table without precision (25.09)"
    if r["system"] not in SYSTEMS:
        return f"system {r['system']} not in the GPU catalog"
    if "tokendrop" in name:
        return "token-dropping MoE run"
    if r["precision"] not in PRECISIONS:
        return f"precision {r['precision']}"
    if base not in PRESETS or r["section"] not in MODES:
        return f"no memtune preset for {base}"
    return None


def recipe_for(
    recipes: dict[str, Any], base: str, mode: str, system: str, precision: str, gpus: int
) -> str | None:
    """The Bridge perf recipe of this model, task, GPU and precision: the one of this GPU count,
    else the one of the nearest count (plain variants only)."""
    gpu = SYSTEMS[system][2]
    stem = f"{FAMILIES[base]}_{RECIPE_TASK[mode]}_"
    tail = f"gpu_{gpu}_{RECIPE_PRECISION[precision]}_config"
    counts = [
        int(name[len(stem) : -len(tail)])
        for name in recipes
        if name.startswith(stem) and name.endswith(tail) and name[len(stem) : -len(tail)].isdigit()
    ]
    if not counts:
        return None
    nearest = min(counts, key=lambda c: (abs(c - gpus), c))
    return f"{stem}{nearest}{tail}"


def run_of(r: dict[str, str], recipes: dict[str, Any]) -> dict[str, Any]:
    name = r["model"]
    base = name.split(" (")[0].strip()
    mode, precision = MODES[r["section"]], PRECISIONS[r["precision"]]
    fsdp, tp, pp, cp, vp, ep, mbs = (
        number(r.get(k, "0" if k == "fsdp" else "1")) for k in ("fsdp", "tp", "pp", "cp", "vp", "ep", "mbs")
    )
    gpus = int(r["gpus"])
    recipe = recipe_for(recipes, base, mode, r["system"], precision, gpus)
    overrides = [] if recipe else list(COMMON)
    overrides += PRECISION_OVERRIDES[precision]
    overrides += [
        f"model.tensor_model_parallel_size={tp}",
        f"model.pipeline_model_parallel_size={pp}",
        f"model.context_parallel_size={cp}",
        f"model.expert_model_parallel_size={ep}",
        f"train.micro_batch_size={mbs}",
        f"model.virtual_pipeline_model_parallel_size={vp}"
        if vp > 1
        else "model.virtual_pipeline_model_parallel_size=null",
    ]
    if recipe:
        overrides += SPLIT_RESET
    overrides += pipeline_split(name, pp, vp)
    if fsdp:
        overrides += [
            "ddp.use_megatron_fsdp=true",
            "ddp.data_parallel_sharding_strategy=optim_grads_params",
            "ddp.use_distributed_optimizer=false",
            "optimizer.use_distributed_optimizer=false",
        ]
    elif recipe:
        overrides += [
            "ddp.use_megatron_fsdp=false",
            "ddp.data_parallel_sharding_strategy=no_shard",
            "ddp.use_distributed_optimizer=true",
            "optimizer.use_distributed_optimizer=true",
        ]
    if "w/o MTP" in name:
        overrides.append("model.mtp_num_layers=null")
    gpu, per_node, _ = SYSTEMS[r["system"]]
    label = f"{name} {r['precision']} {gpus} GPUs {'FSDP ' if fsdp else ''}TP{tp} PP{pp} CP{cp} VP{vp if vp > 1 else '-'} EP{ep} MBS{mbs} GBS{r['gbs']}"
    return {
        "label": label,
        "model": f"recipe:perf:{recipe}" if recipe else PRESETS[base],
        "gpus": gpus,
        "gpu": gpu,
        "gpus_per_node": per_node,
        "seq": int(r["seq"]),
        "gbs": int(r["gbs"]),
        "overrides": overrides,
        "measured": {"model_tflops_per_gpu": float(r["tflops"]), "tokens_per_s_per_gpu": float(r["tokens"])},
        "source": f"{r['file']} @ {r['commit'][:12]}, {r['release']}, {r['section']}, {r['system']}",
    }


# The Megatron-Bridge tag each NeMo container shipped (README.md, "Each release's own settings"):
# docs/releases/software-versions.md's map, a patch container the patch tag docs/versions1.json
# names (26.04.01 shipped v0.4.2, not the v0.4.1 the rule had assumed), 26.08 v0.6.0 (its perf
# recipes are 067f987df03b's).
RELEASE_TAGS = {
    "25.11": "v0.2.0",
    "26.02": "v0.3.0",
    "26.02.01": "v0.3.1",
    "26.04": "v0.4.0",
    "26.04.01": "v0.4.2",
    "26.06": "v0.5.0",
    "26.06.01": "v0.5.1",
    "26.08": "v0.6.0",
}
# beside this folder, not in it: every YAML file under layouts/ is a set of runs
RELEASE_SETTINGS = Path(__file__).resolve().parents[1] / "bridge-release-settings.yaml"
# Bridge sections whose keys memtune's job keeps in its model section (memtune/config/loaders/bridge.py)
MODEL_SECTIONS = ("comm_overlap", "mixed_precision")


# Keys a dense model never reads (a tag's reading may carry its provider's defaults for them)
MOE_ONLY = (
    "model.moe_token_dispatcher_type",
    "model.moe_flex_dispatcher_backend",
    "model.moe_router_force_load_balancing",
    "model.moe_grouped_gemm",
    "model.moe_permute_fusion",
    "model.moe_shared_expert_overlap",
    "model.expert_tensor_parallel_size",
    "comm_overlap.overlap_moe_expert_parallel_comm",
)


def _job_key(key: str) -> str:
    section, name = key.split(".", 1)
    return f"model.{name}" if section in MODEL_SECTIONS else key


def _same(current: Any, value: Any) -> bool:
    if current in (None, []) and value in (None, []):
        return True  # an unset list and an empty one run alike
    return str(current) == str(value) if isinstance(value, str) else bool(current == value)


def release_overrides(run: dict[str, Any], mode: str, name: str, settings: dict[str, Any]) -> list[str]:
    """The overrides that give ``run`` (a row of model ``name``, its layout over 067f987df03b's
    recipe) the settings its own release ran with: each key of ``settings`` whose value is known
    and differs from the job's, except what the row states itself (MTP on or off)."""
    job = run_job({"mode": mode}, run)
    out = []
    for key, value in settings.items():
        if value == "unknown" or (key == "model.mtp_num_layers" and "MTP" in name):
            continue
        if key == "model.moe_flex_dispatcher_backend" and value is None:
            continue  # no flex dispatcher: its backend is never read
        if not job.model.num_moe_experts and key in MOE_ONLY:
            continue
        if key.startswith("model.cpu_offloading") and job.model.pipeline_model_parallel_size > 1:
            # Megatron-Core refuses it (memtune's gate says so too, check/rules/offload.py): a
            # row with stages did not run its preset's offload
            continue
        path = _job_key(key)
        section, field = path.split(".", 1)
        if not _same(getattr(getattr(job, section), field), value):
            out.append(
                f"{path}={yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix('...').strip()}"
            )
    return out


def with_release_settings(run: dict[str, Any], r: dict[str, str], tags: dict[str, Any]) -> dict[str, Any]:
    """``run`` with the settings of the Bridge release of its row ``r`` (``tags``: the settings
    file's recipes per tag), where that release's settings for its recipe were read."""
    tag = RELEASE_TAGS.get(r["release"])
    recipe = run["model"].removeprefix("recipe:perf:")
    read = tags.get(tag, {}).get("recipes", {}).get(recipe) if tag else None
    if read is None:
        return run
    # every tag's runner turns sequence parallelism on where the row's TP is above 1
    settings = {**read["settings"], "model.sequence_parallel": number(r.get("tp", "1")) > 1}
    extra = release_overrides(run, MODES[r["section"]], r["model"], settings)
    return {
        **run,
        "overrides": run["overrides"] + extra,
        "source": f"{run['source']}; settings of Bridge {tag}",
    }


def collect(
    git_dir: str, commit: str, recipes: dict[str, Any], tags: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], Counter[str]]:
    skipped: Counter[str] = Counter()
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in every_row(git_dir, commit):
        why = skip_reason(r)
        if why:
            skipped[why] += 1
            continue
        mode = MODES[r["section"]]
        groups.setdefault((r["release"], mode, r["system"]), []).append(
            with_release_settings(run_of(r, recipes), r, tags or {})
        )
    sets = []
    for (release, mode, system), runs in sorted(groups.items()):
        sets.append(
            {
                "id": f"bridge-summary/{release}/{mode}/{system}",
                "source": f"NVIDIA-NeMo/Megatron-Bridge {', '.join(FILES)}, every commit up to {commit}",
                "mode": mode,
                "runs": sorted(runs, key=lambda run: run["label"]),
            }
        )
    return sets, skipped


def main() -> None:
    git_dir, commit, out = sys.argv[1:4]
    catalog = Path(__file__).resolve().parents[3] / "memtune/catalog/data/perf_recipes.yaml"
    recipes = yaml.safe_load(catalog.read_text())["perf_recipes"]
    tags = yaml.safe_load(RELEASE_SETTINGS.read_text())["tags"] if RELEASE_SETTINGS.exists() else {}
    sets, skipped = collect(git_dir, commit, recipes, tags)
    header = (
        "# Generated by benchmarks/published/layouts/collect_bridge_summary.py from every commit of\n"
        f"# Megatron-Bridge's performance summary tables up to {commit}.\n# Rows left out: "
        + "; ".join(f"{k} ({v})" for k, v in sorted(skipped.items()))
        + "\n"
    )
    with open(out, "w", encoding="utf-8") as f:
        f.write(header)
        yaml.safe_dump({"sets": sets}, f, sort_keys=False, width=120)
    print(f"{len(sets)} sets, {sum(len(s['runs']) for s in sets)} runs; skipped {dict(skipped)}")


if __name__ == "__main__":
    main()
