"""One test per pattern the launch scripts under Megatron-LM's examples/ use (docs/real-jobs.md
lists each script and its outcome). The scripts here are small stand-ins written for these
tests; what they share with the originals is how the command line is put together."""

import pytest

from memtune.config import derive, load_job
from memtune.errors import InputError

MODEL = "--num-layers 8 --hidden-size 256 --num-attention-heads 8 --seq-length 1024"


def test_fixed_node_count_needs_only_the_gpu_count(write):
    # gpt3/train_gpt3_175b_distributed.sh: one node written into the script, a layout for many
    script = write(
        "gpt.sh",
        "GPUS_PER_NODE=8\nNUM_NODES=1\n"
        "DISTRIBUTED_ARGS=(\n  --nproc_per_node $GPUS_PER_NODE\n  --nnodes $NUM_NODES\n)\n"
        f"GPT_MODEL_ARGS=(\n  {MODEL}\n)\n"
        "PARALLEL_ARGS=(\n  --tensor-model-parallel-size 8\n  --pipeline-model-parallel-size 4\n)\n"
        "torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${GPT_MODEL_ARGS[@]} ${PARALLEL_ARGS[@]} "
        "--vocab-file $VOCAB --merge-file $MERGES --micro-batch-size 1 --global-batch-size 64 --bf16\n",
    )
    with pytest.raises(InputError, match=r"cluster.num_gpus=8 is not divisible by TP×PP×CP = 8×4×1 = 32"):
        from memtune.check import gate

        gate(load_job(script).job)
    d = derive(load_job(script, ["cluster.num_gpus=64"]).job)
    assert (d.world_size, d.dp, d.model.vocab_size) == (64, 2, 50257)


def test_pipeline_size_taken_from_the_world_size_is_checked_like_megatron(write):
    # gptoss/02_train.sh: PP_SIZE=${WORLD_SIZE} with a fixed layer count
    from memtune.check import gate

    script = write(
        "oss.sh",
        "GPUS_PER_NODE=${GPUS_PER_NODE:-8}\nNUM_NODES=${NUM_NODES:-1}\n"
        "WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))\nPP_SIZE=${WORLD_SIZE}\nNUM_LAYERS=12\n"
        "MODEL_ARGS=(\n  --num-layers ${NUM_LAYERS}\n  --hidden-size 256\n  --num-attention-heads 8\n)\n"
        "PAR=(\n  --pipeline-model-parallel-size ${PP_SIZE}\n)\n"
        'torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py "${MODEL_ARGS[@]}" '
        '"${PAR[@]}" --tokenizer-type NullTokenizer --vocab-size 1000 --window-size 127,0\n',
    )
    with pytest.raises(InputError) as exc:
        gate(load_job(script).job)
    assert exc.value.problems[0].startswith("PIP001 num_layers = 12 is not divisible by")
    assert derive(load_job(script, ["model.pipeline_model_parallel_size=4"]).job).layers_per_stage == (3,) * 4


def test_flag_value_pairs_in_array_elements_with_fsdp(write):
    # llama/train_llama3_8b_h100_fp8.sh and megatron_fsdp/train_llama3_8b_fsdp_h100_fp8.sh
    script = write(
        "fsdp.sh",
        'MODEL=(\n  "--num-layers 4"\n  "--hidden-size 256"\n  "--num-attention-heads 8"\n)\n'
        'FSDP=(\n  "--use-megatron-fsdp"\n  "--data-parallel-sharding-strategy optim_grads_params"\n)\n'
        "torchrun --nproc_per_node 8 pretrain_gpt.py ${MODEL[@]} ${FSDP[@]} --vocab-size 128256 --bf16\n",
    )
    d = derive(load_job(script).job)
    assert (d.model.num_layers, d.fsdp_strategy, d.world_size) == (4, "optim_grads_params", 8)


def test_command_in_a_string_run_through_a_batch_heredoc(write):
    # megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh: the flags in an array, the command in a string,
    # the string run inside `sbatch <<EOF`; the node count is a placeholder
    script = write(
        "sbatch.sh",
        "TP=${TP:-1}\nEP=${EP:-8}\n"
        f"ARGS=(\n  {MODEL}\n  --expert-model-parallel-size ${{EP}}\n  --num-experts 16\n"
        "  --tokenizer-type HuggingFaceTokenizer\n  --tokenizer-model deepseek-ai/DeepSeek-V3\n)\n"
        'CMD="\ncd /x;\npython /x/pretrain_gpt.py ${ARGS[@]}"\n'
        'sbatch <<EOF\n#!/bin/bash\n#SBATCH --nodes=your_own_num_nodes\nsrun bash -c "${CMD}"\nEOF\n',
    )
    with pytest.raises(InputError) as exc:
        load_job(script)
    assert exc.value.problems == [
        f"{script}: the vocabulary size of --tokenizer-type HuggingFaceTokenizer --tokenizer-model "
        "deepseek-ai/DeepSeek-V3 is not known without the tokenizer files; pass it as model.vocab_size=N"
    ]
    d = derive(load_job(script, ["model.vocab_size=129280", "cluster.num_gpus=32"]).job)
    assert (d.ep, d.world_size, d.model.num_moe_experts) == (8, 32, 16)


def test_positional_arguments_and_slurm_node_count(write):
    # mixtral/train_mixtral_8x7b_distributed.sh: paths from $1..$3, nodes from SLURM_NNODES
    script = write(
        "mixtral.sh",
        'TOKENIZER_MODEL=$2\nGPUS_PER_NODE=8\nNNODES=${SLURM_NNODES:-"1"}\n'
        "DISTRIBUTED_ARGS=(\n  --nproc_per_node $GPUS_PER_NODE\n  --nnodes $NNODES\n)\n"
        f"MODEL_ARGS=(\n  {MODEL}\n  --num-experts 8\n  --expert-model-parallel-size 8\n)\n"
        "torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} "
        "--tokenizer-type Llama2Tokenizer --tokenizer-model ${TOKENIZER_MODEL} "
        "--pipeline-model-parallel-size 4\n",
    )
    with pytest.raises(
        InputError, match=r"--tokenizer-type Llama2Tokenizer --tokenizer-model \$2 is not known"
    ):
        load_job(script)
    d = derive(load_job(script, ["model.vocab_size=32000", "cluster.num_gpus=32"]).job)
    assert (d.pp, d.ep, d.world_size) == (4, 8, 32)


def test_flags_from_the_environment_get_one_line(write):
    # academic_paper_scripts/sc21/SRUN.sh: the command's flags are an environment variable
    script = write(
        "srun.sh",
        'CMD="python -u ${MEGATRON_CODE_DIR}/pretrain_gpt.py ${MEGATRON_PARAMS}"\n'
        'srun -l --container-image img --output=logs/%x.log sh -c "${CMD}"\n',
    )
    with pytest.raises(InputError) as exc:
        load_job(script)
    assert exc.value.problems == [
        f"{script}: the model flags come from variables the script does not set (MEGATRON_CODE_DIR, "
        "MEGATRON_PARAMS); give the expanded command line instead (what `bash -x` prints for it)"
    ]


def test_flags_from_a_sourced_file_get_one_line(write):
    # post_training/modelopt/train.sh: MODEL_ARGS come from a sourced configuration file
    script = write(
        "train.sh",
        'SCRIPT_DIR="$(dirname "$(readlink -f "$0")")"\nsource "${SCRIPT_DIR}/conf/arguments.sh"\n'
        "${LAUNCH_SCRIPT} ${SCRIPT_DIR}/pretrain_gpt.py ${MODEL_ARGS} --tensor-model-parallel-size ${TP}\n",
    )
    with pytest.raises(InputError) as exc:
        load_job(script)
    assert len(exc.value.problems) == 1
    assert "the model flags come from a file the script sources (${SCRIPT_DIR}/conf/arguments.sh)" in str(
        exc.value.problems[0]
    )
