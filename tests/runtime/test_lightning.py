"""The monitor as a Lightning callback, in a real (CPU) Lightning training run."""

from __future__ import annotations

import json

import pytest

from memtune.runtime import MemoryMonitor
from memtune.runtime.lightning import lightning_callback
from memtune.units import GiB
from tests.runtime.runtime_fakes import FixedDevice, SeriesStats, step_values

pl = pytest.importorskip("lightning.pytorch")
torch = pytest.importorskip("torch")


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_every_optimizer_step_is_recorded_and_a_resume_is_marked(tmp_path):
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(12, 4), torch.randn(12, 1)), batch_size=4
    )

    def fit(max_epochs: int, ckpt: str | None = None) -> None:
        monitor = MemoryMonitor(
            tmp_path / "mem", stats=SeriesStats([step_values(GiB, GiB, GiB)]), device=FixedDevice(None, None)
        )
        trainer = pl.Trainer(
            max_epochs=max_epochs,
            accelerator="cpu",
            callbacks=[lightning_callback(monitor)],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=tmp_path,
        )
        trainer.fit(Tiny(), data, ckpt_path=ckpt)

    fit(1)  # 3 steps
    (checkpoint,) = (tmp_path / "checkpoints").glob("*.ckpt")
    fit(2, str(checkpoint))  # resumes after step 3, runs 3 more
    records = [
        json.loads(line)
        for line in (tmp_path / "mem" / "memtune-monitor-rank0.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in records if r["kind"] == "step"] == [1, 2, 3, 4, 5, 6]
    assert [(r["event"], r["step"]) for r in records if r["kind"] == "event"] == [("resume", 4)]
