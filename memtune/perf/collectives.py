"""Time of one collective on a declared fabric: an α-β cost per NCCL algorithm and protocol,
taking the cheapest as NCCL's tuner does.

NCCL (``src/graph/tuning.cc``, NVIDIA/nccl at 5067397c) prices every (algorithm, protocol) pair
as ``latency + bytes / bandwidth`` and runs the cheapest. This module keeps that structure and
NCCL's own latency table, with two simplifications: the bus bandwidth is the fabric's (the
slower of NVLink and the group's share of the node's adapters, at the fractions nccl-tests
reach, ``memtune/perf/constants.py``) instead of NCCL's per-channel topology search, and the
per-channel caps and NVLS/CollNet/PAT algorithms are left out (ring and tree only).

A group is described by its size and the rank stride between its members (Megatron's rank
order puts TP innermost: a TP group has stride 1, a DP group stride TP x CP), which says how
many of its members share an NVLink domain.

An all-to-all (:func:`all_to_all`; MoE's dispatch and combine in ``memtune/perf/moe.py``, CP's
head exchange in ``memtune/perf/layer.py``) sends each member its share straight over NVLink or
the rank's own adapter, with no ring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from memtune.catalog.network import Network
from memtune.perf import constants as K

US = 1e-6


class Op(Enum):
    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"


# NCCL's tuner constants (src/graph/tuning.cc at 5067397c, ncclTunerConstantsDefaults), in µs,
# indexed by protocol (LL, LL128, Simple).
PROTOCOLS = ("LL", "LL128", "Simple")
BASE_LATENCY_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
NVLINK_LATENCY_US = {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)}
NET_LATENCY_US = {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)}
# getNetOverhead() on x86 Intel (1 µs), tripled for Simple: the floor of an intra-node step
# once a ring crosses nodes.
NET_OVERHEAD_US = 1.0
# llMaxBws (GB/s) by GPU generation for 1, 2 and more nodes: the LL protocol's ceiling.
LL_MAX_GB_PER_S = {
    "ampere": (87.7, 22.5, 19.0),
    "hopper": (141.0, 45.0, 35.0),
    "blackwell": (282.0, 90.0, 70.0),
}
# treeCorrectionFactor for all-reduce by protocol, indexed by log2(bytes / 64) from 0 to 23.
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
           1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9,
              0.9, 0.9, 0.9, 1.0, 1.0, 1.0),
    "Simple": (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8,
               0.7, 0.7, 0.8, 0.9, 0.9, 0.9),
}  # fmt: skip


def generation(gpu_name: str) -> str:
    """The GPU generation NCCL's LL ceiling is indexed by."""
    name = gpu_name.upper()
    if name.startswith("A100"):
        return "ampere"
    if name.startswith(("B", "GB")):
        return "blackwell"
    return "hopper"


@dataclass(frozen=True)
class Group:
    """``size`` ranks, consecutive members ``stride`` global ranks apart."""

    size: int
    stride: int = 1

    def per_domain(self, network: Network) -> int:
        """Members that share one NVLink domain."""
        return max(1, min(self.size, network.gpus_per_nvlink_domain // self.stride))

    def domains(self, network: Network) -> int:
        return math.ceil(self.size / self.per_domain(network))


@dataclass(frozen=True)
class Choice:
    algorithm: str
    protocol: str
    seconds: float


def bus_bandwidth(group: Group, network: Network) -> float:
    """Bytes/s of bus bandwidth a ring of ``group`` reaches: NVLink inside one domain; across
    domains the slower of NVLink and the adapters this group's members of a node share (every
    GPU of the node runs its own group at the same time, so each gets its node's share)."""
    nvlink = network.nvlink_bytes_per_s * K.NVLINK_BUS_FRACTION
    if group.domains(network) == 1:
        return nvlink
    local = min(group.per_domain(network), network.gpus_per_node)
    nic = local * network.nic_bytes_per_s_per_gpu * K.INTER_NODE_BUS_FRACTION
    return min(nvlink, nic)


def _latency_us(op: Op, algorithm: str, protocol: int, n: int, nodes: int, rail_optimized: bool) -> float:
    base = BASE_LATENCY_US[algorithm][protocol]
    intra = NVLINK_LATENCY_US[algorithm][protocol]
    # One rank per node: NCCL charges the tree's network latency (tuning.cc, "ppn == 1").
    inter = NET_LATENCY_US["tree" if n == nodes else algorithm][protocol]
    if not rail_optimized:
        # A fabric without rails crosses a spine switch on every inter-node hop: one more
        # network latency per step.
        inter *= 2
    if algorithm == "ring":
        steps = 2 * (n - 1) if op is Op.ALL_REDUCE else n - 1
        inter_steps = 0 if nodes == 1 else (2 * (nodes - 1) if op is Op.ALL_REDUCE else nodes - 1)
        if nodes > 1:
            intra = max(intra, NET_OVERHEAD_US * (3 if PROTOCOLS[protocol] == "Simple" else 1))
        return base + (steps - inter_steps) * intra + inter_steps * inter
    per_node = n // nodes
    return base + 2 * ((per_node - 1) * intra + int(math.log2(nodes)) * inter)


def _bandwidth(
    op: Op, algorithm: str, protocol: str, n: int, nodes: int, bus: float, ll_max: float, nbytes: float
) -> float:
    """Algorithm bandwidth in bytes/s (NCCL's busBw refinements, then bus → algorithm)."""
    if algorithm == "ring":
        if protocol == "LL":
            bus = min(ll_max, bus * 0.5)
        elif protocol == "LL128":
            bus *= 0.92
        steps = 2 * (n - 1) if op is Op.ALL_REDUCE else n - 1
        return bus * n / steps
    bus *= 0.92
    if protocol == "LL":
        bus = min(bus / 3.8, ll_max)
    elif protocol == "LL128":
        bus *= 7 / 9 if nodes == 1 else 120 / 128
    log_size = int(math.log2(max(nbytes, 64) / 64))
    if log_size < 23:
        bus *= TREE_CORRECTION[protocol][log_size]
    return bus * 0.5


def collective(op: Op, nbytes: float, group: Group, network: Network, gpu_name: str) -> Choice:
    """The cheapest (algorithm, protocol) for ``op`` over ``nbytes`` (the full tensor: the
    gathered output of an all-gather, the input of a reduce-scatter), and its time."""
    n = group.size
    if n <= 1 or nbytes <= 0:
        return Choice("none", "none", 0.0)
    nodes = group.domains(network)
    bus = bus_bandwidth(group, network)
    ll_max = LL_MAX_GB_PER_S[generation(gpu_name)][min(nodes, 3) - 1] * 1e9
    algorithms = ("ring", "tree") if op is Op.ALL_REDUCE else ("ring",)
    best = Choice("none", "none", math.inf)
    for algorithm in algorithms:
        for p, protocol in enumerate(PROTOCOLS):
            latency = _latency_us(op, algorithm, p, n, nodes, network.rail_optimized) * US
            if algorithm == "ring" and protocol == "Simple" and op is Op.ALL_REDUCE and nodes > 1:
                latency *= 1.4  # "plateau effect of ring" on sm80 and newer (ncclTopoGetAlgoTime)
            seconds = latency + nbytes / _bandwidth(op, algorithm, protocol, n, nodes, bus, ll_max, nbytes)
            if seconds < best.seconds:
                best = Choice(algorithm, protocol, seconds)
    return best


def pipeline_crosses_domain(stage: int, stages: int, stride: int, network: Network) -> bool:
    """Whether pipeline stage ``stage`` and the next one (the first, after the last: the next
    virtual chunk) sit in different NVLink domains, stages ``stride`` global ranks apart."""
    here, there = stage * stride, (stage + 1) % stages * stride
    return here // network.gpus_per_nvlink_domain != there // network.gpus_per_nvlink_domain


def send_recv(nbytes: float, crosses_domain: bool, network: Network) -> float:
    """One point-to-point transfer (pipeline stages): NCCL's ring/Simple step latency and the
    link it crosses."""
    if nbytes <= 0:
        return 0.0
    p = PROTOCOLS.index("Simple")
    if crosses_domain:
        bw = network.nic_bytes_per_s * K.INTER_NODE_BUS_FRACTION
        latency = BASE_LATENCY_US["ring"][p] + NET_LATENCY_US["ring"][p]
    else:
        bw = network.nvlink_bytes_per_s * K.NVLINK_BUS_FRACTION
        latency = BASE_LATENCY_US["ring"][p] + NVLINK_LATENCY_US["ring"][p]
    return latency * US + nbytes / bw


def exchange_seconds(nvlink_bytes: float, nvlink_rate: float, nic_bytes: float, nic_rate: float) -> float:
    """A rank's direct sends to many peers at once (all-to-all, DeepEP's kernels): NCCL's
    ring/Simple step latency (the network's where any bytes leave the NVLink domain) and the
    slower of its NVLink and adapter traffic at the rates given."""
    p = PROTOCOLS.index("Simple")
    latency = BASE_LATENCY_US["ring"][p] + (NET_LATENCY_US if nic_bytes else NVLINK_LATENCY_US)["ring"][p]
    return latency * US + max(nvlink_bytes / nvlink_rate, nic_bytes / nic_rate if nic_bytes else 0.0)


def all_to_all(nbytes: float, group: Group, network: Network) -> float:
    """NCCL's all-to-all of ``nbytes`` a rank holds, an equal share for each member of ``group``
    (its own stays): the shares of members in its NVLink domain over NVLink, the rest over its
    own adapter, at the rates an all-to-all reaches (``ALL_TO_ALL_*_FRACTION``)."""
    n = group.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    per_domain = group.per_domain(network)
    return exchange_seconds(
        nbytes * (per_domain - 1) / n,
        network.nvlink_bytes_per_s * K.ALL_TO_ALL_NVLINK_FRACTION,
        nbytes * (n - per_domain) / n,
        network.nic_bytes_per_s_per_gpu * K.ALL_TO_ALL_INTER_NODE_FRACTION,
    )
