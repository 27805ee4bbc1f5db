"""Edge config keys have the effect docs/broker.md and docs/protocols/*.md give them,
checked on one edge built directly (no gateway loop: each step is driven by hand)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import memodb, sada
from nfgate.codecs.memodb.messages import Job as MemoJob
from nfgate.codecs.memodb.messages import Ready as MemoReady
from nfgate.codecs.sada.messages import PROTO_ASCII, Intr, Rep, Req
from nfgate.codecs.sada.session import request_id
from nfgate.edges import EdgeSettings
from nfgate.model import Register
from nfgate.transports.nng import connect_req

from .conftest import finish, start_gateway, until

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


def _receive_until(edge: object, want: type, now: int) -> list[object]:
    """Read the edge until a command of type ``want`` comes (bounded)."""
    got: list[object] = []
    for _ in range(200):
        got += edge.receive(now, 100)  # type: ignore[attr-defined]
        if any(isinstance(c, want) for c in got):
            return got
        edge.sockets()[0].poll(50)  # type: ignore[attr-defined]
    pytest.fail(f"no {want.__name__} from the edge")


def test_sada_heartbeat_ms_0_sends_no_ping_even_while_servers_are_recalled(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path
) -> None:
    # docs/protocols/sada.md: heartbeat_ms = 0 means no PINGs (and no liveness). While
    # servers known before a restart are still asked back, the edge ticks every 200 ms;
    # every server's due time was its last message's, so each tick PINGed every server.
    from nfgate.edges.sada import SadaChannelEdge

    recall = tmp_path / "sada-sada-servers.json"
    ghost = {"identity": b"ghost:1".hex(), "proto": PROTO_ASCII.hex(), "dialect": "spec"}
    recall.write_text(json.dumps({"format": 1, "servers": [ghost]}))  # never reconnects
    settings = EdgeSettings(
        name="sada",
        protocol="sada",
        url="tcp://127.0.0.1:*",
        context=ctx,
        options={"heartbeat": (0, 3)},
    )
    edge = SadaChannelEdge(settings, recall=recall)
    server = ctx.socket(zmq.DEALER)
    server.setsockopt(zmq.LINGER, 0)
    try:
        server.connect(edge.endpoint)
        server.send_multipart(sada.encode(Intr(proto=PROTO_ASCII, services=(("echo", ""),))))
        _receive_until(edge, Register, 1000)
        for now in range(1000, 4000, 200):  # the recall's rounds
            deadline = edge.next_deadline()
            assert deadline is not None  # the recall keeps the edge ticking
            edge.tick(max(now, deadline))
        assert edge.stats()["pings_sent"] == 0
    finally:
        server.close(linger=0)
        edge.close()


SPEC_ID = "client-1/42"
PIRAN_ID = request_id(7, 1_700_000_000_000)  # what PIRAN's Darbaan makes: RQ-<millis>-...


@pytest.mark.parametrize(
    ("dialect", "rid", "status_form"),
    [
        ("auto", SPEC_ID, "spec"),  # told from the REQ's id
        ("auto", PIRAN_ID, "piran"),
        ("spec", PIRAN_ID, "spec"),  # forced: the id says nothing any more
        ("piran", SPEC_ID, "piran"),
    ],
)
def test_sada_channel_dialect_key_sets_the_rep_status_form(
    ctx: zmq.Context[zmq.Socket[bytes]], dialect: str, rid: str, status_form: str
) -> None:
    # docs/protocols/sada.md "Dialect per peer": the dialect changes only the REP status
    # the gateway writes, ASCII "400" or PIRAN's int32; a REQ with no service is answered
    # REP 400 by the edge itself.
    from nfgate.edges.sada import SadaChannelEdge

    settings = EdgeSettings(
        name="sada", protocol="sada", url="tcp://127.0.0.1:*", context=ctx, options={"dialect": dialect}
    )
    edge = SadaChannelEdge(settings)
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    try:
        client.connect(edge.endpoint)
        req = Req(proto=PROTO_ASCII, request_id=rid, service="", category="c", action="a", payload=b"")
        client.send_multipart(sada.encode(req))
        for _ in range(200):
            edge.receive(1000, 100)
            if client.poll(50):
                break
        frames = client.recv_multipart(zmq.NOBLOCK)
        assert sada.detect(frames) == status_form
        rep = sada.decode(frames, status_form)
        assert isinstance(rep, Rep) and rep.status == 400 and rep.request_id == rid
    finally:
        client.close(linger=0)
        edge.close()


@pytest.mark.parametrize(("dialect", "status_form"), [("auto", "spec"), ("piran", "piran")])
def test_sada_server_dialect_key_sets_the_rep_status_form(
    ctx: zmq.Context[zmq.Socket[bytes]], dialect: str, status_form: str
) -> None:
    # The same key on the sada-server edge: a channel's REQ with no service gets REP 400.
    from nfgate.edges.sada_server import SadaServerEdge

    channel = ctx.socket(zmq.ROUTER)
    channel.setsockopt(zmq.LINGER, 0)
    port = channel.bind_to_random_port("tcp://127.0.0.1")
    url = f"tcp://127.0.0.1:{port}"
    channel.setsockopt(zmq.RCVTIMEO, 5000)
    settings = EdgeSettings(
        name="sada-server",
        protocol="sada-server",
        url="",
        context=ctx,
        options={"dialect": dialect, "channels": (url,)},
    )
    edge = SadaServerEdge(settings)
    try:
        server = b""
        for _ in range(200):  # the edge's INTR as its connection comes up (its monitor)
            edge.receive(0, 100)
            if channel.poll(50):
                server = channel.recv_multipart()[0]
                break
        assert server, "no INTR from the sada-server edge"
        req = Req(proto=PROTO_ASCII, request_id=SPEC_ID, service="", category="c", action="a", payload=b"")
        channel.send_multipart([server, *sada.encode(req)])
        frames: list[bytes] = []
        for _ in range(200):
            edge.receive(1000, 100)
            if channel.poll(50):
                frames = channel.recv_multipart()[1:]
                message = sada.decode(frames, sada.detect(frames))
                if isinstance(message, Rep):
                    break
        assert sada.detect(frames) == status_form
        rep = sada.decode(frames, status_form)
        assert isinstance(rep, Rep) and rep.status == 400 and rep.request_id == SPEC_ID
    finally:
        edge.close()
        channel.close(linger=0)


def _sp_ready(sock: socket.socket, n: int, service: str) -> None:
    """READY for ``service`` as request ``n`` of a raw req0 peer (a worker each)."""
    [ready] = memodb.encode(MemoReady(services=(service,)))  # type: ignore[arg-type]
    body = (0x80000000 | n).to_bytes(4, "big") + ready  # req0's request id, high bit set
    sock.sendall(len(body).to_bytes(8, "big") + body)


def _sp_peer(url: str) -> socket.socket:
    """A raw TCP socket that speaks NNG's SP framing as a req0 peer (sp-tcp-mapping: the
    8-byte header naming req0, 0x30; then 64-bit sizes) and reads nothing after the
    header: a peer whose replies cannot go out."""
    host, _, port = url.removeprefix("tcp://").rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
    sock.settimeout(5)
    sock.connect((host, int(port)))
    sock.sendall(b"\x00SP\x00\x00\x30\x00\x00")
    header = b""
    while len(header) < 8:
        header += sock.recv(8 - len(header))
    assert header[:4] == b"\x00SP\x00"
    return sock


@pytest.mark.timeout(60)
def test_memodb_send_timeout_ms_gives_up_a_reply_its_peer_does_not_read(tmp_path: Path) -> None:
    # docs/protocols/memodb.md: "a reply that cannot go out in this time (a peer not
    # reading) is given up (send_failed)". A 32 MB JOB to a worker that reads nothing
    # fills the TCP buffers and holds its connection; the HEARTBEAT its idle neighbour
    # on the same connection is answered after heartbeat_ms waits behind it and is
    # given up after send_timeout_ms (with the default, 30 s, it would still wait).
    # 32 MB: more than the kernel buffers on loopback (Linux's tcp_wmem max is 4 MB).
    gw = start_gateway(tmp_path, "[edges.memodb]\nsend_timeout_ms = 200\nheartbeat_ms = 100\n")
    worker = client = None
    try:
        url = gw.endpoint("memodb")
        edge = gw.gateway.edges["memodb"]
        assert edge.transport.send_timeout_ms == 200  # type: ignore[attr-defined]
        worker = _sp_peer(url)
        _sp_ready(worker, 1, "big")
        until(lambda: len(gw.gateway.router.workers()) == 1)
        client = connect_req(url, recv_timeout_ms=100)
        [job] = memodb.encode(MemoJob(service="big", timeout_ms=60_000, payload=b"x" * (32 << 20)))  # type: ignore[arg-type]
        client.send(job)
        until(lambda: sum(w.in_flight for w in gw.gateway.router.workers()) == 1)  # the JOB is going out
        _sp_ready(worker, 2, "idle")  # its HEARTBEAT queues behind the JOB
        until(lambda: edge.traffic().send_failures >= 1, timeout=20)
        assert edge.traffic().send_failures == 1
    finally:
        if client is not None:
            client.close()
        if worker is not None:
            worker.close()
        finish(gw)


def test_sada_heartbeat_ms_0_still_sends_one_rintr_per_default_interval(
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    # A REP from a server the channel does not know is answered RINTR at most once per
    # heartbeat_ms; with heartbeat_ms = 0 that was once per millisecond, so a server
    # streaming REPs got a RINTR for nearly every one.
    from nfgate.edges.sada import SadaChannelEdge

    settings = EdgeSettings(
        name="sada", protocol="sada", url="tcp://127.0.0.1:*", context=ctx, options={"heartbeat": (0, 3)}
    )
    edge = SadaChannelEdge(settings)
    server = ctx.socket(zmq.DEALER)
    server.setsockopt(zmq.LINGER, 0)
    try:
        server.connect(edge.endpoint)
        rep = Rep(proto=PROTO_ASCII, request_id="r-1", status=200, payload=b"")
        for now in (1000, 1002, 1004):
            server.send_multipart(sada.encode(rep))
            for _ in range(200):
                edge.receive(now, 100)
                if edge.stats()["rintr_sent"] + edge.stats()["rintr_suppressed"] == (now - 998) // 2:
                    break
                server.poll(10)
        assert (edge.stats()["rintr_sent"], edge.stats()["rintr_suppressed"]) == (1, 2)
    finally:
        server.close(linger=0)
        edge.close()


def test_sada_server_curve_secret_key_alone_is_named_with_its_section(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path
) -> None:
    # As every config error: the key with its table (it said only "curve_server_key").
    from nfgate.edges.sada_server import SadaServerEdge
    from nfgate.errors import ConfigError

    settings = EdgeSettings(
        name="sada-server",
        protocol="sada-server",
        url="",
        context=ctx,
        options={"channels": ("tcp://127.0.0.1:5055",), "curve_secret_key": tmp_path / "server.key_secret"},
    )
    with pytest.raises(
        ConfigError,
        match=r"^config: edges\.sada-server\.curve_secret_key needs edges\.sada-server\.curve_server_key ",
    ):
        SadaServerEdge(settings)


def test_limits_reach_every_zeromq_edges_socket_and_memodbs_receive_limit(tmp_path: Path) -> None:
    # [limits] high_water_mark and max_message_bytes are socket options (docs/broker.md):
    # each ZeroMQ edge's ROUTER, and NNG's receive limit on the MemoDB edge's socket.
    gw = start_gateway(tmp_path, "[limits]\nhigh_water_mark = 1234\nmax_message_bytes = 654321\n")
    try:
        for name in ("nfp", "dcp", "dbp", "sada", "sada-server"):
            sock = gw.gateway.edges[name].transport.socket  # type: ignore[attr-defined]
            got = (sock.getsockopt(zmq.SNDHWM), sock.getsockopt(zmq.RCVHWM), sock.getsockopt(zmq.MAXMSGSIZE))
            assert got == (1234, 1234, 654321), name
        memo = gw.gateway.edges["memodb"].transport  # type: ignore[attr-defined]
        assert memo.socket.recv_max_size == 654321
    finally:
        finish(gw)
