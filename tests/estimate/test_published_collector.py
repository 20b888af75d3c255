"""The Megatron-LM flag translation behind benchmarks/published/memory/megatron-lm-ci/."""

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
    with pytest.raises(collector.Skip, match="untranslated flags --moe-z-loss-coeff"):
        collector.translate({**BASE, "--moe-z-loss-coeff": 0.001})
    with pytest.raises(collector.Skip, match="optimizer muon"):
        collector.translate({**BASE, "--optimizer": "muon"})
    with pytest.raises(collector.Skip, match="flex dispatcher"):
        collector.translate({**BASE, "--num-experts": 8, "--moe-token-dispatcher-type": "flex"})
    with pytest.raises(collector.Skip, match="hybrid FSDP"):
        collector.translate({**BASE, "--use-megatron-fsdp": True, "--outer-dp-sharding-strategy": "optim"})


def test_expert_all_to_all_overlap_translates():
    args = {**BASE, "--num-experts": 8, "--moe-token-dispatcher-type": "alltoall"}
    model = collector.translate(
        {**args, "--overlap-moe-expert-parallel-comm": True, "--delay-wgrad-compute": True}
    )["model"]
    assert (model["overlap_moe_expert_parallel_comm"], model["delay_wgrad_compute"]) == (True, True)


def test_reserved_cases_are_recognised_by_the_sha1_of_their_name():
    # sha1("a") = 86f7e4..., sha1("b") = e9d71f..., sha1("c") = 84a516..., sha1("d") = 3c3638...
    assert collector.allowed("gpt", "a")  # gpt/ is never reserved
    assert not collector.allowed("moe", "a") and not collector.allowed("mixtral", "b")
    assert not collector.allowed("moe", "c")
    assert collector.allowed("moe", "d") and collector.allowed("mixtral", "d")
    assert collector.run_id("gpt", "x") == "mlm-ci-x" and collector.run_id("moe", "x") == "mlm-ci-moe-x"


def test_moe_mla_and_features_translate():
    config = collector.translate(
        {
            **BASE,
            "--num-layers": 4,
            "--tensor-model-parallel-size": 2,
            "--sequence-parallel": True,
            "--num-experts": 8,
            "--expert-model-parallel-size": 2,
            "--expert-tensor-parallel-size": 1,
            "--moe-layer-freq": "([0]*1+[1]*3)",
            "--moe-ffn-hidden-size": 256,
            "--moe-grouped-gemm": True,
            "--moe-token-dispatcher-type": "alltoall",
            "--moe-router-topk": 4,
            "--multi-latent-attention": True,
            "--q-lora-rank": 64,
            "--kv-lora-rank": 32,
            "--qk-head-dim": 64,
            "--qk-pos-emb-head-dim": 32,
            "--v-head-dim": 64,
            "--recompute-granularity": "selective",
            "--recompute-modules": "[layernorm moe_act]",
            "--cuda-graph-impl": "transformer_engine",
            "--cuda-graph-modules": "[attn moe_router]",
            "--use-megatron-fsdp": True,
            "--use-distributed-optimizer": True,
        }
    )
    model = config["model"]
    assert model["moe_layer_freq"] == [0, 1, 1, 1]
    assert (model["num_moe_experts"], model["expert_model_parallel_size"], model["moe_router_topk"]) == (
        8,
        2,
        4,
    )
    assert (model["q_lora_rank"], model["kv_lora_rank"], model["v_head_dim"]) == (64, 32, 64)
    assert model["recompute_modules"] == ["layernorm", "moe_act"]
    assert model["cuda_graph_scope"] == ["attn", "moe_router"]
    # Megatron-LM's argparse default strategy (arguments.py --data-parallel-sharding-strategy).
    assert config["ddp"]["data_parallel_sharding_strategy"] == "optim_grads_params"
    validate(config)


def test_layer_freq_expressions_other_than_sums_of_lists_skip():
    assert collector._layer_freq("2") == 2
    with pytest.raises(collector.Skip, match="not a sum of"):
        collector._layer_freq("[1 if i % 2 else 0 for i in range(4)]")
