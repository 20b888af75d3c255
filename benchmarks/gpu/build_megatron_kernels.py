"""Build Megatron's optional CUDA extensions from an apex source tree, for `memtune measure`.

Megatron-Core imports four extensions that ship with apex builds: the fused scale-mask-softmax
kernels (``scaled_upper_triang_masked_softmax_cuda`` for causal attention, ``scaled_masked_softmax_cuda``,
which also answers ``get_batch_per_block``, and ``scaled_softmax_cuda``) and the fused
weight-gradient GEMM (``fused_weight_gradient_mlp_cuda``, for ``gradient_accumulation_fusion``).
This script compiles them with ``torch.utils.cpp_extension`` (one process per extension, in
parallel) and leaves each ``NAME.so`` in OUT_DIR; put OUT_DIR on ``PYTHONPATH`` and import torch
before megatron to use them.

    python3 benchmarks/gpu/build_megatron_kernels.py APEX_SOURCE_DIR OUT_DIR [--arch 9.0]

APEX_SOURCE_DIR needs ``csrc/type_shim.h`` and the ``csrc/megatron/`` sources named below; apex's
code stays outside this repository.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

NVCC_FLAGS = [
    "-O3",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
]
EXTENSIONS: dict[str, tuple[list[str], list[str], list[str]]] = {
    # name: (sources under csrc/megatron, extra nvcc flags, extra linker flags)
    "scaled_upper_triang_masked_softmax_cuda": (
        ["scaled_upper_triang_masked_softmax.cpp", "scaled_upper_triang_masked_softmax_cuda.cu"],
        [],
        [],
    ),
    "scaled_masked_softmax_cuda": (["scaled_masked_softmax.cpp", "scaled_masked_softmax_cuda.cu"], [], []),
    "scaled_softmax_cuda": (["scaled_softmax.cpp", "scaled_softmax_cuda.cu"], [], []),
    "fused_weight_gradient_mlp_cuda": (
        [
            "fused_weight_gradient_dense.cpp",
            "fused_weight_gradient_dense_cuda.cu",
            "fused_weight_gradient_dense_16bit_prec_cuda.cu",
        ],
        ["--use_fast_math"],
        ["-lcublas"],
    ),
}


def build_one(name: str, apex: str, out: str, arch: str) -> tuple[str, float]:
    from torch.utils.cpp_extension import load

    sources, nvcc_extra, ldflags = EXTENSIONS[name]
    csrc = Path(apex) / "csrc"
    build_dir = Path(tempfile.gettempdir()) / "megatron_kernels_build" / name
    build_dir.mkdir(parents=True, exist_ok=True)
    code = arch.replace(".", "")
    started = time.monotonic()
    load(
        name=name,
        sources=[str(csrc / "megatron" / s) for s in sources],
        extra_include_paths=[str(csrc)],
        extra_cflags=["-O3"],
        extra_cuda_cflags=NVCC_FLAGS + nvcc_extra + [f"-gencode=arch=compute_{code},code=sm_{code}"],
        extra_ldflags=ldflags,
        build_directory=str(build_dir),
        verbose=False,
    )
    shutil.copy2(build_dir / f"{name}.so", Path(out) / f"{name}.so")
    return name, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("apex", help="apex source tree (with csrc/)")
    parser.add_argument("out", help="directory for the built NAME.so files")
    parser.add_argument("--arch", default="9.0", help="GPU compute capability to build for (default 9.0)")
    parser.add_argument("--only", help="comma-separated extension names (default: all four)")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(EXTENSIONS)
    unknown = sorted(set(names) - set(EXTENSIONS))
    if unknown:
        print(f"--only {','.join(unknown)}: unknown; choose from {', '.join(EXTENSIONS)}", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=len(names)) as pool:
        futures = [pool.submit(build_one, n, args.apex, args.out, args.arch) for n in names]
        for future in futures:
            name, seconds = future.result()
            print(f"built {name} in {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
