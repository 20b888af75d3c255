"""Does cuDNN's FP8 attention backward take longer because of the data it is given?

    python3 benchmarks/gpu/fp8_attention_data.py OUT.json    # on the GPU machine, cuDNN frontend installed

``fp8_attention.py`` timed cuDNN's FP8 backward 1.46x slower than its bf16 one from 32 heads x
batch up, on random inputs. This times two of its shapes (64 heads of 128 at sequence 4096 and 16
at 8192, GQA 8:1) with the graphs of ``fp8_attention.py`` three times each: on its random
inputs, on zeros, and on sparse small integers (a fifth of the entries in -2..2), bf16 and FP8
alike. A kernel whose time follows its data (scaling, saturation, denormals) would move between
them; results in ``results/fp8-attention-data-h100.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fp8_attention import CudnnAttention

SHAPES = [(1, 64, 8, 4096), (1, 16, 2, 8192)]  # batch, query heads, kv heads, sequence
INPUTS = ("q", "k", "v", "o", "dO")


def _small_integers(torch: Any, t: Any) -> Any:
    values = torch.randint(-2, 3, t.shape, device="cuda").float()
    return (values * (torch.rand(t.shape, device="cuda") < 0.2)).to(t.dtype)


def main() -> None:
    import cudnn
    import torch

    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "cudnn": cudnn.backend_version_string()}
    rows = []
    for shape in SHAPES:
        for fp8 in (False, True):
            attention = CudnnAttention(cudnn, torch, shape, fp8)
            row: dict[str, Any] = {"shape": shape, "fp8": fp8}
            row["random_fwd"], row["random_bwd"] = (
                attention.time(attention.forward),
                attention.time(attention.backward),
            )
            for name in INPUTS:
                attention.data[name].zero_()
            row["zeros_fwd"], row["zeros_bwd"] = (
                attention.time(attention.forward),
                attention.time(attention.backward),
            )
            for name in INPUTS:
                attention.data[name].copy_(_small_integers(torch, attention.data[name]))
            row["smallint_fwd"], row["smallint_bwd"] = (
                attention.time(attention.forward),
                attention.time(attention.backward),
            )
            print(json.dumps(row), flush=True)
            rows.append(row)
    out["rows"] = rows
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
