"""The GPU catalog: usable memory, peak dense throughput and bandwidths per GPU.

Capacity is what ``cudaMemGetInfo`` reports as total, which is what a job can ever use. Where
no device reading is on record it is derived from the datasheet figure with the reading/datasheet
ratio of the reference GPU (see ``data/gpus.yaml``). A config's ``cluster.gpu_memory_gib``
overrides the catalog capacity for that job (:func:`capacity_bytes`). The catalog reads nothing
from ``memtune.config``, which reads the catalog's presets and recipes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from memtune.catalog._data import lookup_key, read_catalog
from memtune.errors import InputError
from memtune.numbers import echo
from memtune.units import GiB

REFERENCE_GPU = "H200"  # newest GPU with a reading; its reading/datasheet ratio derives the rest


@dataclass(frozen=True)
class PublishedGemms:
    """bf16 GEMM throughput someone published for a GPU without memtune tables: TFLOP/s of square
    (M = N = K) products by their side, and where they were published."""

    tflops_by_side: tuple[tuple[int, float], ...]
    source: str


@dataclass(frozen=True)
class GPU:
    name: str
    aliases: tuple[str, ...]
    memory_bytes: int
    memory_measured: bool  # a device reading, not derived from the datasheet
    memory_note: str
    datasheet_memory_gb: float
    bf16_tflops: float  # dense tensor-core peak
    fp8_tflops: float | None  # None: no fp8 tensor cores
    fp32_tflops: float | None  # plain fp32 (no TF32), the datasheet's; None: not in the datasheet used
    hbm_tbps: float
    link_gbps: float  # NVLink / Infinity Fabric per GPU, all links, both directions
    source: str
    published_bf16_gemms: PublishedGemms | None = None  # measured elsewhere (memtune/perf/kernels.py)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GiB

    @property
    def bf16_flops(self) -> float:
        return self.bf16_tflops * 1e12

    @property
    def fp8_flops(self) -> float | None:
        return None if self.fp8_tflops is None else self.fp8_tflops * 1e12

    @property
    def fp32_flops(self) -> float | None:
        return None if self.fp32_tflops is None else self.fp32_tflops * 1e12


def _published(entry: dict[str, object] | None) -> PublishedGemms | None:
    if entry is None:
        return None
    by_side = entry["tflops_by_side"]
    assert isinstance(by_side, dict), "gpus.yaml: published_bf16_gemms.tflops_by_side is a mapping"
    return PublishedGemms(tuple(sorted((int(k), float(v)) for k, v in by_side.items())), str(entry["source"]))


@cache
def _gpus() -> tuple[GPU, ...]:
    entries = read_catalog("gpus.yaml")["gpus"]
    reference = next(e for e in entries if e["name"] == REFERENCE_GPU)
    usable_fraction = reference["memory_reading_gib"] / reference["datasheet_memory_gb"]
    gpus = []
    for e in entries:
        reading = e.get("memory_reading_gib")
        gib = reading if reading is not None else e["datasheet_memory_gb"] * usable_fraction
        gpus.append(
            GPU(
                name=e["name"],
                aliases=tuple(e.get("aliases", ())),
                memory_bytes=round(gib * GiB),
                memory_measured=reading is not None,
                memory_note=e["memory_note"],
                datasheet_memory_gb=e["datasheet_memory_gb"],
                bf16_tflops=e["bf16_tflops"],
                fp8_tflops=e.get("fp8_tflops"),
                fp32_tflops=e.get("fp32_tflops"),
                hbm_tbps=e["hbm_tbps"],
                link_gbps=e["link_gbps"],
                source=e["source"],
                published_bf16_gemms=_published(e.get("published_bf16_gemms")),
            )
        )
    return tuple(gpus)


def list_gpus() -> list[GPU]:
    return list(_gpus())


def get_gpu(name: str) -> GPU:
    """Find a GPU by name or alias; also accepts ``torch.cuda.get_device_name()`` strings."""
    wanted = lookup_key(name)
    for gpu in _gpus():
        if wanted in {lookup_key(n) for n in (gpu.name, *gpu.aliases)}:
            return gpu
    raise InputError(
        f"unknown GPU {echo(name)}; known: {', '.join(g.name for g in _gpus())} (`memtune gpus` lists aliases)"
    )


def capacity_bytes(gpu: str, gpu_memory_gib: float | None) -> int:
    """Memory one GPU of a job has: its ``cluster.gpu_memory_gib`` if set, else the catalog's for
    its ``cluster.gpu``."""
    if gpu_memory_gib is not None:
        return round(gpu_memory_gib * GiB)
    return get_gpu(gpu).memory_bytes
