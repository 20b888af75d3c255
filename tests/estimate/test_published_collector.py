"""The Megatron-LM flag translation behind benchmarks/published/megatron-lm-ci/."""

import importlib.util
from pathlib import Path

import pytest

from memtune.config import validate

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "published" / "collect_megatron_ci.py"
spec = importlib.util.spec_from_file_location("collect_megatron_ci", SCRIPT)
collector = importlib.util.module_from_spec(spec)
spec.loader.exec_module(collector)

BASE = {
    "--num-layers": 12,
    "--hidden-size": 512,
    "--num-attention-heads": 8,
    "--seq-length": 1024,
    "--micro-batch-size": 4,
    "--global-batch-size": 32,
    "--vocab-file": "vocab.json",
    "--merge-file": "merges.txt",
    "--bf16": True,
    "--log-interval": 1,
}


def test_megatron_lm_defaults_are_spelled_out():
    model = collector.translate(BASE)["model"]
    assert model["vocab_size"] == 50257  # GPT-2 BPE from --vocab-file/--merge-file
    assert (model["masked_softmax_fusion"], model["bias_activation_fusion"]) == (True, True)
    assert (model["gradient_accumulation_fusion"], model["attention_softmax_in_fp32"]) == (True, False)
    assert (model["hidden_dropout"], model["position_embedding_type"]) == (0.1, "learned_absolute")
    assert model["share_embeddings_and_output_weights"] is True
    assert model["transformer_impl"] == "transformer_engine"


def test_no_flags_and_virtual_stages_translate():
    config = collector.translate(
        {
            **BASE,
            "--pipeline-model-parallel-size": 4,
            "--num-layers-per-virtual-pipeline-stage": 1,
            "--no-gradient-accumulation-fusion": True,
            "--no-masked-softmax-fusion": True,
            "--swiglu": True,
        }
    )
    model = config["model"]
    assert model["virtual_pipeline_model_parallel_size"] == 3  # 12 layers / 4 stages / 1 per chunk
    assert (model["gradient_accumulation_fusion"], model["masked_softmax_fusion"]) == (False, False)
    assert (model["activation_func"], model["ffn_hidden_size"]) == ("silu", 1408)  # 2/3 of 2048, to 64
    validate(config)


def test_untranslated_flags_skip_the_run():
    with pytest.raises(collector.Skip, match="untranslated flags --use-megatron-fsdp"):
        collector.translate({**BASE, "--use-megatron-fsdp": True})
