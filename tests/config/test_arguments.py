"""Every command that takes a job takes it the same way (memtune/config/arguments.py): a config file
or a Megatron-Bridge recipe, Bridge override files, dotted overrides and ``defaults=STACK``."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.cli import main
from memtune.config import LoadedJob, load_job
from memtune.config import arguments as arguments_module
from memtune.errors import InputError
from memtune.plan.query import Query, base_job

RECIPE = "llama3_8b_sft_2gpu_h100_bf16"  # Llama-3 8B, TP2, seq_length 4096, Bridge's defaults
OTHER_RECIPE = "llama3_8b_pretrain_2gpu_h100_bf16"
LOG = str(Path(__file__).resolve().parents[1] / "diagnose" / "fixtures" / "h200" / "capacity.log")
WORDS = ("model.seq_length=2048", "defaults=megatron-lm")


class _Loaded(InputError):
    """Stops a command right after it loaded its job, before any work."""


@pytest.fixture
def loaded_jobs(monkeypatch: pytest.MonkeyPatch) -> list[LoadedJob]:
    jobs: list[LoadedJob] = []

    def record(*args: object, **kwargs: object) -> LoadedJob:
        jobs.append(load_job(*args, **kwargs))  # type: ignore[arg-type]
        raise _Loaded("loaded")

    monkeypatch.setattr(arguments_module, "load_job", record)
    return jobs


COMMANDS = {
    "estimate": ["estimate", "--recipe", RECIPE, *WORDS],
    "estimate (options first)": ["estimate", "--json", "--recipe", RECIPE, *WORDS],
    "check": ["check", "--recipe", RECIPE, *WORDS],
    "plan": ["plan", "--recipe", RECIPE, *WORDS, "--gpus", "2", "--gbs", "8"],
    "fix": ["fix", "--recipe", RECIPE, *WORDS],
    "measure": ["measure", "--recipe", RECIPE, "--rank", "0", *WORDS],
    "diff": ["diff", f"recipe:{RECIPE}", f"recipe:{OTHER_RECIPE}", *WORDS],
    "bisect": ["bisect", "--configs", f"recipe:{RECIPE}", f"recipe:{OTHER_RECIPE}", *WORDS],
    "bisect (options first)": [
        "bisect",
        "--configs",
        f"recipe:{RECIPE}",
        f"recipe:{OTHER_RECIPE}",
        "--json",
        *WORDS,
    ],
    "run": ["run", "--recipe", RECIPE, *WORDS, "--", "true"],
    "diagnose": ["diagnose", LOG, "--recipe", RECIPE, *WORDS],
}


@pytest.mark.parametrize("argv", COMMANDS.values(), ids=COMMANDS.keys())
def test_every_command_takes_a_recipe_overrides_and_a_defaults_choice(argv, loaded_jobs, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().endswith(": loaded")
    [loaded] = loaded_jobs  # the first job; diff and bisect stop before loading B
    assert loaded.source == f"recipe {RECIPE}"
    assert loaded.job.model.num_layers == 32 and loaded.job.model.tensor_model_parallel_size == 2
    assert loaded.job.model.seq_length == 2048
    assert loaded.job.defaults == "megatron-lm"


def test_fix_takes_a_recipe(capsys):
    assert main(["fix", "--recipe", RECIPE, "model.seq_length=2048", "--json"]) in (0, 1)
    assert "unrecognized arguments" not in capsys.readouterr().err


def test_recipe_word_and_flag_name_one_recipe():
    with pytest.raises(InputError, match=rf"^recipe:{RECIPE} and --recipe {OTHER_RECIPE}: name one recipe"):
        arguments_module.load_from_words([f"recipe:{RECIPE}"], OTHER_RECIPE, "usage")


def test_recipe_word_with_a_bridge_override_file(tmp_path):
    layer = tmp_path / "longer.yaml"
    layer.write_text("model:\n  seq_length: 8192\n")
    loaded = arguments_module.load_from_words(
        [f"recipe:{RECIPE}", str(layer), "defaults=megatron-core"], None, ""
    )
    assert (loaded.source, loaded.job.model.seq_length, loaded.job.defaults) == (
        f"recipe {RECIPE}",
        8192,
        "megatron-core",
    )


def test_plan_preset_takes_overrides_and_a_defaults_choice():
    base = base_job(Query("llama3-8b", 16, "H100-80GB", 8, None, 64, "pretrain", (), WORDS))
    assert (base.model.num_layers, base.model.seq_length, base.defaults) == (32, 2048, "megatron-lm")


def test_plan_preset_refuses_a_bridge_override_file(tmp_path):
    layer = tmp_path / "layer.yaml"
    layer.write_text("model:\n  seq_length: 8192\n")
    with pytest.raises(
        InputError, match="a Bridge override file goes over a config file or a recipe, not a preset"
    ):
        base_job(Query("llama3-8b", 16, "H100-80GB", 8, None, 64, "pretrain", (), (str(layer),)))


def test_run_keeps_a_double_dash_inside_the_command():
    from memtune.runtime.cli import _overrides_and_command

    assert _overrides_and_command(["--", "python", "x.py", "--", "y"]) == ([], ["python", "x.py", "--", "y"])
    assert _overrides_and_command(["model.x=1", "--", "true"]) == (["model.x=1"], ["true"])
    assert _overrides_and_command(["python", "x.py", "--", "y"]) == ([], ["python", "x.py", "--", "y"])


def test_plan_needs_a_model_or_a_recipe():
    with pytest.raises(
        InputError, match=r"^MODEL \(a preset or a config file\) or --recipe NAME is required: memtune plan"
    ):
        base_job(Query(None, 16, "H100-80GB", 8, None, 64, "pretrain"))
