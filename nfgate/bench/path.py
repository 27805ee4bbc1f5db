"""Scenario ``path``: what nfgate's Python spends per relayed request, sockets left out.

The relay bench measures whole processes on a shared 2-core machine, where one broker's
figures move by a third from one minute to the next. This scenario measures only the
gateway's own processing, in this process, with the edge's transport replaced by
in-memory queues: decode, the edge's commands, the routing core, the outputs, encode,
the job store (NFP), the loop's feed and flush. It is steady to a few percent from run
to run, so a change to the hot path can be judged here before the relay bench
(docs/performance.md).

The same clients and workers as the relay bench (:mod:`nfgate.bench.dialects`): each
cycle hands the edge one request from each of 4 clients (as the sync mode's 4 clients
send them), feeds them and runs one loop iteration (its poll finds nothing; its flush
sends the dispatches, and for NFP commits the job records and sends the 202s), hands
it the workers' answers, does the same again, and checks that every client got its own
final reply. Paths: ``dcp`` (DCP spec), ``nfp`` (NFP spec) and ``norfab`` (NorFab 0.25),
the NFP ones once with the job store's fsync (the default) and once without. Each
figure is the best of ``rounds`` runs (anything else the machine does only adds). It
includes the bench's own worker answers and reply parsing (a few list operations per
request), the same in every run.
"""

from __future__ import annotations

import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmq

from nfgate.bench.dialects import FINAL, Dialect, make_body, make_key
from nfgate.edges import EdgeSettings, RouterEdge
from nfgate.edges.dcp import DcpEdge
from nfgate.edges.nfp import NfpEdge
from nfgate.gateway import Gateway
from nfgate.routing import Router
from nfgate.store import JobStore

__all__ = ["PATHS", "MemoryTransport", "path"]

PATHS = ("dcp", "nfp", "norfab")
WORKERS = 16
CLIENTS = 4  # requests per cycle: the sync mode's 4 clients

Message = tuple[bytes, list[bytes]]


class MemoryTransport:
    """Stands in for :class:`nfgate.transports.zmq.RouterEndpoint`: ``recv`` hands out
    what :meth:`give` was given, ``send`` appends to :attr:`outbox`, and both count as
    the real one does. ``socket`` is the real one the edge bound, so the gateway's
    poller has something to hold."""

    receive_failures = send_failures = oversized = too_large = 0
    curve_guard = None  # no CURVE

    def __init__(self, socket: zmq.Socket[bytes]) -> None:
        self.socket = socket
        self.outbox: list[Message] = []
        self.received = self.sent = 0
        self._inbox: list[Message] = []
        self._next = 0

    def give(self, messages: list[Message]) -> None:
        self._inbox, self._next = messages, 0

    def recv(self) -> Message | None:
        if self._next >= len(self._inbox):
            return None
        self._next += 1
        self.received += 1
        return self._inbox[self._next - 1]

    def send(self, identity: bytes, frames: list[bytes], *, probe: bool = False) -> bool:
        self.outbox.append((identity, frames))
        self.sent += 1
        return True

    def take(self) -> list[Message]:
        sent, self.outbox = self.outbox, []
        return sent

    monitor: zmq.Socket[bytes] | None = None

    def watch_connections(self) -> zmq.Socket[bytes]:
        """A socket for the poller that never becomes readable: no connection of the
        memory transport closes (the real one's monitor, polled the same way)."""
        if self.monitor is None:
            self.monitor = self.socket.context.socket(zmq.PAIR)
        return self.monitor

    def closed_connections(self) -> list[int]:
        return []

    def source_fd(self) -> int:
        return -1

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.close(0)
        self.socket.close(0)


class _Path:
    """One gateway with one edge on a memory transport, its workers registered."""

    def __init__(
        self, name: str, context: zmq.Context[zmq.Socket[bytes]], data_dir: Path, fsync: bool
    ) -> None:
        self.dialect = Dialect(name)
        protocol = "dcp" if name == "dcp" else "nfp"
        settings = EdgeSettings(name=protocol, protocol=protocol, url="tcp://127.0.0.1:0", context=context)
        # Only NFP keeps job records; the DCP path opens no store.
        self.store = JobStore(data_dir / "jobs.sqlite3", fsync=fsync) if protocol == "nfp" else None
        edge: RouterEdge = (
            NfpEdge(settings, store=self.store) if self.store is not None else DcpEdge(settings)
        )
        self.edge = edge
        self.memory = MemoryTransport(edge.transport.socket)
        edge.transport = self.memory  # type: ignore[assignment]  # duck-typed: recv, send, socket
        # A clock that stands still: no liveness expiry or timer fires mid-measurement.
        self.gateway = Gateway(Router(), [edge], clock=lambda: 0)
        edge.attach(self.gateway)
        self._round = 0
        self.workers = [b"w%02d" % i for i in range(WORKERS)]
        self.clients = [b"c%d" % i for i in range(CLIENTS)]
        d = self.dialect
        for hello, peers in ((d.worker_hello, self.workers), (d.client_hello, self.clients)):
            if hello is not None:
                self._iterate([(peer, hello) for peer in peers])
        self._iterate([(w, d.worker_ready) for w in self.workers])
        self.memory.take()

    def _iterate(self, messages: list[Message]) -> list[Message]:
        self.memory.give(messages)
        self.gateway.feed(self.edge.receive(0, 256), 0)
        self.gateway.step(0)  # a loop iteration: nothing to poll, then tick and flush
        return self.memory.take()

    def run(self, requests: int, body_bytes: int) -> float:
        """Seconds per request for ``requests`` requests (whole cycles). Raises
        RuntimeError if a client does not get its own final reply."""
        d, workers = self.dialect, set(self.workers)
        cycles = -(-requests // CLIENTS)
        self._round += 1
        # Built before the clock starts; a key per request (NFP job uuids must be new).
        asks = []
        for n in range(cycles):
            keys = [make_key(self._round, n * CLIENTS + i) for i in range(CLIENTS)]
            asks.append(
                (
                    keys,
                    [
                        (c, d.request(k, make_body(k, body_bytes)))
                        for c, k in zip(self.clients, keys, strict=True)
                    ],
                )
            )
        start = time.perf_counter()
        for keys, ask in asks:
            sent = self._iterate(ask)
            answers = [(w, a) for w, f in sent if w in workers and (a := d.work(f, w)) is not None]
            sent += self._iterate(answers)
            finals = sorted(p[1] for w, f in sent if w not in workers and (p := d.parse(f))[0] == FINAL)
            if finals != keys:
                raise RuntimeError(f"the {d.name} path answered {finals!r} for {keys!r}")
        return (time.perf_counter() - start) / (cycles * CLIENTS)

    def calls(self, requests: int, body_bytes: int) -> float:
        """Python function calls per request (``sys.setprofile``)."""
        count = 0

        def counter(frame: object, event: str, arg: object) -> None:
            nonlocal count
            if event == "call":
                count += 1

        sys.setprofile(counter)
        try:
            self.run(requests, body_bytes)
        finally:
            sys.setprofile(None)
        return count / requests

    def close(self) -> None:
        self.gateway.close()
        if self.store is not None:
            self.store.close()


@contextmanager
def _opened(name: str, fsync: bool) -> Iterator[_Path]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="nfgate-path-") as data_dir:
        p = _Path(name, context, Path(data_dir), fsync)
        try:
            yield p
        finally:
            p.close()
            context.term()


def measure(
    name: str, *, fsync: bool = True, requests: int = 20_000, rounds: int = 5, size: int = 100
) -> dict[str, Any]:
    """Figures of one path: microseconds per request (best and median of ``rounds``)
    and Python calls per request. Raises RuntimeError if the path loses a reply."""
    with _opened(name, fsync) as p:
        p.run(min(2_000, requests), size)  # warm-up: caches, free lists, the store's pages
        gc.collect()
        runs = sorted(p.run(requests, size) for _ in range(rounds))
        calls = p.calls(400, size)
    return {
        "us_per_request": round(runs[0] * 1e6, 2),
        "us_per_request_median": round(statistics.median(runs) * 1e6, 2),
        "python_calls_per_request": round(calls, 1),
    }


def path(requests: int = 20_000, rounds: int = 5, size: int = 100) -> dict[str, Any]:
    """One JSON-ready object with every path's figures (NFP with and without fsync)."""
    paths: dict[str, dict[str, Any]] = {}
    for name in PATHS:
        variants = (True,) if name == "dcp" else (True, False)
        for fsync in variants:
            key = name if name == "dcp" else f"{name}{'' if fsync else '-nofsync'}"
            paths[key] = measure(name, fsync=fsync, requests=requests, rounds=rounds, size=size)
    return {"scenario": "path", "requests": requests, "rounds": rounds, "body_bytes": size, "paths": paths}
