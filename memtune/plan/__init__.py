"""``memtune plan``: the fastest layouts of a model on a set of GPUs that fit in memory.

``search(base_job)`` enumerates layouts (:mod:`memtune.plan.space`), prunes by arithmetic,
estimates each most-loaded rank with the estimator's cached fast path (:mod:`memtune.plan.fast`),
keeps those that fit, ranks them by the throughput model (:mod:`memtune.perf`) and passes the
shown ones through ``memtune.check.gate``.
"""

from memtune.plan.search import Planned, PlanResult, search

__all__ = ["PlanResult", "Planned", "search"]
