"""Scenario ``path``: what nfgate's Python spends per relayed request, sockets left out.

The relay bench measures whole processes on a shared 2-core machine, where one broker's
figures move by a third from one minute to the next. This scenario measures only the
gateway's own processing, in this process, with the edge's transport replaced by
in-memory queues: decode, the edge's commands, the routing core, the outputs, encode,
the loop's feed and flush. It is steady to a few percent run to run, so a change to the
hot path can be judged here before the relay bench (docs/performance.md).

Each cycle hands the DCP edge 4 client REQUESTs (one per client, as the sync mode's 4
clients send them), feeds them and runs one loop iteration (its poll finds nothing, its
flush sends the dispatches), hands it the 4 workers' REPLYs to those dispatches, does
the same again, and checks that each client got its own reply.
The figure is the best of ``rounds`` runs of ``requests`` requests (the best, since
anything else the machine does can only add to a run).
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

import zmq

from nfgate.edges import EdgeSettings
from nfgate.edges.dcp import DcpEdge
from nfgate.gateway import Gateway
from nfgate.routing import Router

__all__ = ["MemoryTransport", "path"]

PROTOCOL = b"DGBX\x01"
WORKERS = 16
BATCH = 4  # requests per cycle: the sync mode's 4 clients


class MemoryTransport:
    """Stands in for :class:`nfgate.transports.zmq.RouterEndpoint`: ``recv`` hands out
    :attr:`inbox`, ``send`` appends to :attr:`sent`. ``socket`` is the real one the edge
    bound, so the gateway's poller has something to hold."""

    def __init__(self, socket: zmq.Socket[bytes]) -> None:
        self.socket = socket
        self.inbox: list[tuple[bytes, list[bytes]]] = []
        self.sent: list[tuple[bytes, list[bytes]]] = []
        self.oversized = 0
        self._next = 0

    def give(self, messages: list[tuple[bytes, list[bytes]]]) -> None:
        self.inbox, self._next = messages, 0

    def recv(self) -> tuple[bytes, list[bytes]] | None:
        if self._next >= len(self.inbox):
            return None
        self._next += 1
        return self.inbox[self._next - 1]

    def send(self, identity: bytes, frames: list[bytes]) -> bool:
        self.sent.append((identity, frames))
        return True

    def close(self) -> None:
        self.socket.close(0)


def _dcp_gateway(context: zmq.Context[zmq.Socket[bytes]]) -> tuple[Gateway, MemoryTransport]:
    settings = EdgeSettings(name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context)
    edge = DcpEdge(settings)
    memory = MemoryTransport(edge.transport.socket)
    edge.transport = memory  # type: ignore[assignment]  # duck-typed: recv, send, socket, oversized
    # A clock that stands still: no liveness expiry or timer fires mid-measurement.
    gateway = Gateway(Router(), [edge], clock=lambda: 0)
    memory.give([(b"w%02d" % i, [b"", PROTOCOL, b"\x01", b"echo"]) for i in range(WORKERS)])
    gateway.feed(edge.receive(0, 256), 0)
    gateway.step(0)
    memory.sent.clear()
    return gateway, memory


def _run(gateway: Gateway, memory: MemoryTransport, requests: int, body: bytes) -> float:
    """Seconds per request for ``requests`` requests (rounded up to whole cycles).
    Raises RuntimeError if a client does not get its own reply."""
    edge = gateway.edges["dcp"]
    clients = [
        (b"c%d" % k, [b"", PROTOCOL, b"\x04", b"echo", b"", b"key%d" % k, b"", body]) for k in range(BATCH)
    ]
    cycles = -(-requests // BATCH)
    start = time.perf_counter()
    for _ in range(cycles):
        memory.give(clients)
        gateway.feed(edge.receive(0, 256), 0)
        gateway.step(0)  # a loop iteration: nothing to poll, then tick and flush
        dispatched, memory.sent = memory.sent, []
        memory.give([(worker, [b"", PROTOCOL, b"\x05", *frames[4:]]) for worker, frames in dispatched])
        gateway.feed(edge.receive(0, 256), 0)
        gateway.step(0)  # a loop iteration: nothing to poll, then tick and flush
        replies, memory.sent = memory.sent, []
        if sorted(address + frames[4] for address, frames in replies) != [c + f[5] for c, f in clients]:
            raise RuntimeError(f"the DCP path answered {replies!r}")
    return (time.perf_counter() - start) / (cycles * BATCH)


def path(requests: int = 20_000, rounds: int = 5, size: int = 100) -> dict[str, Any]:
    """One JSON-ready object: microseconds of processing per DCP request (best and
    median of ``rounds``), and the Python function calls per request (counted once,
    with ``sys.setprofile``)."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    gateway, memory = _dcp_gateway(context)
    body = b"x" * size
    try:
        _run(gateway, memory, 2_000, body)  # warm-up: caches, free lists
        gc.collect()
        runs = sorted(_run(gateway, memory, requests, body) for _ in range(rounds))
        calls = 0

        def count(frame: object, event: str, arg: object) -> None:
            nonlocal calls
            if event == "call":
                calls += 1

        counted = 400
        sys.setprofile(count)
        try:
            _run(gateway, memory, counted, body)
        finally:
            sys.setprofile(None)
    finally:
        gateway.close()
        context.term()
    return {
        "scenario": "path",
        "path": "dcp-dcp",
        "requests": requests,
        "rounds": rounds,
        "body_bytes": size,
        "us_per_request": round(runs[0] * 1e6, 2),
        "us_per_request_median": round(runs[len(runs) // 2] * 1e6, 2),
        "python_calls_per_request": round(calls / counted, 1),
    }
