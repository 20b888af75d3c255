"""Collect layout comparisons from Megatron-Bridge's performance summary tables.

Reads ``docs/performance-summary.md`` and ``docs/performance-summary-archive.md`` of a
Megatron-Bridge git directory at one commit and writes ``bridge-summary.yaml``: every group of
runs of one model, system, GPU count, precision, global batch and sequence length (within one
of the pre-training / SFT / LoRA tables) that was published with two or more different layouts
(FSDP, TP, PP, CP, VP, EP, MBS), across releases. Where one layout appears in several releases
the newest figure is kept. Rows the model cannot describe are left out and counted: systems
outside memtune's GPU catalog (B300, GB300), NVFP4 precision, token-dropping MoE runs, the 25.09
tables (they do not state the precision), models without a memtune preset.

    python benchmarks/published/layouts/collect_bridge_summary.py GIT_DIR COMMIT OUT.yaml
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from typing import Any

import yaml

FILES = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
SYSTEMS = {"DGX-H100": ("H100-80GB", 8), "DGX-B200": ("B200", 8), "DGX-GB200": ("GB200", 4)}
PRESETS = {
    "LLAMA3_8B": "llama3-8b",
    "LLAMA3_70B": "llama3-70b",
    "LLAMA3.1_405B": "llama3.1-405b",
    "DeepSeekV3": "deepseek-v3",
    "GPT OSS 120B": "gpt-oss-120b",
    "Qwen3_30B_a3B": "qwen3-30b-a3b",
    "Qwen3_235B_a22B": "qwen3-235b-a22b",
}
PRECISIONS = {
    "FP8": "fp8-cs",
    "FP8-CS": "fp8-cs",
    "MXFP8": "mxfp8",
    "FP8-MX": "mxfp8",
    "BF16": "bf16",
}
PRECISION_OVERRIDES = {
    "fp8-cs": ["model.fp8=hybrid", "model.fp8_recipe=tensorwise"],
    "mxfp8": ["model.fp8=hybrid", "model.fp8_recipe=mxfp8"],
    "bf16": [],
}
MODES = {"Pre-Training Performance": "pretrain", "SFT Performance": "finetune", "LoRA Performance": "lora"}
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
# commit read): Qwen3-235B counts the embedding and loss as layers (recipes/qwen/h100/qwen3_moe.py);
# DeepSeek-V3 takes an explicit layout per (PP, VP) (recipes/deepseek/h100/deepseek_v3.py,
# _get_deepseek_v3_pipeline_layout), written here in Megatron's layout-string form.
DEEPSEEK_V3_LAYOUTS = {
    (4, 1): "Et*16|t*16|t*16|t*13{mtp}L",
    (8, 1): "Et*8|(t*8|)*6t*5{mtp}L",
    (4, 2): "Et*8|(t*8|)*6t*5{mtp}L",
    (16, 1): "Et*4|(t*4|)*14t{mtp}L",
    (8, 2): "Et*4|(t*4|)*14t{mtp}L",
    (4, 4): "Et*4|(t*4|)*14t{mtp}L",
}


def pipeline_split(name: str, pp: int, vp: int) -> list[str]:
    base = name.split(" (")[0].strip()
    if base == "Qwen3_235B_a22B" and pp > 1:
        return [
            "model.account_for_embedding_in_pipeline_split=true",
            "model.account_for_loss_in_pipeline_split=true",
        ]
    if base == "DeepSeekV3" and (pp, vp) in DEEPSEEK_V3_LAYOUTS:
        layout = DEEPSEEK_V3_LAYOUTS[(pp, vp)].format(mtp="" if "w/o MTP" in name else "m")
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
            row = dict(zip(header, cells(line), strict=False))
            row.setdefault("model", heading_model)
            row.setdefault("system", heading_system)
            for r in split_alternatives(row):
                out.append({**r, "release": release, "section": section, "file": file})
    return out


def number(text: str) -> int:
    return 1 if text in ("n/a", "", "-") else int(text)


def collect(git_dir: str, commit: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    skipped: Counter[str] = Counter()
    groups: dict[tuple[str, ...], dict[tuple[int, ...], dict[str, Any]]] = {}
    for file in FILES:
        text = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{commit}:{file}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for r in rows(text, file):
            name = r["model"]
            base = name.split(" (")[0].strip()
            if "precision" not in r:
                skipped["table without precision (25.09)"] += 1
                continue
            if r["system"] not in SYSTEMS:
                skipped[f"system {r['system']} not in the GPU catalog"] += 1
                continue
            if "tokendrop" in name:
                skipped["token-dropping MoE run"] += 1
                continue
            precision = PRECISIONS.get(r["precision"])
            if precision is None:
                skipped[f"precision {r['precision']}"] += 1
                continue
            if base not in PRESETS or r["section"] not in MODES:
                skipped[f"no memtune preset for {name}"] += 1
                continue
            key = (MODES[r["section"]], name, r["system"], r["gpus"], precision, r["gbs"], r["seq"])
            layout = tuple(
                number(r.get(k, "0" if k == "fsdp" else "1"))
                for k in ("fsdp", "tp", "pp", "cp", "vp", "ep", "mbs")
            )
            # Files and releases are read newest first: keep the first figure of each layout.
            groups.setdefault(key, {}).setdefault(layout, r)
    sets = []
    for key, layouts in groups.items():
        if len(layouts) < 2:
            continue
        mode, name, system, gpus, precision, gbs, seq = key
        gpu, per_node = SYSTEMS[system]
        set_id = f"bridge-summary/{mode}/{name}/{system}/{gpus}/{precision}/gbs{gbs}/seq{seq}"
        runs = []
        for (fsdp, tp, pp, cp, vp, ep, mbs), r in layouts.items():
            overrides = [
                f"model.tensor_model_parallel_size={tp}",
                f"model.pipeline_model_parallel_size={pp}",
                f"model.context_parallel_size={cp}",
                f"model.expert_model_parallel_size={ep}",
                f"train.micro_batch_size={mbs}",
            ]
            overrides.append(
                f"model.virtual_pipeline_model_parallel_size={vp}"
                if vp > 1
                else "model.virtual_pipeline_model_parallel_size=null"
            )
            overrides += pipeline_split(name, pp, vp)
            if fsdp > 1:
                overrides += [
                    "ddp.use_megatron_fsdp=true",
                    "ddp.data_parallel_sharding_strategy=optim_grads_params",
                    "ddp.use_distributed_optimizer=false",
                    "optimizer.use_distributed_optimizer=false",
                ]
            label = (
                f"{'FSDP ' if fsdp > 1 else ''}TP{tp} PP{pp} CP{cp} VP{vp if vp > 1 else '-'} EP{ep} MBS{mbs}"
            )
            runs.append(
                {
                    "label": f"{label} ({r['release']})",
                    "overrides": overrides,
                    "measured": {
                        "tokens_per_s_per_gpu": float(r["tokens"]),
                        "model_tflops_per_gpu": float(r["tflops"]),
                    },
                    "source": f"{r['file']} @ {commit[:12]}, {r['release']}, {r['section']}",
                }
            )
        common = [
            "ddp.use_distributed_optimizer=true",
            "optimizer.use_distributed_optimizer=true",
            "ddp.overlap_grad_reduce=true",
            "ddp.overlap_param_gather=true",
            "model.sequence_parallel=true",
            *PRECISION_OVERRIDES[precision],
        ]
        if "w/o MTP" in name:
            common.append("model.mtp_num_layers=null")
        sets.append(
            {
                "id": set_id,
                "source": f"NVIDIA-NeMo/Megatron-Bridge {', '.join(FILES)} at {commit}",
                "model": PRESETS[name.split(" (")[0].strip()],
                "gpus": int(gpus),
                "gpu": gpu,
                "gpus_per_node": per_node,
                "seq": int(seq),
                "gbs": int(gbs),
                "mode": mode,
                "common": common,
                "runs": runs,
            }
        )
    return sets, skipped


def main() -> None:
    git_dir, commit, out = sys.argv[1:4]
    sets, skipped = collect(git_dir, commit)
    header = (
        "# Generated by benchmarks/published/layouts/collect_bridge_summary.py from Megatron-Bridge's\n"
        f"# performance summary tables at {commit}; rows left out: "
        + "; ".join(f"{k} ({v})" for k, v in sorted(skipped.items()))
        + "\n"
    )
    with open(out, "w", encoding="utf-8") as f:
        f.write(header)
        yaml.safe_dump({"sets": sets}, f, sort_keys=False, width=120)
    print(f"{len(sets)} sets, {sum(len(s['runs']) for s in sets)} runs; skipped {dict(skipped)}")


if __name__ == "__main__":
    main()
