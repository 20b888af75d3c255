"""Every bad input ends as one-line messages and exit status 2, never a traceback."""

import pytest

from memtune.cli import main

LLAMA = "model:\n  preset: llama3-8b\n"


def run(capsys, *argv):
    status = main(["estimate", *map(str, argv)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return status, err


@pytest.mark.parametrize(
    "name, text, message",
    [
        (
            "unknown.yaml",
            LLAMA + "  tensor_parallel_size: 2\n",
            "model.tensor_parallel_size: unknown key; did you mean 'tensor_model_parallel_size'?",
        ),
        ("section.yaml", LLAMA + "trainer:\n  micro_batch_size: 1\n", "trainer: unknown key;"),
        (
            "type.yaml",
            "model:\n  num_layers: eighty\n  hidden_size: 8\n  num_attention_heads: 2\n  vocab_size: 8\n",
            "model.num_layers: must be an integer, got 'eighty'",
        ),
        (
            "missing.yaml",
            "model:\n  num_layers: 2\n  num_attention_heads: 2\n  vocab_size: 8\n",
            "model.hidden_size: required, but missing",
        ),
        ("literal.yaml", LLAMA + "  activation_func: mish\n", "model.activation_func: must be one of"),
        ("invalid.yaml", "model:\n  num_layers: [1, 2\n", "invalid YAML at line 3, column 1"),
        ("invalid.json", '{"model": {"num_layers": 2,}}', "invalid JSON at line 1, column 28"),
        ("list.yaml", "- 1\n- 2\n", "expected a mapping of sections (model, train, ...), got list"),
        (
            "preset.yaml",
            "model:\n  preset: llama9\n",
            "model.preset: unknown model preset 'llama9'; known: llama3-8b,",
        ),
        ("gpu.yaml", LLAMA + "cluster:\n  gpu_memory_gib: 0\n", "cluster.gpu_memory_gib: "),
        (
            "hf.json",
            '{"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768}',
            "unsupported Hugging Face architecture BertForMaskedLM (model_type 'bert'); supported: LlamaForCausalLM,",
        ),
        (
            "bridge.yaml",
            "model:\n  _target_: x.GPTModelProvider\n  num_layers: 2\nmixed_precision: bf17_mixed\n",
            "mixed_precision: unknown recipe 'bf17_mixed'; known: bf16_mixed, fp16_mixed,",
        ),
        (
            "bridge-peft.yaml",
            "model:\n  num_layers: 2\npeft:\n  _target_: megatron.bridge.peft.dora.DoRA\n  dim: 8\n",
            "peft: only LoRA (megatron.bridge.peft.lora.LoRA) is supported, got megatron.bridge.peft.dora.DoRA",
        ),
        (
            "launch.sh",
            "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --tensor-model-parallel-size $TP "
            "--hidden-size 4096 --num-attention-heads 32 --vocab-size 32000 --seq-length 4096\n",
            "model.tensor_model_parallel_size: must be an integer, got '$TP'",
        ),
        ("no-command.sh", "export CUDA_DEVICE_MAX_CONNECTIONS=1\necho done\n", "no training command found"),
    ],
)
def test_bad_config_exits_2_with_a_one_line_message(capsys, write, name, text, message):
    status, err = run(capsys, write(name, text))
    assert status == 2
    assert message in err
    assert all(line.startswith("memtune estimate: ") for line in err.splitlines())


def test_every_problem_of_a_file_is_reported(capsys, write):
    path = write(
        "two.yaml",
        "model:\n  num_layers: 0\n  hidden_size: 8\n  num_attention_heads: 2\ntrain:\n  micro_batch_size: x\n",
    )
    status, err = run(capsys, path)
    assert status == 2
    assert err.splitlines() == [
        "memtune estimate: model.num_layers: must be a positive integer, got 0",
        "memtune estimate: model.vocab_size: required, but missing",
        "memtune estimate: train.micro_batch_size: must be an integer, got 'x'",
    ]


def test_hf_config_missing_keys_are_all_named(capsys, write):
    path = write("config.json", '{"model_type": "llama", "hidden_size": 8, "intermediate_size": 16}')
    status, err = run(capsys, path)
    assert status == 2
    assert err.splitlines() == [
        f"memtune estimate: {path}: a llama config needs {key!r}, which is missing"
        for key in ("num_hidden_layers", "num_attention_heads", "vocab_size")
    ]


def test_missing_file_and_directory_and_binary(capsys, tmp_path, write):
    assert run(capsys, tmp_path / "nope.yaml") == (
        2,
        f"memtune estimate: {tmp_path / 'nope.yaml'}: no such file\n",
    )
    status, err = run(capsys, tmp_path)
    assert status == 2 and "is a directory" in err
    status, err = run(capsys, write("model.yaml", b"\xff\xfe\x00binary"))
    assert status == 2 and "cannot read as text (UnicodeDecodeError)" in err


def test_bad_override_exits_2(capsys, write):
    status, err = run(capsys, write("ok.yaml", LLAMA), "tensor_model_parallel_size=2")
    assert status == 2
    assert "override 'tensor_model_parallel_size=2': expected section.key=value" in err


def test_a_fractional_field_below_its_bound_is_not_called_an_integer(capsys, write):
    path = write("clamp.yaml", "model:\n  preset: gpt-oss-20b\n  activation_func_clamp_value: -1\n")
    status, err = run(capsys, path)
    assert status == 2
    assert err.splitlines() == [
        "memtune estimate: model.activation_func_clamp_value: must be more than 0, got -1"
    ]
