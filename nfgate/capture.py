"""``--capture DIR``: every frame list the gateway reads or sends, as rolling Parquet segments.

design.md "Capture and the pipeline". The event loop only appends one tuple per message
to a deque (:meth:`Capture.tap`, about a microsecond with the clock read); a writer
thread of its own turns them into Arrow batches and Parquet row groups. Why a thread and
not the loop: building and compressing a row group takes milliseconds, which the loop
must not spend between two messages.

Files. The segment being written is ``capture-<UTC start>-<pid>-<seq>.parquet.partial``;
it is renamed to ``.parquet`` when it is closed (after ``segment_s`` seconds or
``segment_rows`` rows, and at shutdown), so a reader never sees a file without its
footer. :meth:`Capture.close` writes every record the loop handed over before it
returns: a clean shutdown loses nothing. After a crash the last ``.partial`` file is
unreadable (Parquet's footer is written last) and ``nfgate analyze`` skips it.

Write failures (a full disk, a directory removed or made read-only). A segment that
had a failed write is deleted, never renamed: its footer may be missing, and a closed
name promises a readable file. Its records and the failed batch's are counted in
``lost``. A directory that was removed is created again (mode 0700) for the next
segment. A complete segment the directory refuses to rename stays ``.partial`` and
the rename is tried again at each wake-up and at shutdown. The log says ERROR once
when writing starts failing, then at most once a minute (with the count), and INFO
when it works again: a full disk must not flood the log.

Disk budget. With ``max_bytes`` set, closing a segment also deletes the oldest closed
segments in the directory (whoever wrote them: an earlier run too) until the rest fit
in ``max_bytes``, as a ring buffer does; the newest is always kept. The segment being
written is not counted, so the directory holds at most ``max_bytes`` plus one segment.

Overload. When the writer falls ``max_pending`` records behind (a slow disk), further
records are dropped and counted (``dropped``) rather than letting the queue grow without
bound or making the loop wait: capture is an observer and must not slow the broker.

Columns: ``ts_ns`` (int64, wall clock), ``edge``, ``protocol``, ``transport`` (``zmq``,
``nng``, ``udp``: which decoder applies, since DBP speaks ZeroMQ and UDP on one edge),
``direction`` (``in`` or ``out``), ``peer`` (the ZeroMQ identity as
:func:`nfgate.edges.peer_label` prints it, ``pipe-<id>`` for NNG, ``host:port`` for
UDP), ``frames`` (list of binary), ``truncated`` (null, or why the transport dropped
the message and kept only the frames it had read: ``frames`` over ``max_frames``,
``bytes`` over ``max_message_bytes``; a transport says so with the tap's
``truncated=`` keyword).
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from nfgate.errors import ConfigError
from nfgate.transports import Tap

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["Capture", "CaptureConfig", "capture_schema", "check_edges", "load_arrow"]


def check_edges(config: CaptureConfig, served: Iterable[tuple[str, str]]) -> None:
    """Raise :class:`ConfigError` when a ``config.edges`` name matches none of the
    ``served`` (name, kind) edges: an edge's name (``nfp-2``) or its kind (``nfp``)."""
    served = list(served)
    unknown = set(config.edges) - {name for name, _ in served} - {kind for _, kind in served}
    if unknown:
        names = ", ".join(name for name, _ in served)
        raise ConfigError(
            f"config: capture.edges: no edge {', '.join(sorted(unknown))} is served (served: {names})"
        )


log = logging.getLogger("nfgate.capture")

PARTIAL = ".parquet.partial"
ROW_GROUP = 16_384  # rows per write: bounds how long the writer holds the GIL at once
CHUNK = 2_048  # records converted to Arrow per call (see Capture._write)
LOG_EVERY_S = 60.0  # while writes keep failing, one ERROR line at most this often
RENAME_RETRY_S = 1.0  # a segment the directory would not rename is tried again this often
# close() waits for the writer as long as it makes progress, but gives up on one that has
# moved nothing for this long (a hung mount): the process must be able to exit.
STALL_S = 30.0


@attrs.frozen(kw_only=True)
class CaptureConfig:
    """``[capture]`` in the config file, ``--capture DIR`` on the command line."""

    dir: Path
    segment_s: int = 60
    segment_rows: int = 1_000_000
    max_pending: int = 1_000_000
    max_bytes: int = 0  # closed segments kept in dir; 0: no limit
    edges: tuple[str, ...] = ()  # edge names or kinds to capture; empty: every edge


def load_arrow() -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``; raises :class:`ConfigError` naming the extra to
    install when pyarrow is missing (capture is optional, pyarrow is not a core dependency)."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError("capture needs pyarrow: pip install 'nfgate[capture]'") from None
    return pyarrow, pyarrow.parquet


def capture_schema(pa: Any) -> pa.Schema:
    """The segments' columns (``pa`` is the pyarrow module); what ``nfgate analyze``
    checks a segment against."""
    return pa.schema(
        [
            ("ts_ns", pa.int64()),
            ("edge", pa.string()),
            ("protocol", pa.string()),
            ("transport", pa.string()),
            ("direction", pa.string()),
            ("peer", pa.string()),
            ("frames", pa.list_(pa.binary())),
            ("truncated", pa.string()),
        ]
    )


_Record = tuple[int, str, str, str, str, str, Sequence[bytes], str | None]


def _frames_array(pa: Any, messages: Sequence[Sequence[bytes]]) -> Any:
    """The ``frames`` column: offsets and one flat binary array. pyarrow builds it much
    faster that way than from a list of tuples (a 16,384-record batch of 8-frame
    records, every column converted: 0.7 against 2.7 µs per record)."""
    offsets = [0, *itertools.accumulate(map(len, messages))]
    flat = pa.array(list(itertools.chain.from_iterable(messages)), pa.binary())
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat)


class Capture:
    """The capture of one gateway run: taps for the transports, one writer thread.

    Raises :class:`ConfigError` at construction when the directory cannot be created or
    pyarrow is missing. Nothing raises later: a write that fails is counted and logged
    (the module's docstring, "Write failures").
    """

    def __init__(
        self,
        config: CaptureConfig,
        *,
        clock: Callable[[], int] = time.time_ns,
        flush_s: float = 0.2,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._pa, self._pq = load_arrow()
        self._schema = capture_schema(self._pa)
        try:
            # 0700: a capture holds every body that crossed the gateway (credentials too).
            config.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"capture: cannot create {config.dir}: {exc.strerror}") from None
        if not os.access(config.dir, os.W_OK):
            raise ConfigError(f"capture: {config.dir} is not writable")
        self._clock = clock
        self._monotonic = monotonic  # segment age and the failure log's rate (a test's clock)
        self._flush_s = flush_s  # how often the writer wakes to take what is queued
        self._queue: deque[_Record] = deque()
        self.taken = 0  # records handed over by the loop
        self.dropped = 0  # records refused because the writer was max_pending behind
        self.written = 0  # records in closed segments (writer thread)
        self.lost = 0  # records taken but in no closed segment: a write, close or rename failed
        self.segments = 0  # segments closed
        self.deleted = 0  # closed segments deleted to stay under max_bytes
        self.errors = 0  # operations that failed (write, close, rename, delete), each logged or counted
        self._stop = threading.Event()
        self._writer: pq.ParquetWriter | None = None
        self._partial: Path | None = None
        self._opened_at = 0.0
        self._rows_in_segment = 0
        self._seq = 0
        self._unrenamed: list[tuple[Path, int]] = []  # complete segments the directory would not rename
        self._renamed_at = 0.0  # when they were last tried
        self._failing_since: float | None = None  # while writes fail: when they started to
        self._lost_before_failing = 0
        self._logged_at = 0.0
        self._unlogged = 0  # failures since the last ERROR line
        self._thread = threading.Thread(target=self._run, name="nfgate-capture", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ loop thread

    def tap_for(self, edge: str, protocol: str, transport: str) -> Tap:
        """The tap one transport of ``edge`` calls for every message it moves.

        ``truncated`` (keyword): the transport dropped this message for a limit and
        ``frames`` are only those it kept, ``"frames"`` (over ``max_frames``) or
        ``"bytes"`` (over ``max_message_bytes``); recorded so that the analysis does
        not read the cut message as a whole one."""
        queue, clock, limit = self._queue, self._clock, self.config.max_pending

        def tap(direction: str, peer: str, frames: Sequence[bytes], truncated: str | None = None) -> None:
            if len(queue) >= limit:
                self.dropped += 1
                if self.dropped == 1 or self.dropped % 100_000 == 0:
                    log.warning("capture: %d records dropped, the writer is behind", self.dropped)
                return
            # A copy of the list: the edge may reuse or extend it after the send.
            queue.append((clock(), edge, protocol, transport, direction, peer, tuple(frames), truncated))
            self.taken += 1

        return tap

    def attach(self, edges: Iterable[Any]) -> None:
        """Give a tap to every transport of ``edges`` (what :meth:`Edge.wires` lists), or
        of those ``config.edges`` names (an edge's name, ``nfp-2``, or its kind, ``nfp``,
        for all of that kind's). Raises :class:`ConfigError`, before any tap is given,
        when a name matches no edge."""
        edges = list(edges)
        wanted = set(self.config.edges)
        check_edges(self.config, [(e.name, e.kind) for e in edges])
        for edge in edges:
            if wanted and edge.name not in wanted and edge.kind not in wanted:
                continue
            for wire in edge.wires():
                kind = getattr(wire, "capture_kind", None)
                if kind is not None:
                    wire.tap = self.tap_for(edge.name, edge.protocol, kind)

    @property
    def pending(self) -> int:
        """Records the loop has handed over and the writer has not taken yet."""
        return len(self._queue)

    def stats(self) -> dict[str, int]:
        """The counters the gateway publishes (``extra_stats``: ``get_stats`` and the
        metrics' ``nfgate_capture_*``). At rest, ``records = written + lost``;
        ``dropped`` counts the records never queued (the writer was behind)."""
        return {
            "records": self.taken,
            "dropped": self.dropped,
            "written": self.written,
            "lost": self.lost,
            "segments": self.segments,
            "deleted": self.deleted,
            "write_errors": self.errors,
            "pending": self.pending,
        }

    def close(self) -> None:
        """Write what is queued, close the segment and stop the thread.

        Waits as long as the writer makes progress (a slow disk still loses nothing),
        but not for a writer that has moved nothing for ``STALL_S`` seconds: one stuck
        in a write that never returns (a hung NFS mount) held the exit for ever, and
        the signal handlers only ask the loop to stop, which has stopped already. What
        it had not written is then said in an ERROR line and lost."""
        self._stop.set()
        stall_s = STALL_S  # read now: a test lowers it
        progress, since = None, time.monotonic()
        while True:
            self._thread.join(min(stall_s, 0.1))
            if not self._thread.is_alive():
                return
            # Any of these moves while the writer works: it takes batches off the queue,
            # closes segments, counts what it could not write.
            now, seen = time.monotonic(), (len(self._queue), self.segments, self.lost, self.errors)
            if seen != progress:
                progress, since = seen, now
            elif now - since >= stall_s:
                break
        # Neither in a closed segment nor counted lost: queued, in the writer's hands, or
        # in its open segment (which stays .partial, skipped by nfgate analyze).
        unwritten = self.taken - self.written - self.lost
        log.error(
            "capture: the writer has made no progress for %.0f s (a hung disk?); stopping without "
            "it: %d records are not written to %s",
            now - since,
            unwritten,
            self.config.dir,
        )

    # ---------------------------------------------------------- writer thread

    def _run(self) -> None:
        while not self._stop.wait(self._flush_s):
            self._drain(final=False)
        self._drain(final=True)
        self._close_segment()
        self._rename_unrenamed(final=True)
        if self._failing_since is not None:
            log.error(
                "capture: stopped while writing to %s failed; %d records lost in all",
                self.config.dir,
                self.lost,
            )

    def _drain(self, *, final: bool) -> None:
        if self._unrenamed:
            self._rename_unrenamed(final=False)
        queue = self._queue
        while queue:
            # A segment holds segment_rows at most: the batch stops where it is full.
            size = max(1, min(ROW_GROUP, self.config.segment_rows - self._rows_in_segment, len(queue)))
            take = queue.popleft
            self._write([take() for _ in range(size)])
        if (
            not final
            and self._writer is not None
            and self._monotonic() - self._opened_at >= self.config.segment_s
        ):
            self._close_segment()

    def _write(self, batch: list[_Record]) -> None:
        pa = self._pa
        try:
            # Arrow arrays of CHUNK records at a time: converting Python objects holds the
            # GIL for the whole call, and the event loop waits for it meanwhile.
            chunks = [
                rb for i in range(0, len(batch), CHUNK) for rb in self._record_batches(batch[i : i + CHUNK])
            ]
            table = pa.Table.from_batches(chunks, schema=self._schema)
        except Exception as exc:  # records Arrow cannot hold: they are lost, the segment is intact
            self._failed(len(batch), f"cannot convert {len(batch)} records: {exc}")
            return
        try:
            writer = self._writer if self._writer is not None else self._open_segment()
            writer.write_table(table, row_group_size=len(batch))
        except Exception as exc:  # a full disk must not kill the thread: count, log, go on
            # The file may now end in half a row group: it is no segment any more.
            self._failed(len(batch) + self._discard_segment(), exc)
            return
        self._rows_in_segment += len(batch)
        self._recovered()
        if self._rows_in_segment >= self.config.segment_rows:
            self._close_segment()

    def _record_batches(self, records: list[_Record]) -> list[pa.RecordBatch]:
        pa = self._pa
        columns = list(zip(*records, strict=True))
        arrays = [
            pa.array(col, type=field.type) for col, field in zip(columns[:6], self._schema, strict=False)
        ]
        try:
            arrays.append(_frames_array(pa, columns[6]))
        except pa.ArrowCapacityError:
            # Over 2 GiB of frames in one chunk (a binary array's limit): in halves.
            if len(records) == 1:
                raise
            half = len(records) // 2
            return self._record_batches(records[:half]) + self._record_batches(records[half:])
        arrays.append(pa.array(columns[7], type=pa.string()))
        return [pa.RecordBatch.from_arrays(arrays, schema=self._schema)]

    def _open_segment(self) -> pq.ParquetWriter:
        directory = self.config.dir
        if not directory.is_dir():
            # Removed under a running gateway (an operator, a cleanup job): made again, 0700.
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            log.warning("capture: %s was removed; created it again", directory)
        self._seq += 1
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
        self._partial = directory / f"capture-{stamp}-{os.getpid()}-{self._seq:05d}{PARTIAL}"
        self._rows_in_segment = 0
        self._writer = self._pq.ParquetWriter(
            self._partial,
            self._schema,
            compression="zstd",
            # Dictionaries for the few-valued columns only, and statistics for the time
            # (what a reader filters on): half the writer's encoding time (0.60 -> 0.31
            # µs per DCP record, measured), and smaller files.
            use_dictionary=["edge", "protocol", "transport", "direction", "peer", "truncated"],
            write_statistics=["ts_ns"],
        )
        self._opened_at = self._monotonic()
        return self._writer

    def _discard_segment(self) -> int:
        """Drop the open segment after a failed write: close what can be closed, delete
        the file (it may lack its footer, or hold half a row group). Returns the records
        it held, now lost."""
        writer, partial, rows = self._writer, self._partial, self._rows_in_segment
        self._writer = self._partial = None
        self._rows_in_segment = 0
        if writer is not None:
            # The disk that failed the write may fail this too; the file goes anyway.
            with contextlib.suppress(Exception):
                writer.close()
        if partial is not None:
            # Nothing more to do if this fails too: nfgate analyze skips a .partial.
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        return rows

    def _close_segment(self) -> None:
        writer, partial, rows = self._writer, self._partial, self._rows_in_segment
        if writer is None or partial is None:
            self._writer = self._partial = None
            self._rows_in_segment = 0
            return
        try:
            writer.close()  # writes the footer: a full disk can fail it
        except Exception as exc:
            self._failed(self._discard_segment(), exc)
            return
        self._writer = self._partial = None
        self._rows_in_segment = 0
        self._rename(partial, rows)

    def _rename(self, partial: Path, rows: int, *, retry: bool = False) -> bool:
        """``x.parquet.partial`` -> ``x.parquet``. False when the directory refused it:
        the file is complete, so it waits in ``_unrenamed`` to be tried again."""
        try:
            os.replace(partial, partial.with_name(partial.name.removesuffix(".partial")))
        except FileNotFoundError as exc:  # the directory was removed with the file in it
            self._failed(rows, exc)
            return True
        except OSError as exc:  # a read-only directory
            self._unrenamed.append((partial, rows))
            if not retry:  # a failure counted once, not at every retry
                self._failed(0, exc)
            return False
        self.segments += 1
        self.written += rows
        if self.config.max_bytes:
            self._prune()
        return True

    def _rename_unrenamed(self, *, final: bool) -> None:
        now = self._monotonic()
        if not final and now - self._renamed_at < RENAME_RETRY_S:
            return
        self._renamed_at = now
        waiting, self._unrenamed = self._unrenamed, []
        if any([self._rename(partial, rows, retry=True) for partial, rows in waiting]):
            self._recovered()
        if final:
            for partial, rows in self._unrenamed:
                self.lost += rows
                log.error(
                    "capture: %s is complete but could not be renamed; its %d records are counted lost "
                    "(rename it to .parquet for nfgate analyze to read it)",
                    partial,
                    rows,
                )
            self._unrenamed = []

    def _failed(self, records: int, exc: object) -> None:
        """Count a failed operation and the records it lost; log the first of a run of
        failures, then at most one line every LOG_EVERY_S."""
        self.errors += 1
        self.lost += records
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        now = self._monotonic()
        if self._failing_since is None:
            self._failing_since = self._logged_at = now
            self._lost_before_failing = self.lost - records
            self._unlogged = 0
            log.error(
                "capture: cannot write to %s (%s); records are lost until it works again "
                "(%d so far; counted in lost; logged at most once a minute)",
                self.config.dir,
                reason,
                records,
            )
            return
        self._unlogged += 1
        if now - self._logged_at >= LOG_EVERY_S:
            log.error(
                "capture: still cannot write to %s (%s); %d failures in the last %.0f s, "
                "%d records lost since it started",
                self.config.dir,
                reason,
                self._unlogged,
                now - self._logged_at,
                self.lost - self._lost_before_failing,
            )
            self._logged_at = now
            self._unlogged = 0

    def _recovered(self) -> None:
        if self._failing_since is None:
            return
        log.info(
            "capture: writing to %s again after %.0f s of failures; %d records were lost",
            self.config.dir,
            self._monotonic() - self._failing_since,
            self.lost - self._lost_before_failing,
        )
        self._failing_since = None

    def _prune(self) -> None:
        """Delete the oldest closed segments until the rest fit in ``max_bytes``."""
        found = []
        for path in self.config.dir.glob("capture-*.parquet"):
            try:
                st = path.stat()
            except OSError:  # deleted meanwhile (an analyst, another gateway)
                continue
            found.append((st.st_mtime_ns, path.name, st.st_size, path))
        found.sort()
        total = sum(size for _, _, size, _ in found)
        removed = freed = 0
        for _, _, size, path in found[:-1]:  # the newest stays, whatever its size
            if total <= self.config.max_bytes:
                break
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                self.errors += 1
                log.error("capture: cannot delete %s: %s", path, exc)
                continue
            total -= size
            removed += 1
            freed += size
        if removed:
            self.deleted += removed
            log.info(
                "capture: deleted the %d oldest segment(s), %d bytes, to stay under max_bytes", removed, freed
            )
