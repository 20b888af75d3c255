"""Throughput model: predicted step time, tokens/s and model TFLOP/s per GPU of a layout.

``predict(checked)`` for one job; ``predict_layout(derived, layout, gpu)`` for the planner,
which predicts many layouts of one architecture. Constants: :mod:`memtune.perf.constants`.
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
