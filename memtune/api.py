"""memtune's Python entry points on the objects a user already has (``docs/api.md``).

``memtune.estimate(config)``, ``memtune.check(config)`` and ``memtune.fix(config)`` take a
Megatron-Bridge ``ConfigContainer``, a Megatron-LM ``argparse.Namespace`` from its own parser, a
dict in any layout memtune reads, or a path, and return the typed results the commands render:
:class:`~memtune.estimate.Estimate`, a list of :class:`~memtune.check.Finding`,
:class:`~memtune.fix.search.FixResult`. Every job passes the same gate as on the command line,
so a config Megatron would refuse raises :class:`~memtune.errors.InputError` with Megatron's
messages. ``overrides`` are the dotted ``section.key=value`` words the commands take; ``gpus``
and ``gpu`` set ``cluster.num_gpus`` and ``cluster.gpu``, which a ConfigContainer does not hold
(Bridge takes the world size from the launcher).
"""

from __future__ import annotations

from collections.abc import Sequence

from memtune import apicheck
from memtune.catalog.gpus import capacity_bytes
from memtune.check import Finding, gate, run_checks
from memtune.config import LoadedJob, load_object
from memtune.errors import ArgumentTypeError
from memtune.estimate import Estimate, EstimateOptions
from memtune.estimate import estimate as estimate_checked
from memtune.fix.search import FixResult
from memtune.limits import MAX_MOE_IMBALANCE

__all__ = ["check", "estimate", "fix", "load"]

MAX_GPUS = 1 << 20


def load(
    config: object, overrides: Sequence[str] = (), *, gpus: int | None = None, gpu: str | None = None
) -> LoadedJob:
    """The job ``config`` describes, with ``overrides`` applied, validated but not checked."""
    words = _words("overrides", overrides)
    if gpus is not None:
        words.append(f"cluster.num_gpus={apicheck.integer('gpus', gpus, 1, MAX_GPUS)}")
    if gpu is not None:
        if not isinstance(gpu, str):
            raise ArgumentTypeError(f"gpu: must be a GPU name (`memtune gpus`), got {type(gpu).__name__}")
        words.append(f"cluster.gpu={gpu}")
    return load_object(config, words)


def estimate(
    config: object,
    overrides: Sequence[str] = (),
    *,
    gpus: int | None = None,
    gpu: str | None = None,
    moe_imbalance: float = 1.0,
) -> Estimate:
    """Peak memory of every pipeline rank, as ``memtune estimate`` computes it."""
    imbalance = apicheck.number("moe_imbalance", moe_imbalance, 1.0, MAX_MOE_IMBALANCE)
    loaded = load(config, overrides, gpus=gpus, gpu=gpu)
    return estimate_checked(gate(loaded.job), EstimateOptions(moe_routing_imbalance=imbalance))


def check(
    config: object,
    overrides: Sequence[str] = (),
    *,
    gpus: int | None = None,
    gpu: str | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
) -> list[Finding]:
    """Every finding of ``memtune check`` (errors included: this does not raise on them)."""
    loaded = load(config, overrides, gpus=gpus, gpu=gpu)
    capacity_bytes(loaded.job.cluster.gpu, loaded.job.cluster.gpu_memory_gib)  # an unknown GPU is refused
    chosen = _words("select", select) if select is not None else None
    return run_checks(loaded.job, chosen, _words("ignore", ignore))


def fix(
    config: object,
    overrides: Sequence[str] = (),
    *,
    gpus: int | None = None,
    gpu: str | None = None,
    oom_log: Sequence[str] = (),
    snapshot: str | None = None,
) -> FixResult:
    """The ranked changes that make the failing rank fit, as ``memtune fix`` finds them; with the
    logs (or a snapshot) of a run that ran out of memory, for the failure they show."""
    from memtune.diagnose import diagnose
    from memtune.diagnose.advice import fixes_for_failure

    loaded = load(config, overrides, gpus=gpus, gpu=gpu)
    logs = _words("oom_log", oom_log)
    verdict = None
    if logs or snapshot is not None:
        shot = str(apicheck.path("snapshot", snapshot)) if snapshot is not None else None
        verdict = diagnose(logs, snapshot=shot, config=loaded).verdict
    return fixes_for_failure(loaded.job, verdict)


def _words(name: str, words: object) -> list[str]:
    if isinstance(words, str) or not isinstance(words, Sequence):
        raise ArgumentTypeError(f"{name}: must be a list of strings, got {type(words).__name__}")
    bad = [w for w in words if not isinstance(w, str)]
    if bad:
        raise ArgumentTypeError(f"{name}: must be a list of strings, got a {type(bad[0]).__name__}")
    return list(words)
