"""``--capture``: every frame list in and out of every edge, as Parquet segments
(nfgate/capture.py, design.md "Capture and the pipeline")."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import zmq

from nfgate.capture import Capture, CaptureConfig
from nfgate.codecs import dcp, memodb
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.memodb.messages import Job, Result
from nfgate.config import load
from nfgate.errors import ConfigError
from nfgate.transports.nng import connect_req

from .conftest import Running, echo_one, echo_worker, finish, recv, start_gateway, until

pytestmark = pytest.mark.timeout(60)

QUIET = "[edges.nfp]\nheartbeat_ms = 60000\n[edges.dcp]\nheartbeat_ms = 60000\n[edges.memodb]\nheartbeat_ms = 60000\n"


def records(directory: Path) -> list[dict[str, Any]]:
    """Every record of every closed segment, oldest first."""
    rows: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return sorted(rows, key=lambda r: r["ts_ns"])


@pytest.fixture
def captured(tmp_path: Path) -> Iterator[tuple[Running, Path]]:
    directory = tmp_path / "cap"
    running = start_gateway(tmp_path, QUIET, disabled=["dbp", "sada", "sada-server"], capture_dir=directory)
    try:
        yield running, directory
    finally:
        if running.thread.is_alive():
            finish(running)


def test_every_message_in_and_out_is_in_the_capture_as_it_was_on_the_wire(
    captured: tuple[Running, Path],
) -> None:
    gw, directory = captured
    # An NFP spec worker serves a DCP client and a MemoDB client; one undecodable message.
    worker = echo_worker(gw, b"cw1")

    client = gw.dealer("dcp", b"dcp-client")
    request = dcp.encode(DcpRequest(service=b"echo", metadata=(b"m1",), data=(b"hi",)))
    client.send_multipart(request)
    echo_one(worker)
    assert dcp.decode(recv(client)) == DcpReply(metadata=(b"m1",), data=(b"hi",))
    req = connect_req(gw.endpoint("memodb"), recv_timeout_ms=3000)
    try:
        [job] = memodb.encode(Job(id=b"j1", service="echo", timeout_ms=5000, payload=b"p"))
        req.send(job)
        echo_one(worker)
        assert isinstance(memodb.decode([req.recv()]), Result)
    finally:
        req.close()
    gw.dealer("nfp", b"junk").send_multipart([b"x"])
    until(lambda: gw.gateway.edges["nfp"].traffic().receive_failures == 1)
    finish(gw)  # a clean stop: the capture is closed after the edges, with all it was given
    # Read after the stop: the drain's DISCONNECT to the worker is in both.
    traffic = {name: gw.gateway.edges[name].traffic() for name in ("nfp", "dcp", "memodb")}

    assert not list(directory.glob("*.partial"))
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700  # bodies, credentials: the owner's only
    rows = records(directory)
    counts = Counter((r["edge"], r["direction"]) for r in rows)
    for name, t in traffic.items():
        assert counts[(name, "in")] == t.received, name
        assert counts[(name, "out")] == t.sent, name
    by_edge = {r["edge"]: r for r in rows}
    assert by_edge["memodb"]["transport"] == "nng" and by_edge["memodb"]["peer"].startswith("pipe-")
    assert {r["protocol"] for r in rows} == {"nfp", "dcp", "memodb"}
    dcp_rows = [r for r in rows if r["edge"] == "dcp"]
    assert [(r["direction"], r["peer"], r["transport"]) for r in dcp_rows] == [
        ("in", "dcp-client", "zmq"),
        ("out", "dcp-client", "zmq"),
    ]
    assert dcp_rows[0]["frames"] == request  # the frames as sent, identity envelope stripped
    assert [r["frames"] for r in rows if r["peer"] == "junk"] == [[b"x"]]
    stats = gw.gateway.stats()["capture"]
    assert stats["records"] == stats["written"] == len(rows) and stats["dropped"] == 0


def test_a_message_the_gateway_dropped_is_captured_marked_as_cut(captured: tuple[Running, Path]) -> None:
    # The capture keeps what the transport kept of a message over a limit (no more, so
    # a peer cannot make the capture hold it whole), marked so that it does not read as
    # a valid message with fewer frames.
    gw, directory = captured
    sock = gw.dealer("dcp", b"greedy")
    sock.send_multipart([b"", b"DGBX\x01", b"\x04", b"echo", *[b"m"] * 100])
    sock.send_multipart(dcp.encode(DcpRequest(service=b"echo", metadata=(b"ok",), data=(b"x",))))
    until(lambda: gw.gateway.edges["dcp"].stats()["too_many_frames"] == 1)
    finish(gw)
    mine = [r for r in records(directory) if r["peer"] == "greedy"]
    assert [r["truncated"] for r in mine] == ["frames", None]
    assert len(mine[0]["frames"]) == 65  # the identity aside: max_frames and one more


def test_capture_edges_records_only_the_edges_it_names(tmp_path: Path) -> None:
    directory = tmp_path / "cap"
    toml = QUIET + '[capture]\nedges = ["dcp"]\n'
    gw = start_gateway(tmp_path, toml, disabled=["dbp", "sada", "sada-server"], capture_dir=directory)
    try:
        worker = echo_worker(gw, b"cw1")  # NFP traffic: not captured
        client = gw.dealer("dcp", b"dc1")
        client.send_multipart(dcp.encode(DcpRequest(service=b"echo", metadata=(b"m",), data=(b"x",))))
        echo_one(worker)
        assert isinstance(dcp.decode(recv(client)), DcpReply)
    finally:
        finish(gw)
    rows = records(directory)
    dcp_traffic = gw.gateway.edges["dcp"].traffic()
    assert {r["edge"] for r in rows} == {"dcp"}
    assert len(rows) == dcp_traffic.received + dcp_traffic.sent > 0
    assert gw.gateway.edges["nfp"].traffic().received > 0


def test_capture_edges_naming_no_served_edge_is_a_config_error(tmp_path: Path) -> None:
    from nfgate.serve import build
    from tests.ports import random_binds

    config = tmp_path / "nfgate.toml"
    config.write_text('[capture]\nedges = ["dcp", "nfq"]\n')
    cfg = load(config, data_dir=tmp_path / "data", binds=random_binds(), capture_dir=tmp_path / "cap")
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with pytest.raises(
            ConfigError, match=r"^config: capture\.edges: no edge nfq is served \(served: nfp, "
        ):
            build(cfg, context)
    finally:
        context.term()  # returns: build closed every socket it opened
    config.write_text('[capture]\nedges = "dcp"\n')
    with pytest.raises(ConfigError, match=r"^config: capture\.edges must be a list of edge names"):
        load(config)


def test_segments_roll_by_rows_and_close_writes_what_is_queued(tmp_path: Path) -> None:
    cap = Capture(CaptureConfig(dir=tmp_path, segment_rows=10), flush_s=3600)  # drains only at close
    tap = cap.tap_for("dcp", "dcp", "zmq")
    for i in range(25):
        tap("in", "peer", [b"", str(i).encode()])
    assert cap.written == 0 and cap.stats()["pending"] == 25
    cap.close()
    files = sorted(tmp_path.glob("*.parquet"))
    assert [pq.read_metadata(f).num_rows for f in files] == [10, 10, 5]
    assert [r["frames"][1] for f in files for r in pq.read_table(f).to_pylist()] == [
        str(i).encode() for i in range(25)
    ]
    assert cap.stats() | {"pending": 0} == {
        "records": 25,
        "dropped": 0,
        "written": 25,
        "segments": 3,
        "deleted": 0,
        "write_errors": 0,
        "lost": 0,
        "pending": 0,
    }


def _ten_record_segments(directory: Path, count: int, max_bytes: int = 0) -> Capture:
    cap = Capture(CaptureConfig(dir=directory, segment_rows=10, max_bytes=max_bytes), flush_s=3600)
    tap = cap.tap_for("dcp", "dcp", "zmq")
    for i in range(10 * count):
        tap("in", "peer", [b"", b"%04d" % i])
    cap.close()
    return cap


def test_a_disk_budget_deletes_the_oldest_closed_segments(tmp_path: Path) -> None:
    _ten_record_segments(tmp_path / "reference", 1)
    one = next((tmp_path / "reference").glob("*.parquet")).stat().st_size
    directory = tmp_path / "ring"
    directory.mkdir()
    earlier = directory / "capture-20261124T000000-1-00001.parquet"  # an earlier run's
    earlier.write_bytes(b"x" * one)
    os.utime(earlier, ns=(0, 0))  # older than anything this run writes
    crashed = directory / "capture-20261124T000000-1-00002.parquet.partial"
    crashed.write_bytes(b"x" * 10 * one)
    notes = directory / "notes.txt"
    notes.write_bytes(b"x" * 10 * one)

    cap = _ten_record_segments(directory, 6, max_bytes=one * 5 // 2)  # room for two

    kept = sorted(directory.glob("*.parquet"))
    assert len(kept) == 2 and earlier not in kept
    assert sum(f.stat().st_size for f in kept) <= one * 5 // 2
    # The newest two: the last 20 records, in order.
    assert [r["frames"][1] for f in kept for r in pq.read_table(f).to_pylist()] == [
        b"%04d" % i for i in range(40, 60)
    ]
    assert (cap.segments, cap.deleted, cap.errors) == (6, 5, 0)
    assert crashed.exists() and notes.exists()  # only closed segments count and go


def test_the_newest_segment_is_kept_whatever_its_size(tmp_path: Path) -> None:
    cap = _ten_record_segments(tmp_path, 3, max_bytes=1)
    assert len(list(tmp_path.glob("*.parquet"))) == 1 and cap.deleted == 2


def test_a_writer_that_falls_behind_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    cap = Capture(CaptureConfig(dir=tmp_path, max_pending=5), flush_s=3600)
    tap = cap.tap_for("nfp", "nfp", "zmq")
    for _ in range(8):
        tap("out", "w", [b"frame"])
    cap.close()
    assert (cap.taken, cap.dropped, cap.written) == (5, 3, 5)


def test_capture_config_names_the_bad_key(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('[capture]\ndir = "caps"\nsegment_s = 0\n')
    with pytest.raises(ConfigError, match=r"capture\.segment_s must be an integer from 1 to "):
        load(config)
    config.write_text('[capture]\ndir = "caps"\nmax_bytes = -1\n')
    with pytest.raises(ConfigError, match=r"capture\.max_bytes must be an integer from 0 to \d+, got -1"):
        load(config)
    config.write_text('[capture]\ndir = "caps"\nsegment_rows = 5\nmax_bytes = 10_000_000_000\n')
    cfg = load(config)
    assert cfg.capture == CaptureConfig(dir=tmp_path / "caps", segment_rows=5, max_bytes=10_000_000_000)
    assert load(None, capture_dir=tmp_path / "x").capture == CaptureConfig(dir=tmp_path / "x")
    assert load(None).capture is None


def test_capture_without_pyarrow_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ConfigError, match=r"^capture needs pyarrow: pip install 'nfgate\[capture\]'$"):
        Capture(CaptureConfig(dir=tmp_path))
    assert not list(tmp_path.iterdir())


def test_serve_capture_flag_writes_segments_and_exits_0(tmp_path: Path) -> None:
    from tests.serving import start, stop

    directory = tmp_path / "cap"
    server = start(
        "--data-dir",
        str(tmp_path / "data"),
        "--bind",
        "dcp=tcp://127.0.0.1:0",
        "--capture",
        str(directory),
        "--no-metrics",
        *(f"--no-{k}" for k in ("nfp", "memodb", "dbp", "sada", "sada-server")),
    )
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        assert any(f"capturing to {directory}" in line for line in server.lines)
        sock.connect(server.endpoints["dcp"])
        sock.send_multipart(dcp.encode(DcpRequest(service=b"nobody", metadata=(), data=(b"x",))))
        # No worker: the request waits in its queue; its one frame list is captured.
        assert sock.poll(300) == 0
    finally:
        sock.close(0)
        ctx.term()
        assert stop(server) == 0
    rows = records(directory)
    assert [(r["edge"], r["direction"]) for r in rows] == [("dcp", "in")]


def test_capture_into_an_unwritable_place_is_one_line_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nfgate",
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--capture",
            str(blocker / "x"),
        ]
        + ["--no-metrics", "--bind", "nfp=tcp://127.0.0.1:0", "--bind", "dcp=tcp://127.0.0.1:0"]
        + [f"--no-{k}" for k in ("memodb", "dbp", "sada", "sada-server")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error") or "capture" in line]
    assert errors and "capture: cannot create" in errors[-1], proc.stderr


def test_frames_over_a_binary_arrays_limit_are_written_in_smaller_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa

    import nfgate.capture as capture_module

    real = capture_module._frames_array

    def limited(pa_module: Any, messages: Any) -> Any:
        if len(messages) > 2:  # stands in for 2 GiB of frames, which a test cannot allocate
            raise pa.ArrowCapacityError("array cannot contain more than 2147483646 bytes")
        return real(pa_module, messages)

    monkeypatch.setattr(capture_module, "_frames_array", limited)
    cap = Capture(CaptureConfig(dir=tmp_path), flush_s=3600)
    tap = cap.tap_for("dcp", "dcp", "zmq")
    for i in range(7):
        tap("in", "p", [str(i).encode()])
    cap.close()
    rows = records(tmp_path)
    assert [r["frames"] for r in rows] == [[str(i).encode()] for i in range(7)]
    assert (cap.written, cap.errors) == (7, 0)
