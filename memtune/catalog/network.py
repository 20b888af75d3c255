"""The fabric a job's collectives run over: the job's ``cluster.network`` keys, with every unset
key taken from a reference system (``data/networks.yaml``, each figure cited there); and a
node's host memory (``cluster.host_memory_gib``, else the reference system's).

The system is ``cluster.network.system`` when set, else the one whose GPU the job names. A GPU
no reference system carries (H100 NVL, MI300X) gets the node as its NVLink domain at the GPU
catalog's link bandwidth and one 400 Gb/s adapter per GPU (the figures memtune assumed before
networks were declared): ``Network.system`` is then ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from memtune.catalog._data import lookup_key, read_catalog
from memtune.catalog.gpus import get_gpu
from memtune.errors import InputError
from memtune.numbers import echo

if TYPE_CHECKING:  # a type only: config imports the catalog (Derived.network), not the reverse
    from memtune.config.schema import ClusterConfig

# Without a reference system: one adapter per GPU at ConnectX-7's NDR rate (400 Gb/s), and a
# PCIe Gen5 x16 host link (32 GT/s x 16 lanes, 128b/130b encoding: 63 GB/s each way).
FALLBACK_NIC_GBIT_PER_S = 400.0
FALLBACK_HOST_LINK_GB_PER_S = 63.0


@dataclass(frozen=True)
class Network:
    system: str | None  # the reference system unset keys came from; None: the fallback above
    gpus_per_node: int
    gpus_per_nvlink_domain: int
    nvlink_bytes_per_s: float  # one GPU, one direction
    nics_per_node: int
    nic_bytes_per_s: float  # one adapter, one direction
    rail_optimized: bool
    host_link_bytes_per_s: float  # one GPU's line rate to host memory, one direction

    @property
    def nic_bytes_per_s_per_gpu(self) -> float:
        """A GPU's share of its node's adapters when every GPU of the node talks at once."""
        return self.nics_per_node * self.nic_bytes_per_s / self.gpus_per_node


@cache
def _systems() -> tuple[dict[str, Any], ...]:
    return tuple(read_catalog("networks.yaml")["systems"])


def system_names() -> list[str]:
    return [s["name"] for s in _systems()]


def _system(cluster: ClusterConfig) -> dict[str, Any] | None:
    named = cluster.network.system
    if named is not None:
        for s in _systems():
            if lookup_key(s["name"]) == lookup_key(named):
                return s
        raise InputError(f"unknown cluster.network.system {echo(named)}; known: {', '.join(system_names())}")
    gpu = get_gpu(cluster.gpu).name
    return next((s for s in _systems() if gpu in s["gpus"]), None)


def network_of(cluster: ClusterConfig) -> Network:
    """The network in effect: the job's keys over its reference system's."""
    declared = cluster.network
    node = cluster.gpus_per_node
    system = _system(cluster)
    if system is None:
        defaults: dict[str, Any] = {
            "gpus_per_nvlink_domain": None,
            "nvlink_gb_per_s": get_gpu(cluster.gpu).link_gbps / 2,
            "nics_per_node": node,
            "nic_gbit_per_s": FALLBACK_NIC_GBIT_PER_S,
            "rail_optimized": True,
            "host_link_gb_per_s": FALLBACK_HOST_LINK_GB_PER_S,
        }
    else:
        defaults = system

    def pick(key: str) -> Any:
        value = getattr(declared, key)
        return defaults[key] if value is None else value

    domain = pick("gpus_per_nvlink_domain")
    return Network(
        system=None if system is None else system["name"],
        gpus_per_node=node,
        gpus_per_nvlink_domain=node if domain is None else domain,
        nvlink_bytes_per_s=pick("nvlink_gb_per_s") * 1e9,
        nics_per_node=pick("nics_per_node"),
        nic_bytes_per_s=pick("nic_gbit_per_s") * 1e9 / 8,
        rail_optimized=pick("rail_optimized"),
        host_link_bytes_per_s=pick("host_link_gb_per_s") * 1e9,
    )


def host_memory_gib(cluster: ClusterConfig) -> float | None:
    """A node's RAM in GiB: ``cluster.host_memory_gib``, else the reference system's for the job's
    GPU, scaled to ``cluster.gpus_per_node`` GPUs when the job's node differs from the system's
    (its RAM per GPU is what such a node has); None where no reference system carries the GPU."""
    if cluster.host_memory_gib is not None:
        return cluster.host_memory_gib
    system = _system(cluster)
    if system is None:
        return None
    memory = system["host_memory_gib"]
    if isinstance(memory, dict):
        memory = memory.get(get_gpu(cluster.gpu).name, min(memory.values()))
    return float(memory) * cluster.gpus_per_node / float(system["gpus_per_node"])
