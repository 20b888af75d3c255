"""Stream logs (files, directories, stdin) and hand the few interesting lines to the detectors.

Built for multi-GB, many-rank logs: files are read in binary in large chunks, and only lines that
contain one of the trigger substrings are decoded and parsed. The triggers are looked for once per
distinct line shape (digits read as 0) of a block, which in a repetitive training log is a few
dozen lines per MiB; a block of mostly distinct lines gets one ``bytes.find`` pass per trigger.
The chunk keeps a look-ahead tail so a wrapped message or a multi-line report that crosses a chunk
boundary is still seen whole. Memory stays bounded by the chunk and block sizes and the per-kind
caps.
"""

from __future__ import annotations

import gzip
import re
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import accumulate, compress, count
from pathlib import Path
from typing import BinaryIO, Protocol

from memtune.diagnose import detectors
from memtune.diagnose.evidence import Fact, Failure, Where
from memtune.errors import InputError
from memtune.limits import MAX_BINARY_NUL_RATIO, MAX_FINDINGS_PER_KIND, MAX_LINE_BYTES
from memtune.numbers import cut

CHUNK_BYTES = 16 << 20
LOOKAHEAD_BYTES = 64 << 10  # bytes kept after a chunk's last scanned line, so a message is seen whole
LOOKAHEAD_LINES = 48
FOLLOWING_BYTES = 16 << 10  # continuation lines a detector may read after a triggered line
FOLLOWING_LINE_BYTES = 4 << 10  # of which each is cut to this (continuations are short)
KEEP_PER_KIND = 200  # failures and facts kept per (source, rank, kind); the rest are only counted
REPORT_SHAPES_KEPT = 10_000  # shapes of Megatron memory report lines remembered per stream
# Shapes of triggered lines remembered with the kinds of finding they gave, so a line past the
# caps is counted without being read (400,000 OOM messages): this many shapes, of lines up to
# SHAPE_BYTES long.
KIND_SHAPES_KEPT = 10_000
SHAPE_BYTES = 4 << 10

# Files in a log directory that are not logs.
_NOT_LOGS = {
    ".pickle",
    ".pkl",
    ".pt",
    ".pth",
    ".bin",
    ".safetensors",
    ".npy",
    ".npz",
    ".distcp",
    ".png",
    ".jpg",
    ".so",
}
_RANK_IN_NAME = re.compile(r"rank[_-]?([0-9]{1,9})", re.I)
_PREFIX = re.compile(
    r"^\s*(?:\[rank([0-9]{1,9})\]:|\[default([0-9]{1,9})\]:|\[1,([0-9]{1,9})\]<std(?:out|err)>:|([0-9]{1,5}):(?=\s))\s?"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class SourceReport:
    name: str
    bytes_read: int = 0
    lines: int = 0
    note: str = ""  # why the source was skipped, or that it was empty


@dataclass
class ScanResult:
    failures: list[Failure] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    sources: list[SourceReport] = field(default_factory=list)
    suppressed: Counter[str] = field(default_factory=Counter)  # (kind) -> findings beyond the caps
    kept: Counter[str] = field(default_factory=Counter)  # (kind) -> findings kept, over all sources

    @property
    def readable(self) -> list[SourceReport]:
        return [s for s in self.sources if not s.note.startswith("skipped")]


def _split_prefix(text: str) -> tuple[int | None, str]:
    m = _PREFIX.match(text)
    if not m:
        return None, text
    rank = next(g for g in m.groups() if g is not None)
    return int(rank), text[m.end() :]


def _decode(raw: bytes, limit: int = MAX_LINE_BYTES) -> str:
    text = raw[:limit].decode("utf-8", "replace").replace("\x00", "").rstrip("\r\n")
    return _ANSI.sub("", text) if "\x1b" in text else text


_NOT_A_REPORT, _REPORT, _PREFIXED_REPORT = "not a report", "report", "report after a rank prefix"


def _report_shape(raw: bytes) -> str:
    """Whether _examine and detectors.detect read the line as a Megatron memory report and
    nothing else, and whether it has a rank prefix.

    A line's shape (digits as 0) gives the line's own answer: the prefix, ANSI and report patterns
    match digits only as a class, and the report's numbers are at most 30 digits and dots, so
    valid and finite whatever the digits. The one literal digit, in the ``[1,N]<stdout>:``
    prefix, makes such a shape no report, and its lines take the long way."""
    prefix_rank, text = _split_prefix(_decode(raw))
    if detectors.rank_memory_line(text.strip()) is None:
        return _NOT_A_REPORT
    return _REPORT if prefix_rank is None else _PREFIXED_REPORT


def _rank_from_path(path: Path) -> int | None:
    """``rank3.log``, ``rank_3.txt``; or torchrun's ``--log-dir`` tree,
    ``<dir>/<run>/attempt_<n>/<local rank>/stderr.log``, whose lines carry no rank prefix."""
    if m := _RANK_IN_NAME.search(path.name):
        return int(m.group(1))
    parent = path.parent
    if parent.name.isascii() and parent.name.isdigit() and parent.parent.name.startswith("attempt_"):
        return int(parent.name)
    return None


class Readable(Protocol):
    """What the scanner reads from: a binary file, stdin's buffer, a tolerant gzip stream."""

    def read(self, n: int, /) -> bytes: ...


# Digits read as 0: lines that differ only in their numbers (iteration counters, time stamps, rank
# numbers, sizes) become one shape, so a block of a repetitive log is searched once per shape.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_TRIGGERS_AS_ZERO = tuple(t.translate(_DIGITS_AS_ZERO) for t in detectors.TRIGGERS)
# A trigger without digits is in a line exactly when it is in the line's shape; one with digits
# ("status 137") only may be, and the line itself is checked.
_EXACT_TRIGGERS = tuple(t for t in detectors.TRIGGERS if t == t.translate(None, b"0123456789"))
BLOCK_BYTES = 1 << 20  # lines are deduplicated per block: bounds the per-line objects in memory
MOSTLY_DISTINCT = 0.5  # share of distinct shapes in a block above which each trigger is searched instead

# (offset of the line, newlines before it, its shape or None): a line that holds a trigger
Hit = tuple[int, int, bytes | None]


def trigger_lines(buf: bytes, limit: int) -> Iterator[tuple[Iterable[Hit], int]]:
    """For each block of whole lines (about BLOCK_BYTES) of ``buf[:limit]``, in order: its lines
    that contain one of the triggers, in order, and its number of newlines. Offsets and newline
    counts are from the start of ``buf``."""
    pos = newlines = 0
    while pos < limit:
        end = limit
        if pos + BLOCK_BYTES < limit:
            end = buf.rfind(b"\n", pos, pos + BLOCK_BYTES) + 1
            if end <= pos:  # one line longer than a block
                end = buf.find(b"\n", pos + BLOCK_BYTES, limit) + 1 or limit
        found, lines = _block_trigger_lines(buf[pos:end], pos, newlines)
        yield found, lines
        newlines += lines
        pos = end


def _block_trigger_lines(block: bytes, offset: int, newlines: int) -> tuple[Iterable[Hit], int]:
    """trigger_lines for one block that starts at ``offset`` after ``newlines`` newlines."""
    shapes = block.translate(_DIGITS_AS_ZERO).split(b"\n")
    distinct = set(shapes)
    if len(distinct) > MOSTLY_DISTINCT * len(shapes):  # deduplication does not pay
        return _search_each_trigger(block, offset, newlines)
    hit_shapes = {shape for shape in distinct if any(t in shape for t in _TRIGGERS_AS_ZERO)}
    if not hit_shapes:
        return (), len(shapes) - 1
    offsets = accumulate(map((1).__add__, map(len, shapes)), initial=offset)
    found: Iterable[Hit] = compress(
        zip(offsets, count(newlines), shapes), map(hit_shapes.__contains__, shapes)
    )
    exact = {shape for shape in hit_shapes if any(t in shape for t in _EXACT_TRIGGERS)}
    if len(exact) < len(hit_shapes):
        found = [hit for hit in found if hit[2] in exact or _holds_trigger(block, hit[0] - offset)]
    return found, len(shapes) - 1


def _holds_trigger(block: bytes, start: int) -> bool:
    end = block.find(b"\n", start)
    line = block[start : len(block) if end < 0 else end]
    return any(t in line for t in detectors.TRIGGERS)


def _search_each_trigger(block: bytes, offset: int, newlines: int) -> tuple[list[Hit], int]:
    """The plain search: one pass of ``bytes.find`` per trigger, jumping to the next line on a hit."""
    starts = set()
    for trigger in detectors.TRIGGERS:
        pos = block.find(trigger)
        while pos >= 0:
            starts.add(block.rfind(b"\n", 0, pos) + 1)
            end = block.find(b"\n", pos)
            if end < 0:
                break
            pos = block.find(trigger, end)
    hits: list[Hit] = []
    counted_to = before = 0
    for start in sorted(starts):
        before += block.count(b"\n", counted_to, start)
        counted_to = start
        hits.append((offset + start, newlines + before, None))
    return hits, before + block.count(b"\n", counted_to)


class _Stream:
    """Scans one byte stream; collects findings into a ScanResult."""

    def __init__(self, name: str, result: ScanResult) -> None:
        self.name = name
        self.result = result
        self.file_rank = _rank_from_path(Path(name))
        self.kept: Counter[tuple[int | None, str]] = Counter()  # (rank, kind) -> findings kept
        self.skip: set[int] = set()  # line numbers already read as part of an earlier message
        self.report_shapes: dict[bytes, str] = {}  # line shape -> _report_shape(shape)
        self.shape_kinds: dict[bytes, tuple[str, ...]] = {}  # line shape -> kinds its findings had

    def run(self, fh: Readable, report: SourceReport) -> None:
        carry = b""
        line_base = 1  # line number of the first line in `buf`
        eof = False
        while not eof:
            data = fh.read(CHUNK_BYTES)
            eof = not data
            buf = carry + data
            report.bytes_read += len(data)
            if not buf:
                break
            if eof:
                limit = len(buf)
            else:
                cut = buf.rfind(b"\n", 0, max(0, len(buf) - LOOKAHEAD_BYTES))
                if cut < 0:
                    if len(buf) < CHUNK_BYTES + LOOKAHEAD_BYTES:
                        carry = buf
                        continue
                    cut = len(buf) - LOOKAHEAD_BYTES - 1  # one enormous line: cut it
                limit = cut + 1
            line_base += self._scan_region(buf, limit, line_base)
            carry = buf[limit:]
        report.lines = line_base - 1 + (1 if carry and not carry.endswith(b"\n") else 0)

    def _scan_region(self, buf: bytes, limit: int, line_base: int) -> int:
        """Examine the triggered lines of ``buf[:limit]``; return how many lines end there."""
        lineno, newlines = line_base, 0
        for hits, lines in trigger_lines(buf, limit):
            for start, before, shape in hits:
                lineno = line_base + before
                if lineno in self.skip:
                    self.skip.discard(lineno)
                    continue
                if shape is not None and self._counted_report(buf, start, shape):
                    continue
                self._examine(buf, start, lineno)
            newlines += lines
        self.skip = {n for n in self.skip if n > lineno}
        return newlines

    def _counted_report(self, buf: bytes, start: int, shape: bytes) -> bool:
        """Count the line as a summarised finding, without reading it, when it is one of
        Megatron's memory reports and its rank's (or the overall) cap for them is reached.

        Every rank prints the report every log interval: in a healthy log it is nearly every
        triggered line. Whether a line is one depends on its shape alone (see
        _report_shape), so each shape is read once."""
        form = self.report_shapes.get(shape)
        if form is None:
            if len(self.report_shapes) >= REPORT_SHAPES_KEPT:
                self.report_shapes.clear()
            form = self.report_shapes[shape] = _report_shape(shape)
        if form is _NOT_A_REPORT:
            return False
        if self.result.kept[detectors.RANK_MEMORY] < MAX_FINDINGS_PER_KIND:
            rank = self.file_rank
            if form is _PREFIXED_REPORT:
                end = buf.find(b"\n", start)
                rank = _split_prefix(_decode(buf[start : len(buf) if end < 0 else end]))[0]
            key = (rank, detectors.RANK_MEMORY)
            if self.kept[key] < KEEP_PER_KIND:
                return False  # kept: read it in full
            self.kept[key] += 1
        self.result.suppressed[detectors.RANK_MEMORY] += 1
        return True

    def _examine(self, buf: bytes, start: int, lineno: int) -> None:
        end = buf.find(b"\n", start)
        end = len(buf) if end < 0 else end
        raw = buf[start:end]
        prefix_rank, text = _split_prefix(_decode(raw))
        text = text.strip()
        if not text:
            return
        rank = prefix_rank if prefix_rank is not None else self.file_rank
        # Digits read as 0, as for the triggers: a line of a known shape whose kinds are all past
        # their caps would only be counted, so it is counted without running the detectors.
        shape = raw.translate(_DIGITS_AS_ZERO) if len(raw) <= SHAPE_BYTES else None
        known = self.shape_kinds.get(shape) if shape is not None else None
        if known and all(self._full(rank, kind) for kind in known):
            for kind in known:
                self._admit(kind, rank)
            return
        numbers: list[int] = []
        read_following = False

        def following(limit: int) -> list[str]:
            nonlocal read_following
            read_following = True
            texts, found = self._following(buf, end + 1, lineno, prefix_rank, limit)
            numbers[:] = found
            return texts

        line = detectors.Line(text, Where(self.name, lineno, rank), following)
        items = detectors.detect(line)
        for item in items:
            self._keep(item)
            if isinstance(item, Failure) and item.consumed:
                self.skip.update(numbers[: item.consumed])
        if shape is not None and not read_following:  # what it gave depends on the line alone
            if len(self.shape_kinds) >= KIND_SHAPES_KEPT:
                self.shape_kinds.clear()
            self.shape_kinds[shape] = tuple(item.kind for item in items)

    def _following(
        self, buf: bytes, pos: int, lineno: int, rank: int | None, limit: int
    ) -> tuple[list[str], list[int]]:
        """Up to ``limit`` next lines of the same stream: same rank prefix, or no prefix (a wrapped
        continuation), within FOLLOWING_BYTES and LOOKAHEAD_LINES lines of any stream."""
        texts: list[str] = []
        numbers: list[int] = []
        stop = min(len(buf), pos + FOLLOWING_BYTES)
        n = lineno
        while pos < stop and len(texts) < limit and n - lineno < LOOKAHEAD_LINES:
            end = buf.find(b"\n", pos, stop)
            end = stop if end < 0 else end
            n += 1
            other_rank, text = _split_prefix(_decode(buf[pos : min(end, pos + FOLLOWING_LINE_BYTES)]))
            if other_rank is None or other_rank == rank:
                texts.append(text)
                numbers.append(n)
            pos = end + 1
        return texts, numbers

    def _full(self, rank: int | None, kind: str) -> bool:
        return self.result.kept[kind] >= MAX_FINDINGS_PER_KIND or self.kept[(rank, kind)] >= KEEP_PER_KIND

    def _admit(self, kind: str, rank: int | None) -> bool:
        """Whether a finding of ``kind`` on ``rank`` is kept; counted as summarised if not."""
        # Overall first, so a log of 200,000 ranks does not grow a counter per rank either.
        if self.result.kept[kind] >= MAX_FINDINGS_PER_KIND:
            self.result.suppressed[kind] += 1
            return False
        key = (rank, kind)
        self.kept[key] += 1
        if self.kept[key] > KEEP_PER_KIND:
            self.result.suppressed[kind] += 1
            return False
        self.result.kept[kind] += 1
        return True

    def _keep(self, item: Failure | Fact) -> None:
        if not self._admit(item.kind, item.where.rank):
            return
        if isinstance(item, Failure):
            self.result.failures.append(item)
        else:
            self.result.facts.append(item)


def _looks_binary(head: bytes) -> bool:
    """Mostly NUL bytes or undecodable: a few NULs (a crashed writer, a padded file) are not enough."""
    if not head:
        return False
    if head.count(b"\x00") > MAX_BINARY_NUL_RATIO * len(head) + 8:
        return True
    sample = head[:4096].replace(b"\x00", b"")
    undecodable = sample.decode("utf-8", "replace").count("\ufffd")
    return undecodable > 0.3 * max(1, len(sample))


def expand(inputs: Iterable[str]) -> Iterator[str]:
    """The inputs with each directory replaced by the log files under it."""
    for item in inputs:
        path = Path(item)
        if item != "-" and path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() not in _NOT_LOGS)
            if not files:
                raise InputError(f"{item}: directory holds no log files")
            yield from (str(p) for p in files)
        else:
            yield item


def _open(name: str) -> BinaryIO | _TolerantGzip:
    if name == "-":
        if sys.stdin is None:
            raise InputError("-: standard input is closed")
        return sys.stdin.buffer
    if name.endswith(".gz"):
        return _TolerantGzip(name)
    return open(name, "rb", buffering=0)


class _TolerantGzip:
    """A gzip stream that ends, rather than fails, at a cut or corrupt member, keeping what it
    decompressed before; ``error`` then says what happened."""

    PIECE = 1 << 16

    def __init__(self, name: str) -> None:
        self.file = gzip.open(name, "rb")  # noqa: SIM115 - closed by close(), like the other streams
        self.error: Exception | None = None

    def read(self, n: int) -> bytes:
        pieces: list[bytes] = []
        wanted = n
        while wanted > 0 and self.error is None:
            try:
                piece = self.file.read(min(wanted, self.PIECE))
            except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
                self.error = exc
                break
            if not piece:
                break
            pieces.append(piece)
            wanted -= len(piece)
        return b"".join(pieces)

    def close(self) -> None:
        self.file.close()


class _Peeked:
    """A binary stream whose first bytes were already read to sniff for binary content."""

    def __init__(self, head: bytes, rest: Readable) -> None:
        self.head, self.rest = head, rest

    def read(self, n: int) -> bytes:
        if self.head:
            head, self.head = self.head, b""
            return head
        return self.rest.read(n)


def read_source(name: str, report: SourceReport, consume: Callable[[Readable], None]) -> str | None:
    """Open the input ``name`` ("-": stdin) and give its stream to ``consume``, with the scanner's
    guards: binary content is skipped, a cut or corrupt ``.gz`` ends the stream where it breaks,
    and read errors are caught; ``report.note`` says what happened (``consume`` counts
    ``report.bytes_read``). Returns a problem line when nothing of the input could be read."""
    try:
        fh = _open(name)
    except OSError as exc:
        report.note = "skipped: cannot open"
        return f"{name}: cannot open ({exc.strerror or exc.__class__.__name__})"
    try:
        head = fh.read(1 << 16)
        if _looks_binary(head):
            report.note = "skipped: binary data, not a text log"
            return None
        consume(_Peeked(head, fh))
        if report.bytes_read == 0:
            report.note = "empty"
        if isinstance(fh, _TolerantGzip) and fh.error is not None:
            # What was read before the cut is kept: a log copied while the job died is still evidence.
            report.note = (
                f"truncated or corrupt compressed data after {report.bytes_read} bytes "
                f"({fh.error.__class__.__name__}); findings before that point are kept"
            )
            if report.bytes_read == 0:
                report.note = "skipped: " + report.note
                return f"{name}: {report.note[9:]}"
    except OSError as exc:
        report.note = f"skipped: read error ({exc.__class__.__name__}: {cut(str(exc))})"
        return f"{name}: {report.note[9:]}"
    finally:
        if name != "-":  # stdin stays open (and may be None when the process started without one)
            fh.close()
    return None


def text_lines(stream: Readable, report: SourceReport) -> Iterator[str]:
    """Every line of ``stream`` decoded, each cut to MAX_LINE_BYTES, read in CHUNK_BYTES chunks:
    for readers that want each line (``diff --logs``) rather than the triggered ones."""
    carry = b""
    cutting = False  # the rest of a line already cut is being dropped
    while data := stream.read(CHUNK_BYTES):
        report.bytes_read += len(data)
        pieces = (carry + data).split(b"\n")
        carry = pieces.pop()
        if cutting and pieces:
            pieces, cutting = pieces[1:], False
        for piece in pieces:
            report.lines += 1
            yield _decode(piece)
        if len(carry) > MAX_LINE_BYTES:
            if not cutting:
                report.lines += 1
                yield _decode(carry)
                cutting = True
            carry = b""
    if carry and not cutting:
        report.lines += 1
        yield _decode(carry)


def scan(inputs: Iterable[str]) -> ScanResult:
    """Scan every input; raise InputError only when a named input cannot be read at all."""
    result = ScanResult()
    problems = []
    for name in expand(inputs):
        report = SourceReport("<stdin>" if name == "-" else name)
        result.sources.append(report)
        problem = read_source(name, report, partial(_Stream(report.name, result).run, report=report))
        if problem is not None:
            problems.append(problem)
    if problems and not result.readable:
        raise InputError(problems)
    if not result.readable:
        raise InputError([f"{s.name}: {s.note}" for s in result.sources] or ["no input"])
    return result


def scan_text(text: str, name: str = "<text>") -> ScanResult:
    """Scan an in-memory log (tests, the corpus check)."""
    import io

    result = ScanResult()
    report = SourceReport(name)
    result.sources.append(report)
    _Stream(name, result).run(io.BytesIO(text.encode("utf-8")), report)
    return result
