"""``memtune completion bash|zsh|fish``: commands, options, recipes, presets and GPUs complete."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from memtune.catalog.recipes import list_recipes
from memtune.cli import build_parser, main
from memtune.completion import script

BASH = shutil.which("bash")


def _complete(words: list[str]) -> list[str]:
    """What bash's completion function offers for the command line ``words`` (last one typed)."""
    program = (
        script("bash", build_parser())
        + 'COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _memtune; printf \'%s\\n\' "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run([BASH, "-c", program, "bash", *words], capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.mark.skipif(BASH is None, reason="no bash")
@pytest.mark.parametrize(
    "words, expected",
    [
        (["memtune", "es"], ["estimate"]),
        (["memtune", "estimate", "--re"], ["--recipe"]),
        (["memtune", "plan", "--gpu", "H1"], ["H100-80GB", "H100-NVL"]),
        (["memtune", "plan", "llama3."], ["llama3.1-405b"]),
        (["memtune", "fix", "x.yaml", "--format", ""], ["memtune", "bridge", "hydra", "megatron-args"]),
        (
            ["memtune", "estimate", "model.preset=qwen3-3"],
            ["model.preset=qwen3-32b", "model.preset=qwen3-30b-a3b"],
        ),
        (["memtune", "page", "--to"], ["--top"]),
    ],
)
def test_bash_completes(words, expected):
    assert _complete(words) == expected


@pytest.mark.skipif(BASH is None, reason="no bash")
def test_bash_completes_every_recipe():
    offered = _complete(["memtune", "estimate", "--recipe", ""])
    assert offered == [r.label for r in list_recipes()] and len(offered) == 238


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_name_every_command_recipe_and_gpu(shell):
    text = script(shell, build_parser())
    for word in (
        "estimate",
        "page",
        "completion",
        "llama31_405b_pretrain_256gpu_h100_bf16_config",
        "H100-80GB",
    ):
        assert word in text
    binary = shutil.which(shell)
    if binary:  # the shell's own syntax check where the shell is installed
        subprocess.run([binary, "-n", "-c", text], check=True)


def test_the_command_prints_the_script_and_refuses_other_shells(capsys):
    assert main(["completion", "bash"]) == 0
    assert capsys.readouterr().out.endswith("complete -o filenames -F _memtune memtune\n")
    with pytest.raises(SystemExit) as refused:
        main(["completion", "powershell"])
    assert refused.value.code == 2
