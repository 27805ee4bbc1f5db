"""The DBP catalog edge against raw DEALER/REQ peers and UDP sockets (specs/dbp.md,
docs/protocols/dbp.md)."""

from __future__ import annotations

import json
import socket
import struct
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from click.testing import CliRunner

from nfgate.cli import main
from nfgate.codecs import dbp, dcp, nfp
from nfgate.codecs.dcp.messages import Registration as DcpRegistration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import CLIENT, Keepalive, Post, Response
from nfgate.edges.dbp import DbpEdge

from .conftest import RECV_MS, Running, beats, finish, nothing, recv, running_on, start_gateway, until

pytestmark = pytest.mark.timeout(60)

Sock = zmq.Socket[bytes]


# ------------------------------------------------------------------- helpers


def send(sock: Sock, message: Any, dialect: str = "spec") -> None:
    sock.send_multipart(dbp.encode(message, dialect))


def get(sock: Sock, dialect: str | None = None) -> Any:
    return dbp.decode(recv(sock), dialect)


def edge(gw: Running) -> DbpEdge:
    found = gw.gateway.edges["dbp"]
    assert isinstance(found, DbpEdge)
    return found


def udp_address(gw: Running) -> tuple[str, int]:
    udp = edge(gw).udp
    assert udp is not None
    return udp.address


def now() -> float:
    return time.time()


def register(
    gw: Running,
    name: str,
    *,
    function: str = "",
    heartbeat: float = 30.0,
    port: int = 9,
    **extra: Any,
) -> Sock:
    sock = gw.dealer("dbp")
    info = dbp.make_info(
        name=name, ip="127.0.0.1", port=port, function=function, heartbeat=heartbeat, **extra
    )
    send(sock, dbp.Registration(time=now(), info=(info,)))
    approved = get(sock)
    assert isinstance(approved, dbp.Approved), approved
    return sock


def info(gw: Running, query: str, sock: Sock | None = None) -> Any:
    client = sock if sock is not None else gw.dealer("dbp")
    send(client, dbp.Request(time=now(), query=query))
    reply = get(client)
    assert isinstance(reply, dbp.Reply)
    return json.loads(reply.info)


@pytest.fixture
def udp_peer() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(RECV_MS / 1000)
    yield sock
    sock.close()


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -------------------------------------------------------------- info requests


def test_unknown_name_is_status_unknown(gw: Running) -> None:
    assert info(gw, "nope") == {"name": "nope", "status": "unknown"}


def test_registration_info_for_one_and_all(gw: Running) -> None:
    register(gw, "sensor-a", function="", colour="blue")
    register(gw, "echoer", function="echo")
    one = info(gw, "sensor-a")
    assert one == {
        "name": "sensor-a",
        "ip": "127.0.0.1",
        "port": 9,
        "function": "",
        "heartbeat": 30.0,
        "colour": "blue",  # unknown keys are kept
        "status": "active",
    }
    for query in ("", "*"):
        everything = info(gw, query)
        assert set(everything) == {"sensor-a", "echoer", "echo"}
        assert everything["echo"] == {"name": "echo", "workers": 1, "protocols": ["dbp"], "status": "active"}
        assert everything["echoer"]["status"] == "active"


def test_dcp_worker_service_is_in_the_dbp_catalog(gw: Running) -> None:
    worker = gw.dealer("dcp")
    worker.send_multipart(dcp.encode(DcpRegistration(service=b"echo")))
    assert dcp.decode(recv(worker)) == DcpRegistration(service=b"echo")
    until(lambda: gw.gateway.router.workers())
    assert info(gw, "echo") == {"name": "echo", "workers": 1, "protocols": ["dcp"], "status": "active"}
    assert info(gw, "*")["echo"]["protocols"] == ["dcp"]


def test_disconnected_service_is_inactive_from_the_cache(gw: Running) -> None:
    sock = register(gw, "gone-soon", function="work")
    until(lambda: gw.gateway.router.workers())
    send(sock, dbp.Disconnect(time=now()))
    until(lambda: not gw.gateway.router.workers())
    entry = info(gw, "gone-soon")
    assert entry["status"] == "inactive" and entry["function"] == "work" and entry["port"] == 9
    assert info(gw, "*")["gone-soon"]["status"] == "inactive"
    assert info(gw, "work") == {"name": "work", "status": "unknown"}  # no worker offers it any more
    # Registering again makes it active again.
    register(gw, "gone-soon", function="work")
    assert info(gw, "gone-soon")["status"] == "active"


def test_pipelined_info_requests_are_answered_in_order(gw: Running) -> None:
    register(gw, "first")
    client = gw.dealer("dbp")
    for query in ("first", "second", "*"):
        send(client, dbp.Request(time=now(), query=query))
    answers = [json.loads(get(client).info) for _ in range(3)]
    assert answers[0]["status"] == "active" and answers[1]["status"] == "unknown"
    assert "first" in answers[2]


# --------------------------------------------------------------- registration


def test_missing_required_keys_are_denied_with_the_reason(gw: Running) -> None:
    sock = gw.dealer("dbp")
    send(sock, dbp.Registration(time=now(), info=(b'{"name":"half","ip":"127.0.0.1","port":1}',)))
    denied = get(sock)
    assert isinstance(denied, dbp.Denied)
    assert denied.reasons == (b"missing required key(s): function, heartbeat",)
    send(sock, dbp.Registration(time=now(), info=(b"{not json",)))
    denied = get(sock)
    assert isinstance(denied, dbp.Denied) and b"not JSON" in denied.reasons[0]
    bad_types = b'{"name":"x","ip":"127.0.0.1","port":70000,"function":"f","heartbeat":-1}'
    send(sock, dbp.Registration(time=now(), info=(bad_types,)))
    denied = get(sock)
    assert isinstance(denied, dbp.Denied)
    assert denied.reasons == (
        b"port must be an integer 1..65535",
        b"heartbeat must be a positive number of seconds",
    )
    assert info(gw, "half")["status"] == "unknown"
    assert edge(gw).stats()["denied"] == 3


def test_approved_reports_an_adjusted_heartbeat(gw: Running) -> None:
    sock = gw.dealer("dbp")
    info_bytes = dbp.make_info(name="fast", ip="127.0.0.1", port=9, function="", heartbeat=0.001)
    send(sock, dbp.Registration(time=now(), info=(info_bytes,)))
    approved = get(sock)
    assert isinstance(approved, dbp.Approved)
    assert [json.loads(c) for c in approved.changes] == [{"heartbeat": 0.05}]


def test_update_merges_and_is_approved(gw: Running) -> None:
    sock = register(gw, "sensor", colour="blue")
    send(sock, dbp.Update(time=now(), info=(b'{"colour":"red","unit":"K"}',)))
    assert isinstance(get(sock), dbp.Approved)
    entry = info(gw, "sensor")
    assert entry["colour"] == "red" and entry["unit"] == "K" and entry["port"] == 9
    send(sock, dbp.Update(time=now(), info=(b'{"name":"other"}',)))
    denied = get(sock)
    assert isinstance(denied, dbp.Denied) and b"name cannot be changed" in denied.reasons[0]
    send(sock, dbp.Update(time=now(), info=(b'{"port":"x"}',)))
    assert isinstance(get(sock), dbp.Denied)
    assert info(gw, "sensor")["port"] == 9  # a denied update changes nothing


def test_update_of_function_moves_the_worker(gw: Running) -> None:
    sock = register(gw, "svc", function="one")
    client = gw.dealer("dbp")
    assert info(gw, "one", client)["workers"] == 1
    send(sock, dbp.Update(time=now(), info=(b'{"function":"two"}',)))
    assert isinstance(get(sock), dbp.Approved)
    assert info(gw, "two", client)["workers"] == 1  # the Register was fed with the UPDATE
    assert info(gw, "one", client)["status"] == "unknown"


def test_update_from_an_unregistered_peer_is_denied(gw: Running) -> None:
    sock = gw.dealer("dbp")
    send(sock, dbp.Update(time=now(), info=(b'{"colour":"red"}',)))
    denied = get(sock)
    assert isinstance(denied, dbp.Denied) and denied.reasons == (b"not registered",)


def test_the_same_name_from_another_connection_takes_over(gw: Running) -> None:
    first = register(gw, "dup", function="dupsvc")
    second = register(gw, "dup", function="dupsvc")
    assert isinstance(get(first), dbp.Disconnect)
    until(lambda: len(gw.gateway.router.workers()) == 1)
    assert info(gw, "dup")["status"] == "active"
    assert nothing(second, 100)


# ------------------------------------------------------ commands and DISCONNECT


def test_zmq_heartbeat_from_unknown_peer_gets_disconnect(gw: Running) -> None:
    stranger = gw.dealer("dbp")
    send(stranger, dbp.Heartbeat(time=now(), service="who"))
    assert isinstance(get(stranger), dbp.Disconnect)  # "re-register after a broker failure"


def test_heartbeat_and_ack_from_a_service_get_no_answer(gw: Running) -> None:
    sock = register(gw, "quiet")
    send(sock, dbp.Heartbeat(time=now(), service="quiet"))
    send(sock, dbp.Ack(time=now()))
    assert nothing(sock, 200)
    assert info(gw, "quiet")["status"] == "active"


def test_disconnect_before_registration_is_ignored(gw: Running) -> None:
    sock = gw.dealer("dbp")
    send(sock, dbp.Disconnect(time=now()))
    assert nothing(sock, 200)
    assert info(gw, "anything", sock)["status"] == "unknown"  # the peer is still served


def test_unexpected_commands_get_disconnect(gw: Running) -> None:
    client = gw.dealer("dbp")
    send(client, dbp.Approved(time=now()))
    assert isinstance(get(client), dbp.Disconnect)
    send(client, dbp.Reply(time=now(), info=b"{}"))
    assert isinstance(get(client), dbp.Disconnect)
    service = register(gw, "rude", function="rudesvc")
    send(service, dbp.Denied(time=now()))
    assert isinstance(get(service), dbp.Disconnect)
    assert info(gw, "rude")["status"] == "inactive"  # "no further commands to that service node"
    assert edge(gw).stats()["unexpected"] == 3


def test_drain_says_disconnect_to_services(tmp_path: Path) -> None:
    running = start_gateway(tmp_path)
    try:
        sock = register(running, "leaving")
        running.gateway.stop()
        running._waker.send(b"x")
        running.thread.join(timeout=10)
        assert isinstance(get(sock), dbp.Disconnect)
    finally:
        finish(running)


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


# ------------------------------------------------------------- Hermes dialect


def hermes_req(gw: Running) -> Sock:
    sock = gw.context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, RECV_MS)
    sock.connect(gw.endpoint("dbp"))
    gw._sockets.append(sock)
    return sock


def f32(seconds: float) -> bytes:
    return struct.pack("<f", seconds)


def test_hermes_registration_info_and_update(gw: Running) -> None:
    service = hermes_req(gw)
    registration = {
        "name": "hermes-svc",
        "interfaces": {"router": {"ip": "127.0.0.1", "port": 5300}},
        "reg_time": now(),
        "topics": ["a"],
    }
    service.send_multipart([b"UwU", f32(now()), json.dumps(registration).encode()])
    frames = service.recv_multipart()
    assert frames[0] == b"OwO" and len(frames[1]) == 4 and frames[2:] == [b""]  # ["", OwO, t, ""]
    service.send_multipart([b"UoU", f32(now()), b'{"topics":["a","b"]}'])
    frames = service.recv_multipart()
    assert frames[0] == b"u.u" and len(frames[1]) == 4  # Hermes acknowledges UPDATE with u.u

    client = hermes_req(gw)
    client.send_multipart([b"u_U", f32(now()), b"hermes-svc"])
    frames = client.recv_multipart()
    assert frames[0] == b"o_O" and len(frames[1]) == 4
    entry = json.loads(frames[2])
    assert entry["ip"] == "127.0.0.1" and entry["port"] == 5300 and entry["topics"] == ["a", "b"]
    assert entry["status"] == "active"
    client.send_multipart([b"u_U", f32(now()), b"missing"])
    frames = client.recv_multipart()
    assert json.loads(frames[2]) == {"Error": "No Registered Service With the Name missing"}
    # A spec-dialect client asking about the same service gets the spec form.
    assert info(gw, "hermes-svc")["topics"] == ["a", "b"]
    assert not gw.gateway.router.workers()  # REQ sockets cannot take requests: catalog only


def test_hermes_req_peer_gets_one_answer_to_every_message(gw: Running) -> None:
    service = hermes_req(gw)
    service.send_multipart([b"UwU", f32(now()), b'{"name":"h2"}'])
    assert service.recv_multipart()[0] == b"OwO"
    for tag in (b"u.u", b"</3", b"</3"):  # ACK, DISCONNECT, and DISCONNECT when not registered
        service.send_multipart([tag, f32(now())])
        assert service.recv_multipart()[0] == b"u.u"
    assert info(gw, "h2")["status"] == "inactive"


def test_hermes_bad_registration_is_OmO(gw: Running) -> None:
    service = hermes_req(gw)
    service.send_multipart([b"UwU", f32(now()), b'{"interfaces":{}}'])
    frames = service.recv_multipart()
    assert frames[0] == b"OmO" and len(frames[1]) == 4
    assert b"name" in frames[2]


# ---------------------------------------------------------------- beacon


def test_discover_hears_the_beacon(tmp_path: Path) -> None:
    port = free_udp_port()
    toml = f'[edges.dbp]\nbeacon = "127.0.0.1:{port}"\nbeacon_interval_ms = 100\n'
    running = start_gateway(tmp_path, toml)
    try:
        catalog = running.endpoint("dbp")
        result = CliRunner().invoke(
            main,
            ["discover", "--address", "127.0.0.1", "--port", str(port), "--timeout", "5", "--count", "1"],
        )
        assert result.exit_code == 0, result.output
        heard = json.loads(result.output.strip().splitlines()[0])
        assert heard["catalog"] == catalog
        # The gateway counts a beacon after sendto returns, so discover can hear it first.
        for _ in range(100):
            if edge(running).stats().get("beacons_sent", 0) >= 1:
                break
            time.sleep(0.05)
        assert edge(running).stats()["beacons_sent"] >= 1
    finally:
        finish(running)


def test_discover_hearing_nothing_exits_1() -> None:
    port = free_udp_port()
    result = CliRunner().invoke(
        main, ["discover", "--address", "127.0.0.1", "--port", str(port), "--timeout", "0.2"]
    )
    assert result.exit_code == 1 and result.output == ""


def test_beacon_can_be_switched_off(tmp_path: Path) -> None:
    running = start_gateway(tmp_path, '[edges.dbp]\nbeacon = ""\nudp = ""\n')
    try:
        assert edge(running).udp is None
        assert info(running, "x")["status"] == "unknown"
        assert edge(running).stats().get("beacons_sent", 0) == 0
    finally:
        finish(running)


# ------------------------------------------------------------------ garbage


def test_garbage_is_counted_and_harmless(gw: Running, udp_peer: socket.socket) -> None:
    bad = gw.dealer("dbp")
    for junk in (
        [b"x"],
        [b"", b"u_U"],
        [b"", b"??", b"1"],
        [b"", b"u_U", b"1e9", b"q"],
        [b"", b"UwU", b"1"],
        [b"", b"<3", b"1", b""],
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
    assert stats["undecodable"] == 7 and stats["udp_unknown_service"] == 1
    assert info(gw, "survivor")["status"] == "active"


# ------------------------------------------------------------------ config


def test_bad_addresses_are_config_errors_naming_the_key(tmp_path: Path) -> None:
    from nfgate.config import load
    from nfgate.errors import ConfigError

    for key, value in (("udp", '"nope"'), ("beacon", "5245"), ("beacon_interval_ms", "0")):
        config = tmp_path / "bad.toml"
        config.write_text(f"[edges.dbp]\n{key} = {value}\n")
        with pytest.raises(ConfigError, match=f"edges.dbp.{key}"):
            load(config, data_dir=tmp_path)


def test_udp_port_in_use_fails_the_start_and_closes_the_router(tmp_path: Path) -> None:
    from nfgate.config import load
    from nfgate.errors import TransportError
    from nfgate.serve import build
    from tests.ports import random_binds

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
            held.bind(("127.0.0.1", 0))
            port = held.getsockname()[1]
            config = tmp_path / "udp.toml"
            config.write_text(f'[edges.dbp]\nudp = "127.0.0.1:{port}"\n')
            cfg = load(config, data_dir=tmp_path / "data", binds=random_binds())
            with pytest.raises(TransportError, match="address already in use"):
                build(cfg, context)
    finally:
        context.term()  # returns only when every socket the failed build opened is closed


def test_worker_false_keeps_a_service_out_of_routing(gw: Running) -> None:
    register(gw, "listed", function="notrouted", worker=False)
    assert info(gw, "listed")["status"] == "active"
    assert info(gw, "notrouted")["status"] == "unknown"
    assert not gw.gateway.router.workers()


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


def test_curve_on_the_dbp_router(tmp_path: Path) -> None:
    """design.md: ZeroMQ edges support CURVE. A CURVE client is answered; a plain one is not."""
    import zmq.auth

    _, secret_file = zmq.auth.create_certificates(tmp_path, "broker")
    server_public, _ = zmq.auth.load_certificate(secret_file)
    client_public, client_secret = zmq.auth.load_certificate(
        zmq.auth.create_certificates(tmp_path, "client")[1]
    )
    running = start_gateway(tmp_path, f'[edges.dbp]\ncurve_secret_key = "{secret_file}"\n')
    try:
        assert edge(running).curve_public_key == server_public.decode()
        secured = running.context.socket(zmq.DEALER)
        secured.setsockopt(zmq.LINGER, 0)
        secured.setsockopt(zmq.RCVTIMEO, RECV_MS)
        secured.curve_serverkey = server_public
        secured.curve_publickey, secured.curve_secretkey = client_public, client_secret
        secured.connect(running.endpoint("dbp"))
        try:
            assert info(running, "nope", secured) == {"name": "nope", "status": "unknown"}
        finally:
            secured.close(0)
        plain = running.dealer("dbp")
        send(plain, dbp.Request(time=now(), query="nope"))
        assert nothing(plain, 500)
    finally:
        finish(running)


def test_peer_dialects_stay_bounded_behind_a_long_lived_service(tmp_path: Path) -> None:
    # The Hermes service's record is the oldest: the bound must pass over it and forget
    # the clients, or every client after the bound would be kept for as long as it runs.
    with running_on(tmp_path, "[limits]\nmax_peers = 4\n") as gw:
        service = hermes_req(gw)
        service.send_multipart([b"UwU", f32(now()), b'{"name":"kept"}'])
        assert service.recv_multipart()[0] == b"OwO"
        for _ in range(12):
            client = gw.dealer("dbp")
            assert info(gw, "kept", client)["name"] == "kept"
            client.close(0)
        stats = edge(gw).stats()
        assert stats["services"] == 1 and stats["peers"] <= 4
        # Its dialect was kept: the Hermes UPDATE is answered the Hermes way.
        service.send_multipart([b"UoU", f32(now()), b'{"topics":["a"]}'])
        assert service.recv_multipart()[0] == b"u.u"
