"""IPv6 binds: ``tcp://[::1]:port`` on every edge, ``tcp://[::]:port`` for both families,
the metrics endpoint and DBP's UDP socket on IPv6, and the conformance suite against an
IPv6 endpoint. Before, libzmq refused every IPv6 bind ("No such device": ZMQ_IPV6 was
never set) and the metrics server could only bind IPv4.

Loopback only (``::1``): skipped, saying so, on a machine whose loopback has no IPv6.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import dcp, memodb, nfp
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.memodb.messages import Job, Result
from nfgate.codecs.nfp.messages import CLIENT, Post, Response
from nfgate.conformance.model import Verdict
from nfgate.edges.kinds import KINDS
from nfgate.metrics import MetricsServer
from nfgate.transports.nng import connect_req
from nfgate.transports.udp import UdpEndpoint
from nfgate.transports.zmq import connect_dealer, wants_ipv6
from tests.conformance.conftest import run_suite

from .conftest import Running, finish, recv, start_gateway, until

pytestmark = pytest.mark.timeout(60)


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not _has_ipv6_loopback(), reason="this machine's loopback has no IPv6 (::1)")


@pytest.fixture
def gw6(tmp_path: Path) -> Iterator[Running]:
    binds = [(kind.kind, "tcp://[::1]:*") for kind in KINDS.values() if kind.binds]
    running = start_gateway(tmp_path, binds=binds)
    try:
        yield running
    finally:
        finish(running)


def test_wants_ipv6_only_for_a_bracketed_address() -> None:
    assert wants_ipv6("tcp://[::1]:5555") and wants_ipv6("tcp://[::]:5555")
    # A host name keeps IPv4 first: with ZMQ_IPV6, tcp://localhost would bind ::1 alone.
    assert not wants_ipv6("tcp://localhost:5555")
    assert not wants_ipv6("tcp://127.0.0.1:5555") and not wants_ipv6("ipc:///tmp/x")


@needs_ipv6
def test_every_edge_binds_ipv6_and_reports_its_endpoint(gw6: Running) -> None:
    for name, edge in gw6.gateway.edges.items():
        if name != "sada-server":  # connects out, binds nothing
            assert edge.endpoint.startswith("tcp://[::1]:"), (name, edge.endpoint)


@needs_ipv6
@pytest.mark.parametrize("dialect", ["spec", "norfab"])
def test_an_nfp_client_over_ipv6_is_served_by_a_dcp_worker_over_ipv6(gw6: Running, dialect: str) -> None:
    worker = gw6.dealer("dcp")
    worker.send_multipart(dcp.encode(Registration(service=b"v6")))
    assert dcp.decode(recv(worker)) == Registration(service=b"v6")
    client = gw6.dealer("nfp", b"c6")
    client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="v6", target="any", uuid="u6", body=(b"{}",)), dialect)
    )
    assert nfp.decode(recv(client), dialect).status == 202  # type: ignore[attr-defined]
    request = dcp.decode(recv(worker))
    assert isinstance(request, DcpRequest)
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"{}",)))
    )
    reply = nfp.decode(recv(client), dialect)
    assert isinstance(reply, Response) and reply.status == 200 and reply.uuid == "u6"


@needs_ipv6
def test_a_memodb_client_over_ipv6_is_served(gw6: Running) -> None:
    worker = gw6.dealer("dcp")
    worker.send_multipart(dcp.encode(Registration(service=b"m6")))
    assert dcp.decode(recv(worker)) == Registration(service=b"m6")
    client = connect_req(gw6.endpoint("memodb"), recv_timeout_ms=3000)
    try:
        [data] = memodb.encode(Job(service="m6", timeout_ms=5000, payload=b"ping"))
        client.send(data)
        request = dcp.decode(recv(worker))
        assert isinstance(request, DcpRequest) and request.data == (b"ping",)
        worker.send_multipart(
            dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"pong",)))
        )
        assert memodb.decode([client.recv()]) == Result(payload=b"pong")
    finally:
        client.close()


@needs_ipv6
def test_a_bind_on_every_ipv6_address_takes_ipv4_peers_too(tmp_path: Path) -> None:
    running = start_gateway(
        tmp_path, binds=[("dcp", "tcp://[::]:*")], disabled=("nfp", "memodb", "dbp", "sada")
    )
    try:
        port = running.endpoint("dcp").rpartition(":")[2]
        for url in (f"tcp://127.0.0.1:{port}", f"tcp://[::1]:{port}"):
            sock = connect_dealer(running.context, url)
            try:
                sock.setsockopt(zmq.RCVTIMEO, 3000)
                sock.send_multipart(dcp.encode(Registration(service=b"both")))
                assert dcp.decode(recv(sock)) == Registration(service=b"both"), url
            finally:
                sock.close(0)
    finally:
        finish(running)


@needs_ipv6
def test_the_metrics_endpoint_binds_ipv6() -> None:
    server = MetricsServer("http://[::1]:0", lambda: "up 1\n", {"/healthz": lambda: (200, "ok")})
    try:
        assert server.url.startswith("http://[::1]:")
        base = server.url.removesuffix("/metrics")
        with urllib.request.urlopen(base + "/healthz", timeout=5) as answer:
            assert answer.status == 200 and answer.read() == b"ok\n"
        with urllib.request.urlopen(server.url, timeout=5) as answer:
            assert answer.read() == b"up 1\n"
    finally:
        server.close()


@needs_ipv6
def test_dbp_heartbeats_are_taken_on_ipv6(gw6: Running) -> None:
    udp = gw6.gateway.edges["dbp"].udp  # type: ignore[attr-defined]
    assert udp is not None and udp.endpoint.startswith("udp://[::1]:")
    before = udp.received
    sender = UdpEndpoint("::1", 0)
    try:
        assert sender.endpoint.startswith("udp://[::1]:")
        sender.socket.sendto(b"not a heartbeat", udp.address)
        until(lambda: udp.received > before)  # the gateway's loop read it
    finally:
        sender.close()


@needs_ipv6
@pytest.mark.timeout(120)
def test_the_conformance_suite_runs_against_an_ipv6_endpoint(gw6: Running) -> None:
    report = run_suite(
        "dcp", "broker", gw6.endpoint("dcp"), "spec", include=("DCP-BROKER-5.*", "DCP-BROKER-7.*")
    )
    assert len(report.results) >= 10

    failed = [
        (r.id, r.verdict, r.reason) for r in report.results if r.verdict not in (Verdict.PASS, Verdict.INFO)
    ]
    assert not failed


@needs_ipv6
def test_a_dual_stack_udp_socket_names_ipv4_peers_as_ipv4_and_reaches_them() -> None:
    """A DBP edge bound on tcp://[::] gets a UDP socket on "::": an IPv4 service's
    datagrams came from ::ffff:127.0.0.1, which is not the "ip" it registered (so they
    were "from another host" and ignored), and a beat sent to its IPv4 address failed."""
    both = UdpEndpoint("::", 0)
    v4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if both.socket.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY):
            pytest.skip("this machine's IPv6 sockets are IPv6-only (net.ipv6.bindv6only)")
        v4.bind(("127.0.0.1", 0))
        v4.settimeout(3)
        v4.sendto(b"beat", ("127.0.0.1", both.address[1]))
        got: list[tuple[bytes, tuple[str, int]]] = []
        for _ in range(100):
            got += both.recv_batch(4)
            if got:
                break
            time.sleep(0.01)
        assert got == [(b"beat", v4.getsockname())]
        assert both.sendto(b"back", v4.getsockname())
        assert v4.recvfrom(100)[0] == b"back"
    finally:
        v4.close()
        both.close()
