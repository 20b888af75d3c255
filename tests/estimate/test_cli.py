import json
from pathlib import Path

import pytest

from memtune.check import gate
from memtune.cli import main
from memtune.config import load_job
from memtune.estimate import estimate
from memtune.estimate.render import assumptions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "llama3-70b-sft.yaml")


def test_json_for_one_global_rank(capsys):
    assert main(["estimate", EXAMPLE, "--json", "--rank", "31"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["schema_version"] == 1 and len(full["ranks"]) == 1
    data = full["ranks"][0]
    assert data["rank"] == 31 and data["pp_rank"] == 3  # 32 GPUs, PP 4: ranks 24-31 are the last stage
    assert set(data["components"]) == {"weights", "grads", "optimizer", "activations", "transient"}
    assert data["peak_bytes"] == sum(data["components"].values())
    assert isinstance(data["fits"], bool) and data["non_pytorch_bytes"] > 0
    assert main(["estimate", EXAMPLE, "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    assert every.keys() == full.keys() and every["ranks"][3] == {k: v for k, v in data.items() if k != "rank"}


def test_table_explain_and_plot(capsys, tmp_path):
    plot = tmp_path / "ranks.png"
    assert main(["estimate", EXAMPLE, "--explain", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "Verdict:" in out and "GiB (2^30 B)" in out
    assert "decoder.mlp.linear_fc2.input" in out  # the per-tensor breakdown
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_overrides_after_options_change_the_layout(capsys):
    assert (
        main(
            [
                "estimate",
                EXAMPLE,
                "--json",
                "model.pipeline_model_parallel_size=2",
                "model.virtual_pipeline_model_parallel_size=null",
                "cluster.num_gpus=16",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["parallelism"]["pp"] == 2 and len(data["ranks"]) == 2


def test_invalid_config_is_refused_with_check_messages(capsys):
    code = main(["estimate", EXAMPLE, "defaults=megatron-core", "model.tensor_model_parallel_size=1"])
    err = capsys.readouterr().err
    assert code == 2
    assert "SEQ001" in err and "Traceback" not in err


def test_rank_out_of_range(capsys):
    assert main(["estimate", EXAMPLE, "--rank", "32"]) == 2
    assert "--rank: must be between 0 and 31 (world size 32), got 32" in capsys.readouterr().err


def test_strict_exits_1_when_a_rank_does_not_fit(capsys):
    assert main(["estimate", EXAMPLE, "--strict"]) == 0
    assert main(["estimate", EXAMPLE, "--strict", "cluster.gpu_memory_gib=40"]) == 1
    assert main(["estimate", EXAMPLE, "cluster.gpu_memory_gib=40"]) == 0


def test_missing_config_is_one_line(capsys):
    assert main(["estimate"]) == 2
    assert (
        capsys.readouterr().err == "memtune estimate: a config file or --recipe NAME is required: "
        "memtune estimate CONFIG|--recipe NAME [OVERRIDE.yaml ...] [key=value ...]\n"
    )


def test_json_mode_reports_bad_input_as_json(capsys):
    assert main(["estimate", "/no/such/file.yaml", "--json"]) == 2
    out = capsys.readouterr()
    assert json.loads(out.out) == {
        "schema_version": 1,
        "error": {"problems": ["/no/such/file.yaml: no such file"]},
    }
    assert out.err == "memtune estimate: /no/such/file.yaml: no such file\n"


def test_fits_in_json_applies_the_fragmentation_margin_as_the_verdict_does(capsys):
    # rank 0: peak 61.29 + 2% margin + 2.03 outside PyTorch = 64.55 GiB; 64 GiB fits only without the margin
    assert main(["estimate", EXAMPLE, "cluster.gpu_memory_gib=64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "tight"
    assert [(r["fits"], r["verdict"]) for r in data["ranks"]] == [
        (False, "tight"),
        (True, "fits"),
        (True, "fits"),
        (True, "fits"),
    ]
    assert all(r["fits"] == (r["needed_bytes"] <= data["capacity_bytes"]) for r in data["ranks"])


def test_assumptions_name_memory_outside_pytorch_and_the_allocator(capsys):
    assert main(["estimate", EXAMPLE, "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["assumptions"]
    outside = notes.index(
        "outside PyTorch: CUDA context and kernels ~0.6 GiB + ~0.48 GiB per NCCL communicator"
        " (tensor, pipeline, data x context)"
    )
    assert notes[outside + 1].startswith("resume (torch_dist): the checkpoint loads beside the model state")
    assert notes[-1] == "fragmentation margin 2% of the peak (expandable segments on)"
    assert main(["estimate", EXAMPLE, "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["assumptions"][-1] == (
        "fragmentation margin 8% of the peak (expandable segments off)"
    )


def test_cuda_graphs_are_named_outside_pytorch(job_factory):
    job = job_factory(model={"cuda_graph_impl": "transformer_engine"}, env={"NCCL_GRAPH_REGISTER": "0"})
    notes = assumptions(estimate(gate(job)))
    assert (
        "outside PyTorch: CUDA context and kernels ~0.6 GiB + ~0.48 GiB per NCCL communicator"
        " (data x context) + ~1 GiB of instantiated CUDA graphs"
    ) in notes


def test_json_throughput_is_the_step_model_of_the_job_as_configured(capsys):
    from memtune.estimate.render import uncertainty_json
    from memtune.perf.step import predict_step
    from memtune.perf.uncertainty import step_uncertainty

    assert main(["estimate", EXAMPLE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["throughput"]
    d = gate(load_job(EXAMPLE).job).derived
    p = predict_step(d)
    u = step_uncertainty(d)
    assert doc == {
        "step_time_s": p.step_time_s,
        "step_time_uncertainty": uncertainty_json(u),
        "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
        "model_tflops_per_gpu": p.model_tflops_per_gpu,
        "unmeasured": list(p.unmeasured),
        "not_simulated": None,
    }
    assert (doc["step_time_uncertainty"]["relative"], doc["step_time_uncertainty"]["family"]) == (
        u.error,
        "dense",
    )
    # GBS 32 x seq 4096 tokens over 32 GPUs per step
    assert doc["tokens_per_s_per_gpu"] == pytest.approx(32 * 4096 / 32 / doc["step_time_s"])
    assert main(["estimate", EXAMPLE]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Predicted step:"))
    tokens = f"{p.tokens_per_s_per_gpu:,.0f}"
    assert line == (
        f"Predicted step: {p.step_time_s:.3g} s ± {u.error:.0%}, {tokens} tokens/s per GPU, "
        f"{p.model_tflops_per_gpu:.3g} model TFLOP/s per GPU"
    )
    assert len(line) <= 80


def test_a_long_step_is_priced_from_its_repeating_periods(capsys):
    # PP4 x VPP5 chunks x 1,260 microbatches (GBS 2,520 over DP 2) x forward and backward:
    # 50,400 passes, once beyond what estimate would simulate; its steady phase repeats itself
    from memtune.perf.step import predict_step

    assert main(["estimate", EXAMPLE, "--json", "train.global_batch_size=2520"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["num_microbatches"] == 1260 and doc["throughput"]["not_simulated"] is None
    job = load_job(EXAMPLE, ["train.global_batch_size=2520"]).job
    every_pass = predict_step(gate(job).derived, record_events=True)
    assert doc["throughput"]["step_time_s"] == pytest.approx(every_pass.step_time_s, rel=1e-9)


def test_a_step_beyond_the_bound_is_not_simulated_and_memory_is_still_estimated(capsys, monkeypatch):
    monkeypatch.setattr("memtune.perf.step.MAX_ESTIMATE_SIMULATED_OPERATIONS", 100)
    assert main(["estimate", EXAMPLE, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] in ("fits", "tight", "does not fit")
    assert doc["throughput"] == {
        "step_time_s": None,
        "step_time_uncertainty": None,
        "tokens_per_s_per_gpu": None,
        "model_tflops_per_gpu": None,
        "unmeasured": [],
        "not_simulated": "the step has 640 forward and backward passes over its stages and no steady "
        "phase that repeats; the simulation stops at 100 (memtune.limits)",
    }
    assert main(["estimate", EXAMPLE]) == 0
    out = capsys.readouterr().out
    assert "Predicted step: not simulated, the step has 640 forward and backward passes" in out
    assert "Verdict:" in out


@pytest.mark.parametrize("width", [80, 120])
def test_text_fits_the_width_without_trailing_blanks(capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["estimate", EXAMPLE, "--explain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= width and line == line.rstrip() for line in lines)
    assert "pp  layers  mb  weights  grads  optim  activ  trans   peak  other   free" in lines


def test_a_job_short_of_memory_is_pointed_at_fix_with_its_own_words(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    seed = str(ROOT / "examples" / "llama3-70b-sft-fp8.yaml")  # tight: 84.12 of 79.11 GiB
    assert main(["estimate", seed, "train.micro_batch_size=1"]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "the changes that make it fit, cheapest first:",
        f"  memtune fix {seed} train.micro_batch_size=1",
    ]
    assert main(["estimate", EXAMPLE]) == 0  # fits: nothing to point at
    assert "memtune fix" not in capsys.readouterr().out
