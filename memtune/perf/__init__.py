"""Throughput model: predicted step time, tokens/s and model TFLOP/s per GPU of a layout.

``predict(checked)`` for one job; ``predict_layout(derived, layout, gpu)`` for the planner,
which predicts many layouts of one architecture. ``memtune.perf.step.predict_step(derived)`` is
the step model of a job exactly as configured (measured kernel tables, collectives on the
declared fabric, the simulated schedule) that ``memtune bench plan --accuracy`` scores; the
planner moves onto it with the layout refactor. Constants: :mod:`memtune.perf.constants`.
"""

from memtune.perf.model import (
    ASSUMPTIONS,
    Layout,
    Prediction,
    PredictionMemo,
    layout_of,
    predict,
    predict_layout,
)

__all__ = ["ASSUMPTIONS", "Layout", "Prediction", "PredictionMemo", "layout_of", "predict", "predict_layout"]
