"""cluster.network: declared keys over the reference system's defaults."""

from __future__ import annotations

import pytest

from memtune.catalog.network import network_of, system_names
from memtune.config.schema import ClusterConfig, NetworkConfig
from memtune.errors import InputError


def test_h100_takes_dgx_h100_fabric() -> None:
    net = network_of(ClusterConfig(gpu="H100-80GB"))
    assert net.system == "dgx-h100"
    assert (net.gpus_per_nvlink_domain, net.nics_per_node) == (8, 8)
    assert net.nvlink_bytes_per_s == 450e9
    assert net.nic_bytes_per_s_per_gpu == 50e9  # 400 Gb/s


def test_gb200_domain_is_the_rack_not_the_tray() -> None:
    net = network_of(ClusterConfig(gpu="GB200", gpus_per_node=4))
    assert net.gpus_per_nvlink_domain == 72
    assert net.nic_bytes_per_s_per_gpu == 4 * 50e9 / 4


def test_declared_keys_override_the_system() -> None:
    cluster = ClusterConfig(
        gpu="H100-80GB", network=NetworkConfig(nics_per_node=4, nic_gbit_per_s=200, rail_optimized=False)
    )
    net = network_of(cluster)
    assert net.nic_bytes_per_s_per_gpu == 4 * 25e9 / 8
    assert net.rail_optimized is False
    assert net.nvlink_bytes_per_s == 450e9  # still the system's


def test_a_gpu_without_a_system_gets_one_400g_adapter_per_gpu() -> None:
    net = network_of(ClusterConfig(gpu="MI300X"))
    assert net.system is None
    assert net.nic_bytes_per_s_per_gpu == 50e9


def test_unknown_system_is_one_clear_line() -> None:
    with pytest.raises(InputError, match="unknown cluster.network.system"):
        network_of(ClusterConfig(network=NetworkConfig(system="dgx-z9")))
    assert "gb200-nvl72" in system_names()
