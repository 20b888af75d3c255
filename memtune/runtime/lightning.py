"""The memory monitor as a PyTorch Lightning callback.

``Trainer(callbacks=[lightning_callback(MemoryMonitor("memlog"))])``: the monitor starts with
training, records every optimizer step (Lightning's ``global_step``), marks a resume when a
checkpoint is loaded, and closes when training ends. Lightning is imported only when the
callback is built, so memtune needs it only if you use it.
"""

from __future__ import annotations

from typing import Any

from memtune.errors import MissingDependencyError
from memtune.runtime.monitor import MemoryMonitor


def lightning_callback(monitor: MemoryMonitor) -> Any:
    """A ``lightning.pytorch.Callback`` driving ``monitor``."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        raise MissingDependencyError(
            "lightning_callback needs PyTorch Lightning (pip install lightning)"
        ) from None

    class MemoryMonitorCallback(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.monitor = monitor
            self._resumed = False

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.monitor.start()
            if self._resumed:
                self.monitor.mark_resume(trainer.global_step + 1)

        def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
            self._resumed = True

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            self.monitor.step(trainer.global_step)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.monitor.close()

    return MemoryMonitorCallback()
