"""`memtune plan` plans what the job says it trains (issue 42 item 7): a `peft` section is LoRA, a
Bridge SFT recipe or dataset or Megatron-LM's `--finetune` is fine-tuning; `--mode` overrides."""

from __future__ import annotations

from pathlib import Path

import yaml

from memtune.plan.query import Query, base_job, mode_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def query(model: str | None, *overrides: str, mode: str | None = None, recipe: str | None = None) -> Query:
    return Query(model, 8, None, None, None, None, mode, (), overrides, recipe)


def test_a_peft_section_plans_lora_and_keeps_its_adapters():
    q = query(str(EXAMPLES / "llama3-8b-lora.yaml"))
    assert (mode_of(q).name, mode_of(q).why) == ("lora", "the job has a peft section")
    assert base_job(q).peft is not None
    # --mode overrides what the job says: full pretraining drops the adapters.
    forced = query(str(EXAMPLES / "llama3-8b-lora.yaml"), mode="pretrain")
    assert mode_of(forced).name == "pretrain" and base_job(forced).peft is None


def test_a_bridge_sft_recipe_or_dataset_plans_fine_tuning():
    q = query(None, recipe="llama3_70b_sft_config")
    assert mode_of(q).name == "finetune"
    assert mode_of(q).why == "Bridge's llama3_70b_sft_32gpu_h100_bf16_config is an SFT recipe"
    assert mode_of(query(None, recipe="llama3_8b_pretrain_config")).name == "pretrain"


def test_a_bridge_dump_with_an_sft_dataset_plans_fine_tuning(tmp_path):
    dump = yaml.safe_load((EXAMPLES / "bridge-llama3-70b-lora.yaml").read_text(encoding="utf-8"))
    del dump["peft"]  # the same job, fully fine-tuned
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(dump), encoding="utf-8")
    mode = mode_of(query(str(path)))
    assert (mode.name, mode.why) == ("finetune", "its dataset is FinetuningDatasetConfig")
    dump["dataset"] = {
        "seq_length": dump["dataset"]["seq_length"]
    }  # no dataset class: the checkpoint says it
    path.write_text(yaml.safe_dump(dump), encoding="utf-8")
    assert mode_of(query(str(path))).why == "it starts from checkpoint.pretrained_checkpoint"


def test_megatron_lm_finetune_plans_fine_tuning(tmp_path):
    script = (EXAMPLES / "megatron-lm-llama3-8b.sh").read_text(encoding="utf-8")
    assert mode_of(query(str(EXAMPLES / "megatron-lm-llama3-8b.sh"))).name == "pretrain"
    path = tmp_path / "sft.sh"
    path.write_text(
        script.replace("pretrain_gpt.py \\\n", "pretrain_gpt.py --finetune \\\n", 1), encoding="utf-8"
    )
    mode = mode_of(query(str(path)))
    assert (mode.name, mode.why) == ("finetune", "Megatron-LM's --finetune")


def test_a_preset_plans_pretraining():
    assert mode_of(query("llama3-8b")).name == "pretrain"
    assert mode_of(query("llama3-8b", mode="lora")).name == "lora"
