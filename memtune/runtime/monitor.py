"""``MemoryMonitor``: what every rank really uses, step by step, beside the estimate.

Usage in any training loop (Megatron-LM, Megatron-Bridge, plain PyTorch)::

    with MemoryMonitor("runs/mem", config="job.yaml", gather_every=10) as monitor:
        for iteration in range(start, end):
            train_step(...)
            monitor.step(iteration)

torch is imported when the monitor starts, not when this module is imported.
"""

from __future__ import annotations

import io
import json
import os
import time
import warnings
from pathlib import Path
from typing import IO, Any

from memtune import apicheck
from memtune.errors import ArgumentError, InputError, MissingDependencyError
from memtune.limits import MAX_RECORD_BYTES, MAX_STEP
from memtune.outfile import open_stream
from memtune.runtime.records import SCHEMA_VERSION, file_name
from memtune.runtime.stats import CudaAllocatorStats, DeviceSource, NvmlDevice, StatsSource
from memtune.units import human

OUTPUT_VARIABLE = "MEMTUNE_RUNTIME_DIR"  # `memtune run` points the monitor and the OOM hook here
DEFAULT_OUTPUT = "memtune-monitor"
DEFAULT_GATHER_EVERY = 10
DEFAULT_OVER_ESTIMATE_MARGIN = 0.10
MAX_OVER_ESTIMATE_MARGIN = 100.0  # 10,000% over the estimate: any larger margin never warns


class MemoryWarning(UserWarning):
    """The monitor saw something worth acting on before it becomes an OOM."""


def default_output() -> str:
    return os.environ.get(OUTPUT_VARIABLE) or DEFAULT_OUTPUT


def _distributed() -> Any:
    """``torch.distributed`` when a process group is up, else None."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class MemoryMonitor:
    """Per-step, per-rank memory records (JSONL), gathered to rank 0 every ``gather_every`` steps.

    ``config`` (a path memtune reads) or ``estimate_bytes`` (this rank's expected allocator
    peak) enable the estimate columns and the over-estimate warning. ``tensorboard_dir`` adds
    TensorBoard scalars. ``stats`` and ``device`` replace the CUDA allocator and NVML sources.
    ``start_step`` is the step before the first one recorded (the iteration a resumed job
    continues from).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str] | None = None,
        *,
        gather_every: int = DEFAULT_GATHER_EVERY,
        config: str | os.PathLike[str] | None = None,
        estimate_bytes: int | None = None,
        over_estimate_margin: float = DEFAULT_OVER_ESTIMATE_MARGIN,
        tensorboard_dir: str | os.PathLike[str] | None = None,
        stats: StatsSource | None = None,
        device: DeviceSource | None = None,
        group: Any = None,
        start_step: int = 0,
    ) -> None:
        apicheck.integer("gather_every", gather_every, 1, MAX_STEP)
        apicheck.number("over_estimate_margin", over_estimate_margin, 0.0, MAX_OVER_ESTIMATE_MARGIN)
        apicheck.integer("start_step", start_step, 0, MAX_STEP)
        if estimate_bytes is not None:
            apicheck.integer("estimate_bytes", estimate_bytes, 0, MAX_RECORD_BYTES)
        for name, value in (("out_dir", out_dir), ("tensorboard_dir", tensorboard_dir)):
            if value is not None:
                apicheck.directory(name, value)
        if config is not None:
            apicheck.path("config", config)
        if stats is not None:
            apicheck.source("stats", stats, "a stats source", "sample", "reset_peaks")
        if device is not None:
            apicheck.source("device", device, "a device source", "sample")
        apicheck.process_group("group", group)
        if config is not None and estimate_bytes is not None:
            raise ArgumentError("give config or estimate_bytes, not both")
        self.out_dir = Path(out_dir if out_dir is not None else default_output())
        self.gather_every = gather_every
        self.config = config
        self.estimate_bytes = estimate_bytes
        self.over_estimate_margin = over_estimate_margin
        self.tensorboard_dir = tensorboard_dir
        self._stats = stats
        self._device = device
        self._group = group
        self.rank = 0
        self.world_size = 1
        self.pp_rank: int | None = None
        self.summaries: list[dict[str, Any]] = []  # rank 0: the gathered per-rank summaries, one per gather
        self._file: IO[str] | None = None
        self._tensorboard: Any = None
        self._step = start_step
        self._last_time = 0.0
        self._last_retries: int | None = None
        self._retries_warned = False
        self._over_estimate_warned = False

    # -- life cycle -------------------------------------------------------------------------

    def __enter__(self) -> MemoryMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Open this rank's file (appending), write the start record and reset the peaks."""
        import torch

        if self._file is not None:
            raise RuntimeError("MemoryMonitor.start(): already started")
        dist = _distributed()
        if dist is not None:
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        notes: list[str] = []
        config_dump = self._read_config()
        if self._stats is None:
            self._stats = CudaAllocatorStats()
        if self._device is None:
            index = torch.cuda.current_device() if torch.cuda.is_available() else None
            self._device = NvmlDevice(index)
        notes += self._stats.notes + self._device.notes
        if self.tensorboard_dir is not None:
            self._tensorboard = _tensorboard_writer(Path(self.tensorboard_dir) / f"rank{self.rank}")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        records = self.out_dir / file_name(self.rank)
        try:  # appended to, never through a link or into a device (memtune/outfile.py)
            self._file = io.TextIOWrapper(open_stream(records, replace=False, append=True), encoding="utf-8")
        except OSError as exc:
            raise InputError(
                f"{records}: cannot write the monitor's records ({exc.strerror or exc})"
            ) from None
        from memtune.runtime.allocator import allocator_settings_in_effect

        self._write(
            "start",
            world_size=self.world_size,
            pp_rank=self.pp_rank,
            torch=torch.__version__,
            allocator_settings=allocator_settings_in_effect(),
            cuda=torch.cuda.is_available(),
            nvml=self._device.sample()["device_used_bytes"] is not None,
            notes=notes,
            config=config_dump,
            estimate_bytes=self.estimate_bytes,
        )
        if self.rank == 0:
            for note in notes:
                warnings.warn(f"memtune monitor: {note}", MemoryWarning, stacklevel=3)
        self._stats.reset_peaks()
        self._last_time = time.perf_counter()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None

    # -- per step ---------------------------------------------------------------------------

    def step(self, step: int | None = None) -> dict[str, Any]:
        """Record the step that just ended (``step``: its number, default the previous plus one),
        reset the peaks, and gather to rank 0 when the step is a multiple of ``gather_every``.
        Every rank must call it the same number of times (the gather is a collective)."""
        if self._file is None or self._stats is None or self._device is None:
            raise RuntimeError(
                "MemoryMonitor.step() before start(): use `with MemoryMonitor(...)` or call start()"
            )
        if step is not None:
            apicheck.integer("step", step, 0, MAX_STEP)
        now = time.perf_counter()
        self._step = self._step + 1 if step is None else step
        values: dict[str, Any] = self._stats.sample()
        values.update(self._device.sample())
        if values["reserved_bytes"] is not None and values["allocated_bytes"] is not None:
            values["cached_bytes"] = values["reserved_bytes"] - values["allocated_bytes"]
        else:
            values["cached_bytes"] = None
        values["estimate_bytes"] = self.estimate_bytes
        peak = values["peak_allocated_bytes"]
        values["estimate_difference_bytes"] = (
            peak - self.estimate_bytes if peak is not None and self.estimate_bytes is not None else None
        )
        record = self._write("step", step=self._step, step_seconds=now - self._last_time, **values)
        self._check(values)
        if self._tensorboard is not None:
            self._scalars(values)
        if self._step % self.gather_every == 0:
            self._gather(values)
        self._stats.reset_peaks()
        self._last_time = time.perf_counter()
        return record

    def mark_resume(self, step: int | None = None) -> None:
        """Mark that training resumed from a checkpoint; ``step`` is the first step after it
        (default: the next one). ``memtune report`` compares the steps after the marker with the
        steady state before it."""
        if step is not None:
            apicheck.integer("step", step, 0, MAX_STEP)
        self._write("event", event="resume", step=self._step + 1 if step is None else step)

    # -- internals --------------------------------------------------------------------------

    def _read_config(self) -> dict[str, Any] | None:
        if self.config is None:
            return None
        from memtune.check import gate
        from memtune.config import load_job
        from memtune.estimate import estimate

        loaded = load_job(str(self.config), [])
        est = estimate(gate(loaded.job))
        expected = est.derived.world_size
        if _distributed() is not None and expected != self.world_size:
            raise InputError(
                f"{self.config}: the config describes world size {expected}, this run has {self.world_size}"
            )
        rank_estimate = est.rank(self.rank)
        self.pp_rank = rank_estimate.pp_rank
        self.estimate_bytes = rank_estimate.peak_bytes
        return loaded.job.model_dump(mode="json", exclude_defaults=True)

    def _write(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = {"schema_version": SCHEMA_VERSION, "kind": kind, "rank": self.rank, "time": time.time()}
        record.update(fields)
        assert self._file is not None
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        return record

    def _warn(self, check: str, message: str) -> None:
        self._write("event", event="warning", check=check, step=self._step, message=message)
        warnings.warn(f"memtune monitor: {message}", MemoryWarning, stacklevel=3)

    def _check(self, values: dict[str, Any]) -> None:
        retries = values["num_alloc_retries"]
        if retries is not None:
            if self._last_retries is not None and retries > self._last_retries and not self._retries_warned:
                self._retries_warned = True
                self._warn(
                    "alloc_retries",
                    f"rank {self.rank} step {self._step}: num_alloc_retries rose from {self._last_retries} "
                    f"to {retries}: the allocator had to free its cache and retry cudaMalloc "
                    "(fragmentation or memory pressure; an OOM may follow)",
                )
            self._last_retries = retries
        peak, expected = values["peak_allocated_bytes"], self.estimate_bytes
        if (
            peak is not None
            and expected is not None
            and peak > expected * (1 + self.over_estimate_margin)
            and not self._over_estimate_warned
        ):
            self._over_estimate_warned = True
            self._warn(
                "over_estimate",
                f"rank {self.rank} step {self._step}: peak allocated {human(peak)} exceeds the estimate "
                f"{human(expected)} by {100 * (peak / expected - 1):.0f}% (margin {100 * self.over_estimate_margin:.0f}%)",
            )

    def _gather(self, values: dict[str, Any]) -> None:
        summary = {
            "rank": self.rank,
            "peak_allocated_bytes": values["peak_allocated_bytes"],
            "peak_reserved_bytes": values["peak_reserved_bytes"],
            "num_alloc_retries": values["num_alloc_retries"],
        }
        dist = _distributed()
        gathered: list[Any]
        if dist is None:
            gathered = [summary]
        else:
            gathered = [None] * dist.get_world_size(self._group)
            dist.all_gather_object(gathered, summary, group=self._group)
        if self.rank != 0:
            return
        self.summaries.append({"step": self._step, "ranks": gathered})
        peaks = {g["rank"]: g["peak_allocated_bytes"] for g in gathered}
        known = {r: p for r, p in peaks.items() if p is not None}
        most_loaded = max(known, key=lambda r: known[r]) if known else None
        skew = max(known.values()) - min(known.values()) if known else None
        self._write(
            "gather",
            step=self._step,
            peaks=peaks,
            reserved={g["rank"]: g["peak_reserved_bytes"] for g in gathered},
            most_loaded_rank=most_loaded,
            skew_bytes=skew,
        )

    def _scalars(self, values: dict[str, Any]) -> None:
        for name in ("peak_allocated_bytes", "peak_reserved_bytes", "cached_bytes", "device_used_bytes"):
            if values[name] is not None:
                self._tensorboard.add_scalar(
                    f"memory/{name[: -len('_bytes')]}_gib", values[name] / 2**30, self._step
                )
        if values["num_alloc_retries"] is not None:
            self._tensorboard.add_scalar("memory/num_alloc_retries", values["num_alloc_retries"], self._step)


def _tensorboard_writer(path: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise MissingDependencyError(
            "tensorboard_dir needs the tensorboard package: pip install 'memtune[tensorboard]'"
        ) from None
    return SummaryWriter(str(path))
