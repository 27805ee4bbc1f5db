"""When the gateway's loop sends what the edges queued (nfgate/gateway.py, SEND_EVERY).

Driven in process, one loop iteration at a time, on a recording memory transport
(``recording.Recorded``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

from nfgate.codecs import dcp
from nfgate.codecs.dcp.messages import Registration, Reply, Request
from nfgate.edges import EdgeSettings
from nfgate.edges.dcp import DcpEdge
from nfgate.gateway import BATCH, SEND_EVERY, TICK_RETRY_MS, Gateway
from nfgate.model import Peer, ServiceRef
from nfgate.model import Request as CoreRequest
from nfgate.routing import Router

from .recording import Recorded

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def loop() -> Iterator[tuple[Gateway, Recorded]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    settings = EdgeSettings(name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context)
    edge = DcpEdge(settings)
    memory = Recorded(edge, dcp.decode, [])
    gateway = Gateway(Router(), [edge], clock=lambda: 0)
    edge.attach(gateway)
    yield gateway, memory
    gateway.close()
    context.term()


def iterate(gateway: Gateway, memory: Recorded, *messages: tuple[bytes, object]) -> None:
    """One loop iteration over ``messages`` (peer, DCP message), as the poll would find them."""
    memory.events.clear()
    memory.give([(peer, dcp.encode(m)) for peer, m in messages])  # type: ignore[arg-type]
    edge = gateway.edges["dcp"]
    gateway._read(edge, 0)  # what step() does for a readable socket
    gateway.step(0)  # the rest of the iteration: tick and flush


def request(key: bytes) -> Request:
    return Request(service=b"echo", metadata=(key,), data=(b"x",))


def test_a_worker_freed_early_in_a_batch_gets_its_next_request_before_the_batch_is_read(
    loop: tuple[Gateway, Recorded],
) -> None:
    gateway, memory = loop
    iterate(gateway, memory, (b"w1", Registration(service=b"echo")))
    iterate(gateway, memory, (b"c1", request(b"r1")))  # w1 is busy with r1 from here
    # One batch: w1's reply first, then many more requests. w1's reply and its next
    # request (r2, queued since) leave within the first SEND_EVERY messages read.
    more = [(b"c%d" % i, request(b"r%d" % i)) for i in range(2, SEND_EVERY * 4)]
    iterate(gateway, memory, (b"w1", Reply(client=b"c1", metadata=(b"r1",), data=(b"y",))), *more)
    reads = [i for i, (kind, _, _) in enumerate(memory.events) if kind == "recv"]
    assert len(reads) == 1 + len(more)
    sends = [(i, peer, m) for i, (kind, peer, m) in enumerate(memory.events) if kind == "send"]
    to_c1 = next(i for i, peer, _ in sends if peer == b"c1")
    to_w1 = next(i for i, peer, m in sends if peer == b"w1" and isinstance(m, Request))
    assert to_c1 < reads[SEND_EVERY] and to_w1 < reads[SEND_EVERY]
    assert memory.events[to_w1][2].metadata == (b"r2",)  # type: ignore[union-attr]


def test_an_edge_reads_at_most_a_batch_per_iteration(loop: tuple[Gateway, Recorded]) -> None:
    gateway, memory = loop
    iterate(gateway, memory, *[(b"c%d" % i, request(b"r%d" % i)) for i in range(BATCH + 10)])
    assert sum(kind == "recv" for kind, _, _ in memory.events) == BATCH


def test_an_edge_whose_socket_ran_dry_is_not_read_again_in_the_same_iteration(
    loop: tuple[Gateway, Recorded],
) -> None:
    gateway, memory = loop
    reads: list[bool] = []
    recv = memory.recv

    def counting() -> tuple[bytes, list[bytes]] | None:
        got = recv()
        reads.append(got is not None)
        return got

    memory.recv = counting  # type: ignore[method-assign]
    iterate(gateway, memory, (b"w1", Registration(service=b"echo")), (b"c1", request(b"r1")))
    # Two messages, then one empty read that ends the chunk and the edge's turn: a
    # second chunk would only meet the empty socket again (an exception in pyzmq).
    assert reads == [True, True, False]
    assert any(kind == "send" and peer == b"w1" for kind, peer, _ in memory.events)


def test_a_bug_on_one_message_costs_only_that_message(
    loop: tuple[Gateway, Recorded], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Messages are read SEND_EVERY at a time; a handler that raises on one of them must
    # not take the commands of the others read with it (Edge.internal_error).
    gateway, memory = loop
    edge = gateway.edges["dcp"]
    real = DcpEdge._request

    def buggy(self: DcpEdge, address: bytes, worker: object, msg: Request) -> object:
        if msg.metadata == (b"boom",):
            raise RuntimeError("a bug")
        return real(self, address, worker, msg)  # type: ignore[arg-type]

    monkeypatch.setattr(DcpEdge, "_request", buggy)
    iterate(gateway, memory, (b"w1", Registration(service=b"echo")), (b"w2", Registration(service=b"echo")))
    iterate(gateway, memory, (b"c1", request(b"r1")), (b"c2", request(b"boom")), (b"c3", request(b"r3")))
    dispatched = [m.metadata for kind, _, m in memory.events if kind == "send" and isinstance(m, Request)]
    assert sorted(dispatched) == [(b"r1",), (b"r3",)]  # type: ignore[type-var]
    assert gateway.internal_errors == 1 and edge.counters["internal_errors"] == 1


def test_a_bug_on_one_output_costs_only_that_output(
    loop: tuple[Gateway, Recorded], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two workers' replies read in one chunk: the core's outputs for both are in one
    # feed; an edge bug on the first reply's delivery must not drop the second's.
    gateway, memory = loop
    edge = gateway.edges["dcp"]
    real = DcpEdge.emit

    def buggy(self: DcpEdge, output: object, now: int) -> object:
        reply = getattr(output, "reply", None)
        if reply is not None and reply.body == (b"boom",):
            raise RuntimeError("a bug")
        return real(self, output, now)  # type: ignore[arg-type]

    iterate(gateway, memory, (b"w1", Registration(service=b"echo")), (b"w2", Registration(service=b"echo")))
    iterate(gateway, memory, (b"c1", request(b"r1")), (b"c2", request(b"r2")))
    monkeypatch.setattr(DcpEdge, "emit", buggy)
    held = {m.metadata: peer for kind, peer, m in memory.events if kind == "send" and isinstance(m, Request)}
    iterate(
        gateway,
        memory,
        (held[(b"r1",)], Reply(client=b"c1", metadata=(b"r1",), data=(b"boom",))),
        (held[(b"r2",)], Reply(client=b"c2", metadata=(b"r2",), data=(b"fine",))),
    )
    replies = [(peer, m.data) for kind, peer, m in memory.events if kind == "send" and isinstance(m, Reply)]
    assert replies == [(b"c2", (b"fine",))]
    assert gateway.internal_errors == 1 and edge.counters["internal_errors"] == 1
    assert gateway.stats()["core"]["internal_errors"] == 1  # nfgate_core_internal_errors_total


def test_an_output_for_an_edge_that_does_not_exist_is_counted_as_a_bug_and_the_loop_goes_on(
    loop: tuple[Gateway, Recorded],
) -> None:
    # The core only addresses peers its edges gave it: an output for another edge is a
    # bug, logged and counted where the metrics show bugs, and the loop goes on.
    gateway, memory = loop
    iterate(gateway, memory, (b"w1", Registration(service=b"echo")))
    stray = Peer(edge="gone", protocol="dcp", address=b"x")
    memory.events.clear()
    gateway.feed(
        [CoreRequest(service=ServiceRef(name="echo"), reply_to=stray, metadata=(b"s",), body=(b"q",))], 0
    )
    assert gateway.internal_errors == 1  # its Accepted; its Dispatch went to w1
    turns = gateway.stats()["core"]["iterations"]
    gateway.step(0)  # sends the dispatch
    assert gateway.stats()["core"]["iterations"] == turns + 1  # nfgate_core_iterations_total
    (job,) = [m for kind, _, m in memory.events if kind == "send" and isinstance(m, Request)]
    iterate(gateway, memory, (b"w1", Reply(client=job.client, metadata=(b"s",), data=(b"a",))))
    assert gateway.stats()["core"]["internal_errors"] == 2  # its Deliver: nowhere to go
    iterate(gateway, memory, (b"c1", request(b"r1")))  # w1 is free again and serves the next
    sent = [
        (peer, m.metadata) for kind, peer, m in memory.events if kind == "send" and isinstance(m, Request)
    ]
    assert sent == [(b"w1", (b"r1",))]


def test_a_bug_in_an_edges_timer_costs_that_tick_not_the_loop(
    loop: tuple[Gateway, Recorded], monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, memory = loop
    monkeypatch.setattr(DcpEdge, "next_deadline", lambda self: 0)
    monkeypatch.setattr(DcpEdge, "tick", lambda self, now: 1 / 0)
    iterate(gateway, memory, (b"w1", Registration(service=b"echo")))  # the tick raises here
    iterate(gateway, memory, (b"c1", request(b"r1")))  # the loop goes on serving
    sent = [
        (peer, m.metadata) for kind, peer, m in memory.events if kind == "send" and isinstance(m, Request)
    ]
    assert sent == [(b"w1", (b"r1",))]
    # Held off for TICK_RETRY_MS (the clock stands at 0): not tried, nor logged, again
    # at every turn, and the poll sleeps instead of spinning on the deadline still due.
    assert gateway.internal_errors == 1 and gateway.edges["dcp"].counters["internal_errors"] == 1
    assert gateway._wait(0, 5000) == TICK_RETRY_MS
