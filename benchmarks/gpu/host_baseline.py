"""Measure the host memory of a data loader worker of a training process (docs/save.md, "Host memory").

Run on the GPU machine (torch and megatron-core importable, a CUDA GPU):

    python3 benchmarks/gpu/host_baseline.py OUT.json

It imports torch and Megatron-Core, starts CUDA as a training process has by the time Megatron
builds its data loaders (after the model), then builds a ``torch.utils.data.DataLoader`` as
Megatron-LM's ``build_pretraining_data_loader`` does (2 persistent workers, pinned batches)
over a memory-mapped token file of the shape Megatron's ``GPTDataset`` reads, draws batches,
and reads each worker's unique set size (the pages only it holds: ``Private_Clean`` +
``Private_Dirty`` of ``/proc/PID/smaps_rollup``) and its proportional set size, beside the
training process's own resident set.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile


def _rollup(pid: int) -> dict[str, int]:
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 3 and parts[-1] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return fields


def main(out: str) -> int:
    import numpy as np
    import torch
    import torch.utils.data as data
    from megatron.core import parallel_state  # noqa: F401  (imported as a training process has it)

    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")  # the CUDA context, as after the model's build
    seq, samples = 4096, 2048
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tokens.bin")
        np.arange(seq * samples, dtype=np.int32).tofile(path)
        tokens = np.memmap(path, dtype=np.int32, mode="r").reshape(samples, seq)

        class Tokens(data.Dataset):
            def __len__(self) -> int:
                return samples

            def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
                return {"tokens": torch.from_numpy(np.array(tokens[index], dtype=np.int64))}

        loader = data.DataLoader(
            Tokens(), batch_size=1, num_workers=2, pin_memory=True, persistent_workers=True
        )
        batches = iter(loader)
        for _ in range(64):
            next(batches)
        workers = [w.pid for w in batches._workers]  # type: ignore[attr-defined]
        result = {
            "trainer": _rollup(os.getpid()),
            "workers": [_rollup(pid) for pid in workers],
            "torch": torch.__version__,
        }
        del batches, loader
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1)
    for worker in result["workers"]:
        unique = worker.get("Private_Clean", 0) + worker.get("Private_Dirty", 0)
        print(f"worker unique {unique / 2**20:.0f} MiB, proportional {worker.get('Pss', 0) / 2**20:.0f} MiB")
    print(f"trainer resident {result['trainer'].get('Rss', 0) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
