"""Verbatim failure texts (docs/allocator.md M1-M7, the labelled corpus, Megatron sources) for the tests."""

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"  # logs, snapshots and the labelled OOM corpus

MSG_211_FRAGMENTATION = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.80 GiB "
    "of which 3.12 MiB is free. Including non-PyTorch memory, this process has 139.79 GiB memory in use. Of the "
    "allocated memory 89.28 GiB is allocated by PyTorch, and 50.00 GiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)
MSG_211_CAPACITY = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 139.80 GiB "
    "of which 1.31 GiB is free. Including non-PyTorch memory, this process has 138.48 GiB memory in use. Of the "
    "allocated memory 137.98 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
    "fragmentation.  See documentation for Memory Management  "
    "(https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)
MSG_211_OTHER_PROCESS = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB. GPU 0 has a total capacity of 139.80 GiB "
    "of which 78.68 GiB is free. Process 1234 has 60.51 GiB memory in use. Including non-PyTorch memory, this process "
    "has 612.00 MiB memory in use. Of the allocated memory 512 bytes is allocated by PyTorch, and 2.00 MiB is reserved "
    "by PyTorch but unallocated."
)
MSG_24_PRIVATE_POOLS = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 79.11 GiB of "
    "which 1.02 GiB is free. Including non-PyTorch memory, this process has 77.50 GiB memory in use. Of the allocated "
    "memory 76.00 GiB is allocated by PyTorch, with 20.00 GiB allocated in private pools (e.g., CUDA Graphs), and "
    "1.00 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
MSG_21_CAPACTY = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacty of 79.15 GiB "
    "of which 1.15 GiB is free. Process 2514 has 77.99 GiB memory in use. Of the allocated memory 70.33 GiB is "
    "allocated by PyTorch, and 6.14 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
    "large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
    "PYTORCH_CUDA_ALLOC_CONF"
)
MSG_OLD_TEXTGEN = (
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 166.00 MiB (GPU 0; 8.00 GiB total capacity; "
    "6.93 GiB already allocated; 0 bytes free; 7.22 GiB reserved in total by PyTorch) If reserved memory is >> "
    "allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management "
    "and PYTORCH_CUDA_ALLOC_CONF"
)
MSG_OLD_MEGATRON60 = (
    "RuntimeError: CUDA out of memory. Tried to allocate 2.29 GiB (GPU 0; 31.75 GiB total capacity; 19.22 GiB already "
    "allocated; 1.06 GiB free; 28.32 GiB reserved in total by PyTorch)"
)
MSG_14_CACHED = (
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.76 GiB total capacity; 9.83 GiB already "
    "allocated; 9.56 MiB free; 9.87 GiB cached)"
)
MSG_ASYNC = """torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)
Currently allocated     : 139.00 GiB
Requested               : 1024.00 MiB
Device limit            : 139.80 GiB
Free (according to CUDA): 3.12 MiB
PyTorch limit (set by user-supplied memory fraction)
                        : 17179869184.00 GiB"""

# (line, expected label) for every non-allocator failure the issue lists
FAILURE_LINES = [
    (
        "node:2134736:2285781 [0] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
        "outside_pytorch",
    ),
    (
        "node:2134736:2285781 [0] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes",
        "outside_pytorch",
    ),
    ("gpu01:12:99 [3] alloc.h:103 NCCL WARN Cuda failure 2 'out of memory'", "outside_pytorch"),
    ("torch.AcceleratorError: CUDA error: out of memory", "outside_pytorch"),
    ("RuntimeError: CUDA driver error: out of memory", "capacity"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "capacity"),
    ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "capacity"),
    ("RuntimeError: Triton Error [CUDA]: out of memory", "capacity"),
    ("torch.OutOfMemoryError: CUDA out of memory.", "capacity"),
    (
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.batch. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.",
        "host_oom",
    ),
    (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM Killed.",
        "host_oom",
    ),
    ("srun: error: gpu17: task 0: Out Of Memory", "host_oom"),
    ("State: OUT_OF_MEMORY", "host_oom"),
    (
        "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 0 (pid: 4242) of "
        "binary: /usr/bin/python",
        "host_oom",
    ),
    (
        "[2024-01-22 16:50:50,1] [INFO] [launch.py:347:main] Process 1080504 exits with return code = -9",
        "host_oom",
    ),
    ("Killed", "host_oom"),
    ("RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.", "host_oom"),
    (
        "RuntimeError: DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes.",
        "host_oom",
    ),
    (
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 1048576, Hardware limit: 232448. "
        "Reducing block sizes or `num_stages` may help.",
        "not_oom",
    ),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.", "not_oom"),
    (
        "ValueError: Currently there is no support for Pipeline parallelism with CPU offloading",
        "configuration",
    ),
    (
        "RuntimeError: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is currently not supported with nccl_ub due to "
        "compatibility issue with torch.cuda.MemPool API.",
        "configuration",
    ),
    ("RuntimeError: torch.cuda.MemPool doesn't currently support expandable_segments.", "configuration"),
    (
        "AssertionError: Setting NCCL_GRAPH_REGISTER=0 to avoid illegal memory access when using CUDA Graph with "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
        "configuration",
    ),
    ("ValueError: Unrecognized key 'foo' in CUDA allocator config.", "configuration"),
]
