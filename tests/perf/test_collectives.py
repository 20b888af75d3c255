"""The α-β collective costs against values worked out by hand from NCCL's tuner constants
(src/graph/tuning.cc at 5067397c) on DGX H100's fabric (450 GB/s NVLink per direction, eight
400 Gb/s adapters per node; bus fractions 0.8)."""

from __future__ import annotations

import pytest

from memtune.catalog.network import Network
from memtune.perf.collectives import Group, Op, bus_bandwidth, collective, send_recv

DGX_H100 = Network(
    system="dgx-h100",
    gpus_per_node=8,
    gpus_per_nvlink_domain=8,
    nvlink_bytes_per_s=450e9,
    nics_per_node=8,
    nic_bytes_per_s=50e9,
    rail_optimized=True,
    host_link_bytes_per_s=63e9,
)


def test_large_tp_all_gather_takes_ring_simple() -> None:
    # 7 steps of 3.4 µs NVLink latency on top of 8.4 µs; 360 GB/s bus x 8/7 algorithm bandwidth.
    choice = collective(Op.ALL_GATHER, 2**26, Group(8), DGX_H100, "H100-80GB")
    assert (choice.algorithm, choice.protocol) == ("ring", "Simple")
    assert choice.seconds == pytest.approx((8.4 + 7 * 3.4) * 1e-6 + 2**26 / (360e9 * 8 / 7))


def test_small_tp_all_gather_takes_ll() -> None:
    # LL: 6.6 + 7 x 0.6 µs latency, half the bus bandwidth (180 GB/s) capped at Hopper's 141 GB/s.
    choice = collective(Op.ALL_GATHER, 8192, Group(8), DGX_H100, "H100-80GB")
    assert (choice.algorithm, choice.protocol) == ("ring", "LL")
    assert choice.seconds == pytest.approx((6.6 + 7 * 0.6) * 1e-6 + 8192 / (141e9 * 8 / 7))


def test_one_rank_per_node_uses_its_nic_share() -> None:
    # Stride 8: every member on its own node, each with one 50 GB/s adapter at 80%.
    assert bus_bandwidth(Group(4, stride=8), DGX_H100) == pytest.approx(40e9)
    # Stride 2: four members per node share four of the node's adapters' worth, capped by NVLink.
    assert bus_bandwidth(Group(8, stride=2), DGX_H100) == pytest.approx(4 * 50e9 * 0.8)


def test_large_cross_node_all_reduce_takes_the_ring() -> None:
    # Ring: 6 network steps of 14 µs (tree latency, one rank per node) + 8.4, x 1.4 plateau;
    # bandwidth 40 GB/s x 4/6. Tree: 0.92 x 40 x 0.5 = 18.4 GB/s, slower for 1 GiB.
    choice = collective(Op.ALL_REDUCE, 2**30, Group(4, stride=8), DGX_H100, "H100-80GB")
    assert (choice.algorithm, choice.protocol) == ("ring", "Simple")
    assert choice.seconds == pytest.approx((8.4 + 6 * 14) * 1.4e-6 + 2**30 / (40e9 * 4 / 6))


def test_small_cross_node_all_reduce_takes_the_tree() -> None:
    # Tree LL: 6.8 + 2 x log2(4) x 5 µs; 40 x 0.92 / 3.8 GB/s, x 0.7 correction at 4 KiB, x 0.5.
    choice = collective(Op.ALL_REDUCE, 4096, Group(4, stride=8), DGX_H100, "H100-80GB")
    assert (choice.algorithm, choice.protocol) == ("tree", "LL")
    assert choice.seconds == pytest.approx(26.8e-6 + 4096 / (40e9 * 0.92 / 3.8 * 0.7 * 0.5))


def test_no_spine_rails_double_network_latency() -> None:
    flat = Network(**{**DGX_H100.__dict__, "rail_optimized": False})
    railed = collective(Op.ALL_REDUCE, 4096, Group(4, stride=8), DGX_H100, "H100-80GB").seconds
    spined = collective(Op.ALL_REDUCE, 4096, Group(4, stride=8), flat, "H100-80GB").seconds
    assert spined - railed == pytest.approx(2 * 2 * 5.0e-6)


def test_single_rank_groups_cost_nothing() -> None:
    assert collective(Op.ALL_REDUCE, 2**30, Group(1), DGX_H100, "H100-80GB").seconds == 0.0


def test_send_recv_crosses_the_adapter_between_nodes() -> None:
    assert send_recv(2**20, True, DGX_H100) == pytest.approx(22.4e-6 + 2**20 / 40e9)
    assert send_recv(2**20, False, DGX_H100) == pytest.approx(11.8e-6 + 2**20 / 360e9)
