"""Random lives of MemoDB requests through the edge and the core: long-polling workers
that get JOBs or HEARTBEATs on their held requests, answer late or never, drop their
connection, and clients whose JOBs carry timeouts.

In process (the frame is in lives.py), with the edge's NNG socket replaced by a memory
stand-in. MemoDB has no error reply: a request the gateway cannot serve is dropped and
counted (``client_errors_unsent``). So at the end every client JOB has at most one
RESULT, its own, and the JOBs left without one are exactly those counted as failed.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from nfgate.codecs import memodb
from nfgate.codecs.memodb.messages import Disconnect, Heartbeat, Job, Ready, Result
from nfgate.edges.memodb import MemodbEdge
from nfgate.gateway import Gateway
from nfgate.routing import Router
from nfgate.routing_types import RouterConfig
from tests.conftest import scaled

from .lives import HEARTBEAT, Lives

pytestmark = pytest.mark.timeout(300)

CLIENTS = {b"m1": 1, b"m2": 2}  # client -> its connection
WORKERS = {b"x1": "spec", b"x2": "spec", b"x3": "spec"}


class MemoryRep:
    """Stands in for :class:`nfgate.transports.nng.RepEndpoint`: requests given by the
    test are read by the edge, answers go to :attr:`outbox`. The fds are pipes that never
    turn readable, for the gateway's poller."""

    posted = pending = False
    receive_failures = send_failures = 0
    received_posted = refused = dropped = orphaned = send_failed = 0  # the edge's stats read them

    def __init__(self) -> None:
        self.fd, self._fd_w = os.pipe()
        self.event_fd, self._event_w = os.pipe()
        self.inbox: list[tuple[int, int, bytes]] = []
        self._held: dict[int, int] = {}  # key -> connection
        self.outbox: list[tuple[int, int, bytes]] = []  # (connection, key, answer)
        self.closed: list[int] = []
        self.received = self.sent = 0
        self._next = 1

    @property
    def held(self) -> int:
        return len(self._held)

    def give(self, pipe: int, message: object) -> int:
        [data] = memodb.encode(message, "spec")  # type: ignore[arg-type]
        key, self._next = self._next, self._next + 1
        self.inbox.append((key, pipe, data))
        return key

    def recv(self) -> tuple[int, int, bytes] | None:
        if not self.inbox:
            return None
        key, pipe, data = self.inbox.pop(0)
        self._held[key] = pipe
        self.received += 1
        return key, pipe, data

    def send(self, key: int, data: bytes) -> bool:
        pipe = self._held.pop(key, None)
        if pipe is None:
            return False
        self.outbox.append((pipe, key, data))
        self.sent += 1
        return True

    def drop(self, key: int) -> bool:
        return self._held.pop(key, None) is not None

    def closed_pipes(self) -> list[int]:
        closed, self.closed = self.closed, []
        return closed

    def post(self, count: int) -> None:
        pass

    def unpost(self) -> None:
        pass

    def reap(self) -> bool:
        return False

    def retry_after_ms(self) -> int | None:
        return None

    def close(self) -> None:  # by the edge, when the gateway closes
        for fd in (self.fd, self._fd_w, self.event_fd, self._event_w):
            os.close(fd)


class MemodbLives(Lives):
    ROSTER = WORKERS

    def __init__(self) -> None:
        super().__init__()
        settings_ = self.settings("memodb")
        settings_.options["job_timeout_ms"] = 1_500
        self.edge = MemodbEdge(settings_)
        self.edge.transport.close()
        self.rep = MemoryRep()
        self.edge.transport = self.rep  # type: ignore[assignment]  # duck-typed stand-in
        config = RouterConfig(queue_expiry_ms=2_000, max_redispatch=1, liveness={"memodb": HEARTBEAT})
        self.gateway = Gateway(Router(config), [self.edge], clock=lambda: self.now)
        self.edge.attach(self.gateway)
        self.serial = 0
        self.asked: dict[int, bytes] = {}  # a client's transport key -> its request
        self.requests: set[bytes] = set()
        self.pipe = {w: 10 + i for i, w in enumerate(WORKERS)}  # worker -> its connection
        self.waiting: dict[bytes, int] = {}  # worker -> the key of its request the broker holds
        self.ids: dict[bytes, bytes] = {}  # worker -> the ID the broker gave it
        self.beat_due: set[bytes] = set()  # answered HEARTBEAT: owes one back

    # ------------------------------------------------------------------ plumbing

    def iterate(self) -> None:
        self.gateway.feed(self.edge.receive(self.now, 256), self.now)
        self.gateway.step(0)
        outbox, self.rep.outbox = self.rep.outbox, []
        for _, key, data in outbox:
            message = memodb.decode([data], "spec")
            if key in self.asked:
                request = self.asked.pop(key)
                assert isinstance(message, Result), message
                self.finals.setdefault(request, []).append((200, message.payload))
                continue
            [worker] = [w for w, k in self.waiting.items() if k == key]
            del self.waiting[worker]
            if isinstance(message, Disconnect):  # unknown to the broker now: start again
                self.ids.pop(worker, None)
                self.beat_due.discard(worker)
                self.held[worker].clear()
                self.registered.discard(worker)
                continue
            self.ids[worker] = message.id  # type: ignore[attr-defined]
            if isinstance(message, Job):
                self.held[worker][b"job"] = message.payload
            else:
                assert isinstance(message, Heartbeat), message
                self.beat_due.add(worker)
        assert self.gateway.internal_errors == 0

    def ask(self, worker: bytes, message: object) -> None:
        """``worker`` sends a request (the broker holds it until it has an answer)."""
        self.waiting[worker] = self.rep.give(self.pipe[worker], message)
        self.iterate()

    # --------------------------------------------------------------------- rules

    @rule(client=st.sampled_from(sorted(CLIENTS)), timeout=st.sampled_from((0, 800)))
    def request(self, client: bytes, timeout: int) -> None:
        self.serial += 1
        request = b"%032x" % self.serial
        self.requests.add(request)
        self.asked[
            self.rep.give(CLIENTS[client], Job(service="echo", timeout_ms=timeout, payload=request))
        ] = request
        self.iterate()

    @rule(worker=st.sampled_from(sorted(WORKERS)))
    def register(self, worker: bytes) -> None:
        if worker in self.registered or worker in self.silent or worker in self.waiting:
            return
        self.registered.add(worker)
        self.ask(worker, Ready(services=("echo",)))

    def reply(self, worker: bytes, key: bytes) -> None:
        payload = self.held[worker].pop(key)
        assert isinstance(payload, bytes)
        self.ask(worker, Result(id=self.ids[worker], payload=payload))

    @precondition(lambda self: len(self.silent) < len(WORKERS) - 1)
    @rule(worker=st.sampled_from(sorted(WORKERS)))
    def crash(self, worker: bytes) -> None:
        """The worker's process dies: its connection closes; it comes back on another."""
        if worker not in self.registered:
            return
        self.rep.closed.append(self.pipe[worker])
        self.pipe[worker] += 100
        for state in (self.waiting, self.ids):
            state.pop(worker, None)
        self.beat_due.discard(worker)
        self.held[worker].clear()
        self.registered.discard(worker)
        self.iterate()

    @rule(ms=st.sampled_from((10, 120, 400, 2500)))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        self.iterate()
        # Live workers answer a HEARTBEAT at once, as the spec asks.
        for worker in sorted(self.beat_due & self.registered):
            self.beat_due.discard(worker)
            self.ask(worker, Heartbeat(id=self.ids[worker]))

    # ------------------------------------------------------------------ the end

    def settle(self) -> None:
        self.pipe[b"x9"] = 99
        self.enlist(b"x9", "spec")
        super().settle()

    def check(self) -> None:
        for request, answers in self.finals.items():
            assert answers == [(200, request)], f"{request!r} got {answers}"
        unanswered = self.requests - set(self.finals)
        failed = self.edge.counters["client_errors_unsent"]
        assert len(unanswered) == failed, f"{len(unanswered)} JOBs without RESULT, {failed} counted as failed"


MemodbLives.TestCase.settings = settings(max_examples=scaled(200), stateful_step_count=50, deadline=None)
test_every_memodb_job_gets_its_result_or_is_counted_failed = MemodbLives.TestCase
