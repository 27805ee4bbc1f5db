"""The DBP edge's services as workers for DCP and NFP clients, their heartbeats over UDP
and ZeroMQ, garbage on both paths, and the edge driven by hand (specs/dbp.md)."""

from __future__ import annotations

import json
import socket
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from nfgate.codecs import dbp, dcp, nfp
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import CLIENT, Keepalive, Post, Response

from .conftest import RECV_MS, Running, beats, finish, nothing, recv, start_gateway, until
from .dbp_helpers import Sock, edge, get, info, now, register, send

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------- helpers


def udp_address(gw: Running) -> tuple[str, int]:
    udp = edge(gw).udp
    assert udp is not None
    return udp.address


@pytest.fixture
def udp_peer() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(RECV_MS / 1000)
    yield sock
    sock.close()


# ------------------------------------------------------ services as workers


def serve_one(sock: Sock, answer: bytes | None = None) -> dict[str, Any]:
    """Take one REQUEST; reply with ``answer`` (raw) or an envelope echoing the body upper-cased."""
    request = get(sock)
    assert isinstance(request, dbp.Request)
    envelope: dict[str, Any] = json.loads(request.query)
    if answer is None:
        body = [frame.upper() for frame in envelope["body"]]
        answer = json.dumps({"id": envelope["id"], "status": 200, "body": body}).encode()
    send(sock, dbp.Reply(time=now(), info=answer))
    return envelope


def test_dcp_client_served_by_a_dbp_worker(gw: Running) -> None:
    worker = register(gw, "upper-1", function="upper")
    until(lambda: gw.gateway.router.workers())
    client = gw.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=b"upper", metadata=(b"m-1",), data=(b"abc", b"de"))))
    envelope = serve_one(worker)
    assert envelope["service"] == "upper" and envelope["body"] == ["abc", "de"]
    assert envelope["encoding"] == "utf-8" and envelope["id"].isdigit()
    assert dcp.decode(recv(client)) == DcpReply(client=None, metadata=(b"m-1",), data=(b"ABC", b"DE"))


def test_binary_body_is_base64_both_ways(gw: Running) -> None:
    worker = register(gw, "bin-1", function="bin")
    until(lambda: gw.gateway.router.workers())
    client = gw.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=b"bin", metadata=(b"k",), data=(b"\xff\x00",))))
    request = get(worker)
    envelope = json.loads(request.query)
    assert envelope["encoding"] == "base64" and envelope["body"] == ["/wA="]
    answer = {"id": envelope["id"], "encoding": "base64", "body": ["AP8="]}
    send(worker, dbp.Reply(time=now(), info=json.dumps(answer).encode()))
    assert dcp.decode(recv(client)) == DcpReply(client=None, metadata=(b"k",), data=(b"\x00\xff",))


def nfp_get(sock: Sock, dialect: str = "spec") -> Any:
    for _ in range(20):
        message = nfp.decode(recv(sock), dialect)
        if not isinstance(message, Keepalive):
            return message
    pytest.fail("only keepalives")


@pytest.mark.parametrize("dialect", ["spec", "norfab"])
def test_nfp_client_served_by_a_dbp_worker_with_a_plain_reply(gw: Running, dialect: str) -> None:
    worker = register(gw, "conv-1", function="convert")
    until(lambda: gw.gateway.router.workers())
    client = gw.dealer("nfp", b"nfc")
    job = uuidlib.uuid4().hex
    body = b'{"task":"convert","kwargs":{"x":1}}'
    post = Post(header=CLIENT, service="convert", target="any", uuid=job, body=(body,))
    client.send_multipart(nfp.encode(post, dialect))
    accepted = nfp_get(client, dialect)
    assert accepted.status == 202
    assert json.loads(accepted.body[0])["workers"] == ["dbp-conv-1"]
    envelope = serve_one(worker, b'{"y":2}')  # not an envelope: the whole frame is the answer
    assert envelope["body"] == [body.decode()]
    reply = nfp_get(client, dialect)
    assert isinstance(reply, Response) and reply.status == 200 and reply.uuid == job
    if dialect == "norfab":  # wrapped as NorFab's {worker: Result}
        assert json.loads(reply.body[0])["dbp-conv-1"]["result"] == {"y": 2}
    else:
        assert reply.body == (b'{"y":2}',)


def test_worker_status_and_bad_envelope(gw: Running) -> None:
    worker = register(gw, "st-1", function="st")
    until(lambda: gw.gateway.router.workers())
    client = gw.dealer("nfp", b"nfc2")
    for answer_status in (404, "bad"):
        job = uuidlib.uuid4().hex
        client.send_multipart(
            nfp.encode(Post(header=CLIENT, service="st", target="any", uuid=job, body=(b"x",)))
        )
        assert nfp_get(client).status == 202
        request = get(worker)
        envelope = json.loads(request.query)
        answer = {"id": envelope["id"], "status": answer_status, "body": "nope"}
        send(worker, dbp.Reply(time=now(), info=json.dumps(answer).encode()))
        reply = nfp_get(client)
        assert isinstance(reply, Response) and reply.uuid == job
        assert reply.status == (404 if answer_status == 404 else 500)
    assert edge(gw).stats()["bad_reply"] == 1


def test_reply_for_no_request_is_counted(gw: Running) -> None:
    worker = register(gw, "idle-1", function="idle")
    send(worker, dbp.Reply(time=now(), info=b'{"id":"999","body":[]}'))
    send(worker, dbp.Reply(time=now(), info=b"plain"))
    until(lambda: edge(gw).stats().get("unknown_reply") == 2)
    assert info(gw, "idle-1")["status"] == "active"


# ----------------------------------------------------------------- heartbeats


HEARTBEAT_S = 0.2


def test_udp_heartbeats_both_ways(gw: Running, udp_peer: socket.socket) -> None:
    port = udp_peer.getsockname()[1]
    # A longer interval here: the test must not miss a beat on a loaded machine.
    sock = register(gw, "beating", function="beat", heartbeat=0.5, port=port)
    # The catalog beats to the ip/port the service registered.
    data, _ = udp_peer.recvfrom(2048)
    beat = dbp.decode_heartbeat_datagram(data)
    assert beat.service == "beating" and abs(beat.time - now()) < 5
    # The service beats to the catalog's UDP port for longer than the liveness window.
    target = udp_address(gw)
    for _ in range(16):  # 1.6 s: longer than liveness x interval (1.5 s)
        udp_peer.sendto(dbp.encode_heartbeat_datagram(dbp.Heartbeat(time=now(), service="beating")), target)
        time.sleep(0.1)
    stats = edge(gw).stats()
    assert stats["udp_beats_in"] >= 14 and stats["udp_beats_out"] >= 2
    assert stats.get("switched_to_zmq", 0) == 0 and stats.get("expired", 0) == 0
    assert nothing(sock, 10)  # no ZeroMQ heartbeat: the UDP path works
    assert info(gw, "beating")["status"] == "active"
    # show_workers counts them for this service: the only one, so as many as the edge.
    until(lambda: beats(gw, "dbp") == (edge(gw).stats()["udp_beats_out"], edge(gw).stats()["udp_beats_in"]))


def test_a_heartbeat_datagram_from_another_host_is_not_the_services(gw: Running) -> None:
    # "The service sends the same datagram, naming itself": from 127.0.0.2 it is not.
    register(gw, "victim", function="beat", heartbeat=30.0, port=9)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as spoof:
        spoof.bind(("127.0.0.2", 0))
        beat = dbp.encode_heartbeat_datagram(dbp.Heartbeat(time=now(), service="victim"))
        spoof.sendto(beat, udp_address(gw))
        until(lambda: edge(gw).stats()["udp_wrong_sender"] == 1)
    assert edge(gw).stats()["udp_beats_in"] == 0


def test_missed_beat_switches_to_zmq_then_expiry(gw: Running, udp_peer: socket.socket) -> None:
    port = udp_peer.getsockname()[1]
    sock = register(gw, "flaky", function="flakysvc", heartbeat=HEARTBEAT_S, port=port)
    # No datagram from the service: after a missed beat the catalog beats over ZeroMQ.
    beat = get(sock)
    assert isinstance(beat, dbp.Heartbeat) and beat.service == "flaky"
    assert edge(gw).stats()["switched_to_zmq"] == 1
    deadline = time.monotonic() + 1.0
    zmq_beats = 0
    while time.monotonic() < deadline:  # the service answers on the same path
        send(sock, dbp.Heartbeat(time=now(), service="flaky"))
        for _ in range(10):
            if not sock.poll(0):
                break
            message = get(sock)
            assert isinstance(message, dbp.Heartbeat), message
            zmq_beats += 1
        time.sleep(HEARTBEAT_S / 2)
    assert zmq_beats >= 3 and info(gw, "flaky")["status"] == "active"
    # Silence for liveness (3) intervals: DISCONNECT, and the cache says inactive.
    for _ in range(10):
        message = get(sock)
        if isinstance(message, dbp.Disconnect):
            break
        assert isinstance(message, dbp.Heartbeat)
    else:
        pytest.fail("no DISCONNECT")
    assert info(gw, "flaky")["status"] == "inactive"
    assert edge(gw).stats()["expired"] == 1
    until(lambda: not gw.gateway.router.workers())


def test_service_switching_first_is_followed(gw: Running, udp_peer: socket.socket) -> None:
    port = udp_peer.getsockname()[1]
    sock = register(gw, "leader", heartbeat=HEARTBEAT_S, port=port)
    send(sock, dbp.Heartbeat(time=now(), service="leader"))  # the service moved to ZeroMQ
    assert isinstance(get(sock), dbp.Heartbeat)  # and so did the catalog
    assert edge(gw).stats().get("switched_to_zmq", 0) == 0  # it followed; it did not miss a beat


# ------------------------------------------------------------------ garbage


def test_garbage_is_counted_and_harmless(gw: Running, udp_peer: socket.socket) -> None:
    bad = gw.dealer("dbp")
    for junk in (
        [b"x"],
        [b"", b"u_U"],
        [b"", b"??", b"1"],
        [b"", b"u_U", b"1e9", b"q"],
        [b"", b"UwU", b"1"],
        [b"", b"u_U", b"1", b"\x00bad"],
    ):
        bad.send_multipart(junk)
    target = udp_address(gw)
    for datagram in (b"", b"hello", b"<3 x y", b"<3 1 nobody", b"\xff" * 3000):
        udp_peer.sendto(datagram, target)
    sock = register(gw, "survivor", function="ok")
    client = gw.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=b"ok", metadata=(b"1",), data=(b"a",))))
    serve_one(sock)
    assert dcp.decode(recv(client)).data == (b"A",)
    until(lambda: edge(gw).stats().get("udp_undecodable", 0) == 4)
    stats = edge(gw).stats()
    assert stats["undecodable"] == 6 and stats["udp_unknown_service"] == 1
    assert info(gw, "survivor")["status"] == "active"


# ----------------------------------------------------- the edge without a loop


def test_a_request_the_core_gave_up_on_does_not_block_the_next(tmp_path: Path) -> None:
    """Driven by hand, no gateway thread: after a timeout the core dispatches the next
    request to the (free again) service; a plain REPLY answers the new one."""
    from nfgate.edges import EdgeSettings
    from nfgate.edges.dbp import make
    from nfgate.model import Peer, Reply, Request, ServiceRef
    from nfgate.routing_types import Dispatch
    from nfgate.store import JobStore

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    store = JobStore(tmp_path / "jobs.sqlite3")
    settings = EdgeSettings(
        name="dbp",
        protocol="dbp",
        url="tcp://127.0.0.1:*",
        context=context,
        options={"udp": None, "beacon": None},
    )
    unit = make(settings, store=store)
    service = context.socket(zmq.DEALER)
    service.setsockopt(zmq.LINGER, 0)
    service.setsockopt(zmq.RCVTIMEO, RECV_MS)
    try:
        service.connect(unit.endpoint)
        info_bytes = dbp.make_info(name="slow", ip="127.0.0.1", port=9, function="slowsvc", heartbeat=30)
        send(service, dbp.Registration(time=now(), info=(info_bytes,)))
        commands: list[Any] = []
        for _ in range(100):
            commands += unit.receive(0, 10)
            if commands:
                break
            unit.transport.socket.poll(50)
        [registered] = commands
        assert registered.services == (ServiceRef(name="slowsvc"),) and registered.name == "dbp-slow"
        assert isinstance(get(service), dbp.Approved)
        client = Peer(edge="dcp", protocol="dcp", address=b"c")
        for core_id in (1, 2):  # request 1 timed out in the core; 2 is dispatched next
            request = Request(id=core_id, service=ServiceRef(name="slowsvc"), body=(b"x",), reply_to=client)
            assert unit.emit(Dispatch(worker=registered.peer, request=request), 0) == []
            assert json.loads(get(service).query)["id"] == str(core_id)
        send(service, dbp.Reply(time=now(), info=b"late but plain"))
        replies: list[Any] = []
        for _ in range(100):
            replies += unit.receive(0, 10)
            if replies:
                break
            unit.transport.socket.poll(50)
        assert replies == [
            Reply(id=2, status=200, body=(b"late but plain",), worker=registered.peer, worker_name="dbp-slow")
        ]
    finally:
        service.close(0)
        unit.close()
        store.close()
        context.term()


def test_a_reply_over_the_size_limit_frees_the_request_and_the_service_comes_back(tmp_path: Path) -> None:
    """nfgate's JSON envelope carries a binary body as base64, a third larger: a worker's
    echo of a body under ``max_message_bytes`` can be over it, and libzmq drops the
    connection it came by. The service, beating over UDP, looked alive: it stayed listed
    with its one request held, the client got nothing, and so did every later request.
    Now its connection's closing unregisters it, the request goes on (here: no other
    worker, so the queue expiry's 408), and the service, told DISCONNECT at its next
    command, registers again and serves."""
    toml = "[limits]\nmax_message_bytes = 4000\n[routing]\nqueue_expiry_ms = 500\n"
    gw = start_gateway(tmp_path, toml)
    try:
        worker = register(gw, "big-1", function="big")
        until(lambda: gw.gateway.router.workers())
        client = gw.dealer("nfp", b"big-client")
        job = uuidlib.uuid4().hex
        client.send_multipart(
            nfp.encode(
                Post(header=CLIENT, service="big", target="any", uuid=job, body=(bytes(range(256)) * 12,))
            )
        )
        assert nfp_get(client).status == 202
        request = get(worker)
        envelope = json.loads(request.query)
        assert envelope["encoding"] == "base64" and len(request.query) > 4000
        send(worker, dbp.Reply(time=now(), info=request.query.encode()))  # the echo: over the limit
        until(lambda: not gw.gateway.router.workers())
        final = nfp_get(client)
        assert isinstance(final, Response) and final.uuid == job and final.status == 408
        # Its next command is answered DISCONNECT; it registers again and is served.
        send(worker, dbp.Heartbeat(time=now(), service="big-1"))
        assert isinstance(get(worker), dbp.Disconnect)
        send(
            worker,
            dbp.Registration(
                time=now(),
                info=(dbp.make_info(name="big-1", ip="127.0.0.1", port=9, function="big", heartbeat=30.0),),
            ),
        )
        assert isinstance(get(worker), dbp.Approved)
        until(lambda: gw.gateway.router.workers())
        small = uuidlib.uuid4().hex
        client.send_multipart(
            nfp.encode(Post(header=CLIENT, service="big", target="any", uuid=small, body=(b"x",)))
        )
        assert nfp_get(client).status == 202
        serve_one(worker)
        done = nfp_get(client)
        assert (
            isinstance(done, Response) and done.uuid == small and done.status == 200 and done.body == (b"X",)
        )
        assert edge(gw).counters["connections_closed"] >= 1
    finally:
        finish(gw)
