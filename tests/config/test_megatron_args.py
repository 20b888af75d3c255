from pathlib import Path

import pytest

from memtune.config import derive, load_job
from memtune.config.loaders._shell import evaluate, parse_script
from memtune.errors import InputError

SCRIPT = Path(__file__).parents[2] / "examples" / "megatron-lm-llama3-8b.sh"


def test_example_launch_script_maps_flags_env_and_world_size():
    loaded = load_job(SCRIPT)
    job, m = loaded.job, loaded.job.model
    assert loaded.format == "megatron-args"
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups) == (
        32,
        4096,
        14336,
        32,
        8,
    )
    assert (m.kv_channels, m.seq_length, m.vocab_size) == (128, 8192, 128256)
    assert m.gated_linear_unit and m.activation_func == "silu"  # --swiglu
    assert (
        m.normalization == "RMSNorm" and not m.share_embeddings_and_output_weights and not m.add_bias_linear
    )
    assert (m.tensor_model_parallel_size, m.pipeline_model_parallel_size, m.sequence_parallel) == (2, 1, True)
    assert m.position_embedding_type == "rope" and m.attention_backend == "fused" and m.bf16
    assert (job.train.micro_batch_size, job.train.global_batch_size) == (1, 128)
    assert job.optimizer.use_distributed_optimizer and job.ddp.use_distributed_optimizer
    assert job.ddp.overlap_grad_reduce and job.ddp.overlap_param_gather
    assert job.ddp.grad_reduce_in_fp32  # --bf16 without --grad-reduce-in-bf16
    assert job.env.CUDA_DEVICE_MAX_CONNECTIONS == "1"
    assert job.env.PYTORCH_CUDA_ALLOC_CONF == "expandable_segments:True"
    assert (job.cluster.num_gpus, job.cluster.gpus_per_node) == (
        8,
        8,
    )  # --nproc_per_node 8 --nnodes ${NUM_NODES:-1}
    # positional parameters fall back to their ${1:-...} defaults; unknown flags are reported with values
    assert job.checkpoint.save == "checkpoints/llama3_8b"  # the save phase (docs/save.md)
    assert "--lr 3.0e-4" in loaded.ignored and "--use-mcore-models" in loaded.ignored
    assert "--max-position-embeddings 8192" in loaded.ignored


def test_string_variables_virtual_stages_and_megatron_lm_defaults(write):
    path = write(
        "train.sh",
        """#!/bin/bash
CUDA_DEVICE_MAX_CONNECTIONS=1           # not exported: the trainer never sees it
WORLD_SIZE=16
GPT_ARGS="--num-layers 80 --hidden-size 8192 --num-attention-heads 64 \\
    --num-query-groups 8 --seq-length 4096 --vocab-size 128256"
PAR="--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 5"
python pretrain_gpt.py $GPT_ARGS $PAR --swiglu --bf16 --grad-reduce-in-bf16 --recompute-activations \\
    --recompute-modules core_attn mlp --fp8-format hybrid --fp8-recipe=tensorwise --micro-batch-size 2
""",
    )
    loaded = load_job(path)
    m = loaded.job.model
    assert m.virtual_pipeline_model_parallel_size == 4  # 80 layers / PP4 = 20 per stage, chunks of 5
    assert m.num_query_groups is None  # without --group-query-attention Megatron-LM ignores it
    assert "--num-query-groups (Megatron-LM uses it only with --group-query-attention)" in loaded.ignored
    assert m.position_embedding_type == "learned_absolute"  # Megatron-LM's default
    assert m.recompute_granularity == "selective" and m.recompute_modules == ["core_attn", "mlp"]
    assert (m.fp8, m.fp8_recipe) == ("hybrid", "tensorwise")
    assert loaded.job.ddp.grad_reduce_in_fp32 is False
    assert loaded.job.env.CUDA_DEVICE_MAX_CONNECTIONS is None
    assert any(
        i.startswith("CUDA_DEVICE_MAX_CONNECTIONS (set in the script but not exported")
        for i in loaded.ignored
    )
    assert loaded.job.cluster.num_gpus == 16
    assert loaded.job.train.micro_batch_size == 2


def test_argument_text_with_prefixed_environment_and_moe_flags(write):
    path = write(
        "args.txt",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True NCCL_GRAPH_REGISTER=0 "
        "torchrun --nproc-per-node=4 --nnodes=2 pretrain_gpt.py --num-layers 8 --hidden-size 1024 "
        "--num-attention-heads 8 --vocab-size 32000 --seq-length 1024 --num-experts 16 --moe-router-topk 4 "
        "--moe-layer-freq '([0]*2+[1]*6)' --moe-grouped-gemm --expert-model-parallel-size 4 "
        "--moe-token-dispatcher-type alltoall --use-distributed-optimizer --use-nccl-ub\n",
    )
    job = load_job(path).job
    assert job.model.moe_layer_freq == [0, 0, 1, 1, 1, 1, 1, 1]
    assert (job.model.num_moe_experts, job.model.moe_router_topk, job.model.expert_model_parallel_size) == (
        16,
        4,
        4,
    )
    assert job.model.moe_grouped_gemm and job.model.moe_token_dispatcher_type == "alltoall"
    assert (
        job.env.PYTORCH_CUDA_ALLOC_CONF == "expandable_segments:True" and job.env.NCCL_GRAPH_REGISTER == "0"
    )
    assert job.env.use_nccl_ub
    assert (job.cluster.num_gpus, job.cluster.gpus_per_node) == (8, 4)
    assert job.ddp.grad_reduce_in_fp32 is False  # fp32 training: gradients have the parameters' dtype


def test_bash_arrays_appends_and_arithmetic(write):
    path = write(
        "run.sh",
        """
NODES=2
GPUS=8
MODEL=(
  --num-layers 4   # a comment inside the array
  --hidden-size 256
)
MODEL+=(--num-attention-heads 4 --vocab-size 1000)
export PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True,max_split_size_mb:512"
torchrun --nnodes $NODES --nproc_per_node $((GPUS / 2)) train.py "${MODEL[@]}" --cpu-offloading-num-layers 2
""",
    )
    job = load_job(path).job
    assert (job.model.num_layers, job.model.hidden_size, job.model.num_attention_heads) == (4, 256, 4)
    assert job.model.cpu_offloading  # --cpu-offloading-num-layers > 0 turns it on, as in Megatron-LM
    assert job.env.PYTORCH_CUDA_ALLOC_CONF == "expandable_segments:True,max_split_size_mb:512"
    assert job.cluster.num_gpus == 8


def test_tokenizer_vocabulary_of_an_unknown_tokenizer_needs_an_override(write):
    path = write(
        "run.sh",
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
        "--num-attention-heads 32 --tokenizer-type HuggingFaceTokenizer --tokenizer-model org/unknown-model\n",
    )
    with pytest.raises(InputError) as exc:
        load_job(path)
    assert exc.value.problems == [
        f"{path}: the vocabulary size of --tokenizer-type HuggingFaceTokenizer --tokenizer-model "
        "org/unknown-model is not known without the tokenizer files; pass it as model.vocab_size=N"
    ]
    assert load_job(path, ["model.vocab_size=128256"]).job.model.vocab_size == 128256


@pytest.mark.parametrize(
    "tokenizer, vocab",
    [
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B", 128256),
        ("--tokenizer-type GPT2BPETokenizer --vocab-file v.json --merge-file m.txt", 50257),
        ("--vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt", 50257),
        ("--tokenizer-type NullTokenizer --vocab-size 32000", 32000),
    ],
)
def test_vocabulary_from_the_tokenizer_flags(write, tokenizer, vocab):
    path = write(
        "run.sh",
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 "
        f"--num-attention-heads 4 {tokenizer}\n",
    )
    assert load_job(path).job.model.vocab_size == vocab


@pytest.mark.parametrize("entry", ["pretrain_bert.py", "pretrain_t5.py"])
def test_non_gpt_entry_points_are_refused_in_one_line(write, entry):
    path = write("run.sh", f"torchrun --nproc-per-node 8 {entry} --num-layers 2 --hidden-size 256\n")
    with pytest.raises(InputError) as exc:
        load_job(path)
    assert exc.value.problems == [
        f"{entry} trains a model memtune does not estimate; memtune reads GPT-style decoder launches "
        "(pretrain_gpt.py and scripts taking its flags)"
    ]


def test_array_elements_holding_flag_value_pairs_split_when_expanded_unquoted(write):
    # The pattern of NVIDIA's Llama 3 FP8 example: each array element is "--flag value".
    path = write(
        "run.sh",
        'MODEL=(\n  "--num-layers 2"\n  "--hidden-size 256"\n  "--num-attention-heads 4"\n)\n'
        'TRAIN=("--micro-batch-size 2" "--vocab-size 1000")\n'
        'ALL="${MODEL[@]} --seq-length 128"\n'
        "torchrun --nproc-per-node 8 pretrain_gpt.py ${MODEL[@]} ${TRAIN[@]} $ALL\n",
    )
    job = load_job(path).job
    assert (job.model.num_layers, job.model.hidden_size, job.model.seq_length) == (2, 256, 128)
    assert job.train.micro_batch_size == 2 and job.model.vocab_size == 1000


def test_virtual_stage_size_that_does_not_divide_is_an_input_error(write):
    path = write(
        "run.sh",
        "python pretrain_gpt.py --num-layers 80 --hidden-size 8 --num-attention-heads 2 --vocab-size 8 "
        "--pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 3\n",
    )
    with pytest.raises(InputError) as exc:
        load_job(path)
    assert exc.value.problems == [
        f"{path}: --num-layers-per-virtual-pipeline-stage 3: 80 layers over 4 pipeline stages do not split into chunks of 3"
    ]


def test_value_flag_without_value_is_an_input_error(write):
    path = write("run.sh", "python pretrain_gpt.py --num-layers 2 --hidden-size\n")
    with pytest.raises(InputError, match="--hidden-size: expects a value"):
        load_job(path)


def test_restricted_evaluator_refuses_anything_but_integer_lists():
    assert evaluate("[0]*3+[1]*2") == [0, 0, 0, 1, 1]
    assert evaluate("8 * 4") == 32
    assert evaluate("__import__('os')") is None
    assert evaluate("[0]*10000000000") is None


def test_unset_variable_stays_literal_and_default_applies():
    script = parse_script('A=${UNSET:-7}\nB="$A-$UNSET"\n')
    assert script.variables == {"A": "7", "B": "7-$UNSET"}


def test_pipeline_layout_places_uneven_stages_embedding_and_loss(write):
    # Megatron's shorthand: E embedding, t decoder layer, L loss, | between stages, x*n repeats;
    # stage i runs on pipeline rank i % PP, virtual stage i // PP
    script = write(
        "layout.sh",
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 14 --hidden-size 256 "
        "--num-attention-heads 4 --seq-length 512 --micro-batch-size 1 --vocab-size 1000 --bf16 "
        "--pipeline-model-parallel-size 4 --pipeline-model-parallel-layout 'Et|t*2|(tt|)*4,t*3|L'\n",
    )
    d = derive(load_job(script).job)
    assert d.vpp == 2
    # stages: [E t] [t t] [t t] [t t] | [t t] [t t] [t t t] [L]
    assert [[len(c.layers) for c in rank] for rank in d.chunks] == [[1, 2], [2, 2], [2, 3], [2, 0]]
    assert d.layers_per_stage == (3, 4, 5, 2)
    assert d.chunks[3][1].layers == () and d.chunks[3][1].has_output
    assert d.chunks[1][1].layers == (9, 10)  # layer order runs over ranks within a virtual stage
    assert d.chunks[0][0].has_embedding and d.chunks[0][0].layers == (0,)


def test_pipeline_layout_with_virtual_stage_flags_is_refused(write):
    script = write(
        "layout.sh",
        "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 "
        "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Ett|ttL' "
        "--num-virtual-stages-per-pipeline-rank 2\n",
    )
    with pytest.raises(InputError, match="--pipeline-model-parallel-layout sets the virtual stages itself"):
        load_job(script)


def test_pipeline_layout_that_miscounts_layers_is_one_line(write):
    script = write(
        "layout.sh",
        "pretrain_gpt.py --num-layers 5 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 "
        "--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout 'Ett|ttL'\n",
    )
    with pytest.raises(InputError) as exc:
        load_job(script)
    assert exc.value.problems == [
        "model: pipeline_model_parallel_layout places 4 decoder layers, num_layers is 5"
    ]


def test_fine_grained_activation_offloading_flags(write):
    script = write(
        "offload.sh",
        "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 "
        "--fine-grained-activation-offloading --offload-modules core_attn attn_proj "
        "--min-offloaded-tensor-size 4096 --activation-offload-fraction 0.5\n",
    )
    loaded = load_job(script)
    m = loaded.job.model
    assert m.fine_grained_activation_offloading and m.offload_modules == ["core_attn", "attn_proj"]
    assert (m.min_offloaded_tensor_size, m.activation_offload_fraction) == (4096, 0.5)
    assert loaded.ignored == []


def test_tiktoken_vocabulary_is_megatrons_cap(write):
    # Megatron's TikTokenizer without --vocab-size keeps 2**17 tokens, special tokens included
    script = write(
        "tik.sh",
        "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
        "--tokenizer-type TikTokenizer --tokenizer-model /data/llama3.json --tiktoken-pattern v2\n",
    )
    loaded = load_job(script)
    assert loaded.job.model.vocab_size == 131072
    assert loaded.ignored == ["--tiktoken-pattern v2"]


def test_moe_layer_freq_in_megatron_list_syntax_as_a_dotted_override(write):
    script = write(
        "moe.sh",
        "pretrain_gpt.py --num-layers 8 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 "
        "--num-experts 4 --moe-layer-freq 1\n",
    )
    job = load_job(script, ["model.moe_layer_freq=([0]*3+[1]*5)"]).job
    assert job.model.moe_layer_freq == [0, 0, 0, 1, 1, 1, 1, 1]
    assert derive(job).moe_layer_pattern == (False,) * 3 + (True,) * 5


TINY_LAUNCH = (
    "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
    "--vocab-size 100 --micro-batch-size 1"
)


def test_manual_gc_is_read(write):
    loaded = load_job(write("gc.sh", f"{TINY_LAUNCH} --manual-gc --manual-gc-interval 100\n"))
    assert loaded.job.train.manual_gc is True
    assert "--manual-gc-interval" in " ".join(loaded.ignored)  # no memory effect: listed, not dropped


def test_cp_comm_type_flags_one_word_per_layer_or_mixed(write):
    # Megatron-LM's `--cp-comm-type` takes one word or one per layer; one repeated word is that type
    head = "pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 "
    script = write(
        "cp.sh",
        head + "--context-parallel-size 4 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2\n",
    )
    loaded = load_job(script)
    m = loaded.job.model
    assert (m.cp_comm_type, m.hierarchical_context_parallel_sizes) == ("a2a+p2p", [2, 2])
    assert loaded.ignored == []
    assert derive(loaded.job).cp_all_to_all_size == 2 and derive(loaded.job).cp_ring_size == 2
    per_layer = write("cp2.sh", head + "--context-parallel-size 2 --cp-comm-type a2a a2a\n")
    assert load_job(per_layer).job.model.cp_comm_type == "a2a"
    mixed = write("cp3.sh", head + "--context-parallel-size 2 --cp-comm-type a2a p2p\n")
    with pytest.raises(InputError, match=r"a per-layer list must repeat one type \(got a2a, p2p\)"):
        load_job(mixed)


def test_sliding_window_and_softmax_flags(write):
    # GPT-OSS's attention as Megatron-LM's flags give it: a 127-key window on every layer but
    # each second one, and a learnable softmax offset
    script = write(
        "swa.sh",
        "pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 "
        "--window-size 127,0 --window-attn-skip-freq 2 --softmax-type learnable\n",
    )
    loaded = load_job(script)
    m = loaded.job.model
    assert (m.window_size, m.window_attn_skip_freq, m.softmax_type) == ([127, 0], 2, "learnable")
    assert loaded.ignored == []
    # layers are numbered from 1 in Megatron: the 2nd and 4th attend in full
    assert derive(loaded.job).window_attention_pattern == (True, False, True, False)
    listed = write(
        "swa2.sh",
        script.read_text().replace("--window-attn-skip-freq 2", '--window-attn-skip-freq "[1,1,1,0]"'),
    )
    assert derive(load_job(listed).job).window_attention_pattern == (True, True, True, False)


LAUNCH_WITH_OVERLAP = (
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 8 "
    "--seq-length 2048 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 8 --bf16 "
    "--tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap --tp-comm-overlap-cfg {cfg}\n"
)


def test_a_launchs_userbuffer_file_is_read_beside_it(write):
    # Megatron-LM's --tp-comm-overlap-cfg (initialize.py: yaml.safe_load of the file): the fields
    # memtune prices become model.tp_comm_overlap_cfg; the others are reported as ignored
    write(
        "ub.yaml",
        "proj_fprop:\n  method: ring_exchange\n  aggregate: 0\n  set_sm_margin: 1\nfc1_dgrad:\n  num_sm: 2\n",
    )
    loaded = load_job(write("train.sh", LAUNCH_WITH_OVERLAP.format(cfg="ub.yaml")))
    d = derive(loaded.job)
    assert loaded.job.model.tp_comm_overlap
    assert (d.userbuffer_gemm("proj_fprop").method, d.userbuffer_gemm("proj_fprop").margin_sms) == (
        "ring_exchange",
        16,
    )
    assert d.userbuffer_gemm("fc1_dgrad").margin_sms == 2
    assert "--tp-comm-overlap-cfg ub.yaml: proj_fprop.aggregate" in loaded.ignored


def test_a_launchs_userbuffer_file_not_found_is_said(write):
    loaded = load_job(write("train.sh", LAUNCH_WITH_OVERLAP.format(cfg="missing/ub.yaml")))
    assert loaded.job.model.tp_comm_overlap_cfg is None
    assert (
        "--tp-comm-overlap-cfg missing/ub.yaml (not found beside the launch or here: Transformer Engine's "
        "defaults priced)"
    ) in loaded.ignored


def test_test_mode_is_read(write):
    loaded = load_job(write("test_mode.sh", f"{TINY_LAUNCH} --qk-layernorm --test-mode\n"))
    assert loaded.job.model.test_mode is True
    assert not any("--test-mode" in word for word in loaded.ignored)
