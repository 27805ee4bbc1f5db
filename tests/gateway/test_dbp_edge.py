"""The DBP catalog edge against raw DEALER/REQ peers and UDP sockets (specs/dbp.md,
docs/protocols/dbp.md): info requests, registration, commands, the Hermes dialect, the
beacon, config and CURVE."""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path

import pytest
import zmq
from click.testing import CliRunner

from nfgate.cli import main
from nfgate.codecs import dbp, dcp
from nfgate.codecs.dcp.messages import Registration as DcpRegistration

from .conftest import RECV_MS, Running, finish, nothing, recv, running_on, start_gateway, until
from .dbp_helpers import Sock, edge, get, info, now, register, send

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------- helpers


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


@pytest.mark.parametrize("heartbeat", [b"1e308", b"1" + b"0" * 400])
def test_a_heartbeat_too_long_to_scale_is_approved_as_the_longest(gw: Running, heartbeat: bytes) -> None:
    # Finite and positive, so approved: scaled to ms it overflowed (an internal error,
    # and the service got neither APPROVED nor DENIED).
    sock = gw.dealer("dbp")
    body = b'{"name":"slow","ip":"127.0.0.1","port":9,"function":"","heartbeat":' + heartbeat + b"}"
    send(sock, dbp.Registration(time=now(), info=(body,)))
    approved = get(sock)
    assert isinstance(approved, dbp.Approved)
    assert [json.loads(c) for c in approved.changes] == [{"heartbeat": 3600.0}]
    assert edge(gw).counters["internal_errors"] == 0 and gw.gateway.internal_errors == 0


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
