"""The gateway's other threads at a stop (nfgate/capture.py's writer, Gateway.close):
a stop must end, in bounded time, whatever one of them is stuck in, and one part that
fails to close must not keep the others from closing."""

from __future__ import annotations

import datetime
import os
import socket
import sqlite3
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from nfgate import capture, metrics
from nfgate.capture import Capture, CaptureConfig
from nfgate.codecs import dcp
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.store import JobStore

from .conftest import start_gateway, until

pytestmark = pytest.mark.timeout(60)


def _fifos_for_first_segment(directory: Path) -> list[Path]:
    """FIFOs where this process's first segment will be opened, for the next seconds:
    nobody reads them, so the writer's open() blocks as on a hung mount."""
    now = datetime.datetime.now(datetime.UTC)
    fifos = []
    for s in range(-1, 10):
        stamp = (now + datetime.timedelta(seconds=s)).strftime("%Y%m%dT%H%M%S")
        fifo = directory / f"capture-{stamp}-{os.getpid()}-00001.parquet.partial"
        os.mkfifo(fifo)
        fifos.append(fifo)
    return fifos


def test_close_gives_up_on_a_writer_stuck_in_io(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capture, "STALL_S", 0.5, raising=False)
    directory = tmp_path / "cap"
    directory.mkdir()
    fifos = _fifos_for_first_segment(directory)
    cap = Capture(CaptureConfig(dir=directory), flush_s=3600)
    tap = cap.tap_for("dcp", "dcp", "zmq")
    for i in range(3):
        tap("in", "p", [b"%d" % i])
    closing = threading.Thread(target=cap.close, daemon=True)
    started = time.monotonic()
    try:
        closing.start()
        closing.join(10)
        assert not closing.is_alive(), "close() waited for a writer stuck in I/O: the exit hangs"
        assert time.monotonic() - started < 5
        assert any(
            "the writer has made no progress" in m and "3 records are not written" in m
            for m in caplog.messages
        ), caplog.messages
    finally:
        # Let the stuck open() return (the writer then fails on a pipe nobody reads).
        for fifo in fifos:
            if fifo.exists():
                os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        cap._thread.join(10)


def test_close_waits_for_a_slow_writer_that_makes_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(capture, "STALL_S", 1.5, raising=False)
    # Five one-segment batches of 0.5 s each: 2.5 s in all, over stall_s, each under it
    # with a second to spare for the write itself (the first one loads Arrow's writer,
    # slow on a loaded machine).
    cap = Capture(CaptureConfig(dir=tmp_path, segment_rows=2), flush_s=3600)
    write = cap._write

    def slow(batch: list) -> None:  # type: ignore[type-arg]
        time.sleep(0.5)
        write(batch)

    cap._write = slow  # type: ignore[method-assign]
    tap = cap.tap_for("dcp", "dcp", "zmq")
    for i in range(10):
        tap("in", "p", [b"%d" % i])
    cap.close()
    assert not cap._thread.is_alive()
    assert (cap.written, cap.lost, cap.segments) == (10, 0, 5)


def test_a_closer_that_raises_does_not_keep_the_capture_from_being_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job store's last commit fails at the stop (a full data disk): it still closes
    # and raises (JobStore.close), and the capture, closed after it, must still write
    # what it was handed.
    real = JobStore.close

    def full_disk(self: JobStore) -> None:
        real(self)
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(JobStore, "close", full_disk)
    directory = tmp_path / "cap"
    running = start_gateway(
        tmp_path, binds=[("dcp", "tcp://127.0.0.1:*")], capture_dir=directory, no_metrics=True
    )
    capture = running.gateway.extra_stats["capture"].__self__  # type: ignore[attr-defined]
    client = running.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=b"nobody", metadata=(), data=(b"x",))))
    # The DCP edge's transport read it (so the capture took it): capture.taken alone is
    # met at once by the DBP edge's SHALOM, and a loaded machine then stopped first.
    until(lambda: running.gateway.edges["dcp"].transport.received >= 1)  # type: ignore[attr-defined]
    running.stop()
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        running.gateway.close()
    try:
        assert not capture._thread.is_alive(), "the capture was not closed"
        assert not list(directory.glob("*.partial"))
        rows = [r for p in directory.glob("*.parquet") for r in pq.read_table(p).to_pylist()]
        assert [r["frames"][-1] for r in rows if r["edge"] == "dcp"] == [b"x"]
    finally:
        capture.close()
        for s in running._closers:  # type: ignore[attr-defined]
            s.close()
        running.context.destroy(linger=0)


def _handlers() -> int:
    """The metrics server's connection threads alive now (named after their target)."""
    return sum("process_request_thread" in t.name for t in threading.enumerate())


def test_an_idle_metrics_connection_does_not_keep_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    # Long enough that all five connections' threads are seen alive together on a
    # loaded machine, before the first ends.
    monkeypatch.setattr(metrics, "IDLE_S", 1.5, raising=False)
    server = metrics.MetricsServer("http://127.0.0.1:0", lambda: "x 1\n")
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(5)]
    try:
        # Each connection gets a thread; one that never sends a request is closed after
        # IDLE_S, and its thread ends.
        until(lambda: _handlers() == 5)
        until(lambda: _handlers() == 0, timeout=5)
        for sock in idle:
            assert sock.recv(1) == b""  # closed by the server
        with urllib.request.urlopen(server.url, timeout=5) as answer:  # scrapes go on
            assert answer.read() == b"x 1\n"
    finally:
        for sock in idle:
            sock.close()
        server.close()
