"""``memtune run``: launch a training command with the job's memory environment, keep its output,
and diagnose it when it fails. Pure of torch."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from memtune.config.derived import Derived
from memtune.runtime.monitor import OUTPUT_VARIABLE

LOG_NAME = "output.log"
RUN_RECORD = "run.json"
ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class LaunchEnvironment:
    variables: dict[str, str]  # set for the child
    removed: list[str] = field(default_factory=list)  # inherited, dropped for the child
    notes: list[str] = field(default_factory=list)

    def apply(self, base: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if k not in self.removed}
        env.update(self.variables)
        return env


def launch_environment(derived: Derived | None, base: Mapping[str, str], out_dir: Path) -> LaunchEnvironment:
    """The child's memory environment: the config's allocator settings (inherited allocator
    variables dropped, so the config's are the ones torch reads), its ``NCCL_GRAPH_REGISTER``,
    ``CUDA_DEVICE_MAX_CONNECTIONS`` where Megatron needs it, and the output directory for the
    monitor and the OOM hook."""
    launch = LaunchEnvironment({OUTPUT_VARIABLE: str(out_dir)})
    if derived is None:
        return launch
    env = derived.job.env
    for name in ALLOCATOR_VARIABLES:
        configured = getattr(env, name)
        if configured is not None:
            launch.variables[name] = configured
            if base.get(name) not in (None, configured):
                launch.notes.append(
                    f"{name}={base[name]!r} from your environment replaced by the config's {configured!r}"
                )
        elif name in base:
            launch.removed.append(name)
            launch.notes.append(
                f"{name}={base[name]!r} from your environment dropped: the config does not set it"
            )
    if env.NCCL_GRAPH_REGISTER is not None:
        launch.variables["NCCL_GRAPH_REGISTER"] = env.NCCL_GRAPH_REGISTER
    connections = derived.device_max_connections
    if connections is not None:
        launch.variables["CUDA_DEVICE_MAX_CONNECTIONS"] = connections
        if env.CUDA_DEVICE_MAX_CONNECTIONS is None:
            launch.notes.append(
                "CUDA_DEVICE_MAX_CONNECTIONS=1: Megatron-LM requires it with tensor or context parallelism before Blackwell"
            )
    return launch


def _tee(source: IO[bytes], terminal: IO[bytes], log: IO[bytes], lock: threading.Lock) -> None:
    for line in iter(source.readline, b""):
        terminal.write(line)
        terminal.flush()
        with lock:
            log.write(line)
            log.flush()
    source.close()


def exit_status(returncode: int) -> int:
    """The child's exit status as a shell reports it: 128 + N when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode


def run_command(command: list[str], env: Mapping[str, str], out_dir: Path) -> int:
    """Run ``command``, streaming its stdout and stderr to ours and both into ``out_dir/output.log``;
    SIGINT and SIGTERM sent to memtune go to the child. Returns the child's exit status.

    The child runs in its own process group, so a Ctrl-C at the terminal reaches it once, through
    memtune, and memtune stays alive to save the output and diagnose it.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    try:
        child = subprocess.Popen(
            command,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
        )
    except OSError as exc:
        from memtune.errors import InputError

        raise InputError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
    previous = {sig: signal.signal(sig, lambda s, _f: child.send_signal(s)) for sig in FORWARDED_SIGNALS}
    lock = threading.Lock()
    with open(out_dir / LOG_NAME, "wb") as log:
        assert child.stdout is not None and child.stderr is not None
        threads = [
            threading.Thread(target=_tee, args=(child.stdout, sys.stdout.buffer, log, lock), daemon=True),
            threading.Thread(target=_tee, args=(child.stderr, sys.stderr.buffer, log, lock), daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            returncode = child.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        for thread in threads:
            thread.join()
    status = exit_status(returncode)
    record = {
        "schema_version": 1,
        "command": command,
        "exit_status": status,
        "started": started,
        "seconds": time.time() - started,
    }
    (out_dir / RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return status


def snapshots_in(out_dir: Path) -> list[Path]:
    """OOM snapshots under ``out_dir``, newest first."""
    found = [p for p in out_dir.rglob("*.pickle") if p.is_file()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
