"""Catalogs of model presets and GPUs, shipped as YAML under ``data/``.

``memtune models`` and ``memtune gpus`` list them; configs refer to them by name
(``model: {preset: llama3-70b}``, ``cluster: {gpu: H100-80GB}``).
"""

from memtune.catalog.gpus import GPU, capacity_bytes, get_gpu, list_gpus
from memtune.catalog.models import ModelPreset, get_model, list_models

__all__ = ["GPU", "ModelPreset", "capacity_bytes", "get_gpu", "get_model", "list_gpus", "list_models"]
