import pytest

from memtune.config.loaders import read_raw

MODEL = "num_layers: 2\n  hidden_size: 8\n  num_attention_heads: 2\n  vocab_size: 64"


@pytest.mark.parametrize(
    "name, text, fmt",
    [
        ("job.sh", "python pretrain_gpt.py --num-layers 2\n", "megatron-args"),
        ("args.txt", "torchrun --nproc-per-node 2 pretrain_gpt.py --num-layers 2\n", "megatron-args"),
        ("args", "--num-layers 2 --hidden-size 8\n", "megatron-args"),
        (
            "config.json",
            '{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 8, "intermediate_size": 16, '
            '"num_attention_heads": 2, "vocab_size": 64}',
            "hf",
        ),
        (
            "nested.yaml",
            f"model:\n  {MODEL}\n  init_method:\n    _target_: torch.nn.init.normal_\n    _partial_: true\n",
            "bridge",
        ),
        ("sections.yaml", f"model:\n  {MODEL}\nlogger:\n  log_interval: 10\n", "bridge"),
        ("job.yaml", f"model:\n  {MODEL}\n", "memtune"),
        (
            "job.json",
            '{"model": {"num_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "vocab_size": 64}}',
            "memtune",
        ),
    ],
)
def test_format_is_detected_from_the_file(write, name, text, fmt):
    assert read_raw(write(name, text)).format == fmt


def test_yaml_mentioning_num_layers_in_a_comment_stays_yaml(write):
    assert (
        read_raw(write("job.yaml", f"# was launched with --num-layers 2\nmodel:\n  {MODEL}\n")).format
        == "memtune"
    )
