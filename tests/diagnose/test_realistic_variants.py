"""Realistic log variants of the patterns real issue trackers contain (docs/allocator.md M1-M7).

Each case is a whole log excerpt composed the way the tools print it (torchrun/DeepSpeed/Slurm/NCCL
prefixes, wrapped or interleaved lines, prose around a pasted message). The expected label follows
the decision rules of docs/allocator.md C1-C9, not the classifier's output; the comment on each case gives the rule
(R = requested, U = reserved but unallocated, F = free, T = total).
"""

import pytest

from memtune.diagnose import detectors, diagnose_text

HINT_22 = (
    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
HINT_29 = HINT_22.replace("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
HINT_OLD = (
    "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  "
    "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
)


def wrapped(text: str, width: int, prefix: str = "") -> str:
    """Hard-wrap the way a terminal or a fixed-width log collector does: cut anywhere, no hyphen."""
    return "\n".join(prefix + text[i : i + width] for i in range(0, len(text), width))


def traceback(prefix: str, frames: list[tuple[str, int, str, str]]) -> str:
    lines = [f"{prefix}Traceback (most recent call last):"]
    for path, lineno, fn, code in frames:
        lines += [f'{prefix}  File "{path}", line {lineno}, in {fn}', f"{prefix}    {code}"]
    return "\n".join(lines)


MEGATRON_FRAMES = [
    ("/workspace/Megatron-LM/pretrain_gpt.py", 334, "<module>", "pretrain("),
    (
        "/workspace/Megatron-LM/megatron/training/training.py",
        842,
        "pretrain",
        "iteration, num_floating_point_operations_so_far = train(",
    ),
    ("/workspace/Megatron-LM/megatron/training/training.py", 1589, "train", "train_step(forward_step_func,"),
    (
        "/workspace/Megatron-LM/megatron/core/pipeline_parallel/schedules.py",
        493,
        "forward_backward_no_pipelining",
        "backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config)",
    ),
]
ITER = (
    "[2025-03-02 10:{m:02d}:11] iteration {i:>8}/  500000 | consumed samples: {c:>10} | elapsed time per iteration "
    "(ms): 4211.3 | learning rate: 2.999E-04 | global batch size:  1024 | lm loss: 2.871E+00 | loss scale: 1.0 | "
    "grad norm: 0.412 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)


def iterations(n: int, start: int = 1) -> str:
    return "\n".join(ITER.format(m=i % 60, i=i, c=i * 1024) for i in range(start, start + n))


# ---------------------------------------------------------------------------------------------
# capacity
# ---------------------------------------------------------------------------------------------

# Two unprefixed ranks writing to one stderr: the class name is split ("torch.cuda" / ".OutOfMemoryError")
# and the two messages run into each other. 1.x numbers: U = 21.53 − 21.11 = 0.42 GiB < R 1.96 GiB and
# U + F = 1.47 GiB < R → rule 3, capacity.
INTERLEAVED_OLD_CAPACITY = """\
  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/linear.py", line 114, in forward
    return F.linear(input, self.weight, self.bias)
  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/linear.py", line 114, in forward
torch.cuda    return F.linear(input, self.weight, self.bias)
.OutOfMemoryErrortorch.cuda: .CUDA out of memory. Tried to allocate 1.96 GiB (GPU 1; 23.69 GiB total capacity; \
21.11 GiB already allocated; 1.05 GiB free; 21.53 GiB reserved in total by PyTorch) If reserved memory is >> allocated \
memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF
OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB (GPU 0; 23.69 GiB total capacity; 21.09 GiB already \
allocated; 1.07 GiB free; 21.51 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try \
setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF
"""

# torchrun prefixes only the traceback; Megatron's own lines carry none. U 1.31 GiB < R 3.50 GiB and
# U + F = 2.50 GiB < R → rule 3, capacity (U is also under 2 % of T: noise, rule 7).
MSG_RANK3 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 3 has a total capacity of "
    "79.10 GiB of which 1.19 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in "
    "use. Of the allocated memory 75.02 GiB is allocated by PyTorch, and 1.31 GiB is reserved by PyTorch but "
    "unallocated. " + HINT_22
)
RANK_PREFIX_ONLY_ON_TRACEBACK = "\n".join(
    [
        "using world size: 8, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 1",
        iterations(3),
        traceback("[rank3]: ", MEGATRON_FRAMES),
        "[rank3]: " + MSG_RANK3,
        "W0302 10:04:12.118000 2210 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 2212 closing signal SIGTERM",
        "E0302 10:04:13.301000 2210 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 3 "
        "(pid: 2215) of binary: /usr/bin/python",
    ]
)

# A Slurm output file wrapped at 100 columns, torch 2.9 hint. U 0.38 GiB, R 2.25 GiB, F 0.61 GiB → capacity.
MSG_29_CAPACITY = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.25 GiB. GPU 0 has a total capacity of "
    "139.81 GiB of which 624.00 MiB is free. Including non-PyTorch memory, this process has 139.19 GiB "
    "memory in use. Of the allocated memory 135.87 GiB is allocated by PyTorch, and 389.54 MiB is "
    "reserved by PyTorch but unallocated. " + HINT_29
)
WRAPPED_SLURM_CAPACITY = iterations(2) + "\n" + wrapped(MSG_29_CAPACITY, 100) + "\n"

# OOM while loading the optimizer state on resume (Megatron-LM#1509 kind): the duplicate FP32 moments are a
# transient peak. U 412 MiB, R 3.82 GiB, F 2.91 GiB → U + F < R → capacity.
RESUME_OPTIMIZER_LOAD = "\n".join(
    [
        " loading distributed checkpoint from /checkpoints/llama3-8b at iteration 12000",
        traceback(
            "[rank0]: ",
            [
                (
                    "/workspace/Megatron-LM/megatron/training/training.py",
                    712,
                    "pretrain",
                    "iteration, num_floating_point_operations_so_far = load_checkpoint(",
                ),
                (
                    "/workspace/Megatron-LM/megatron/training/checkpointing.py",
                    1302,
                    "load_checkpoint",
                    "optimizer.load_state_dict(state_dict['optimizer'])",
                ),
                (
                    "/workspace/Megatron-LM/megatron/core/optimizer/distrib_optimizer.py",
                    1105,
                    "load_state_dict",
                    "tensors = {",
                ),
                (
                    "/workspace/Megatron-LM/megatron/core/optimizer/distrib_optimizer.py",
                    1106,
                    "<dictcomp>",
                    "'exp_avg': init_shard(),",
                ),
            ],
        ),
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.82 GiB. GPU 0 has a total capacity of "
        "79.10 GiB of which 2.91 GiB is free. Including non-PyTorch memory, this process has 76.18 GiB memory in use. Of "
        "the allocated memory 74.88 GiB is allocated by PyTorch, and 412.37 MiB is reserved by PyTorch but unallocated. "
        + HINT_22,
    ]
)

# Container PID mismatch, the process's own usage printed as "Process N has" (LlamaFactory#7532 kind). T − F − A − U
# = 0.67 GiB, so nothing is held outside this allocator; U 0.93 GiB < R 8.00 GiB, U + F < R → capacity.
CONTAINER_PID_OWN_PROCESS = (
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of "
    "79.33 GiB of which 1.23 GiB is free. Process 2923 has 78.09 GiB memory in use. Of the allocated memory 76.50 GiB "
    "is allocated by PyTorch, and 954.12 MiB is reserved by PyTorch but unallocated. " + HINT_22 + "\n"
    "  0%|          | 0/1170 [00:07<?, ?it/s]\n"
)

# RL colocation: the vLLM engine (another process) holds 40 GiB. U 1.21 GiB < R 2.50 GiB, U + F = 1.51 GiB < R →
# rule 3, capacity; attribution: the co-tenant.
MSG_COTENANT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of "
    "79.11 GiB of which 312.00 MiB is free. Process 48213 has 40.12 GiB memory in use. Including "
    "non-PyTorch memory, this process has 38.66 GiB memory in use. Of the allocated memory 35.90 GiB is "
    "allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated. " + HINT_22
)
RL_COLOCATED_VLLM = "\n".join(
    [
        "INFO 05-11 09:12:40 [gpu_worker.py:227] Available KV cache memory: 31.42 GiB",
        "INFO 05-11 09:12:41 [kv_cache_utils.py:716] GPU KV cache size: 257,392 tokens",
        "(TrainActor pid=48190) Traceback (most recent call last):",
        '(TrainActor pid=48190)   File "/opt/skyrl/trainer/worker.py", line 388, in training_step',
        "(TrainActor pid=48190)     loss.backward()",
        "(TrainActor pid=48190) " + MSG_COTENANT,
    ]
)

# cuBLAS handle creation on a full GPU (older stacks: NOT_INITIALIZED for the same cause, docs/allocator.md M7) → capacity.
CUBLAS_NOT_INITIALIZED = "\n".join(
    [
        "{'loss': 1.9312, 'learning_rate': 1.98e-05, 'epoch': 0.02}",
        traceback(
            "",
            [
                (
                    "/usr/local/lib/python3.10/dist-packages/transformers/trainer.py",
                    3238,
                    "training_step",
                    "self.accelerator.backward(loss, **kwargs)",
                ),
                (
                    "/usr/local/lib/python3.10/dist-packages/torch/autograd/__init__.py",
                    251,
                    "backward",
                    "Variable._execution_engine.run_backward(",
                ),
            ],
        ),
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`",
    ]
)

# Triton kernel launch on a full GPU (Megatron-Bridge PR#3767 kind) → capacity.
TRITON_LAUNCH = "\n".join(
    [
        traceback(
            "[rank5]: ",
            [
                (
                    "/usr/local/lib/python3.12/dist-packages/triton/runtime/jit.py",
                    757,
                    "run",
                    "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function,",
                ),
                (
                    "/usr/local/lib/python3.12/dist-packages/triton/backends/nvidia/driver.py",
                    560,
                    "__call__",
                    "self.launch(gridX, gridY, gridZ, stream, function, *args)",
                ),
            ],
        ),
        "[rank5]: RuntimeError: Triton Error [CUDA]: out of memory",
    ]
)

# ≤1.4 "cached" format: U = 10.83 − 10.65 = 0.18 GiB < R 98 MiB? no, U ≥ R, but U is 1.6 % of T (rule 7: noise)
# and under 512 MiB; the GPU is simply full → capacity.
OLD_CACHED_CAPACITY = (
    "RuntimeError: CUDA out of memory. Tried to allocate 98.00 MiB (GPU 0; 11.17 GiB total capacity; 10.65 GiB already "
    "allocated; 3.81 MiB free; 10.83 GiB cached)\n"
)

# 1.5–1.9 "reserved in total" format without the hint: U = 14.93 − 14.71 = 0.22 GiB < R 1.50 GiB → capacity.
OLD_RESERVED_CAPACITY = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 211, in <module>\n'
    "    outputs = model(**batch)\n"
    "RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.78 GiB total capacity; 14.71 GiB already "
    "allocated; 95.19 MiB free; 14.93 GiB reserved in total by PyTorch)\n"
)

# 20 GiB of CUDA-graph private pools inside "allocated"; U 1 GiB < R 8 GiB, U + F < R → rule 3 capacity, rule 5:
# the graph pools are PyTorch's own memory, held for the graphs' lifetime (TE#2543 is labelled capacity).
PRIVATE_POOLS_CAPACITY = "[rank9]: " + (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 1 has a total capacity of 139.81 GiB "
    "of which 1.02 GiB is free. Including non-PyTorch memory, this process has 138.78 GiB memory in use. Of the "
    "allocated memory 136.50 GiB is allocated by PyTorch, with 20.00 GiB allocated in private pools (e.g., CUDA "
    "Graphs), and 1.00 GiB is reserved by PyTorch but unallocated. " + HINT_22
)

# A GitHub issue body: prose that mentions fragmentation and an expandable-segments attempt, plus one pasted
# message whose numbers say capacity (U 20 MiB, R 4 GiB, F 0.5 GiB). The numbers outrank the prose.
ISSUE_PROSE_AND_MESSAGE = """\
### Describe the bug

Fine-tuning Qwen2.5-32B with ZeRO-3 on 8xH100 runs for ~200 steps and then OOMs during the eval loop. I first thought
this was fragmentation, because memory grows slowly, so I exported expandable segments as the error suggests, but it
still crashes at the same step.

```
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 2 has a total capacity of 79.10 GiB of \
which 512.06 MiB is free. Including non-PyTorch memory, this process has 78.58 GiB memory in use. Of the allocated \
memory 77.71 GiB is allocated by PyTorch, and 20.33 MiB is reserved by PyTorch but unallocated. If reserved but \
unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
```

### Environment
- torch 2.5.1, transformers 4.46.0, deepspeed 0.15.4
"""

# Rule 4: a tiny request (2 MiB) with nothing free and nothing cached: the GPU is full, the failing op incidental.
TINY_REQUEST_FULL_GPU = "[rank1]: " + (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 1 has a total capacity of 79.10 GiB "
    "of which 1.06 MiB is free. Including non-PyTorch memory, this process has 79.09 GiB memory in use. Of the "
    "allocated memory 78.02 GiB is allocated by PyTorch, and 13.98 MiB is reserved by PyTorch but unallocated. "
    + HINT_22
)

# DeepSpeed kills the other workers after one died of a CUDA OOM (return code 1, not −9): still capacity.
DEEPSPEED_KILLS_AFTER_CUDA_OOM = "\n".join(
    [
        "[rank0]: " + MSG_RANK3.replace("GPU 3", "GPU 0"),
        "[2024-05-10 08:12:31,552] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 2212",
        "[2024-05-10 08:12:31,553] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 2213",
        "[2024-05-10 08:12:33,811] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
        "'--local_rank=0', '--deepspeed', 'ds_config.json'] exits with return code = 1",
    ]
)

# Windows WDDM: "allocated" exceeds the total (MMed-RAG#38 kind); U 0.31 GiB < R 2 GiB, F 0 → capacity.
WINDOWS_ALLOCATED_ABOVE_TOTAL = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacty of 8.00 GiB "
    "of which 0 bytes is free. Of the allocated memory 22.44 GiB is allocated by PyTorch, and 318.52 MiB is reserved by "
    "PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid "
    "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
)

# ---------------------------------------------------------------------------------------------
# fragmentation
# ---------------------------------------------------------------------------------------------

# Interleaved ranks, torch 2.1 ("capacty"), the class name split over two lines; the own process shown as
# "Process N has" (container). U 2.22 GiB ≥ R 1.03 GiB → rule 1, fragmentation.
INTERLEAVED_21_FRAGMENTATION = """\
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
torch.cuda
.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.03 GiB. GPU 2 has a total capacty of 23.65 GiB of which \
401.06 MiB is free. Process 1784 has 23.25 GiB memory in use. Of the allocated memory 20.57 GiB is allocated by \
PyTorch, and 2.22 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting \
max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF
  0%|          | 3/4680 [00:21<9:12:10,  7.08s/it]
"""

# torch 2.9.1 with only PYTORCH_ALLOC_CONF set: silently not applied (pytorch#183387), the hint is printed regardless.
# U 11.50 GiB ≥ R 4.00 GiB → rule 1, fragmentation (the setting was not in effect).
ALLOC_CONF_291_NOT_APPLIED = "\n".join(
    [
        "+ export PYTORCH_ALLOC_CONF=expandable_segments:True",
        "[W1120 14:44:07.101109672 AllocatorConfig.cpp:28] Warning: PYTORCH_CUDA_ALLOC_CONF is deprecated, use PYTORCH_ALLOC_CONF instead",
        "torch version: 2.9.1+cu128",
        iterations(2),
        "[rank6]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 6 has a total capacity of "
        "139.81 GiB of which 2.12 GiB is free. Including non-PyTorch memory, this process has 137.68 GiB memory in use. Of "
        "the allocated memory 124.83 GiB is allocated by PyTorch, and 11.50 GiB is reserved by PyTorch but unallocated. "
        + HINT_29,
    ]
)

# ROCm build that cannot do expandable segments: the setting is ignored. HIP message, U 29.61 GiB ≥ R 2 GiB → rule 1.
ROCM_UNSUPPORTED_EXPANDABLE = "\n".join(
    [
        "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True",
        "/opt/conda/lib/python3.10/site-packages/torch/cuda/__init__.py:843: UserWarning: expandable_segments not supported "
        "on this platform (Triggered internally at /pytorch/c10/hip/HIPAllocatorConfig.h:40.)",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 191.98 GiB of "
        "which 1.23 GiB is free. Of the allocated memory 160.50 GiB is allocated by PyTorch, and 29.61 GiB is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/hip.html#environment-variables)",
    ]
)

# 1.5–1.9 format: U = 30.11 − 21.87 = 8.24 GiB ≫ R 3.13 GiB → C1 (old-format arithmetic, docs/allocator.md C1).
OLD_RESERVED_FRAGMENTATION = (
    "RuntimeError: CUDA out of memory. Tried to allocate 3.13 GiB (GPU 3; 31.75 GiB total capacity; 21.87 GiB already "
    "allocated; 611.50 MiB free; 30.11 GiB reserved in total by PyTorch)\n"
)

# ≤1.4 "cached" format: U = 14.86 − 9.02 = 5.84 GiB ≥ R 1.22 GiB → rule 1.
OLD_CACHED_FRAGMENTATION = (
    "RuntimeError: CUDA out of memory. Tried to allocate 1.22 GiB (GPU 0; 15.90 GiB total capacity; 9.02 GiB already "
    "allocated; 231.88 MiB free; 14.86 GiB cached)\n"
)

# Container PID mismatch with "this process has 0 bytes", rank-prefixed and wrapped at 120 columns per line.
# U 4.02 GiB ≥ R 3.00 GiB → rule 1 (ms-swift#5943 kind).
MSG_ZERO_BYTES = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 4 has a total capacity of "
    "79.11 GiB of which 1.87 GiB is free. Including non-PyTorch memory, this process has 0 bytes memory "
    "in use. Of the allocated memory 51.38 GiB is allocated by PyTorch, and 4.02 GiB is reserved by "
    "PyTorch but unallocated. " + HINT_22
)
CONTAINER_ZERO_BYTES_WRAPPED = wrapped(MSG_ZERO_BYTES, 120, "[rank12]: ") + "\n"

# Fragmentation-assisted (rule 2): U 3.90 GiB < R 6.00 GiB ≤ U + F = 6.40 GiB.
FRAGMENTATION_ASSISTED = "[rank0]: " + (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. GPU 0 has a total capacity of 79.10 GiB of "
    "which 2.50 GiB is free. Including non-PyTorch memory, this process has 76.58 GiB memory in use. Of the allocated "
    "memory 71.68 GiB is allocated by PyTorch, and 3.90 GiB is reserved by PyTorch but unallocated. "
    + HINT_22
)

# A full memory_summary() pasted after the OOM: 20207 MiB non-releasable (inactive split) of 78420 MiB reserved.
MEMORY_SUMMARY_TABLE = """\
|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 1            |        cudaMalloc retries: 3         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |  58213 MiB |  58213 MiB |   9871 GiB |   9814 GiB |
|       from large pool |  58090 MiB |  58090 MiB |   9855 GiB |   9798 GiB |
|       from small pool |    123 MiB |    140 MiB |     16 GiB |     16 GiB |
|---------------------------------------------------------------------------|
| Active memory         |  58213 MiB |  58213 MiB |   9871 GiB |   9814 GiB |
|---------------------------------------------------------------------------|
| Requested memory      |  58101 MiB |  58101 MiB |   9866 GiB |   9809 GiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |  78420 MiB |  78420 MiB |  90112 MiB |  11692 MiB |
|---------------------------------------------------------------------------|
| Non-releasable memory |  20207 MiB |  21370 MiB |   8121 GiB |   8101 GiB |
|---------------------------------------------------------------------------|
"""

# ---------------------------------------------------------------------------------------------
# NCCL (outside PyTorch's allocator)
# ---------------------------------------------------------------------------------------------

# The Python error says "internal error"; only the NCCL WARN lines show the OOM. Peers only see the socket
# closing and the watchdog (docs/allocator.md M7: scan NCCL WARN lines).
NCCL_INTERNAL_ERROR_PEERS = "\n".join(
    [
        "gpu-node-07:88121:88342 [2] NCCL INFO Channel 12/0 : 2[2] -> 3[3] via P2P/CUMEM",
        "gpu-node-07:88121:88342 [2] include/alloc.h:125 NCCL WARN Cuda failure 'out of memory'",
        "gpu-node-07:88121:88342 [2] include/alloc.h:132 NCCL WARN Failed to CUDA calloc 10485760 bytes",
        "gpu-node-07:88121:88342 [2] NCCL INFO transport/p2p.cc:220 -> 1",
        "[rank2]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3356, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5",
        "[rank2]: ncclInternalError: Internal check failed.",
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version 2.21.5",
        "[rank3]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "[rank3]: Last error:",
        "[rank3]: socketProgress: Connection closed by remote peer gpu-node-07<52311>",
        "[rank1]:[E1128 07:41:12.556021981 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600011 milliseconds before timing out.",
    ]
)

# "unhandled cuda error" at communicator init; the cause is in the Python error's "Last error" block.
NCCL_UNHANDLED_CUDA_ERROR = "\n".join(
    [
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.28.9",
        "[rank0]: ncclUnhandledCudaError: Call to CUDA function failed.",
        "[rank0]: Last error:",
        "[rank0]: Cuda failure 'out of memory'",
    ]
)

# Older NCCL form with the error number and the async calloc, then the Python error on the same rank.
NCCL_CALLOC_ASYNC = "\n".join(
    [
        "h100-12:3301:3459 [5] alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'",
        "h100-12:3301:3459 [5] alloc.h:206 NCCL WARN Failed to CUDA calloc async 24 bytes",
        "h100-12:3301:3459 [5] NCCL INFO init.cc:1536 -> 1",
        "[rank5]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
    ]
)

# ---------------------------------------------------------------------------------------------
# host memory
# ---------------------------------------------------------------------------------------------

DEEPSPEED_MINUS_9 = "\n".join(
    [
        "[2024-02-01 11:03:27,114] [INFO] [utils.py:802:see_memory_usage] CPU Virtual Memory:  used = 481.2 GB, percent = 95.5%",
        "[2024-02-01 11:03:58,902] [INFO] [launch.py:316:sigkill_handler] Killing subprocess 90412",
        "[2024-02-01 11:03:58,903] [INFO] [launch.py:316:sigkill_handler] Killing subprocess 90413",
        "[2024-02-01 11:04:01,377] [ERROR] [launch.py:322:sigkill_handler] ['/usr/bin/python3', '-u', 'finetune.py', "
        "'--local_rank=3', '--deepspeed', 'ds_z3_offload.json'] exits with return code = -9",
    ]
)

DATALOADER_WORKER_KILLED = "\n".join(
    [
        traceback(
            "",
            [
                (
                    "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py",
                    1243,
                    "_try_get_data",
                    "data = self._data_queue.get(timeout=timeout)",
                ),
                (
                    "/usr/local/lib/python3.10/dist-packages/torch/utils/data/_utils/signal_handling.py",
                    73,
                    "handler",
                    "_error_if_any_worker_fails()",
                ),
            ],
        ),
        "RuntimeError: DataLoader worker (pid 28731) is killed by signal: Killed. ",
    ]
)

SLURM_OOM_KILL = "\n".join(
    [
        iterations(2),
        "srun: error: gpu-a100-031: task 3: Killed",
        "srun: Terminating StepId=1873342.0",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1873342.batch. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.",
    ]
)

TORCHRUN_MINUS_9 = """\
E1129 03:12:44.120000 140091 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 1 (pid: 140093) of binary: /usr/bin/python
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
========================================================
train.py FAILED
--------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
--------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-11-29_03:12:44
  host      : node-3
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 140093)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 140093
========================================================
"""

# ---------------------------------------------------------------------------------------------
# other: raw CUDA errors outside the allocator, not-an-OOM
# ---------------------------------------------------------------------------------------------

# CUDA-graph instantiation memory is outside PyTorch's allocator (vllm#19186 kind).
GRAPH_CAPTURE_END = "\n".join(
    [
        traceback(
            "",
            [
                (
                    "/usr/local/lib/python3.12/dist-packages/torch/cuda/graphs.py",
                    186,
                    "__exit__",
                    "self.cuda_graph.capture_end()",
                ),
                (
                    "/usr/local/lib/python3.12/dist-packages/torch/cuda/graphs.py",
                    84,
                    "capture_end",
                    "super().capture_end()",
                ),
            ],
        ),
        "torch.AcceleratorError: CUDA error: out of memory",
        "Search for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
        "for more information.",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ]
)

TRITON_SHARED_MEMORY = "\n".join(
    [
        "[rank0]: torch._inductor.exc.InductorError: RuntimeError: No valid triton configs. OutOfResources: out of resource: "
        "shared memory, Required: 262144, Hardware limit: 232448. Reducing block sizes or `num_stages` may help.",
        "[rank0]: Set TORHCDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug to PyTorch).",
    ]
)

GARBAGE_SIZE = "\n".join(
    [
        traceback(
            "[rank1]: ",
            [
                (
                    "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py",
                    2948,
                    "all_gather_object",
                    "object_list[i] = _tensor_to_object(tensor, tensor_size, group)",
                ),
            ],
        ),
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.",
    ]
)


CASES = [
    # (id: expected label, one-line reason), text, label
    ("interleaved-1x-capacity", INTERLEAVED_OLD_CAPACITY, "capacity"),
    ("rank-prefix-only-on-traceback", RANK_PREFIX_ONLY_ON_TRACEBACK, "capacity"),
    ("slurm-wrapped-2.9-capacity", WRAPPED_SLURM_CAPACITY, "capacity"),
    ("resume-optimizer-load", RESUME_OPTIMIZER_LOAD, "capacity"),
    ("container-pid-own-process", CONTAINER_PID_OWN_PROCESS, "capacity"),
    ("rl-colocated-vllm-cotenant", RL_COLOCATED_VLLM, "capacity"),
    ("cublas-not-initialized", CUBLAS_NOT_INITIALIZED, "capacity"),
    ("triton-launch-oom", TRITON_LAUNCH, "capacity"),
    ("1.4-cached-small-U", OLD_CACHED_CAPACITY, "capacity"),
    ("1.5-reserved-small-U", OLD_RESERVED_CAPACITY, "capacity"),
    ("private-pools-graphs", PRIVATE_POOLS_CAPACITY, "capacity"),
    ("issue-prose-plus-message", ISSUE_PROSE_AND_MESSAGE, "capacity"),
    ("tiny-request-full-gpu", TINY_REQUEST_FULL_GPU, "capacity"),
    ("deepspeed-kills-after-cuda-oom", DEEPSPEED_KILLS_AFTER_CUDA_OOM, "capacity"),
    ("windows-allocated-above-total", WINDOWS_ALLOCATED_ABOVE_TOTAL, "capacity"),
    ("interleaved-2.1-fragmentation", INTERLEAVED_21_FRAGMENTATION, "fragmentation"),
    ("alloc-conf-2.9.1-not-applied", ALLOC_CONF_291_NOT_APPLIED, "fragmentation"),
    ("rocm-expandable-unsupported", ROCM_UNSUPPORTED_EXPANDABLE, "fragmentation"),
    ("1.5-reserved-large-U", OLD_RESERVED_FRAGMENTATION, "fragmentation"),
    ("1.4-cached-large-U", OLD_CACHED_FRAGMENTATION, "fragmentation"),
    ("container-zero-bytes-wrapped", CONTAINER_ZERO_BYTES_WRAPPED, "fragmentation"),
    ("fragmentation-assisted", FRAGMENTATION_ASSISTED, "fragmentation"),
    ("memory-summary-non-releasable", MEMORY_SUMMARY_TABLE, "fragmentation"),
    ("nccl-internal-error-peers", NCCL_INTERNAL_ERROR_PEERS, "outside_pytorch"),
    ("nccl-unhandled-cuda-error", NCCL_UNHANDLED_CUDA_ERROR, "outside_pytorch"),
    ("nccl-calloc-async", NCCL_CALLOC_ASYNC, "outside_pytorch"),
    ("deepspeed-minus-9", DEEPSPEED_MINUS_9, "host_oom"),
    ("dataloader-worker-killed", DATALOADER_WORKER_KILLED, "host_oom"),
    ("slurm-oom-kill", SLURM_OOM_KILL, "host_oom"),
    ("torchrun-minus-9", TORCHRUN_MINUS_9, "host_oom"),
    ("graph-capture-end-driver-oom", GRAPH_CAPTURE_END, "outside_pytorch"),
    ("triton-shared-memory", TRITON_SHARED_MEMORY, "not_oom"),
    ("garbage-size", GARBAGE_SIZE, "not_oom"),
]


@pytest.mark.parametrize("text, label", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_realistic_log_is_labelled_by_the_rules(text, label):
    d = diagnose_text(text)
    assert d.verdict.label == label, d.verdict.reasons


@pytest.mark.parametrize("text", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_every_deciding_line_passes_the_prefilter(text):
    d = diagnose_text(text)
    for rank in d.verdict.ranks:
        line = text.splitlines()[rank.root.failure.where.line - 1].encode()
        assert any(t in line for t in detectors.TRIGGERS)


# --- the reasoning, not only the label -----------------------------------------------------------


def _numbers(text):
    return diagnose_text(text).verdict.numbers


def test_split_class_name_still_yields_the_numbers():
    n = _numbers(INTERLEAVED_21_FRAGMENTATION)
    assert (n.requested, n.device, n.format) == (round(1.03 * (1 << 30)), 2, "2.1")
    assert n.unallocated == round(2.22 * (1 << 30))


def test_wrapped_rank_prefixed_message_parses_whole():
    n = _numbers(CONTAINER_ZERO_BYTES_WRAPPED)
    assert n.requested == 3 << 30 and n.unallocated == round(4.02 * (1 << 30)) and n.device == 4
    assert n.this_process == 0 and n.nvml_unreliable


def test_cotenant_is_named_in_the_reasons_and_fixed_first():
    d = diagnose_text(RL_COLOCATED_VLLM)
    assert any("other processes 40.12 GiB" in r for r in d.verdict.reasons)
    assert d.fixes[0].title == "Free the GPU from other processes"


def test_own_process_shown_as_other_process_is_not_a_cotenant():
    d = diagnose_text(CONTAINER_PID_OWN_PROCESS)
    assert not any("other processes" in r for r in d.verdict.reasons)


def test_private_pools_are_named_and_graphs_fix_offered():
    d = diagnose_text(PRIVATE_POOLS_CAPACITY)
    assert any("20.00 GiB of the 136.50 GiB allocated sit in private pools" in r for r in d.verdict.reasons)
    assert d.fixes[0].title == "Narrow or drop CUDA graphs"


def test_alloc_conf_on_291_is_known_not_applied():
    d = diagnose_text(ALLOC_CONF_291_NOT_APPLIED)
    assert d.verdict.expandable.on is False
    assert "PYTORCH_ALLOC_CONF" in d.verdict.expandable.source and "2.9.1" in d.verdict.expandable.source


def test_alloc_conf_on_211_is_applied():
    text = ALLOC_CONF_291_NOT_APPLIED.replace("2.9.1+cu128", "2.11.0+cu130")
    d = diagnose_text(text)
    assert d.verdict.expandable.on is True and d.verdict.label == "capacity"


def test_old_variable_name_on_291_is_applied():
    text = ALLOC_CONF_291_NOT_APPLIED.replace("export PYTORCH_ALLOC_CONF", "export PYTORCH_CUDA_ALLOC_CONF")
    assert diagnose_text(text).verdict.expandable.on is True


def test_rocm_variable_and_unsupported_warning():
    d = diagnose_text(ROCM_UNSUPPORTED_EXPANDABLE)
    assert d.verdict.expandable.on is False and "not supported" in d.verdict.expandable.source


def test_a_hint_wrapped_onto_its_own_line_is_not_a_setting():
    # a collector that wraps at word boundaries can start a line with the hint's variable assignment
    cut = MSG_RANK3.index("PYTORCH_CUDA_ALLOC_CONF=")
    text = MSG_RANK3[:cut].rstrip() + "\n" + MSG_RANK3[cut:]
    d = diagnose_text(text)
    assert d.verdict.expandable.on is None and d.verdict.label == "capacity"


def test_nccl_root_cause_is_the_warn_line_not_the_peers():
    d = diagnose_text(NCCL_INTERNAL_ERROR_PEERS)
    assert d.verdict.confidence == "high"
    assert d.verdict.reasons[0].startswith("<text>:2: NCCL could not allocate its buffers")
    assert d.fixes[0].title == "Shrink NCCL's own buffers"


def test_memory_summary_reads_non_releasable_against_gpu_reserved():
    d = diagnose_text(MEMORY_SUMMARY_TABLE)
    assert d.verdict.reasons[0].endswith("non-releasable (inactive split) memory 19.73 GiB")


def test_minority_rank_failure_is_uneven_load_not_a_label_change():
    # docs/allocator.md C8: one rank of 32 failing is imbalance on that rank, still a shortage there, not fragmentation
    lines = [
        "using world size: 32, data-parallel size: 4",
        "[rank31]: torch.OutOfMemoryError: CUDA out of memory.",
    ]
    d = diagnose_text("\n".join(lines))
    assert d.verdict.label == "capacity"
    assert any("the load is uneven" in r for r in d.verdict.reasons)


def test_sigkill_handler_after_a_python_error_is_not_a_host_oom():
    text = "\n".join(
        DEEPSPEED_KILLS_AFTER_CUDA_OOM.splitlines()[1:]
    )  # only the launcher's lines, exit code 1
    assert diagnose_text(text).verdict.label != "host_oom"


# --- one-line variants of the same causes, as other tools print them ------------------------------

LINE_VARIANTS = [
    # kernel log of a cgroup (container) OOM kill
    (
        "[Fri Nov 29 03:12:44 2024] Memory cgroup out of memory: Killed process 140093 (python) total-vm:312844112kB, "
        "anon-rss:251203524kB",
        "host_oom",
    ),
    # accelerate / subprocess: the child died of SIGKILL
    (
        "subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' died with <Signals.SIGKILL: 9>.",
        "host_oom",
    ),
    ("train-worker-0 exited with code 137", "host_oom"),
    # ROCm raw runtime error (hipify of "CUDA error: out of memory")
    ("RuntimeError: HIP error: out of memory", "outside_pytorch"),
    # newer NCCL phrasing of the same allocation failure
    (
        "node7:31:88 [1] transport/nvls.cc:214 NCCL WARN Cuda driver error 2 'out of memory'",
        "outside_pytorch",
    ),
    # prose that names the host OOM killer is not a GPU OOM
    ("The job gets killed by the Linux OOM killer while every rank loads the full checkpoint.", "host_oom"),
]


@pytest.mark.parametrize("line, label", LINE_VARIANTS)
def test_line_variant(line, label):
    d = diagnose_text("step 100 | loss 1.9\n" + line + "\n")
    assert d.verdict.label == label, d.verdict.reasons
    assert any(t in line.encode() for t in detectors.TRIGGERS)


def test_nccl_python_error_alone_is_weak_outside_pytorch():
    d = diagnose_text(NCCL_UNHANDLED_CUDA_ERROR.splitlines()[0] + "\n")
    assert d.verdict.label == "outside_pytorch" and d.verdict.confidence == "low"


def test_peer_network_errors_alone_are_no_diagnosis():
    peers = [
        line for line in NCCL_INTERNAL_ERROR_PEERS.splitlines() if line.startswith(("[rank3]", "[rank1]"))
    ]
    assert diagnose_text("\n".join(peers)).verdict.label is None


def test_prose_denying_fragmentation_does_not_claim_it():
    text = (
        "I don't think this is fragmentation: reserved and allocated differ by a few MiB.\n"
        "The run OOMs at the first evaluation step.\n"
    )
    d = diagnose_text(text)
    assert d.verdict.label == "capacity" and d.verdict.confidence == "low"


def test_prose_claiming_fragmentation_is_low_confidence_fragmentation():
    d = diagnose_text("The OOM is caused by fragmentation after CUDA graph capture.\n")
    assert d.verdict.label == "fragmentation" and d.verdict.confidence == "low"


def test_python_environ_assignment_is_a_setting():
    text = 'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"\n' + FRAGMENTATION_ASSISTED
    d = diagnose_text(text)
    assert d.verdict.expandable.on is True and d.verdict.label == "capacity"


def test_summary_with_only_allocated_rows_is_low_confidence():
    # the public pytorch#84614 shape: only the allocated row, current 11 GiB under the peak
    table = "\n".join(MEMORY_SUMMARY_TABLE.splitlines()[:8]).replace(
        "|  58213 MiB |  58213 MiB |", "|  61218 MiB |  72128 MiB |"
    )
    d = diagnose_text(table + "\n")
    assert d.verdict.label == "fragmentation" and d.verdict.confidence == "low"


def test_oom_at_graph_capture_leads_with_the_graphs_fix():
    d = diagnose_text(GRAPH_CAPTURE_END)
    assert d.verdict.phase == "CUDA-graph capture"
    assert d.fixes[0].title == "Narrow or drop CUDA graphs"
