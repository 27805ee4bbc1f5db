"""The SADA channel and server edges against raw peers (specs/safir-darbaan.md)."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import zmq

from nfgate.codecs import dcp, nfp, sada
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import CLIENT, Keepalive, Post, Response
from nfgate.codecs.sada.messages import PROTO_ASCII, PROTO_BYTE, Intr, Ping, Pong, Rep, Req, Rintr
from nfgate.config import load
from nfgate.edges.sada_common import resolve_port
from nfgate.errors import ConfigError
from nfgate.model import ServiceRef
from nfgate.serve import build
from tests.ports import random_binds

from .conftest import RECV_MS, Running, beats, finish, nothing, recv, running_on, start_gateway, until

pytestmark = pytest.mark.timeout(60)

# Servers that are not part of a liveness test would have to answer PINGs while the
# test waits: give them 10 s, and the liveness test 3 x 100 ms.
SLOW = """
[edges.sada]
heartbeat_ms = 2000
liveness = 5
"""
FAST = """
[edges.sada]
heartbeat_ms = 100
liveness = 3
"""


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Running]:
    running = start_gateway(tmp_path, SLOW)
    try:
        yield running
    finally:
        finish(running)


def send(sock: zmq.Socket[bytes], message: object, dialect: str = "spec") -> None:
    sock.send_multipart(sada.encode(message, dialect))  # type: ignore[arg-type]


def get(sock: zmq.Socket[bytes], *, pong: bool = True) -> object:
    """The next SADA message that is not a PING (a PING is answered PONG when ``pong``)."""
    for _ in range(100):
        frames = recv(sock)
        message = sada.decode(frames, sada.detect(frames))
        if not isinstance(message, Ping):
            return message
        if pong:
            send(sock, Pong(proto=message.proto))
    pytest.fail("only PINGs")


def server(gw: Running, *services: tuple[str, str], proto: bytes = PROTO_ASCII) -> zmq.Socket[bytes]:
    """A SADA server (a DEALER is a ROUTER with one peer) introduced to the channel."""
    before = len(gw.gateway.router.workers())
    sock = gw.dealer("sada")
    send(sock, Intr(proto=proto, services=services))
    until(lambda: len(gw.gateway.router.workers()) > before)
    return sock


def req(rid: str, service: str, version: str = "", payload: bytes = b"p", proto: bytes = PROTO_ASCII) -> Req:
    return Req(
        proto=proto,
        request_id=rid,
        service=service,
        version=version,
        category="cat",
        action="act",
        payload=payload,
    )


def answer(sock: zmq.Socket[bytes], suffix: bytes = b"!", status: int = 200, dialect: str = "spec") -> Req:
    request = get(sock)
    assert isinstance(request, Req)
    rep = Rep(
        proto=request.proto, request_id=request.request_id, status=status, payload=request.payload + suffix
    )
    send(sock, rep, dialect)
    return request


def dcp_worker(gw: Running, service: bytes) -> zmq.Socket[bytes]:
    sock = gw.dealer("dcp")
    sock.send_multipart(dcp.encode(Registration(service=service)))
    assert dcp.decode(recv(sock)) == Registration(service=service)
    return sock


# ---------------------------------------------------------------- the channel


def test_intr_makes_a_worker_with_versions(gw: Running) -> None:
    server(gw, ("calc", "1.2"), ("echo", ""))
    [info] = gw.gateway.router.workers()
    assert info.peer.protocol == "sada" and info.peer.edge == "sada"
    assert info.services == (ServiceRef(name="calc", version="1.2"), ServiceRef(name="echo"))
    assert info.name.startswith("sada-")


def test_a_new_intr_replaces_the_services_and_an_empty_one_withdraws(gw: Running) -> None:
    s = server(gw, ("a", "1"))
    send(s, Intr(services=(("b", ""), ("a", "2"))))  # "after any change … resend an INTR"
    wanted = [(ServiceRef(name="b"), ServiceRef(name="a", version="2"))]
    until(lambda: [w.services for w in gw.gateway.router.workers()] == wanted)
    send(s, Intr())  # nothing to offer: no longer a worker, but known (no RINTR for its PONG)
    until(lambda: not gw.gateway.router.workers())
    send(s, Pong())
    assert nothing(s, 100)
    assert gw.gateway.edges["sada"].stats().get("rintr_sent", 0) == 0


def test_nfp_spec_client_served_by_sada_server(gw: Running) -> None:
    s = server(gw, ("calc", "1.2"))
    client = gw.dealer("nfp")
    job = uuidlib.uuid4().hex
    client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="calc", target="any", uuid=job, body=(b"2+2",)))
    )
    request = answer(s, b"=4")
    assert request.service == "calc" and request.version == "1.2"  # the version the server offered
    assert (request.category, request.action) == ("default", "default")  # NFP has none
    # "Channels RECOMMENDED to prepends their id in the request id generated"; the rest is
    # PIRAN's form (what a PIRAN server, which validates ids, gets alone).
    channel_id, _, bare = request.request_id.rpartition("/")
    assert channel_id == gw.gateway.edges["sada"].identity.decode()  # type: ignore[attr-defined]
    assert bare.startswith("RQ-")
    sada.parse_piran_request_id(bare)
    replies = []
    for _ in range(5):
        message = nfp.decode(recv(client))
        if not isinstance(message, Keepalive):
            replies.append(message)
        if len(replies) == 2:
            break
    assert replies[0].status == 202  # type: ignore[attr-defined]
    assert replies[1] == Response(header=b"NFPB01", service="calc", uuid=job, status=200, body=(b"2+2=4",))


def test_sada_client_via_channel_served_by_dcp_worker(gw: Running) -> None:
    worker = dcp_worker(gw, b"upper")
    client = gw.dealer("sada")
    send(client, req("client-1", "upper", payload=b"abc"))
    request = dcp.decode(recv(worker))
    assert isinstance(request, DcpRequest) and request.data == (b"abc",)
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"ABC",)))
    )
    assert get(client) == Rep(request_id="client-1", status=200, payload=b"ABC")
    # DCP data parts in several frames reach a SADA client as one msgpack array
    send(client, req("client-2", "upper", payload=b"x"))
    request = dcp.decode(recv(worker))
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"a", b"b")))  # type: ignore[attr-defined]
    )
    rep = get(client)
    assert isinstance(rep, Rep) and sada.payload.unpack(rep.payload) == [b"a", b"b"]


def test_version_matching(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, SLOW + "[routing]\nqueue_expiry_ms = 300\n")
    try:
        v1 = server(gw, ("calc", "1"))
        v2 = server(gw, ("calc", "2"))
        client = gw.dealer("sada")
        send(client, req("a", "calc", "2"))
        assert answer(v2).version == "2"
        assert get(client) == Rep(request_id="a", status=200, payload=b"p!")
        send(client, req("b", "calc", "1"))
        assert answer(v1).version == "1"
        assert get(client) == Rep(request_id="b", status=200, payload=b"p!")
        send(client, req("c", "calc", "3"))  # nobody offers version 3: 503 after the queue expiry
        assert get(client) == Rep(request_id="c", status=503, payload=b"")
        unversioned = server(gw, ("calc", ""))  # an unversioned service matches any version
        send(client, req("d", "calc", "3"))
        assert answer(unversioned).version == "3"
        assert get(client) == Rep(request_id="d", status=200, payload=b"p!")
    finally:
        finish(gw)


def test_ping_pong_then_silent_server_dead_and_request_redispatched(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, FAST)
    try:
        _silent_server_dies(gw)
    finally:
        finish(gw)


def _silent_server_dies(gw: Running) -> None:
    silent = server(gw, ("echo", ""))
    frames = recv(silent)  # silent for 100 ms: PING
    assert sada.decode(frames) == Ping()
    send(silent, Pong())  # it answers once
    client = gw.dealer("sada")
    send(client, req("r-1", "echo"))
    first = get(silent, pong=False)
    assert isinstance(first, Req)
    backup = server(gw, ("echo", ""))
    # The silent server never answers its PINGs: dead after 3 x 100 ms, its request goes on.
    again = answer(backup, b" from backup")
    assert again.payload == b"p" and again.request_id != first.request_id
    assert get(client) == Rep(request_id="r-1", status=200, payload=b"p from backup")
    stats = gw.gateway.router.stats()
    assert stats["workers_lost"] == 1 and stats["redispatched"] == 1
    assert gw.gateway.edges["sada"].stats()["pings_sent"] >= 3
    # The dead server wakes up and answers: the channel forgot it, so it asks for INTR.
    send(silent, Rep(request_id=first.request_id, status=200, payload=b"late"))
    assert get(silent, pong=False) == Rintr()
    assert nothing(client, 100)  # the late answer goes nowhere


def test_pings_and_pongs_are_counted_per_server(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, FAST)
    try:
        s = server(gw, ("echo", ""))
        assert sada.decode(recv(s)) == Ping()  # silent for 100 ms: the channel PINGs
        send(s, Pong())
        send(s, Ping())
        assert get(s, pong=False) == Pong()  # PINGs meanwhile go unanswered: heard stays 2
        until(lambda: (beats(gw, "sada") or (0, 0))[1] == 2)
        sent, _ = beats(gw, "sada") or (0, 0)
        assert sent >= 2  # at least the first PING and the PONG
    finally:
        finish(gw)


def test_rintr_for_an_unknown_server_then_it_introduces_itself(gw: Running) -> None:
    stranger = gw.dealer("sada")
    send(stranger, Pong(proto=PROTO_BYTE))  # e.g. the gateway restarted under it
    assert get(stranger) == Rintr(proto=PROTO_BYTE)
    send(stranger, Rep(proto=PROTO_BYTE, request_id="old", status=200, payload=b""))
    assert nothing(stranger, 50)  # one RINTR per interval is enough
    send(stranger, Intr(proto=PROTO_BYTE, services=(("svc", ""),)))
    until(lambda: gw.gateway.router.workers())
    assert gw.gateway.edges["sada"].stats()["rintr_sent"] == 1


def test_both_version_frame_forms(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, FAST)
    try:
        _both_forms(gw)
    finally:
        finish(gw)


def _both_forms(gw: Running) -> None:
    old = server(gw, ("echo", ""), proto=PROTO_BYTE)
    ping = sada.decode(recv(old))
    assert ping == Ping(proto=PROTO_BYTE)  # spoken to in its own form
    send(old, Pong(proto=PROTO_BYTE))
    for proto in (PROTO_BYTE, PROTO_ASCII):
        client = gw.dealer("sada")
        send(client, req("f", "echo", proto=proto))
        assert answer(old).proto == PROTO_BYTE
        frames = recv(client)
        assert frames[1] == proto
        assert sada.decode(frames) == Rep(proto=proto, request_id="f", status=200, payload=b"p!")


def test_piran_dialect_int32_status(gw: Running) -> None:
    piran_server = gw.dealer("sada", identity=b"127.0.0.1:40001")  # PIRAN servers set ip:port
    send(piran_server, Intr(services=(("calc", "1"),)))
    until(lambda: gw.gateway.router.workers())
    rid = sada.new_request_id("RQ", int(time.time() * 1000), "AB12CD34")
    piran_client = gw.dealer("sada")  # no identity, but a PIRAN request id
    send(piran_client, req(rid, "calc", "1"))
    answer(piran_server, b"", status=201, dialect="piran")  # a 4-byte status from the server
    frames = recv(piran_client)
    assert frames[4] == b"\x00\x00\x00\xc9"  # answered in the client's dialect
    assert sada.decode(frames, "piran") == Rep(request_id=rid, status=201, payload=b"p")
    spec_client = gw.dealer("sada")
    send(spec_client, req("plain-id", "calc", "1"))
    answer(piran_server, b"", status=200, dialect="piran")
    assert recv(spec_client)[4] == b"200"


@pytest.mark.parametrize(("form", "prefix"), [("spec", b"tcp://"), ("piran", b"")])
def test_channel_identity_is_its_public_endpoint(tmp_path: Path, form: str, prefix: bytes) -> None:
    gw = start_gateway(tmp_path, SLOW + f'identity_form = "{form}"\n')
    router = gw.context.socket(zmq.ROUTER)  # a SADA server as the spec has it: a ROUTER
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.setsockopt(zmq.RCVTIMEO, RECV_MS)
    try:
        endpoint = gw.endpoint("sada")
        identity = prefix + endpoint.removeprefix("tcp://").encode()
        router.connect(endpoint)
        for _ in range(200):  # until the handshake names the channel
            try:
                router.send_multipart([identity, *sada.encode(Intr(services=(("id", ""),)))])
                break
            except zmq.ZMQError:
                time.sleep(0.01)
        else:
            pytest.fail(f"the channel is not reachable as {identity!r}")
        until(lambda: gw.gateway.router.workers())
    finally:
        router.close(0)
        finish(gw)


def test_worker_timeout_is_504(tmp_path: Path) -> None:
    toml = SLOW + "request_timeout_ms = 200\n[routing]\nmax_redispatch = 0\n"
    gw = start_gateway(tmp_path, toml)
    try:
        worker = dcp_worker(gw, b"slow")
        client = gw.dealer("sada")
        send(client, req("t", "slow"))
        assert isinstance(dcp.decode(recv(worker)), DcpRequest)  # and never answered
        assert get(client) == Rep(request_id="t", status=504, payload=b"")
    finally:
        finish(gw)


def test_garbage_is_counted_and_harmless(gw: Running) -> None:
    s = server(gw, ("echo", ""))
    bad = gw.dealer("sada")
    for junk in (
        [b"x"],
        [b"", b"SADA2", b"PING"],
        [b"", b"SADA1", b"NOPE"],
        [b"", b"SADA1", b"INTR", b"odd"],
        [b"", b"SADA1", b"REP", b"id", b"abc", b""],
        [b"", b"\xff" * 40],
    ):
        bad.send_multipart(junk)
    bad.send_multipart([b"", b"SADA1", b"REQ", b"bad-req", b"echo"])  # truncated: answered 400
    assert get(bad) == Rep(request_id="bad-req", status=400, payload=b"")
    send(bad, Rintr())  # a channel-only command sent to the channel
    client = gw.dealer("sada")
    send(client, req("ok", "echo"))
    answer(s)
    assert get(client) == Rep(request_id="ok", status=200, payload=b"p!")
    stats = gw.gateway.edges["sada"].stats()
    assert stats["undecodable"] == 7 and stats["unexpected"] == 1


def test_server_edge_is_idle_without_channels(gw: Running) -> None:
    edge = gw.gateway.edges["sada-server"]
    assert edge.endpoint == "" and edge.next_deadline() is None
    assert edge.stats()["channels"] == 0


def test_config_rejects_bad_sada_options(tmp_path: Path) -> None:
    for toml, key in (
        ('[edges.sada]\nidentity_form = "tcp"\n', "edges.sada.identity_form"),
        ('[edges.sada]\ndialect = "x"\n', "edges.sada.dialect"),
        ("[edges.sada]\nserver_capacity = 0\n", "edges.sada.server_capacity"),
        ("[edges.sada-server]\nchannels = 5\n", "edges.sada-server.channels"),
        ("[edges.sada-server]\nrefresh_ms = 0\n", "edges.sada-server.refresh_ms"),
    ):
        path = tmp_path / "c.toml"
        path.write_text(toml)
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load(path, data_dir=tmp_path)


# ----------------------------------------------------------------- the server


class Channel:
    """A test channel: a ROUTER bound with its public endpoint as identity."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], form: str) -> None:
        self.url = resolve_port("tcp://127.0.0.1:*")
        self.sock = context.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, RECV_MS)
        self.sock.setsockopt(zmq.ROUTING_ID, sada.channel_identity(self.url, form))
        self.sock.bind(self.url)
        self.server = b""

    def intr_with(self, name: str) -> Intr:
        """Read INTRs until one lists ``name`` (the gateway re-INTRs when its services change)."""
        for _ in range(100):
            identity, *frames = recv(self.sock)
            message = sada.decode(frames)
            if isinstance(message, Intr):
                self.server = identity
                if any(n == name for n, _ in message.services):
                    return message
        pytest.fail(f"no INTR listing {name!r}")

    def send(self, message: object, dialect: str = "spec") -> None:
        self.sock.send_multipart([self.server, *sada.encode(message, dialect)])  # type: ignore[arg-type]

    def get(self) -> object:
        _, *frames = recv(self.sock)
        return sada.decode(frames, sada.detect(frames))


@contextlib.contextmanager
def served_channel(tmp_path: Path, form: str = "spec", toml: str = "") -> Iterator[tuple[Running, Channel]]:
    """A test channel and a gateway whose sada-server edge connects to it."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    channel = Channel(context, form)
    gw = start_gateway(
        tmp_path, toml + f'[edges.sada-server]\nchannels = ["{channel.url}"]\nrefresh_ms = 50\n'
    )
    try:
        yield gw, channel
    finally:
        finish(gw)
        channel.sock.close(0)
        context.term()


@pytest.mark.parametrize(("form", "status"), [("spec", b"200"), ("piran", b"\x00\x00\x00\xc8")])
def test_gateway_as_sada_server_answers_req_via_dcp_worker(tmp_path: Path, form: str, status: bytes) -> None:
    with served_channel(tmp_path, form) as (gw, channel):
        worker = dcp_worker(gw, b"upper")
        intr = channel.intr_with("upper")
        assert intr.proto == PROTO_ASCII  # PIRAN's form when we speak first
        channel.send(Ping())
        assert channel.get() == Pong()
        channel.send(Rintr())
        assert isinstance(channel.get(), Intr)
        rid = "chan-1" if form == "spec" else sada.new_request_id("RQ", 1_700_000_000_000, "ZZ99YY88")
        channel.send(Req(request_id=rid, service="upper", category="c", action="a", payload=b"abc"))
        request = dcp.decode(recv(worker))
        assert isinstance(request, DcpRequest) and request.data == (b"abc",)
        worker.send_multipart(
            dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"ABC",)))
        )
        _, *frames = recv(channel.sock)
        assert frames[4] == status  # PIRAN channel (ip:port identity): int32 status
        assert sada.decode(frames, sada.detect(frames)) == Rep(request_id=rid, status=200, payload=b"ABC")
        # garbage from the channel is counted, and the edge carries on
        channel.sock.send_multipart([channel.server, b"", b"SADA1", b"BOGUS"])
        channel.send(Intr())  # a server-only command
        channel.send(Ping(proto=PROTO_BYTE))
        assert channel.get() == Pong(proto=PROTO_BYTE)
        stats = gw.gateway.edges["sada-server"].stats()
        assert stats["undecodable"] == 1 and stats["unexpected"] == 1 and stats["channels"] == 1


def test_server_edge_does_not_reintroduce_sada_services(tmp_path: Path) -> None:
    with served_channel(tmp_path, toml=SLOW) as (gw, channel):
        server(gw, ("from-sada", "1"))
        dcp_worker(gw, b"native")
        intr = channel.intr_with("native")
        assert intr.services == (("native", ""),)


def test_a_draining_server_edge_withdraws_each_service_once_its_reqs_are_answered(tmp_path: Path) -> None:
    # A drain refuses new requests: channels are told to send them to other servers.
    # The service of a REQ still held here stays offered until it is answered, since a
    # channel may take the REQ back from a server that stops offering its service and
    # run it again elsewhere (nfgate's own channel does).
    with served_channel(tmp_path) as (gw, channel):
        upper = dcp_worker(gw, b"upper")
        dcp_worker(gw, b"lower")
        for _ in range(10):  # INTRs until one lists both (one per change of the set)
            if channel.intr_with("upper").services == (("lower", ""), ("upper", "")):
                break
        else:
            pytest.fail("no INTR listing both services")
        channel.send(Req(request_id="held", service="upper", category="c", action="a", payload=b"abc"))
        request = dcp.decode(recv(upper))
        assert isinstance(request, DcpRequest)
        gw.gateway.stop()  # as SIGTERM: drains (drain_ms 5000 by default)
        gw._waker.send(b"x")
        assert channel.get() == Intr(services=(("upper", ""),))
        until(lambda: gw.gateway.snapshot.get("core", {}).get("draining") == 1)
        channel.send(Req(request_id="late", service="lower", category="c", action="a", payload=b"x"))
        assert channel.get() == Rep(request_id="late", status=503, payload=b"")  # no re-INTR: nothing changed
        upper.send_multipart(
            dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"ABC",)))
        )
        assert channel.get() == Rep(request_id="held", status=200, payload=b"ABC")
        assert channel.get() == Intr(services=())  # after the REP, not before
        gw.thread.join(timeout=10)  # nothing left at a worker: the drain is over
        assert not gw.thread.is_alive()


def test_public_endpoint_names_the_channel(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, SLOW + 'public_endpoint = "tcp://localhost:*"\n')
    try:
        port = gw.endpoint("sada").rpartition(":")[2]
        assert gw.gateway.edges["sada"].identity == f"tcp://localhost:{port}".encode()  # type: ignore[attr-defined]
    finally:
        finish(gw)


def test_a_wildcard_host_needs_a_public_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[edges.sada]\npublic_endpoint = "tcp://0.0.0.0:5055"\n')
    with pytest.raises(ConfigError, match=r"set edges\.sada\.public_endpoint"):
        load(path, data_dir=tmp_path / "data", binds=random_binds())  # before any edge binds
    # The edge refuses it too, when built from options the loader did not check.
    cfg = load(None, data_dir=tmp_path / "data", binds=random_binds())
    sada = cfg.edge("sada")
    sada = attrs.evolve(sada, options={**sada.options, "public_endpoint": "tcp://0.0.0.0:5055"})
    cfg = attrs.evolve(cfg, edges=tuple(sada if e.kind == "sada" else e for e in cfg.edges))
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with pytest.raises(ConfigError, match="public_endpoint"):
            build(cfg, context)  # edges built before it are closed again
    finally:
        context.term()


def test_server_edge_reaches_a_channel_whatever_its_identity(tmp_path: Path) -> None:
    """The gateway names its connection itself, so a channel whose identity is not its
    URL (behind NAT, PIRAN form, anything) still gets the INTR; and it introduces itself
    again when the channel restarts."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    url = resolve_port("tcp://127.0.0.1:*")

    def channel() -> zmq.Socket[bytes]:
        sock = context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, RECV_MS)
        sock.setsockopt(zmq.ROUTING_ID, b"channel-behind-nat")
        for _ in range(100):  # a closed ROUTER frees its port a moment later
            try:
                sock.bind(url)
                return sock
            except zmq.ZMQError:
                time.sleep(0.02)
        sock.close(0)
        pytest.fail(f"cannot bind {url} again")

    sock = channel()
    gw = start_gateway(tmp_path, SLOW + f'[edges.sada-server]\nchannels = ["{url}"]\nrefresh_ms = 50\n')
    try:
        dcp_worker(gw, b"svc")
        for _ in range(10):
            _, *frames = recv(sock)
            if sada.decode(frames) == Intr(services=(("svc", ""),)):
                break
        else:
            pytest.fail("no INTR listing svc")
        sock.close(0)  # the channel restarts: it lost our INTR, and cannot RINTR us (no name)
        sock = channel()
        _, *frames = recv(sock)  # the gateway introduces itself on the new connection
        assert sada.decode(frames) == Intr(services=(("svc", ""),))
        assert gw.gateway.edges["sada-server"].stats()["connections"] >= 2
    finally:
        finish(gw)
        sock.close(0)
        context.term()


def test_client_records_stay_bounded_behind_a_long_lived_server(tmp_path: Path) -> None:
    # The server's record is the oldest: the bound must pass over it and forget clients.
    with running_on(tmp_path, SLOW + "[limits]\nmax_peers = 4\n") as gw:
        s = server(gw, ("calc", "1"))

        def one_request(i: int) -> None:
            client = gw.dealer("sada")
            send(client, req(f"client-{i}", "calc", payload=b"%d" % i))
            answer(s, b"!")
            rep = get(client)
            assert isinstance(rep, Rep) and rep.request_id == f"client-{i}" and rep.payload == b"%d!" % i
            client.close(0)

        for i in range(12):
            one_request(i)
        stats = gw.gateway.edges["sada"].stats()
        assert stats["servers"] == 1 and stats["peers"] <= 4
        one_request(12)  # the server's record was kept: it still serves


def test_server_edge_warns_when_its_intr_is_over_the_frame_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A channel with the same [limits] max_frames would drop the INTR, and say nothing
    # to this side: the operator is told here (3 frames and 2 per service; 3 services: 9).
    limits = "[limits]\nmax_frames = 8\n"
    with served_channel(tmp_path, toml=limits) as (gw, channel), caplog.at_level(logging.WARNING, "nfgate"):
        workers = [dcp_worker(gw, name) for name in (b"s1", b"s2")]
        channel.intr_with("s2")  # 2 services: 7 frames, within the limit
        assert not [r for r in caplog.records if "over [limits] max_frames" in r.getMessage()]
        workers.append(dcp_worker(gw, b"s3"))
        until(lambda: any("INTR of 3 services is 9 frames" in r.getMessage() for r in caplog.records))


def test_server_edge_answers_an_undecodable_req_400(tmp_path: Path) -> None:
    with served_channel(tmp_path) as (gw, channel):
        dcp_worker(gw, b"upper")
        channel.intr_with("upper")
        channel.sock.send_multipart([channel.server, b"", b"SADA1", b"REQ", b"rid-bad"])  # frames missing
        assert channel.get() == Rep(request_id="rid-bad", status=400, payload=b"")
        assert gw.gateway.edges["sada-server"].stats()["undecodable"] == 1


def test_server_edge_answers_an_undecodable_piran_req_400_in_piran(tmp_path: Path) -> None:
    # No REQ has settled the channel's dialect yet: the rejected one's PIRAN request id
    # does, as a REQ that decodes would (PIRAN reads a REP status as a 4-byte int32).
    with served_channel(tmp_path) as (gw, channel):
        dcp_worker(gw, b"upper")
        channel.intr_with("upper")
        rid = sada.new_request_id("RQ", 1_700_000_000_000, "ZZ99YY88")
        channel.sock.send_multipart([channel.server, b"", b"SADA1", b"REQ", rid.encode()])  # frames missing
        _, *frames = recv(channel.sock)
        assert frames[4] == (400).to_bytes(4, "big"), frames
        assert sada.decode(frames, "piran") == Rep(request_id=rid, status=400, payload=b"")
