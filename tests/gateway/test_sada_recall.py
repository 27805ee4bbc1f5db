"""The SADA channel asks its servers back after a restart (nfgate/edges/sada_recall.py):
"If a channel restarted, it can send a RINTR(request for INTR) command to servers. and
servers SHOULD response by INTR command" (specs/safir-darbaan.md)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import sada
from nfgate.codecs.sada.messages import PROTO_ASCII, PROTO_BYTE, Intr, Ping, Pong, Rintr
from nfgate.edges.sada_recall import RETRY_MS, ServerRecall
from tests.ports import random_binds

from .conftest import RECV_MS, Running, finish, recv, start_gateway, until
from .nfp_helpers import mmi_call

pytestmark = pytest.mark.timeout(60)

SLOW = """
[edges.sada]
heartbeat_ms = 2000
liveness = 3
"""


@pytest.fixture
def port() -> int:
    """A free port for the channel: the same before and after the restart."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


def _server(ctx: zmq.Context[zmq.Socket[bytes]], url: str, identity: bytes | None) -> zmq.Socket[bytes]:
    """A SADA server's socket (a DEALER talks to the channel's ROUTER as a ROUTER with one
    peer would), living across the gateway's restart: libzmq reconnects it."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, RECV_MS)
    if identity is not None:
        sock.setsockopt(zmq.ROUTING_ID, identity)
    sock.connect(url)
    return sock


def _next(sock: zmq.Socket[bytes]) -> object:
    """The next message that is not a PING (answered PONG)."""
    for _ in range(50):
        frames = recv(sock)
        message = sada.decode(frames, sada.detect(frames))
        if not isinstance(message, Ping):
            return message
        sock.send_multipart(sada.encode(Pong(proto=message.proto)))
    pytest.fail("only PINGs")


def _start(tmp_path: Path, port: int) -> Running:
    binds = [(k, u) for k, u in random_binds() if k != "sada"] + [("sada", f"tcp://127.0.0.1:{port}")]
    return start_gateway(tmp_path, SLOW, binds=binds)


def _served(gw: Running) -> list[str]:
    return sorted(s.name for w in gw.gateway.router.workers() for s in w.services)


def _intr(sock: zmq.Socket[bytes], proto: bytes, *services: str) -> None:
    sock.send_multipart(sada.encode(Intr(proto=proto, services=tuple((name, "") for name in services))))


def test_an_idle_server_is_asked_back_after_the_gateway_restarts(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]], port: int
) -> None:
    url = f"tcp://127.0.0.1:{port}"
    gw = _start(tmp_path, port)
    try:
        named = _server(ctx, url, b"srv-1")  # an identity of its own: kept
        anonymous = _server(ctx, url, None)  # libzmq's: names one connection only
        _intr(named, PROTO_BYTE, "kept")
        _intr(anonymous, PROTO_ASCII, "lost")
        until(lambda: _served(gw) == ["kept", "lost"])
    finally:
        finish(gw)
    gw = _start(tmp_path, port)  # the same data dir and endpoint; both servers stay idle
    try:
        assert _next(named) == Rintr(proto=PROTO_BYTE)  # in the form it spoke
        _intr(named, PROTO_BYTE, "kept")
        until(lambda: _served(gw) == ["kept"])
        assert gw.gateway.edges["sada"].stats()["rintr_sent"] == 1
        assert anonymous.poll(3 * RETRY_MS) == 0  # never written down: nothing to ask
        assert gw.gateway.edges["sada"].stats()["unroutable"] == 0  # the tries before it connected
    finally:
        finish(gw)


def test_a_server_that_withdrew_is_not_asked_back(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]], port: int
) -> None:
    url = f"tcp://127.0.0.1:{port}"
    gw = _start(tmp_path, port)
    try:
        server = _server(ctx, url, b"srv-2")
        _intr(server, PROTO_BYTE, "gone")
        until(lambda: _served(gw) == ["gone"])
        _intr(server, PROTO_BYTE)  # "INTR with zero services"
        until(lambda: not _served(gw))
    finally:
        finish(gw)
    gw = _start(tmp_path, port)
    try:
        assert server.poll(5 * RETRY_MS) == 0
    finally:
        finish(gw)


def test_an_idle_server_re_registers_after_an_mmi_restart(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]], port: int
) -> None:
    # "restart (every worker is disconnected and re-registers)": a SADA server has no
    # DISCONNECT, and idle it would not speak again; RINTR asks it to introduce itself.
    gw = _start(tmp_path, port)
    try:
        server = _server(ctx, f"tcp://127.0.0.1:{port}", None)  # any identity: same connection
        _intr(server, PROTO_ASCII, "svc")
        until(lambda: _served(gw) == ["svc"])
        status, _ = mmi_call(gw.dealer("nfp"), "mmi.service.broker", "restart")
        assert status == 200
        assert _next(server) == Rintr(proto=PROTO_ASCII)
        assert not _served(gw)
        _intr(server, PROTO_ASCII, "svc")
        until(lambda: _served(gw) == ["svc"])
    finally:
        finish(gw)


def test_a_server_back_from_a_network_break_is_asked_back(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]], port: int
) -> None:
    # Its PING found no connection: forgotten ("socket gone"), and asked back with RINTR
    # once it reconnects, or, idle, it would never be heard from again.
    binds = [(k, u) for k, u in random_binds() if k != "sada"] + [("sada", f"tcp://127.0.0.1:{port}")]
    gw = start_gateway(tmp_path, "[edges.sada]\nheartbeat_ms = 100\nliveness = 50\n", binds=binds)
    try:
        url = f"tcp://127.0.0.1:{port}"
        server = _server(ctx, url, b"srv-3")
        _intr(server, PROTO_BYTE, "svc")
        until(lambda: _served(gw) == ["svc"])
        server.close(0)  # the break
        until(lambda: not _served(gw))
        back = _server(ctx, url, b"srv-3")  # the same server, its socket reconnected
        assert _next(back) == Rintr(proto=PROTO_BYTE)
        _intr(back, PROTO_BYTE, "svc")
        until(lambda: _served(gw) == ["svc"])
    finally:
        finish(gw)


# ------------------------------------------------------------- the file alone


def _rintr_to(reachable: set[bytes], asked: list[bytes]) -> Callable[[bytes, bytes, str], bool]:
    def rintr(identity: bytes, proto: bytes, dialect: str) -> bool:
        asked.append(identity)
        return identity in reachable

    return rintr


def test_the_recall_asks_until_each_server_is_connected_then_gives_up_on_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    first = ServerRecall(path, window_ms=1000, limit=10)
    first.keep(b"a", PROTO_BYTE, "spec")
    first.keep(b"b", PROTO_ASCII, "piran")
    again = ServerRecall(path, window_ms=1000, limit=10)
    assert again.pending == 2 and again.due() == 0
    asked: list[bytes] = []
    assert again.ask(0, _rintr_to(set(), asked)) == 0 and asked == [b"a", b"b"]
    assert again.due() == RETRY_MS and again.ask(RETRY_MS - 1, _rintr_to({b"a"}, asked)) == 0  # not yet
    assert again.ask(RETRY_MS, _rintr_to({b"a"}, asked)) == 1 and again.pending == 1
    assert again.ask(1000, _rintr_to(set(), asked)) == 0  # the window is over: b is given up
    assert again.pending == 0 and again.due() is None
    third = ServerRecall(path, window_ms=1000, limit=10)  # and forgotten: it INTRs when it starts
    assert third.pending == 1 and json.loads(path.read_text())["servers"][0]["identity"] == b"a".hex()
    assert not third.expect(b"b") and third.expect(b"a")  # a break: only a kept one is asked back
    assert third.ask(5000, _rintr_to({b"a"}, asked)) == 1


def test_a_server_whose_connection_went_is_forgotten_without_a_restart_claimed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing restarted: the server's connection went (expect) and it stayed away.
    recall = ServerRecall(tmp_path / "servers.json", window_ms=1000, limit=10)
    recall.keep(b"a", PROTO_BYTE, "spec")
    assert recall.expect(b"a")
    asked: list[bytes] = []
    recall.ask(0, _rintr_to(set(), asked))
    with caplog.at_level("INFO", logger="nfgate.edge.sada"):
        assert recall.ask(1000, _rintr_to(set(), asked)) == 0 and recall.pending == 0
    assert caplog.messages == [
        "1 SADA server(s) not connected again within 1000 ms (of a restart or of their connection going): forgotten"
    ]


def test_the_recall_is_bounded_and_a_bad_file_is_an_empty_list(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    recall = ServerRecall(path, window_ms=1000, limit=2)
    for name in (b"a", b"b", b"c"):
        recall.keep(name, PROTO_BYTE, "spec")
    assert ServerRecall(path, window_ms=1000, limit=10).pending == 2
    assert path.stat().st_mode & 0o077 == 0  # identities and endpoints: the owner's only
    entry = '{"format": 1, "servers": [{"identity": "61", "proto": "%s", "dialect": "%s"}]}'
    for damaged in (
        "{",
        '{"format": 9, "servers": []}',
        '{"format": 1, "servers": [{"identity": "zz"}]}',
        entry % (b"SADA2".hex(), "spec"),  # a RINTR in it could not be encoded: not taken
        entry % (PROTO_BYTE.hex(), "bogus"),
    ):
        path.write_text(damaged)
        assert ServerRecall(path, window_ms=1000, limit=10).pending == 0
