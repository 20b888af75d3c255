"""Throughput model: predicted step time, tokens/s and model TFLOP/s per GPU of a layout.

``predict(checked)`` for one job; ``predict_derived(derived, gpu, memo)`` for the planner, which
predicts many layouts of one job (``Derived.with_knobs``). ``memtune.perf.step.predict_step(derived)``
is the step model of a job exactly as configured (measured kernel tables, collectives on the
declared fabric, the simulated schedule) that ``memtune bench plan --accuracy`` scores.
Constants: :mod:`memtune.perf.constants`.
"""

from memtune.perf.model import ASSUMPTIONS, Prediction, PredictionMemo, predict, predict_derived

__all__ = ["ASSUMPTIONS", "Prediction", "PredictionMemo", "predict", "predict_derived"]
