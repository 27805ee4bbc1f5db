"""A DCP or SADA client whose connection closes under an identity libzmq made up for it
(it set none) can never be answered: its requests are cancelled, queued ones never
dispatched, the one at a worker left to finish as a late one. A client with an identity
of its own may come back under it and get its replies: it is left alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import zmq

from nfgate.codecs import dcp, sada
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.sada.messages import PROTO_ASCII, Intr, Ping, Pong, Rep, Req
from nfgate.model import ClientGone

from .conftest import Running, nothing, recv, running_on, until
from .test_connections_closed import _Connections, _on_stand_in

if TYPE_CHECKING:
    from nfgate.edges.dcp import DcpEdge
    from nfgate.model import Command

pytestmark = pytest.mark.timeout(60)

# Slow heartbeats (no PING from the SADA channel while a test waits) and one request at
# a time per SADA server, as a DCP worker takes.
CONFIG = """
[edges.dcp]
heartbeat_ms = 60000
[edges.sada]
heartbeat_ms = 60000
server_capacity = 1
"""


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Running]:
    with running_on(tmp_path, CONFIG) as running:
        yield running


def core(gw: Running) -> dict[str, int]:
    return gw.gateway.router.stats()


# ---------------------------------------------------------------------------- DCP


def dcp_worker(gw: Running) -> zmq.Socket[bytes]:
    sock = gw.dealer("dcp", b"worker")
    sock.send_multipart(dcp.encode(Registration(service=b"svc")))
    assert dcp.decode(recv(sock)) == Registration(service=b"svc")
    return sock


def dcp_ask(client: zmq.Socket[bytes], key: bytes) -> None:
    client.send_multipart(dcp.encode(DcpRequest(service=b"svc", metadata=(key,), data=(b"x",))))


def dcp_serve(worker: zmq.Socket[bytes]) -> bytes:
    """Answer the next request; its metadata part (the key the client gave)."""
    request = dcp.decode(recv(worker))
    assert isinstance(request, DcpRequest)
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"y",)))
    )
    return request.metadata[0]


def test_a_dcp_client_gone_has_its_queued_requests_dropped_and_its_held_one_run_out(gw: Running) -> None:
    worker = dcp_worker(gw)
    client = gw.dealer("dcp")  # no identity: libzmq makes one up, for this connection only
    for i in range(5):
        dcp_ask(client, b"%d" % i)
    until(lambda: core(gw)["queued"] == 4)  # one at the worker, which takes one at a time
    first = dcp.decode(recv(worker))
    assert isinstance(first, DcpRequest) and first.metadata == (b"0",)
    client.close(0)
    edge = gw.gateway.edges["dcp"]
    until(lambda: edge.counters["clients_gone"] == 1)
    # Its requests ended; the one at the worker keeps the worker's slot, as a late one.
    until(lambda: (core(gw)["queued"], core(gw)["jobs"], core(gw)["late"]) == (0, 0, 1))
    worker.send_multipart(dcp.encode(DcpReply(client=first.client, metadata=first.metadata, data=(b"y",))))
    until(lambda: core(gw)["late"] == 0)
    assert nothing(worker, 300)  # the queued ones were never dispatched
    stats = core(gw)
    assert (stats["queued"], stats["in_flight"], stats["late"]) == (0, 0, 0)
    assert stats["late_replies"] == 1 and stats["cancelled"] == 5
    assert edge.counters["clients_gone"] == 1 and edge.counters["unroutable"] == 0


def test_a_live_clients_requests_are_served_before_any_of_a_gone_ones(gw: Running) -> None:
    worker = dcp_worker(gw)
    dead = gw.dealer("dcp")
    for i in range(20):
        dcp_ask(dead, b"dead-%d" % i)
    until(lambda: core(gw)["queued"] == 19)
    live = gw.dealer("dcp")
    for i in range(5):
        dcp_ask(live, b"live-%d" % i)
    until(lambda: core(gw)["queued"] == 24)
    dead.close(0)
    until(lambda: gw.gateway.edges["dcp"].counters["clients_gone"] == 1)
    assert dcp_serve(worker) == b"dead-0"  # the one it held, answered late
    served = [dcp_serve(worker) for _ in range(5)]
    assert served == [b"live-%d" % i for i in range(5)]
    got = sorted(dcp.decode(recv(live)).metadata[0] for _ in range(5))  # type: ignore[attr-defined]
    assert got == [b"live-%d" % i for i in range(5)]
    assert nothing(worker, 300)
    until(lambda: core(gw)["jobs"] == 0)


def test_a_dcp_client_with_its_own_identity_gets_its_replies_when_it_comes_back(gw: Running) -> None:
    # Beside it, a client with a made-up identity closes too: only that one is cancelled.
    worker = dcp_worker(gw)
    client = gw.dealer("dcp", b"my-client")
    for i in range(3):
        dcp_ask(client, b"%d" % i)
    until(lambda: core(gw)["queued"] == 2)
    anonymous = gw.dealer("dcp")
    for i in range(2):
        dcp_ask(anonymous, b"anonymous-%d" % i)
    until(lambda: core(gw)["queued"] == 4)
    client.close(0)
    anonymous.close(0)
    until(lambda: gw.gateway.edges["dcp"].counters["clients_gone"] == 1)
    until(lambda: core(gw)["queued"] == 2)  # my-client's, kept
    assert core(gw)["cancelled"] == 2
    again = gw.dealer("dcp", b"my-client")
    dcp_ask(again, b"3")  # connected again: this one queues behind the others
    # Read by the gateway, so its connection is the identity's before any reply goes to it.
    until(lambda: core(gw)["queued"] == 3)
    assert [dcp_serve(worker) for _ in range(4)] == [b"0", b"1", b"2", b"3"]
    got = sorted(dcp.decode(recv(again)).metadata[0] for _ in range(4))  # type: ignore[attr-defined]
    assert got == [b"0", b"1", b"2", b"3"]
    assert nothing(worker, 300)
    assert gw.gateway.edges["dcp"].counters["clients_gone"] == 1


# --------------------------------------------------------------------------- SADA


def sada_send(sock: zmq.Socket[bytes], message: object) -> None:
    sock.send_multipart(sada.encode(message, "spec"))  # type: ignore[arg-type]


def sada_get(sock: zmq.Socket[bytes]) -> object:
    for _ in range(100):
        frames = recv(sock)
        message = sada.decode(frames, sada.detect(frames))
        if not isinstance(message, Ping):
            return message
        sada_send(sock, Pong(proto=message.proto))
    pytest.fail("only PINGs")


def sada_server(gw: Running) -> zmq.Socket[bytes]:
    sock = gw.dealer("sada")
    sada_send(sock, Intr(proto=PROTO_ASCII, services=(("svc", ""),)))
    until(lambda: len(gw.gateway.router.workers()) == 1)
    return sock


def sada_ask(client: zmq.Socket[bytes], rid: str) -> None:
    message = Req(
        proto=PROTO_ASCII, request_id=rid, service="svc", version="", category="c", action="a", payload=b"p"
    )
    sada_send(client, message)


def sada_serve(server: zmq.Socket[bytes]) -> Req:
    request = sada_get(server)
    assert isinstance(request, Req)
    sada_send(server, Rep(proto=PROTO_ASCII, request_id=request.request_id, status=200, payload=b"r"))
    return request


def test_a_sada_client_gone_has_its_queued_requests_dropped_and_its_held_one_run_out(gw: Running) -> None:
    server = sada_server(gw)
    client = gw.dealer("sada")
    for i in range(5):
        sada_ask(client, f"RQ-{i}")
    until(lambda: core(gw)["queued"] == 4)
    first = sada_get(server)
    assert isinstance(first, Req)
    client.close(0)
    edge = gw.gateway.edges["sada"]
    until(lambda: edge.counters["clients_gone"] == 1)
    until(lambda: (core(gw)["queued"], core(gw)["jobs"], core(gw)["late"]) == (0, 0, 1))
    sada_send(server, Rep(proto=PROTO_ASCII, request_id=first.request_id, status=200, payload=b"r"))
    until(lambda: core(gw)["late"] == 0)
    assert nothing(server, 300)
    stats = core(gw)
    assert (stats["queued"], stats["in_flight"], stats["late"]) == (0, 0, 0)
    assert stats["late_replies"] == 1 and stats["cancelled"] == 5
    assert edge.counters["clients_gone"] == 1 and edge.counters["unroutable"] == 0


def test_a_sada_client_with_its_own_identity_gets_its_replies_when_it_comes_back(gw: Running) -> None:
    server = sada_server(gw)
    client = gw.dealer("sada", b"127.0.0.1:7001")
    for i in range(3):
        sada_ask(client, f"RQ-{i}")
    until(lambda: core(gw)["queued"] == 2)
    anonymous = gw.dealer("sada")
    for i in range(2):
        sada_ask(anonymous, f"RQ-anonymous-{i}")
    until(lambda: core(gw)["queued"] == 4)
    client.close(0)
    anonymous.close(0)
    until(lambda: gw.gateway.edges["sada"].counters["clients_gone"] == 1)
    until(lambda: core(gw)["queued"] == 2)  # 127.0.0.1:7001's, kept
    assert core(gw)["cancelled"] == 2
    again = gw.dealer("sada", b"127.0.0.1:7001")
    sada_ask(again, "RQ-3")  # connected again: this one queues behind the others
    # Read by the gateway, so its connection is the identity's before any REP goes to it.
    until(lambda: core(gw)["queued"] == 3)
    for _ in range(4):  # the server sees the channel's own request ids
        sada_serve(server)
    got = sorted(rep.request_id for rep in (sada_get(again) for _ in range(4)) if isinstance(rep, Rep))
    assert got == ["RQ-0", "RQ-1", "RQ-2", "RQ-3"]
    assert nothing(server, 300)
    assert gw.gateway.edges["sada"].counters["clients_gone"] == 1


# ----------------------------------------------- the fd bookkeeping, on a stand-in watch


@pytest.fixture
def watched_dcp() -> Iterator[tuple[DcpEdge, _Connections]]:
    from nfgate.edges import EdgeSettings
    from nfgate.edges.dcp import DcpEdge

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    settings = EdgeSettings(name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context)
    edge = DcpEdge(settings)
    fake = _on_stand_in(edge)
    try:
        yield edge, fake
    finally:
        edge.close()
        context.term()


A, B = b"\x00\x00\x00\x00\x0a", b"\x00\x00\x00\x00\x0b"  # identities libzmq made up


def first_message(edge: DcpEdge, fake: _Connections, address: bytes, fd: int) -> list[Command]:
    fake.fd = fd
    out: list[Command] = []
    edge._remember(address, "spec", out)
    return out


def gone(commands: list[Command]) -> list[bytes]:
    return [c.peer.address for c in commands if isinstance(c, ClientGone)]


def test_a_client_fd_reused_before_its_closing_is_read_is_told_apart(
    watched_dcp: tuple[DcpEdge, _Connections],
) -> None:
    edge, fake = watched_dcp
    assert first_message(edge, fake, A, 7) == []
    fake.closed = [7]  # A's closing, still to read when B's first message on fd 7 comes
    assert gone(first_message(edge, fake, B, 7)) == [A]
    fake.closed = [7]  # B's own, later
    assert gone(edge._connections_closed(0)) == [B]
    assert edge.counters["clients_gone"] == 2 and not edge._by_fd and not edge._client_fd


def test_a_client_whose_closing_was_read_before_its_first_message_is_gone_when_its_fd_is_reused(
    watched_dcp: tuple[DcpEdge, _Connections],
) -> None:
    edge, fake = watched_dcp
    fake.closed = [7]
    assert edge._connections_closed(0) == []  # no one watched on fd 7 yet
    assert first_message(edge, fake, A, 7) == []  # what A sent before it closed, read late
    assert gone(first_message(edge, fake, B, 7)) == [A]  # fd 7 is B's connection: A is gone
    fake.closed = [7]
    assert gone(edge._connections_closed(0)) == [B]  # B's closing is not taken for A's


def test_a_worker_on_the_fd_of_a_client_whose_closing_was_read_first_keeps_its_own_closing(
    watched_dcp: tuple[DcpEdge, _Connections],
) -> None:
    # Client A's closing is read before its first message; then a worker registers on
    # A's old fd. No closing of A's is still to come: the worker's, when it comes, must
    # not be taken for it (the worker would be left registered until its liveness ran out).
    from nfgate.edges.dcp import _Worker
    from nfgate.model import Unregister

    edge, fake = watched_dcp
    fake.closed = [7]
    assert edge._connections_closed(0) == []
    assert first_message(edge, fake, A, 7) == []
    edge._workers[b"W"] = _Worker(b"svc")
    edge.note_connection(b"W")  # on fd 7 (fake.fd): A is gone
    assert gone(edge.lost_messages()) == [A]
    fake.closed = [7]  # W's connection closes
    (closed,) = edge._connections_closed(0)
    assert isinstance(closed, Unregister) and closed.peer.address == b"W"


def test_a_worker_with_a_made_up_identity_whose_closing_was_read_first_is_gone_when_its_fd_is_reused(
    watched_dcp: tuple[DcpEdge, _Connections],
) -> None:
    # Only an identity of its own is handed over to a newer connection: a made-up one on
    # a reused fd is a closed connection's, whatever its peer was.
    from nfgate.edges.dcp import _Worker
    from nfgate.model import Unregister

    edge, fake = watched_dcp
    fake.closed = [7]
    assert edge._connections_closed(0) == []
    assert first_message(edge, fake, A, 7) == []  # A registers as a worker, read late
    edge._workers[A] = _Worker(b"svc")
    edge.note_connection(A)
    out = first_message(edge, fake, B, 7)  # a client's first message on fd 7
    assert [c.peer.address for c in out if isinstance(c, Unregister)] == [A]
    fake.closed = [7]
    assert gone(edge._connections_closed(0)) == [B]  # B is watched


def test_a_client_with_its_own_identity_is_not_watched(watched_dcp: tuple[DcpEdge, _Connections]) -> None:
    edge, fake = watched_dcp
    first_message(edge, fake, b"my-client", 7)
    fake.closed = [7]
    assert edge._connections_closed(0) == [] and edge.counters["clients_gone"] == 0


def test_a_message_renamed_by_a_handover_leaves_the_worker_alone(
    watched_dcp: tuple[DcpEdge, _Connections],
) -> None:
    # Worker W (its own identity) on fd 7 reconnected: libzmq renamed its old connection,
    # whose leftover REQUEST comes under a made-up name. That connection is still open:
    # the newcomer is not watched, the worker not touched.
    from nfgate.edges.dcp import _Worker

    edge, fake = watched_dcp
    fake.fd = 7
    edge._workers[b"W"] = _Worker(b"svc")
    edge.note_connection(b"W")
    assert first_message(edge, fake, A, 7) == []
    assert edge._by_fd == {7: b"W"} and A not in edge._client_fd


def test_forgetting_a_client_record_forgets_its_fd() -> None:
    from nfgate.edges import EdgeSettings
    from nfgate.edges.dcp import DcpEdge
    from nfgate.transports.zmq import Limits

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    settings = EdgeSettings(
        name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context, limits=Limits(max_peers=4)
    )
    edge = DcpEdge(settings)
    fake = _on_stand_in(edge)
    try:
        for n in range(20):
            first_message(edge, fake, b"\x00" + n.to_bytes(4, "big"), 100 + n)
        assert len(edge._dialects) <= 4 and set(edge._client_fd) <= set(edge._dialects)
        assert len(edge._by_fd) == len(edge._client_fd)
    finally:
        edge.close()
        context.term()
