"""A worker whose connection closes is removed at once, its requests dispatched again
(the issue: "a worker ... whose socket goes is removed"), not liveness intervals later:
its DEALER would reconnect on its own and pass for alive. The connection also closes
when libzmq drops it for a frame over ``max_message_bytes`` (ZMQ_MAXMSGSIZE), which
took a reply with it: the request went on waiting for a worker that had answered."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import zmq

from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Keepalive, Open, Post, Ready, Response

from .conftest import Running, recv, running_on, until

if TYPE_CHECKING:
    from nfgate.edges import RouterEdge
    from nfgate.edges.dcp import DcpEdge
    from nfgate.edges.nfp import NfpEdge
    from nfgate.model import Command

pytestmark = pytest.mark.timeout(30)

# Heartbeats a minute apart: liveness cannot be what removes a worker in these tests.
SLOW_BEATS = """
[edges.nfp]
heartbeat_ms = 60000
[edges.dcp]
heartbeat_ms = 60000
"""


def nfp_worker(gw: Running, identity: bytes) -> zmq.Socket[bytes]:
    sock = gw.dealer("nfp", identity)
    sock.send_multipart(nfp.encode(Open(header=WORKER)))
    recv(sock)  # OPEN
    sock.send_multipart(nfp.encode(Ready(service="svc")))
    until(lambda: any(w.peer.address == identity for w in gw.gateway.router.workers()))
    return sock


def next_post(sock: zmq.Socket[bytes]) -> Post:
    for _ in range(10):
        message = nfp.decode(recv(sock), "spec")
        if isinstance(message, Post):
            return message
    pytest.fail("no POST")


def next_command(sock: zmq.Socket[bytes]) -> str:
    """The type of the next message from the broker that is not a KEEPALIVE."""
    for _ in range(10):
        name = type(nfp.decode(recv(sock), "spec")).__name__
        if name != "Keepalive":
            return name
    pytest.fail("only KEEPALIVEs")


def final_status(client: zmq.Socket[bytes]) -> int:
    for _ in range(10):
        message = nfp.decode(recv(client), "spec")
        if isinstance(message, Response) and message.status != 202:
            return message.status
    pytest.fail("no final RESPONSE")


def post(client: zmq.Socket[bytes]) -> None:
    client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="svc", target="any", uuid="u1", body=(b"x",)))
    )


def answer(worker: zmq.Socket[bytes], job: Post, body: bytes) -> None:
    message = Response(header=WORKER, service="svc", uuid=job.uuid, status=200, body=(body,))
    worker.send_multipart(nfp.encode(message))


def test_a_worker_whose_connection_closes_has_its_job_dispatched_again_at_once(tmp_path: Path) -> None:
    with running_on(tmp_path, SLOW_BEATS) as gw:
        first = nfp_worker(gw, b"w1")
        client = gw.dealer("nfp", b"c1")
        post(client)
        next_post(first)
        second = nfp_worker(gw, b"w2")
        started = time.monotonic()
        first.close(0)  # the worker process dies: its TCP connection closes
        job = next_post(second)
        assert time.monotonic() - started < 5  # not the minute a heartbeat would take
        answer(second, job, b"done")
        assert final_status(client) == 200
        assert gw.gateway.edges["nfp"].counters["connections_closed"] == 1
        assert [w.name for w in gw.gateway.router.workers()] == ["w2"]


def test_a_reply_over_the_byte_limit_sends_the_job_to_another_worker(tmp_path: Path) -> None:
    # libzmq drops the connection of a peer sending a frame over ZMQ_MAXMSGSIZE, and the
    # frame with it: the job must not wait for ever on a worker that has answered.
    with running_on(tmp_path, SLOW_BEATS + "[limits]\nmax_message_bytes = 65536\n") as gw:
        big = nfp_worker(gw, b"w1")
        client = gw.dealer("nfp", b"c1")
        post(client)
        answer(big, next_post(big), b"x" * 100_000)
        second = nfp_worker(gw, b"w2")
        answer(second, next_post(second), b"small")
        assert final_status(client) == 200
        # The first worker's DEALER reconnected by itself; its next message finds it
        # unknown, and it is told so (DISCONNECT), after which it may register again.
        big.send_multipart(nfp.encode(Keepalive(header=WORKER, service="svc")))
        told = nfp.decode(recv(big), "spec")
        assert type(told).__name__ == "Disconnect"


LIMIT = SLOW_BEATS + "[limits]\nmax_message_bytes = 65536\n"


def test_a_reply_of_frames_under_the_limit_but_over_it_together_sends_the_job_elsewhere(
    tmp_path: Path,
) -> None:
    # No frame is over ZMQ_MAXMSGSIZE, so libzmq keeps the connection; the gateway drops
    # the message for its total. The job must not wait for ever on a worker that has
    # answered (busy for ever too, as a spec worker takes one job at a time).
    with running_on(tmp_path, LIMIT) as gw:
        big = nfp_worker(gw, b"w1")
        client = gw.dealer("nfp", b"c1")
        post(client)
        job = next_post(big)
        reply = Response(header=WORKER, service="svc", uuid=job.uuid, status=200, body=(b"x" * 40_000,) * 2)
        big.send_multipart(nfp.encode(reply))
        second = nfp_worker(gw, b"w2")
        answer(second, next_post(second), b"small")
        assert final_status(client) == 200
        big.send_multipart(nfp.encode(Keepalive(header=WORKER, service="svc")))
        assert type(nfp.decode(recv(big), "spec")).__name__ == "Disconnect"


def test_a_worker_whose_replies_are_always_too_large_ends_the_job_with_an_error(tmp_path: Path) -> None:
    # The only worker answers every try with a reply over the limit and registers again
    # each time it is told it is unknown: after max_redispatch tries the client is
    # answered 500, not left with 202 for ever.
    with running_on(tmp_path, LIMIT + "[routing]\nmax_redispatch = 2\n") as gw:
        worker = nfp_worker(gw, b"w1")
        client = gw.dealer("nfp", b"c1")
        post(client)
        for _ in range(3):  # the first try and two more
            job = next_post(worker)
            too_large = (b"x" * 40_000,) * 2
            worker.send_multipart(
                nfp.encode(Response(header=WORKER, service="svc", uuid=job.uuid, status=200, body=too_large))
            )
            worker.send_multipart(nfp.encode(Keepalive(header=WORKER, service="svc")))
            assert next_command(worker) == "Disconnect"
            worker.send_multipart(nfp.encode(Ready(service="svc")))
        assert final_status(client) == 500
        assert gw.gateway.router.stats()["in_flight"] == 0


def test_a_dcp_reply_over_the_limit_in_total_sends_the_request_elsewhere(tmp_path: Path) -> None:
    with running_on(tmp_path, LIMIT) as gw:
        big = gw.dealer("dcp", b"d1")
        big.send_multipart(dcp.encode(Registration(service=b"svc")))
        recv(big)
        client = gw.dealer("dcp", b"c1")
        client.send_multipart(dcp.encode(DcpRequest(service=b"svc", metadata=(b"k",), data=(b"x",))))
        request = dcp.decode(recv(big), "spec")
        assert isinstance(request, DcpRequest)
        reply = DcpReply(client=request.client, metadata=request.metadata, data=(b"y" * 40_000,) * 2)
        big.send_multipart(dcp.encode(reply))
        other = gw.dealer("dcp", b"d2")
        other.send_multipart(dcp.encode(Registration(service=b"svc")))
        recv(other)
        again = dcp.decode(recv(other), "spec")
        assert isinstance(again, DcpRequest) and again.metadata == (b"k",)
        other.send_multipart(
            dcp.encode(DcpReply(client=again.client, metadata=again.metadata, data=(b"ok",)))
        )
        answered = dcp.decode(recv(client), "spec")
        assert isinstance(answered, DcpReply) and answered.data == (b"ok",)


def test_a_clients_connection_closing_touches_no_worker(tmp_path: Path) -> None:
    with running_on(tmp_path, SLOW_BEATS) as gw:
        worker = nfp_worker(gw, b"w1")
        client = gw.dealer("nfp", b"c1")
        post(client)
        job = next_post(worker)
        client.close(0)
        time.sleep(0.3)
        assert [w.name for w in gw.gateway.router.workers()] == ["w1"]
        answer(worker, job, b"done")  # the job ends as usual; its result is kept for a GET
        until(lambda: gw.gateway.router.workers()[0].in_flight == 0)
        assert gw.gateway.edges["nfp"].counters["connections_closed"] == 0


def test_a_dcp_worker_whose_connection_closes_has_its_request_dispatched_again(tmp_path: Path) -> None:
    with running_on(tmp_path, SLOW_BEATS) as gw:
        workers = []
        for identity in (b"d1", b"d2"):
            sock = gw.dealer("dcp", identity)
            sock.send_multipart(dcp.encode(Registration(service=b"svc")))
            recv(sock)  # the echo that confirms it
            workers.append(sock)
        client = gw.dealer("dcp", b"c1")
        client.send_multipart(dcp.encode(DcpRequest(service=b"svc", metadata=(b"k",), data=(b"x",))))
        got = [s for s in workers if s.poll(3000)]
        assert len(got) == 1
        holder = got[0]
        request = dcp.decode(recv(holder), "spec")
        other = workers[1 - workers.index(holder)]
        holder.close(0)
        again = dcp.decode(recv(other), "spec")
        assert isinstance(request, DcpRequest) and isinstance(again, DcpRequest)
        assert again.data == (b"x",) and again.metadata == (b"k",)
        reply = DcpReply(client=again.client, metadata=again.metadata, data=(b"y",))
        other.send_multipart(dcp.encode(reply))
        answered = dcp.decode(recv(client), "spec")
        assert isinstance(answered, DcpReply) and answered.data == (b"y",)
        assert gw.gateway.edges["dcp"].counters["connections_closed"] == 1


@pytest.mark.parametrize("protocol", ["dcp", "nfp"])
def test_an_all_part_of_a_worker_with_no_identity_fails_when_its_connection_closes(
    tmp_path: Path, protocol: str
) -> None:
    # Its name is one libzmq made up for that connection: it never comes back under it,
    # so the part fails at once (500), not after the queue expiry (300 s) as a part of a
    # worker with a name of its own would (it waits for that name).
    with running_on(tmp_path, SLOW_BEATS) as gw:
        workers = []
        for _ in range(2):
            sock = gw.dealer(protocol)  # no identity
            if protocol == "dcp":
                sock.send_multipart(dcp.encode(Registration(service=b"svc")))
                recv(sock)
            else:
                sock.send_multipart(nfp.encode(Ready(service="svc")))
            workers.append(sock)
        until(lambda: len(gw.gateway.router.workers()) == 2)
        client = gw.dealer("nfp", b"c1")
        job = Post(header=CLIENT, service="svc", target="all", uuid="u1", body=(b"x",))
        client.send_multipart(nfp.encode(job))
        held = [dcp.decode(recv(workers[1]), "spec") if protocol == "dcp" else next_post(workers[1])]
        workers[0].close(0)
        assert final_status(client) == 500
        if protocol == "dcp":
            (asked,) = held
            assert isinstance(asked, DcpRequest)
            reply = DcpReply(client=asked.client, metadata=asked.metadata, data=(b"y",))
            workers[1].send_multipart(dcp.encode(reply))
        else:
            (post_,) = held
            assert isinstance(post_, Post)
            answer(workers[1], post_, b"y")
        assert final_status(client) == 200
        assert gw.gateway.router.stats()["jobs"] == 0


class _Connections:
    """Stands in for the transport's connection watch: the fd of the message being
    handled, and the closings the monitor has to tell."""

    monitor = object()

    def __init__(self) -> None:
        self.fd = -1
        self.closed: list[int] = []
        self.sent: list[tuple[bytes, list[bytes]]] = []

    def send(self, identity: bytes, frames: list[bytes], *, probe: bool = False) -> bool:
        self.sent.append((identity, frames))
        return True

    def watch_connections(self) -> object:
        return self.monitor

    def source_fd(self) -> int:
        return self.fd

    def closed_connections(self) -> list[int]:
        closed, self.closed = self.closed, []
        return closed

    def close(self) -> None:
        """Nothing to close: the edge's own transport was closed when this replaced it."""


def _on_stand_in(edge: RouterEdge) -> _Connections:
    """Close ``edge``'s socket and put it on a stand-in connection watch."""
    fake = _Connections()
    edge.transport.close()
    edge.transport = fake  # type: ignore[assignment]
    edge.side_inputs()
    return fake


def test_a_closing_read_after_its_fd_was_reused_is_not_taken_for_the_new_connection() -> None:
    # Worker A's connection (fd 7) closes and a new worker B connects on fd 7; B's
    # registration is read before A's closing (both during one batch). A is gone, B is
    # not: the closing of fd 7 is A's.
    from nfgate.edges import EdgeSettings
    from nfgate.edges.dcp import DcpEdge, _Worker
    from nfgate.model import Unregister

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    edge = DcpEdge(EdgeSettings(name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context))
    fake = _on_stand_in(edge)
    try:
        for address in (b"A", b"B"):
            fake.fd = 7
            edge._workers[address] = _Worker(b"svc")
            edge.note_connection(address)
        fake.closed = [7]  # A's closing, read only now
        (gone,) = edge._connections_closed(0)
        assert isinstance(gone, Unregister) and gone.peer.address == b"A"
        assert set(edge._workers) == {b"B"}
        fake.closed = [7]  # B's own closing, later
        (gone,) = edge._connections_closed(0)
        assert gone.peer.address == b"B" and not edge._workers
    finally:
        edge.close()
        context.term()


def test_a_worker_that_reconnects_before_its_closing_is_read_is_handled_as_closed() -> None:
    # DCP worker A registered on fd 7; its connection closes (its reply was too large,
    # say, and lost with it), its DEALER reconnects on fd 9 under the same identity and
    # beats, and that PING is read before fd 7's closing. A must not keep its requests
    # as if nothing happened: it is unregistered (its requests go to another worker) and
    # told to RECONNECT, as when the closing is read first; the closing then counts once.
    from nfgate.codecs.dcp.messages import Ping, Reconnect
    from nfgate.edges import EdgeSettings
    from nfgate.edges.dcp import DcpEdge
    from nfgate.model import Unregister

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    edge = DcpEdge(EdgeSettings(name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context))
    fake = _on_stand_in(edge)
    try:
        out: list[object] = []
        fake.fd = 7
        edge._on_message(b"A", Registration(service=b"svc"), "spec", out)  # type: ignore[arg-type]
        out.clear()
        fake.fd = 9
        edge._on_message(b"A", Ping(), "spec", out)  # type: ignore[arg-type]
        assert [type(c) for c in out if isinstance(c, Unregister)] == [Unregister]
        assert b"A" not in edge._workers
        assert isinstance(dcp.decode(fake.sent[-1][1], "spec"), Reconnect)
        fake.closed = [7]  # the old connection's closing, read only now
        assert edge._connections_closed(0) == []
        assert edge.counters["connections_closed"] == 1
        # A registers again on fd 9 and is watched there: its own closing removes it.
        edge._on_message(b"A", Registration(service=b"svc"), "spec", [])  # type: ignore[arg-type]
        fake.closed = [9]
        (gone,) = edge._connections_closed(0)
        assert isinstance(gone, Unregister) and gone.peer.address == b"A"
    finally:
        edge.close()
        context.term()


@pytest.fixture
def nfp_watched(tmp_path: Path) -> Iterator[tuple[NfpEdge, _Connections]]:
    """An NFP edge on a stand-in connection watch, spec worker A registered by fd 7."""
    from nfgate.edges import EdgeSettings
    from nfgate.edges.nfp import NfpEdge
    from nfgate.store import JobStore

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    store = JobStore(tmp_path / "jobs.sqlite3", fsync=False)
    edge = NfpEdge(
        EdgeSettings(name="nfp", protocol="nfp", url="tcp://127.0.0.1:0", context=context), store=store
    )
    fake = _on_stand_in(edge)
    out: list[Command] = []
    fake.fd = 7
    for message in (Open(header=WORKER), Ready(service="svc")):
        edge._on_message(b"A", message, "spec", 0, out)
    assert [type(c).__name__ for c in out] == ["Register"]
    try:
        yield edge, fake
    finally:
        edge.close()
        store.close()
        context.term()


def test_an_nfp_worker_that_reconnects_before_its_closing_is_read_is_handled_as_closed(
    nfp_watched: tuple[NfpEdge, _Connections],
) -> None:
    # As above for NFP: the KEEPALIVE on the new connection finds the worker gone and is
    # answered DISCONNECT (the spec's answer to a worker it does not know), after which
    # the worker sends READY again.
    from nfgate.codecs.nfp.messages import Disconnect
    from nfgate.model import Unregister

    edge, fake = nfp_watched
    out: list[Command] = []
    fake.fd = 9
    edge._on_message(b"A", Keepalive(header=WORKER, service="svc"), "spec", 0, out)
    assert [type(c) for c in out] == [Unregister]
    assert isinstance(nfp.decode(fake.sent[-1][1], "spec"), Disconnect)
    fake.closed = [7]
    assert edge._connections_closed(0) == []
    assert edge.counters["connections_closed"] == 1


# libzmq's name for a connection whose identity ROUTER_HANDOVER gave to a newer one: a
# zero byte and a 32-bit counter (here the first value of glibc's rand() plus one, as
# seen in a gateway's log).
RENAMED = b"\x00\x6b\x8b\x45\x68"


@pytest.fixture
def watched() -> Iterator[tuple[DcpEdge, _Connections]]:
    """A DCP edge on a stand-in connection watch, worker A registered by fd 7."""
    from nfgate.edges import EdgeSettings
    from nfgate.edges.dcp import DcpEdge

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    edge = DcpEdge(EdgeSettings(name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context))
    fake = _on_stand_in(edge)
    fake.fd = 7
    out: list[Command] = []
    edge._on_message(b"A", Registration(service=b"svc"), "spec", out)
    assert [type(c).__name__ for c in out] == ["Register"]
    try:
        yield edge, fake
    finally:
        edge.close()
        context.term()


def test_what_a_renamed_connection_left_unread_registers_no_worker(
    watched: tuple[DcpEdge, _Connections],
) -> None:
    # DCP worker A registered on fd 7 reconnects under its identity; libzmq hands A's
    # name to the new connection and renames the old one, whose last PING and a second
    # registration are still queued. Read now, they come from RENAMED by fd 7, whose
    # connection has not closed: no worker RENAMED (its requests would go nowhere), A
    # untouched, each counted.
    from nfgate.codecs.dcp.messages import Ping

    edge, fake = watched
    out: list[Command] = []
    sent = len(fake.sent)
    for message in (Registration(service=b"svc"), Ping()):
        edge._on_message(RENAMED, message, "spec", out)
    assert out == [] and fake.sent[sent:] == []
    assert set(edge._workers) == {b"A"}
    assert edge.counters["handover_leftovers"] == 2
    assert edge.counters["connections_closed"] == 0


def test_a_new_connection_on_a_closed_connections_fd_is_a_new_worker(
    watched: tuple[DcpEdge, _Connections],
) -> None:
    # The other way a registration comes by a fd noted for another worker: A's
    # connection closed and a new worker (no identity of its own: libzmq's name, the
    # same shape) connected on the reused fd. The closing is there to read: A is gone,
    # the newcomer is registered.
    from nfgate.model import Register, Unregister

    edge, fake = watched
    out: list[Command] = []
    fake.closed = [7]
    edge._on_message(RENAMED, Registration(service=b"svc"), "spec", out)
    assert [(type(c), c.peer.address) for c in out] == [(Unregister, b"A"), (Register, RENAMED)]
    assert set(edge._workers) == {RENAMED}
    assert edge.counters["handover_leftovers"] == 0
    fake.closed = [7]  # the newcomer's own closing, later
    (gone,) = edge._connections_closed(0)
    assert isinstance(gone, Unregister) and gone.peer.address == RENAMED


def test_an_nfp_ready_left_on_a_renamed_connection_registers_no_worker(
    nfp_watched: tuple[NfpEdge, _Connections],
) -> None:
    edge, _ = nfp_watched
    out: list[Command] = []
    for message in (Ready(service="svc"), Keepalive(header=WORKER, service="svc")):
        edge._on_message(RENAMED, message, "spec", 0, out)
    assert out == [] and set(edge._workers) == {b"A"}
    assert edge.counters["handover_leftovers"] == 2
