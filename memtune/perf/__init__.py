"""Throughput model: the step of a training layout, priced and simulated.

``memtune.perf.step.predict_step(derived)`` prices a job exactly as configured (measured kernel
tables, collectives on the declared fabric, the iteration simulated in Megatron-Core's order);
``throughput_of`` does so within a bounded time beside a memory estimate, and ``StepPricer``
reuses prices across the many layouts ``memtune plan`` searches, which it prunes with
``memtune.perf.simulate.step_bound``, a lower bound on the same step. Constants:
:mod:`memtune.perf.constants`.
"""
