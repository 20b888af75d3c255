"""A proposed job written in each format loads back as that job (memtune/config/writers.py)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

import memtune
from memtune.cli import main
from memtune.config import load_job
from memtune.config.changes import Change, with_changes
from memtune.config.writers import changes_between, render
from memtune.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "examples" / "megatron-lm-llama3-8b.sh"
BRIDGE_DUMP = ROOT / "examples" / "bridge-llama3-70b-lora.yaml"
NATIVE = ROOT / "examples" / "llama3-70b-sft.yaml"

LAUNCH_CHANGES = [
    # a valued flag given through a variable, a switch removed, one added, new flags, the environment
    [Change("model.tensor_model_parallel_size", 4), Change("model.sequence_parallel", False)],
    [
        Change("model.recompute_granularity", "selective"),
        Change("model.recompute_modules", ["core_attn", "mlp"]),
    ],
    [Change("optimizer.use_distributed_optimizer", False), Change("ddp.use_distributed_optimizer", False)],
    [Change("env.PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False"), Change("train.micro_batch_size", 2)],
    [Change("model.masked_softmax_fusion", False), Change("model.pipeline_model_parallel_size", 2)],
    [Change("model.cpu_offloading", True), Change("model.cpu_offloading_num_layers", 4)],
    # a tuple flag (Megatron-LM's tuple_type, written 127,0), a per-layer list's one word, a list flag
    [
        Change("model.window_size", [127, 0]),
        Change("model.window_attn_skip_freq", 2),
        Change("model.softmax_type", "learnable"),
        Change("model.context_parallel_size", 2),
        Change("model.cp_comm_type", "a2a+p2p"),
        Change("model.hierarchical_context_parallel_sizes", [2, 1]),
    ],
]


def _same_job(path: Path, proposed, overrides=(), **kwargs) -> None:
    back = load_job(path, overrides, **kwargs)
    assert changes_between(back.job, proposed) == []


@pytest.mark.parametrize("changes", LAUNCH_CHANGES, ids=lambda c: str(c[0]))
def test_a_patched_launch_script_loads_as_the_proposed_job(tmp_path, changes):
    loaded = load_job(LAUNCH)
    proposed = with_changes(loaded.job, changes)
    out = tmp_path / "patched.sh"
    out.write_text(render(loaded, proposed, "megatron-args", "test"))
    _same_job(out, proposed)


def test_a_patched_launch_script_touches_only_the_changed_flags(tmp_path):
    loaded = load_job(LAUNCH)
    changes = [Change("model.tensor_model_parallel_size", 4), Change("model.sequence_parallel", False)]
    text = render(loaded, with_changes(loaded.job, changes), "megatron-args", "test")
    diff = [
        line
        for line in difflib.unified_diff(LAUNCH.read_text().splitlines(), text.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert diff == [
        "-    --tensor-model-parallel-size $TP_SIZE",
        "+    --tensor-model-parallel-size 4",
        "-    --sequence-parallel",
    ]


def test_a_new_flag_goes_on_its_own_line_after_num_layers_in_a_continued_command(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/bash\n# my job\ntorchrun --nproc-per-node 8 pretrain_gpt.py \\\n"
        "    --num-layers 32 \\\n    --hidden-size 4096 --num-attention-heads 32 \\\n"
        "    --seq-length 4096 --vocab-size 32000 --micro-batch-size 1 --bf16\n"
    )
    loaded = load_job(script)
    proposed = with_changes(
        loaded.job,
        [
            Change("model.recompute_granularity", "full"),
            Change("model.recompute_method", "uniform"),
            Change("model.recompute_num_layers", 1),
        ],
    )
    text = render(loaded, proposed, "megatron-args", "test")
    assert "    --num-layers 32 \\\n    --recompute-num-layers 1 \\\n" in text
    assert text.startswith("#!/bin/bash\n# my job\n")
    script.write_text(text)
    _same_job(script, proposed)


def test_a_key_without_a_flag_is_refused_in_one_line():
    loaded = load_job(LAUNCH)
    proposed = with_changes(loaded.job, [Change("model.bias_activation_fusion", False)])
    with pytest.raises(
        InputError,
        match=r"^--format megatron-args: model.bias_activation_fusion=false has no Megatron-LM flag memtune writes; use --format hydra or memtune$",
    ):
        render(loaded, proposed, "megatron-args", "test")


@pytest.mark.parametrize(
    "base, kwargs",
    [(BRIDGE_DUMP, {}), (None, {"recipe": "llama3_70b_peft_config"})],
    ids=["dump", "recipe"],
)
def test_a_bridge_override_file_laid_over_the_base_gives_the_proposed_job(tmp_path, base, kwargs):
    loaded = load_job(base, **kwargs)
    changes = [
        Change("model.recompute_granularity", "full"),
        Change("model.recompute_method", "uniform"),
        Change("model.recompute_num_layers", 1),
        Change("train.micro_batch_size", 1),
    ]
    proposed = with_changes(loaded.job, changes)
    out = tmp_path / "override.yaml"
    out.write_text(render(loaded, proposed, "bridge", "test"))
    _same_job(base, proposed, layers=[str(out)], **kwargs)


def test_hydra_overrides_over_the_base_give_the_proposed_job(tmp_path):
    loaded = load_job(NATIVE)
    proposed = with_changes(
        loaded.job,
        [
            Change("model.tensor_model_parallel_size", 8),
            Change("model.virtual_pipeline_model_parallel_size", None),
        ],
    )
    lines = render(loaded, proposed, "hydra", "test").splitlines()
    assert lines[0].startswith("#")
    _same_job(NATIVE, proposed, overrides=lines[1:])


def test_memtune_yaml_is_the_whole_proposed_job(tmp_path):
    loaded = load_job(LAUNCH)
    proposed = with_changes(loaded.job, [Change("model.tensor_model_parallel_size", 4)])
    out = tmp_path / "job.yaml"
    out.write_text(render(loaded, proposed, "memtune", "test"))
    _same_job(out, proposed)


def test_fix_writes_the_launch_script_by_default_and_it_loads_as_the_first_suggestion(tmp_path, capsys):
    out = tmp_path / "fixed.sh"
    assert main(["fix", str(LAUNCH), "model.seq_length=32768", "--write", str(out)]) == 0
    first = memtune.fix(LAUNCH, ["model.seq_length=32768"]).suggestions[0]
    assert out.read_text().startswith(LAUNCH.read_text().splitlines()[0])  # still the script
    _same_job(out, first.job)


def test_fix_writes_bridge_overrides_for_a_recipe(tmp_path, capsys):
    out = tmp_path / "override.yaml"
    recipe = "llama3_70b_peft_config"
    assert main(["fix", "--recipe", recipe, "model.seq_length=16384", "--write", str(out)]) == 0
    first = memtune.fix({"recipe": recipe}, ["model.seq_length=16384"]).proposed
    assert "seq_length: 16384" in out.read_text()
    _same_job(None, first.job, recipe=recipe, layers=[str(out)])


def test_plan_writes_layout_n(tmp_path, capsys):
    out = tmp_path / "layout.txt"
    assert main(["plan", str(NATIVE), "--top", "2", "--write", "2", str(out), "--format", "hydra"]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "# written by memtune plan: layout 2"
    planned = load_job(NATIVE, lines[1:])
    assert memtune.estimate(NATIVE, lines[1:]).verdict() in ("fits", "tight")
    assert changes_between(load_job(NATIVE).job, planned.job)


def test_write_never_replaces_the_input(tmp_path, capsys):
    copy = tmp_path / "job.sh"
    copy.write_text(LAUNCH.read_text())
    assert main(["fix", str(copy), "model.seq_length=32768", "--write", str(copy), "--force"]) == 2
    assert "is the input" in capsys.readouterr().err
    assert copy.read_text() == LAUNCH.read_text()


@pytest.mark.parametrize("command", [["fix", str(NATIVE)], ["plan", str(NATIVE)]])
def test_format_without_write_is_refused(command, capsys):
    assert main([*command, "--format", "hydra"]) == 2
    assert "--format goes with --write" in capsys.readouterr().err
