"""Collect the NeMo Framework 24.07 performance summary (DGX H100, FP8), every row.

Reads ``docs/source/performance/performance_summary.md`` of an NVIDIA/NeMo git directory at one
commit (its last version before the page moved to docs.nvidia.com is 9c5c5e9709) and writes one
set per table: pre-training and fine-tuning (SFT and LoRA on SQuAD packed to 4,096 tokens), each
run one row with its measured tokens/s and model TFLOP/s per GPU.

The architectures are those NeMo trained (cited per model below); every run is FP8 with delayed
scaling (NeMo 24.07's ``fp8: True`` with ``fp8_hybrid`` and an amax history, Transformer Engine's
default recipe), the distributed optimizer with gradient-reduce and parameter-gather overlap,
sequence parallelism and Transformer Engine's TP communication overlap wherever TP > 1 (the
launcher's ``*_fp8_performance`` configs and the perf recipes of that release). What else those
runs set (CUDA graphs, vboost, NCCL tuning) is not stated in the table and not modelled.

    python benchmarks/published/layouts/collect_nemo_summary.py GIT_DIR COMMIT OUT.yaml
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import yaml

FILE = "docs/source/performance/performance_summary.md"
COLUMNS = {
    "#-GPUs": "gpus",
    "GBS": "gbs",
    "MBS": "mbs",
    "Sequence Length": "seq",
    "Packed Sequence Length": "seq",
    "TP": "tp",
    "PP": "pp",
    "CP": "cp",
    "VP": "vp",
    "Tokens / sec / GPU": "tokens",
    "Model TFLOP / sec / GPU": "tflops",
    "Model": "model",
    "Task": "task",
}
GPT3 = {
    # NeMo-Framework-Launcher launcher_scripts/conf/training/gpt3/{5b,20b,175b}.yaml: learned
    # positions, LayerNorm, GeLU, FFN 4h, biases, GPT-2 BPE vocabulary, sequence 2,048.
    "vocab_size": 50257,
    "gated_linear_unit": False,
    "activation_func": "gelu",
    "normalization": "LayerNorm",
    "position_embedding_type": "learned_absolute",
    "add_bias_linear": True,
    "share_embeddings_and_output_weights": True,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
}
LLAMA2 = {
    # meta-llama/Llama-2-{7b,13b,70b}-hf config.json
    "vocab_size": 32000,
    "gated_linear_unit": True,
    "activation_func": "silu",
    "normalization": "RMSNorm",
    "position_embedding_type": "rope",
    "add_bias_linear": False,
    "share_embeddings_and_output_weights": False,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
}
NEMOTRON = {
    # NVIDIA/NeMo nemo/collections/llm/gpt/model/nemotron.py NemotronConfig: squared ReLU, RoPE on
    # half the head, LayerNorm, no biases, untied embeddings, 256k vocabulary.
    "vocab_size": 256000,
    "gated_linear_unit": False,
    "activation_func": "squared_relu",
    "normalization": "LayerNorm",
    "position_embedding_type": "rope",
    "add_bias_linear": False,
    "share_embeddings_and_output_weights": False,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
}


def _shape(layers: int, hidden: int, heads: int, ffn: int, groups: int | None = None) -> dict[str, Any]:
    shape: dict[str, Any] = {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "ffn_hidden_size": ffn,
    }
    if groups:
        shape["num_query_groups"] = groups
    return shape


MODELS: dict[str, str | dict[str, Any]] = {
    "GPT3-5B": {**GPT3, **_shape(24, 4096, 32, 16384)},
    "GPT3-20B": {**GPT3, **_shape(44, 6144, 48, 24576)},
    "GPT3-175B": {**GPT3, **_shape(96, 12288, 96, 49152)},
    "LLAMA2-7B": {**LLAMA2, **_shape(32, 4096, 32, 11008)},
    "LLAMA2-13B": {**LLAMA2, **_shape(40, 5120, 40, 13824)},
    "LLAMA2-70B": {**LLAMA2, **_shape(80, 8192, 64, 28672, groups=8)},
    # nemotron.py Nemotron3Config8B / Nemotron3Config22B
    "Nemotron-8B": {**NEMOTRON, **_shape(32, 4096, 32, 16384)},
    "Nemotron-22B": {**NEMOTRON, **_shape(40, 6144, 48, 24576)},
    "Nemotron-340B": "nemotron-4-340b",
    "LLAMA3-8B": "llama3-8b",
    "LLAMA3-70B": "llama3-70b",
}
TASKS = {"SFT": "finetune", "LoRA": "lora"}
# NeMo 1.0's LoRA (the 24.07 container's): examples/nlp/language_modeling/tuning/conf/
# megatron_gpt_finetuning_config.yaml at the same commit, ``peft.lora_tuning``: adapters on
# ``attention_qkv`` alone (memtune's ``linear_qkv``), ``adapter_dim`` 32, ``alpha`` equal to it,
# ``adapter_dropout`` 0.0.
LORA = ["peft.target_modules=[linear_qkv]", "peft.dim=32", "peft.alpha=32", "peft.dropout=0.0"]
COMMON = [
    "model.fp8=hybrid",
    "model.fp8_recipe=delayed",
    "ddp.use_distributed_optimizer=true",
    "optimizer.use_distributed_optimizer=true",
    "ddp.overlap_grad_reduce=true",
    "ddp.overlap_param_gather=true",
    "ddp.grad_reduce_in_fp32=false",
]


def tables(text: str) -> list[list[dict[str, str]]]:
    """The markdown tables of the page, each a list of rows keyed by column."""
    found: list[list[dict[str, str]]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        values = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [COLUMNS.get(c, c) for c in values]
            found.append([])
        elif not set(line) <= set("|- "):
            found[-1].append(dict(zip(header, values, strict=False)))
    return found


def run_of(row: dict[str, str]) -> dict[str, Any]:
    tp, pp = int(row["tp"]), int(row["pp"])
    cp, vp = int(row.get("cp", 1)), int(row.get("vp", 1))
    mode = TASKS.get(row.get("task", ""), "pretrain")
    overrides = (
        list(COMMON)
        + [
            f"model.tensor_model_parallel_size={tp}",
            f"model.pipeline_model_parallel_size={pp}",
            f"model.context_parallel_size={cp}",
            f"model.virtual_pipeline_model_parallel_size={vp}"
            if vp > 1
            else "model.virtual_pipeline_model_parallel_size=null",
            f"train.micro_batch_size={row['mbs']}",
            f"model.sequence_parallel={'true' if tp > 1 else 'false'}",
            f"model.tp_comm_overlap={'true' if tp > 1 else 'false'}",
        ]
        + (LORA if mode == "lora" else [])
    )
    task = f" {row['task']}" if "task" in row else ""
    return {
        "label": f"{row['model']}{task} {row['gpus']} GPUs TP{tp} PP{pp} CP{cp} VP{vp if vp > 1 else '-'} MBS{row['mbs']} GBS{row['gbs']}",
        "model": MODELS[row["model"]],
        "gpus": int(row["gpus"]),
        "seq": int(row["seq"]),
        "gbs": int(row["gbs"]),
        "mode": mode,
        "overrides": overrides,
        "measured": {
            "model_tflops_per_gpu": float(row["tflops"].split("]")[0].strip("[")),
            "tokens_per_s_per_gpu": float(row["tokens"]),
        },
    }


def collect(git_dir: str, commit: str) -> list[dict[str, Any]]:
    text = subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{commit}:{FILE}"], check=True, capture_output=True, text=True
    ).stdout
    pretrain, finetune = tables(text)[:2]
    source = f"NVIDIA/NeMo {FILE} at {commit} (NeMo 24.07 container, DGX H100, FP8)"
    return [
        {
            "id": f"nemo-summary/24.07/{name}/DGX-H100",
            "source": source,
            "gpu": "H100-80GB",
            "gpus_per_node": 8,
            "mode": "pretrain",
            "runs": [run_of(row) for row in rows],
        }
        for name, rows in (("pretrain", pretrain), ("finetune", finetune))
    ]


def main() -> None:
    git_dir, commit, out = sys.argv[1:4]
    sets = collect(git_dir, commit)
    with open(out, "w", encoding="utf-8") as f:
        f.write(
            "# Generated by benchmarks/published/layouts/collect_nemo_summary.py from NVIDIA/NeMo\n"
            f"# {FILE} at {commit}.\n"
        )
        yaml.safe_dump({"sets": sets}, f, sort_keys=False, width=120)
    print(f"{len(sets)} sets, {sum(len(s['runs']) for s in sets)} runs")


if __name__ == "__main__":
    main()
