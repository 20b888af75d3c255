"""``memtune run``: launch a training command with the job's memory environment, keep its output,
and diagnose it when it fails. Pure of torch.

Also the one way memtune runs a user's command (``run`` and ``bisect`` both): the command gets
its own process group; SIGINT, SIGTERM and SIGHUP sent to memtune are passed to that group, and
a second one escalates to SIGKILL; when the command ends, what it left running in its group gets
SIGTERM, then SIGKILL once the output pipes close (or after a grace), so no process of memtune's
outlives it. Its output is read in bounded chunks and copied to sinks that may fail (a closed
stdout, a full disk) without stopping the draining, so the command never blocks on a full pipe.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import BinaryIO, Protocol

from memtune.childenv import repository_variables
from memtune.config.derived import Derived
from memtune.errors import InputError
from memtune.limits import EXIT_GRACE_SECONDS, KILL_GRACE_SECONDS, OUTPUT_CHUNK_BYTES
from memtune.numbers import cut, echo
from memtune.outfile import check_output_path, open_stream, write_atomically
from memtune.runtime.monitor import OUTPUT_VARIABLE

LOG_NAME = "output.log"
RUN_RECORD = "run.json"
ALLOCATOR_VARIABLES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
POLL_SECONDS = 0.1  # how often the supervisor looks for the command's end while its output is quiet
DEFAULT_OUT_ATTEMPTS = 1000  # suffixes tried for a default run directory started in the same second


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
    monitor and the OOM hook. git's variables that name a repository are dropped, as for every
    command memtune starts (``memtune/childenv.py``)."""
    launch = LaunchEnvironment({OUTPUT_VARIABLE: str(out_dir)})
    dropped = repository_variables(base)
    if dropped:
        launch.removed += dropped
        launch.notes.append(
            f"{cut(', '.join(dropped), 200)} from your environment dropped: they point git at a repository, "
            "and memtune starts no process with them"
        )
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


# --- output sinks --------------------------------------------------------------------------------


class Sink(Protocol):
    def write(self, data: bytes) -> None: ...

    def finish(self) -> None: ...


class DescriptorSink:
    """Raw writes to a file descriptor (memtune's stdout or stderr). The first error (a reader that
    closed the pipe, a full device) is kept and later output for it is dropped."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.error: OSError | None = None

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view and self.error is None:
            try:
                view = view[os.write(self.fd, view) :]
            except OSError as exc:
                self.error = exc

    def finish(self) -> None:
        pass


class FileSink:
    """Appends to an open binary file; the first error is kept and later output is dropped."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: bytes) -> None:
        if self.error is None:
            try:
                self.file.write(data)
                self.file.flush()
            except OSError as exc:
                self.error = exc

    def finish(self) -> None:
        pass


class LineSink:
    """One stream's share of a file both streams go to: whole lines, so stdout and stderr
    interleave line by line; a line longer than a chunk is written in chunk-sized pieces."""

    def __init__(self, target: FileSink) -> None:
        self.target = target
        self.pending = bytearray()

    def write(self, data: bytes) -> None:
        self.pending += data
        end = self.pending.rfind(b"\n") + 1
        if end == 0 and len(self.pending) >= OUTPUT_CHUNK_BYTES:
            end = len(self.pending)
        if end:
            self.target.write(bytes(self.pending[:end]))
            del self.pending[:end]

    def finish(self) -> None:
        if self.pending:
            self.target.write(bytes(self.pending))
            self.pending.clear()


# --- running a command -------------------------------------------------------------------------


class Interrupted(Exception):
    """memtune received SIGINT, SIGTERM or SIGHUP; the command it was running has been stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Finished:
    status: int  # as a shell reports it: 128 + N when signal N ended the command
    timed_out: bool


def exit_status(returncode: int) -> int:
    """The child's exit status as a shell reports it: 128 + N when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone already
        os.killpg(group, signum)


def _has_exited(pid: int) -> bool:
    """Whether the child has ended, without reaping it: its zombie keeps its process group id
    taken, so signalling the group afterwards cannot reach an unrelated process."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


class Supervisor:
    """While entered, SIGINT, SIGTERM and SIGHUP sent to memtune go to the running command's
    process group (a second one sends SIGKILL, and so does ``kill_after`` seconds passing after
    the first, when given); with no command running they are only recorded. ``received`` is the
    first one, and :meth:`check` raises :class:`Interrupted` for it."""

    def __init__(self, kill_after: float | None = None) -> None:
        # `run` passes None: a training job given SIGTERM may take minutes to save a checkpoint,
        # and whoever sent it escalates on their own schedule (Slurm after KillWait).
        self.kill_after = kill_after
        self.received: int | None = None
        self._received_at: float | None = None
        self._group: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Supervisor:
        for signum in FORWARDED_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for signum, handler in self._previous.items():
            if handler is not None:  # None: set outside Python, which cannot be put back from here
                signal.signal(signum, handler)  # type: ignore[arg-type]

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = self.received is None
        if first:
            self.received, self._received_at = signum, time.monotonic()
        if self._group is not None:
            _signal_group(self._group, signum if first else signal.SIGKILL)

    def check(self) -> None:
        if self.received is not None:
            raise Interrupted(self.received)

    def run(
        self,
        command: Sequence[str],
        env: Mapping[str, str] | None,
        cwd: Path | None,
        stdout: Sequence[Sink],
        stderr: Sequence[Sink],
        timeout: float | None = None,
    ) -> Finished:
        """Run ``command`` until it ends (or ``timeout`` seconds pass: SIGTERM, then SIGKILL),
        copying its stdout and stderr to the sinks. Raises OSError if it cannot be started."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()  # memtune's own lines come before the command's
        child = subprocess.Popen(
            list(command),
            env=None if env is None else dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
        )
        self._group = child.pid
        if self.received is not None:  # a signal that came while it was being started
            _signal_group(child.pid, self.received)
        assert child.stdout is not None and child.stderr is not None
        pipes = selectors.DefaultSelector()
        pipes.register(child.stdout, selectors.EVENT_READ, list(stdout))
        pipes.register(child.stderr, selectors.EVENT_READ, list(stderr))
        try:
            timed_out = self._pump(child.pid, pipes, timeout)
        except BaseException:
            _signal_group(child.pid, signal.SIGKILL)  # memtune itself failed: its command must not outlive it
            raise
        finally:
            self._group = None
            for key in list(pipes.get_map().values()):
                pipes.unregister(key.fileobj)
            pipes.close()
            child.stdout.close()
            child.stderr.close()
            returncode = child.wait()
            for sink in (*stdout, *stderr):
                sink.finish()
        return Finished(exit_status(returncode), timed_out)

    def _pump(self, pid: int, pipes: selectors.BaseSelector, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        timed_out = False
        kill_at: float | None = None  # when the group gets SIGKILL
        ended = killed = False
        while True:
            now = time.monotonic()
            if self.kill_after is not None and self._received_at is not None and not (ended or killed):
                escalation = self._received_at + self.kill_after
                kill_at = escalation if kill_at is None else min(kill_at, escalation)
            if not ended and _has_exited(pid):
                ended = True
                _signal_group(pid, signal.SIGTERM)  # whatever it left running in its group
                kill_at = now + EXIT_GRACE_SECONDS
            if deadline is not None and not ended and not timed_out and now >= deadline:
                timed_out = True
                _signal_group(pid, signal.SIGTERM)
                kill_at = now + KILL_GRACE_SECONDS
            if kill_at is not None and now >= kill_at:
                _signal_group(pid, signal.SIGKILL)
                kill_at, killed = None, True
                if ended:
                    # Anything still holding the pipes left the group (setsid): stop waiting for it.
                    self._drain(pipes, rounds=16)
                    return timed_out
            if ended and not pipes.get_map():
                _signal_group(pid, signal.SIGKILL)
                return timed_out
            if pipes.get_map():
                self._drain(pipes, rounds=1, wait=POLL_SECONDS)
            else:
                time.sleep(POLL_SECONDS)

    @staticmethod
    def _drain(pipes: selectors.BaseSelector, rounds: int, wait: float = 0.0) -> None:
        for _ in range(rounds):
            ready = pipes.select(wait)
            if not ready:
                return
            for key, _ in ready:
                data = os.read(key.fd, OUTPUT_CHUNK_BYTES)
                if not data:
                    pipes.unregister(key.fileobj)
                    continue
                for sink in key.data:
                    sink.write(data)


# --- memtune run -------------------------------------------------------------------------------


def default_out_dir(now: time.struct_time | None = None) -> Path:
    """A new directory ``memtune-run-YYYYmmdd-HHMMSS`` (``-2``, ``-3``... for runs started in the
    same second), created here so two runs cannot pick the same one."""
    stem = time.strftime("memtune-run-%Y%m%d-%H%M%S", now or time.localtime())
    for attempt in range(1, DEFAULT_OUT_ATTEMPTS + 1):
        path = Path(stem if attempt == 1 else f"{stem}-{attempt}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise InputError(f"{stem}: {DEFAULT_OUT_ATTEMPTS} run directories of this second exist; give --out DIR")


def claim_out_dir(name: str, force: bool) -> Path:
    """The directory ``--out NAME``, made ready for a run: refuses one that holds an earlier run
    unless ``force``, a blank name (which would mean the current directory) and a file."""
    if not name.strip():
        raise InputError(f"--out {echo(name)}: give a directory name")
    out_dir = Path(name)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out {cut(name)}: not a directory")
    if not force:
        earlier = [entry for entry in (LOG_NAME, RUN_RECORD) if os.path.lexists(out_dir / entry)]
        if earlier:
            raise InputError(
                f"--out {cut(name)} holds an earlier run ({', '.join(earlier)}); "
                "give a new directory, or --force to replace it"
            )
    if out_dir.is_dir():  # what --force would replace: files only, never a link to one elsewhere
        for entry in (LOG_NAME, RUN_RECORD):
            check_output_path("--out", str(out_dir / entry), force=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


@dataclass(frozen=True)
class RunResult:
    status: int
    started: float  # time.time() when it started
    notes: list[str]  # what went wrong copying the output (a full disk), one line each


def run_command(command: list[str], env: Mapping[str, str], out_dir: Path, force: bool = False) -> RunResult:
    """Run ``command``, streaming its stdout and stderr to ours and both into ``out_dir/output.log``;
    SIGINT, SIGTERM and SIGHUP sent to memtune go to the child. The child's exit status comes back.

    The child runs in its own process group, so a Ctrl-C at the terminal reaches it once, through
    memtune, and memtune stays alive to save the output and diagnose it.
    """
    started = time.time()
    # Created new (an earlier log is removed first with --force), never through a link: a second
    # run racing for the same --out cannot truncate this one's log.
    try:
        opened = open_stream(out_dir / LOG_NAME, replace=force)
    except OSError as exc:
        raise InputError(f"--out {cut(str(out_dir / LOG_NAME))}: {exc.strerror or exc}") from None
    with opened as log_file:
        log = FileSink(log_file)
        terminal_out, terminal_err = DescriptorSink(sys.stdout.fileno()), DescriptorSink(sys.stderr.fileno())
        with Supervisor() as supervisor:
            try:
                finished = supervisor.run(
                    command, env, None, [terminal_out, LineSink(log)], [terminal_err, LineSink(log)]
                )
            except OSError as exc:
                (out_dir / LOG_NAME).unlink()  # created empty just now: nothing of a run to keep
                raise InputError(f"cannot start {cut(command[0])!r}: {exc.strerror or exc}") from None
    notes = []
    if log.error is not None:
        notes.append(f"{out_dir / LOG_NAME} is incomplete: {log.error.strerror or log.error}")
    if terminal_out.error is not None and terminal_out.error.errno != errno.EPIPE:
        notes.append(
            f"the command's output could not be written to stdout ({terminal_out.error.strerror}); "
            f"it is all in {out_dir / LOG_NAME}"
        )
    record = {
        "schema_version": 1,
        "command": command,
        "exit_status": finished.status,
        "started": started,
        "seconds": time.time() - started,
    }
    text = (json.dumps(record, indent=2) + "\n").encode()
    try:
        write_atomically(out_dir / RUN_RECORD, lambda handle: handle.write(text), replace=force)
    except OSError as exc:  # the command's status matters more than its record
        notes.append(f"{out_dir / RUN_RECORD} not written: {exc.strerror or exc}")
    return RunResult(finished.status, started, notes)


def snapshots_in(out_dir: Path, since: float = 0.0) -> list[Path]:
    """OOM snapshots under ``out_dir`` written at or after ``since`` (an earlier run's, kept in a
    directory reused with --force, would diagnose the wrong failure), newest first."""
    found = [p for p in out_dir.rglob("*.pickle") if p.is_file() and p.stat().st_mtime >= since]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
