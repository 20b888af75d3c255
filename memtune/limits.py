"""Every limit memtune puts on its input, in one place (docs/limits.md explains them).

Each limit is far above anything a real training job or log has, and low enough that a small
hostile input cannot make memtune run for minutes or take gigabytes. Hitting one gives a single
line naming the limit, never a traceback.
"""

from __future__ import annotations

# --- configuration sizes (schema plausibility limits) ---------------------------------------
MAX_LAYERS = 10_000  # num_layers and every other per-layer count
MAX_WIDTH = 1_000_000  # hidden_size, ffn_hidden_size, kv_channels, head dims, LoRA rank
MAX_HEADS = 100_000  # attention heads, query groups, experts, router top-k
MAX_VOCAB = 100_000_000
MAX_SEQ_LENGTH = 100_000_000
MAX_PARALLEL = 1_000_000  # each parallel size, num_gpus, gpus_per_node
MAX_BATCH = 100_000_000  # micro and global batch sizes
MAX_COUNT = 1 << 40  # any other count (bucket sizes, ...)
MAX_GPU_MEMORY_GIB = 1 << 20  # 1 PiB per GPU
MAX_HOST_MEMORY_GIB = 1 << 30  # cluster.host_memory_gib: 1 EiB per node
MAX_LINK_GB_PER_S = 1e6  # cluster.network bandwidths: 1 PB/s per GPU or adapter
# ... and at least 1 MB/s (a denormal bandwidth would divide a transfer's time to infinity)
MIN_LINK_GB_PER_S = 1e-3
# forwards + backwards one simulated step places over all its stages (a steady phase that repeats
# itself is priced without placing its repeats, memtune/perf/simulate.py)
MAX_SIMULATED_OPERATIONS = 1_000_000
MAX_ESTIMATE_SIMULATED_OPERATIONS = 500_000  # the same, for the step `estimate` and `plan` price
MAX_MOE_IMBALANCE = 1e6  # --moe-imbalance: the hottest expert rank's share relative to balanced

# --- configuration files ---------------------------------------------------------------------
MAX_CONFIG_BYTES = 16 << 20  # a config or launch script larger than this is not one
FIFO_WAIT_SECONDS = 5.0  # how long a named pipe given as an input is waited on for its first bytes
MAX_NESTING = 64  # mapping/list depth in YAML, JSON and override values
MAX_NODES = 200_000  # values in one config document, aliases expanded
MAX_ALIASES = 1_000  # YAML alias uses in one document
MAX_SHELL_VALUE = 64 << 10  # characters in one expanded shell variable or line
MAX_ARITHMETIC_CHARS = 10_000  # characters of one $(( )) or moe_layer_freq expression
MAX_ARITHMETIC_VALUE = 1 << 63  # magnitude of any integer an expression computes
MAX_LIST = 100_000  # entries of a list an expression builds

# --- numbers read from text ------------------------------------------------------------------
MAX_DIGITS = 30  # digits of an integer read from a log, a flag or a version (2**64 has 20)

# --- error output ----------------------------------------------------------------------------
MAX_ECHO = 80  # characters of a user's value quoted back in an error line
MAX_PROBLEM_LINES = 20  # error lines printed; the rest are counted ("... and N more")

# --- logs --------------------------------------------------------------------------------------
MAX_LINE_BYTES = 64 << 10  # longer log lines are cut (nothing memtune parses is that long)
MAX_FINDINGS_PER_KIND = 1_000  # findings kept per kind over all sources; the rest are counted
MAX_BINARY_NUL_RATIO = 0.01  # a log whose first 64 KiB are more than 1% NUL bytes is binary

# --- JSON Lines read back (monitor records, measured runs, runs' logs) -------------------------
MAX_JSONL_LINE_BYTES = 16 << 20  # one record; a line longer than this is not one
MAX_JSONL_RECORDS = 1_000_000  # lines of one JSONL file
MAX_RECORD_BYTES = 1 << 62  # a byte count in a record (4 EiB)
MAX_STEP = 1 << 40  # a training step or iteration number in a record or a log
MAX_RUN_PAIRS = 1_000_000  # (rank, step) pairs one run of `diff --logs` may hold

# --- memory snapshots ------------------------------------------------------------------------
MAX_SNAPSHOT_BYTES = 2 << 30  # bytes read from a snapshot (also from pipes and devices)
MAX_PICKLE_MEMO = 10_000_000  # memo index a snapshot pickle may use
# Memory the objects of a snapshot may take, counted from its opcodes before any is built: this
# many bytes per byte of the file, plus the floor below (by the same count real snapshots take 10
# to 15 times their size; one of empty sets, 240).
MAX_SNAPSHOT_MEMORY_PER_BYTE = 24
MIN_SNAPSHOT_MEMORY = 64 << 20
MAX_SNAPSHOT_OBJECTS = 50_000_000  # containers and values visited when summarising a snapshot
MAX_SNAPSHOT_NUMBER = 1 << 62  # a byte count or time stamp beyond this makes the file corrupt
MAX_DEVICES = 1_024  # a device index in a snapshot (one process sees a few GPUs)
MAX_SNAPSHOT_FOLDER_FILES = 1_024  # per-rank snapshots compared from one folder
MAX_PATTERN_SECONDS = 1.0  # CPU seconds a `--category NAME=REGEX` may spend on one allocation's stack
MAX_COMPARED_ROWS = 12  # sites, categories or phases printed per comparison (JSON keeps all)

# --- commands memtune runs (bisect, run) -------------------------------------------------------
MAX_BISECT_RUNS = 100  # commands one `bisect --good/--bad` runs, both endpoint checks included
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600  # `bisect --timeout`, `measure --timeout`: a week per run
MAX_MEASURE_ITERATIONS = 1_000  # `measure --iters`: the peak is steady from iteration 2
OUTPUT_CHUNK_BYTES = 64 << 10  # one read of a command's output; a line longer than this is written in pieces
EXIT_GRACE_SECONDS = 2.0  # after a command ends: how long what it left running may hold its output open
KILL_GRACE_SECONDS = 5.0  # after SIGTERM for a timeout: how long before SIGKILL
# SMs a userbuffer overlap's communication kernel may take (schema.UserbufferGemmConfig.num_sm):
# fewer than any training GPU has (an A100 has 108), so the overlapped GEMM keeps some
MAX_UB_SMS = 100
