"""Every example loads; the README's main example is the job its comments describe."""

from pathlib import Path

import pytest
import yaml

from memtune.catalog.models import get_model
from memtune.check import gate
from memtune.cli import main
from memtune.config import derive, load_job
from memtune.estimate import estimate

EXAMPLES = Path(__file__).parents[2] / "examples"
FORMATS = {
    "llama3-70b-sft.yaml": "memtune",
    "llama3-70b-sft-fp8.yaml": "memtune",
    "qwen3-30b-a3b-ep8.yaml": "memtune",
    "llama3-8b-lora.yaml": "memtune",
    "broken-llama3-8b.yaml": "memtune",
    "bridge-llama3-70b-lora.yaml": "bridge",
    "megatron-lm-llama3-8b.sh": "megatron-args",
}


def test_examples_folder_holds_the_listed_files():
    assert sorted(p.name for p in EXAMPLES.iterdir()) == sorted(FORMATS)


@pytest.mark.parametrize("name", FORMATS)
def test_example_loads_in_its_format(name):
    assert load_job(EXAMPLES / name).format == FORMATS[name]


def test_main_example_layout():
    d = derive(load_job(EXAMPLES / "llama3-70b-sft.yaml").job)
    assert (d.tp, d.pp, d.vpp, d.cp, d.dp, d.world_size) == (4, 4, 5, 1, 2, 32)
    assert d.num_microbatches == 16  # GBS 32 / (MBS 1 x DP 2)
    assert d.sequence_parallel and d.job.ddp.grad_reduce_in_fp32 is False
    assert [len(c.layers) for c in d.chunks[0]] == [4] * 5


def test_moe_example_layout():
    d = derive(load_job(EXAMPLES / "qwen3-30b-a3b-ep8.yaml").job)
    assert (d.ep, d.etp, d.dp, d.edp) == (8, 1, 16, 2)
    assert d.recompute_modules == ("moe_act",)


def test_broken_example_holds_the_problems_check_should_find():
    job = load_job(EXAMPLES / "broken-llama3-8b.yaml").job
    assert job.model.cpu_offloading and job.model.pipeline_model_parallel_size > 1
    assert job.model.sequence_parallel and job.model.tensor_model_parallel_size == 1
    assert "expandable_segments:True" in job.env.PYTORCH_CUDA_ALLOC_CONF and job.env.use_nccl_ub


def test_main_example_is_the_model_bridge_builds_and_the_readme_shows_its_estimate(
    tmp_path, capsys, monkeypatch
):
    # Bridge's Llama bridge (src/megatron/bridge/models/llama/llama_bridge.py) fuses the SwiGLU;
    # the preset says so, and the example writes out the preset's architecture key for key.
    example = yaml.safe_load((EXAMPLES / "llama3-70b-sft.yaml").read_text(encoding="utf-8"))
    preset = get_model("llama3-70b")
    assert preset["bias_activation_fusion"] is True
    assert {k: example["model"][k] for k in preset if k != "seq_length"} == {
        k: v for k, v in preset.items() if k != "seq_length"
    }
    through_preset = dict(example)
    through_preset["model"] = {
        k: v for k, v in example["model"].items() if k not in preset or k == "seq_length"
    }
    through_preset["model"]["preset"] = "llama3-70b"
    (tmp_path / "preset.yaml").write_text(yaml.safe_dump(through_preset), encoding="utf-8")
    peaks = [
        [r.peak_bytes for r in estimate(gate(load_job(path).job)).ranks]
        for path in (EXAMPLES / "llama3-70b-sft.yaml", tmp_path / "preset.yaml")
    ]
    assert peaks[0] == peaks[1]

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["estimate", str(EXAMPLES / "llama3-70b-sft.yaml")]) == 0
    printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ memtune estimate examples/llama3-70b-sft.yaml\n", 1)[1].split("```", 1)[0]
    shown = block.splitlines()
    # titles, header, rule and the four pipeline ranks, then the resume table's title, header,
    # rule and ranks (the example resumes its own checkpoint)
    assert shown[:15] == printed[:15]
    verdict = printed.index(shown[15])
    assert shown[15:] == printed[verdict : verdict + len(shown) - 15]
    assert "61.29" in shown[4] and shown[8].startswith("Resume from a torch_dist")
    assert shown[15].startswith("Verdict: fits")


def test_a_memtune_file_with_a_checkpoint_section_is_read_as_memtune(tmp_path):
    # memtune's schema and Bridge's ConfigContainer both have `checkpoint`; it marks no format.
    path = tmp_path / "job.yaml"
    path.write_text(
        "model: {preset: llama3-8b}\ncheckpoint: {load: /ckpt}\ncluster: {num_gpus: 8, gpu: H100-80GB}\n",
        encoding="utf-8",
    )
    loaded = load_job(path)
    assert loaded.format == "memtune"
    assert loaded.job.checkpoint.load == "/ckpt"
