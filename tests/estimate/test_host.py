"""Host memory per node (estimate/host.py): every path that takes host memory, against the
node's RAM (cluster.host_memory_gib, else the reference system's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtune.check import gate
from memtune.config import derive, load_job
from memtune.config.changes import Change, with_changes
from memtune.estimate import HOST_VERDICT, estimate
from memtune.estimate.host import DATALOADER_WORKER, DATALOADER_WORKERS, PROCESS
from memtune.units import GiB
from tests.estimate.conftest import make_job

QWEN = Path(__file__).resolve().parents[2] / "examples" / "qwen3-30b-a3b-ep8.yaml"
BASELINE = PROCESS + DATALOADER_WORKERS * DATALOADER_WORKER


def _pow2(nbytes: float) -> int:
    return 1 << (max(round(nbytes), 1) - 1).bit_length()


def test_layerwise_activation_offload_holds_the_offloaded_layers_in_pinned_host_memory():
    """Transformer Engine pins a copy of every tensor an offloaded layer saves; with PP 1 one
    microbatch is on the host at a time. Two of TINY's four layers offloaded: each tensor of the
    layer rounded up to a power of two, twice."""
    offload = {"attention_backend": "flash", "cpu_offloading": True, "cpu_offloading_num_layers": 2}
    est = estimate(gate(make_job(model=offload)))
    rank = est.ranks[0]
    from memtune.estimate import activations as act
    from memtune.estimate.core import layer_saved
    from memtune.estimate.flavour import flavour_of

    d = est.derived
    layer = layer_saved(d, act.dims_of(d), flavour_of(d), 0, est.options)
    expected = 2 * sum(_pow2(nbytes) for nbytes in layer.tensors.values())
    assert rank.activation_host_pinned == expected > 0
    host = est.host(rank)
    assert host.parts["activation offload"] == expected
    assert est.host_bytes_per_node == 2 * (BASELINE + expected)  # 2 GPUs on one node


def test_the_issues_layerwise_offload_job_reports_its_host_memory():
    """memtune estimate examples/qwen3-30b-a3b-ep8.yaml model.seq_length=16384
    model.cpu_offloading=true model.cpu_offloading_num_layers=47 ...: reported as 0 GiB before."""
    changes = [
        Change("model.seq_length", 16384),
        Change("model.cpu_offloading", True),
        Change("model.cpu_offloading_num_layers", 47),
        Change("model.recompute_granularity", None),
        Change("model.recompute_modules", None),
    ]
    est = estimate(gate(with_changes(load_job(QWEN).job, changes)))
    rank = est.ranks[0]
    # 47 layers' saved activations of one microbatch, more than 90 GiB per rank, rounded up
    assert rank.activation_host_pinned > 90 * GiB
    assert est.host_bytes_per_node == 8 * round(BASELINE + rank.activation_host_pinned)
    assert est.host_bytes_per_node < 2048 * GiB and est.host_fits  # a DGX H100 node has 2 TB


def test_host_memory_beyond_the_nodes_ram_is_its_own_verdict():
    offload = {"attention_backend": "flash", "cpu_offloading": True, "cpu_offloading_num_layers": 2}
    job = make_job(model=offload)
    small = with_changes(job, [Change("cluster.host_memory_gib", 1.0)])
    est = estimate(gate(small))
    assert not est.host_fits
    assert est.verdict() == HOST_VERDICT and est.judged_phase() == "host memory"
    assert not est.fits(est.ranks[0])
    assert estimate(gate(job)).verdict() == "fits"


@pytest.mark.parametrize(
    "gpu, per_node, expected_gib",
    [
        ("A100-40GB", 8, 1024),
        ("A100-80GB", 8, 2048),
        ("H100-80GB", 8, 2048),
        ("B200", 8, 2048),
        ("GB200", 4, 960),
    ],
)
def test_node_ram_comes_from_the_reference_system(gpu, per_node, expected_gib):
    job = make_job(cluster={"gpu": gpu, "gpus_per_node": per_node, "num_gpus": 2})
    assert derive(job).host_memory_bytes_per_node == expected_gib * GiB


def test_node_ram_is_scaled_to_the_jobs_node_and_overridable():
    job = make_job(cluster={"gpu": "H100-80GB", "gpus_per_node": 4, "num_gpus": 2})
    assert derive(job).host_memory_bytes_per_node == 1024 * GiB  # half a DGX's GPUs, half its RAM
    job = make_job(cluster={"gpu": "H100-80GB", "host_memory_gib": 512, "num_gpus": 2})
    assert derive(job).host_memory_bytes_per_node == 512 * GiB
    unknown = make_job(cluster={"gpu": "MI300X", "num_gpus": 2})
    assert derive(unknown).host_memory_bytes_per_node is None
    assert estimate(gate(unknown)).host_fits  # unknown RAM: not judged


def test_optimizer_offload_counts_the_host_optimizers_state():
    offload = {
        "use_distributed_optimizer": True,
        "optimizer_cpu_offload": True,
        "optimizer_offload_fraction": 1.0,
        "use_precision_aware_optimizer": True,
    }
    est = estimate(gate(make_job(optimizer=offload, ddp={"use_distributed_optimizer": True})))
    rank = est.ranks[0]
    assert rank.state.host > 0
    assert est.host(rank).parts["optimizer offload"] == rank.state.host
