"""MLPerf Training v6.0 in the Llama 3.1 8B and Llama 2 70B LoRA collections: read from the stored
copy of the fork Richardyu114/training_results_v6.0 at eabf23a (benchmarks/published/layouts/
mlperf.py, STORED). None of NVIDIA's v6.0 submissions of either benchmark could be translated (GB300,
or GB200 whose code the stored copy lacks); these tests pin what the committed files say of them and
the pure readings behind it, and need neither the stored copy nor a mirror."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import yaml

LAYOUTS = Path(__file__).resolve().parents[2] / "benchmarks/published/layouts"

# NVIDIA/benchmarks/llama31_8b/implementations/nemo/config_GB200_256x4x1xtp4pp1cp4_8b.sh at eabf23a,
# the script README-tyche-hsg_ngpu1024_ngc26.04_nemo.md names (its settings lines, as published)
GB200_8B = """\
source $(dirname ${BASH_SOURCE[0]})/config_common.sh
source $(dirname ${BASH_SOURCE[0]})/config_common_cg.sh
source $(dirname ${BASH_SOURCE[0]})/config_common_8b.sh

export MINIBS=1
export MICRO_BATCH_SIZE=1
export TENSOR_MODEL_PARALLEL=4
export SEQ_PARALLEL=True
export PIPELINE_MODEL_PARALLEL=1
export INTERLEAVED_PIPELINE=null
export CONTEXT_PARALLEL=4
export TP_COMM_OVERLAP=True
export BUCKET_SIZE=768000000
export DGXNNODES=256
export DGXNGPU=4
"""


def module(name: str) -> ModuleType:
    """A collector module (they import ``mlperf`` from their own folder)."""
    if str(LAYOUTS) not in sys.path:
        sys.path.insert(0, str(LAYOUTS))
    return importlib.import_module(name)


def header(name: str) -> list[str]:
    lines = (LAYOUTS / name).read_text(encoding="utf-8").splitlines()
    return [line[2:] for line in lines if line.startswith("# ")]


def set_ids(name: str) -> list[str]:
    return [s["id"] for s in yaml.safe_load((LAYOUTS / name).read_text(encoding="utf-8"))["sets"]]


def test_stored_copy_is_named_with_its_commit_not_as_mlcommons() -> None:
    mlperf = module("mlperf")
    root, what = mlperf.STORED["v6.0"]
    assert "Richardyu114/training_results_v6.0 at eabf23a07b2a0c60a289ff871dc3a46fff0d0421" in what
    assert "fork of mlcommons/training_results_v6.0" in what
    assert mlperf.git_dir("v6.0") == root / "mlcommons+training_results_v6.0" / "repo"
    assert mlperf.git_dir("v5.1") == mlperf.MIRRORS / "mlcommons+training_results_v5.1" / "repo"


def test_gb200_8b_launch_script_reads_as_published() -> None:
    # 256 nodes x 4 GB200 = 1,024 GPUs; TP 4 x PP 1 x CP 4 = 16 per replica: DP 64, GBS MINIBS x DP = 64.
    mlperf = module("mlperf")
    env = mlperf.exports(GB200_8B)
    tp, pp, cp = (
        int(env[k]) for k in ("TENSOR_MODEL_PARALLEL", "PIPELINE_MODEL_PARALLEL", "CONTEXT_PARALLEL")
    )
    assert (tp, pp, cp, env["INTERLEAVED_PIPELINE"]) == (4, 1, 4, "null")
    gpus = int(env["DGXNNODES"]) * int(env["DGXNGPU"])
    assert int(env["MINIBS"]) * gpus // (tp * pp * cp) == 64
    assert env["BUCKET_SIZE"] == "768000000"
    llama31 = module("collect_mlperf_llama31")
    sourced = [m.group(1) for line in GB200_8B.splitlines() if (m := llama31.SOURCE_LINE.match(line))]
    assert sourced == ["config_common.sh", "config_common_cg.sh", "config_common_8b.sh"]


def test_v60_system_accelerators() -> None:
    # NVIDIA/systems/*_ngc26.04_nemo.json accelerator_model_name: theia is GB300, tyche-hsg GB200
    llama31 = module("collect_mlperf_llama31")
    assert llama31.gpu_of("NVIDIA Blackwell Ultra GPU (GB300)") is None
    assert llama31.gpu_of("NVIDIA Blackwell GPU (GB200)") == "GB200"
    lora = module("collect_mlperf_lora")
    mlperf = module("mlperf")
    for accelerator, gpu in (
        ("NVIDIA Blackwell Ultra GPU (GB300)", None),
        ("NVIDIA Blackwell GPU (GB200)", "GB200"),
    ):
        sub = mlperf.Submission(
            "v6.0", "llama2_70b_lora", "NVIDIA", "s", {"accelerator_model_name": accelerator}, (), ""
        )
        assert lora.gpu_of(sub) == gpu


def test_llama31_8b_v60_left_out_as_read() -> None:
    lines = header("mlperf-llama31.yaml")
    assert not [i for i in set_ids("mlperf-llama31.yaml") if i.startswith("mlperf/v6.0/")]
    v60 = [line.strip() for line in lines if line.strip().startswith("v6.0 llama31_8b NVIDIA ")]
    assert len(v60) == 4
    gb200 = next(line for line in v60 if "tyche-hsg_ngpu1024_ngc26.04_nemo" in line)
    assert "(NVIDIA Blackwell GPU (GB200), 256x4)" in gb200
    assert "not in the stored copy" in gb200 and "config_common_8b.sh" in gb200
    assert sum("(NVIDIA Blackwell Ultra GPU (GB300)" in line for line in v60) == 3
    assert any("Richardyu114/training_results_v6.0 at eabf23a" in line for line in lines)


def test_llama2_lora_v60_left_out_as_read() -> None:
    lines = header("mlperf-llama2-lora.yaml")
    assert not [i for i in set_ids("mlperf-llama2-lora.yaml") if i.startswith("mlperf/v6.0/")]
    v60 = sorted(line.strip() for line in lines if line.strip().startswith("v6.0 theia_"))
    assert [line.split(":")[0] for line in v60] == [
        "v6.0 theia_ngpu512_ngc26.04_nemo",
        "v6.0 theia_ngpu72_ngc26.04_nemo",
        "v6.0 theia_ngpu8_ngc26.04_nemo",
    ]
    assert all(
        line.endswith("NVIDIA Blackwell Ultra GPU (GB300) is not in memtune's GPU catalog") for line in v60
    )
