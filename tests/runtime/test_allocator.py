"""configure_allocator and check_allocator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from memtune.errors import InputError
from memtune.runtime import AllocatorConfigError, configure_allocator
from memtune.runtime import allocator as allocator_module


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "NCCL_GRAPH_REGISTER"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_writes_the_alias_and_keeps_options_already_set(clean_env):
    clean_env.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,expandable_segments:False")
    setup = configure_allocator(garbage_collection_threshold=0.8)
    assert setup.variable == "PYTORCH_CUDA_ALLOC_CONF"
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == (
        "max_split_size_mb:128,expandable_segments:True,garbage_collection_threshold:0.8"
    )
    assert setup.notes == ["replaced from the environment: expandable_segments:False"]


def test_merges_the_newer_variable_torch_would_ignore(clean_env):
    clean_env.setenv("PYTORCH_ALLOC_CONF", "roundup_power2_divisions:[256:1,>:8]")
    setup = configure_allocator()
    assert (
        os.environ["PYTORCH_CUDA_ALLOC_CONF"]
        == "roundup_power2_divisions:[256:1,>:8],expandable_segments:True"
    )
    assert "merged into PYTORCH_CUDA_ALLOC_CONF" in setup.notes[0]


def test_bad_options_are_input_errors(clean_env):
    with pytest.raises(InputError, match="torch's allocator has no option 'expandable_segment'"):
        configure_allocator(options={"expandable_segment": "True"})
    with pytest.raises(InputError, match=r"max_split_size_mb: must be from 20 to 2\^30, got 8"):
        configure_allocator(max_split_size_mb=8)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ


def test_refused_once_cuda_has_initialised(clean_env):
    clean_env.setattr(allocator_module, "_cuda_initialised", lambda: True)
    clean_env.setattr(allocator_module, "allocator_settings_in_effect", lambda: "")
    with pytest.raises(
        AllocatorConfigError, match="CUDA is already initialised, so the allocator has read its settings"
    ):
        configure_allocator()
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    # The same settings already in effect are no error.
    clean_env.setattr(allocator_module, "allocator_settings_in_effect", lambda: "expandable_segments:True")
    assert configure_allocator().notes == ["already in effect"]


def test_nccl_user_buffers_refused_before_torch_2_11(clean_env):
    clean_env.setattr(allocator_module, "installed_torch_version", lambda: (2, 10, 0))
    with pytest.raises(AllocatorConfigError, match="Megatron-Core refuses the pair before torch 2.11"):
        configure_allocator(use_nccl_ub=True)
    clean_env.setattr(allocator_module, "installed_torch_version", lambda: (2, 11, 0))
    notes = configure_allocator(use_nccl_ub=True).notes
    assert notes == [
        "with NCCL user buffers the user-buffer pool runs without expandable segments "
        "(torch 2.11.0 falls back silently); the rest of the allocator expands"
    ]


def test_cuda_graphs_get_nccl_graph_register_off(clean_env):
    setup = configure_allocator(cuda_graphs=True)
    assert os.environ["NCCL_GRAPH_REGISTER"] == "0"
    assert setup.notes[0].startswith("NCCL_GRAPH_REGISTER=0 set")
    clean_env.setenv("NCCL_GRAPH_REGISTER", "1")
    with pytest.raises(AllocatorConfigError, match="need NCCL_GRAPH_REGISTER=0, the environment has '1'"):
        configure_allocator(cuda_graphs=True)
    clean_env.delenv("PYTORCH_CUDA_ALLOC_CONF")
    assert configure_allocator(expandable_segments=False, cuda_graphs=True).notes == []


SCRIPT = textwrap.dedent(
    """
    import json, os
    from memtune.runtime import check_allocator, configure_allocator
    configure_allocator(max_split_size_mb=64)
    import torch
    first = check_allocator()
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:False"  # too late: already parsed
    second = check_allocator()
    print(json.dumps([first.in_effect, first.expandable_segments, first.problems, second.problems]))
    """
)


def test_settings_are_read_back_from_the_allocator_not_the_environment():
    pytest.importorskip("torch")
    env = {**os.environ, "PYTORCH_ALLOC_CONF": "garbage_collection_threshold:0.5"}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    in_effect, expandable, first_problems, second_problems = json.loads(out.stdout.splitlines()[-1])
    assert in_effect == "garbage_collection_threshold:0.5,expandable_segments:True,max_split_size_mb:64"
    assert expandable is True
    assert first_problems == [
        "PYTORCH_ALLOC_CONF='garbage_collection_threshold:0.5' is ignored: PYTORCH_CUDA_ALLOC_CONF is set and torch reads it first"
    ]
    assert second_problems[1] == (
        "the allocator runs with 'garbage_collection_threshold:0.5,expandable_segments:True,max_split_size_mb:64', "
        "the environment asks for 'expandable_segments:False': it was set after the allocator initialised"
    )
