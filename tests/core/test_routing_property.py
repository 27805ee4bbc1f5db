"""The routing core under random interleavings (hypothesis): no request is ever lost."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nfgate.model import (
    Cancel,
    ClientGone,
    Forward,
    Heartbeat,
    Peer,
    Register,
    Reply,
    Target,
    TargetKind,
    Unregister,
)
from nfgate.routing import Router
from nfgate.routing_types import Abort, Accepted, Deliver, Dispatch, Evict, RouterConfig

from .routing_helpers import CA, CB, W1, W2, req, svc, worker

# --- property: no request is ever lost ---------------------------------------------------

PEERS = (W1, W2, worker("d", "dcp"))
CLIENTS = (CA, CB)
NAMES = ("w1", "w2", "d")
SERVICES = ("a", "b")


class NeverLoseARequest(RuleBasedStateMachine):
    """Random interleavings: every accepted request ends with exactly one final Deliver,
    its terminal Delivers counting ``remaining`` down by one; nothing is sent to a worker
    that is not registered, nor to a worker still holding that request (timed out there
    and not answered yet), and nothing follows a final Deliver. Worker ``d``'s edge may
    refuse what it is sent (a body its dialect cannot carry), as the gateway feeds back."""

    def __init__(self) -> None:
        super().__init__()
        self.router = Router(
            RouterConfig(
                queue_expiry_ms=1_000,
                max_redispatch=1,
                max_queue_per_service=6,
                liveness={"memodb": (100, 3), "dcp": (100, 2)},
            )
        )
        self.now = 0
        self.registered: set[Peer] = set()
        self.open: dict[int, int | None] = {}  # id -> last remaining seen (None: none yet)
        self.done: set[int] = set()
        self.held: set[tuple[Peer, int]] = set()  # what workers were given, as they see it
        self.refusing = False  # d's edge answers every dispatch with Reply(reason=...)

    def step(self, out: list[Any]) -> None:
        """What the core answered one command with; first, the workers it dropped (a
        worker that registers again as another worker forgets what it held)."""
        while self.router.changes:
            change = self.router.changes.popleft()
            if not change.joined:
                self.held = {h for h in self.held if h[0] != change.peer}
        self.feed(out)

    def feed(self, out: list[Any]) -> None:
        refused: list[Reply] = []
        for o in out:
            if isinstance(o, Accepted):
                assert o.request.id not in self.open and o.request.id not in self.done
                self.open[o.request.id] = None
            elif isinstance(o, Dispatch):
                assert o.worker in self.registered
                assert o.request.id in self.open
                assert (o.worker, o.request.id) not in self.held, "given again to a worker holding it"
                if self.refusing and o.worker == PEERS[2]:
                    refused.append(Reply(id=o.request.id, status=500, worker=o.worker, reason="cannot carry"))
                else:
                    self.held.add((o.worker, o.request.id))
            elif isinstance(o, Deliver):
                rid = o.reply.id
                assert rid not in self.done, f"Deliver after final for {rid}"
                if o.reply.status < 200:
                    continue
                if rid in self.open:
                    last = self.open[rid]
                    assert last is None or o.remaining == last - 1
                    self.open[rid] = o.remaining
                else:  # refused: no Accepted, a single final Deliver
                    assert o.reply.status == 503
                if o.final:
                    self.open.pop(rid, None)
                    self.done.add(rid)
            elif isinstance(o, Evict):
                assert o.worker in self.registered
                self.registered.discard(o.worker)
                self.held = {h for h in self.held if h[0] != o.worker}
            elif isinstance(o, Abort):
                self.held.discard((o.worker, o.request.id))
        for reply in refused:  # as the gateway does: after the outputs that caused them
            self.step(self.router.handle(reply, self.now))

    @rule(on=st.booleans())
    def refuse(self, on: bool) -> None:
        self.refusing = on

    @rule(
        i=st.integers(0, 2),
        services=st.sets(st.sampled_from(SERVICES), min_size=1),
        capacity=st.integers(1, 2),
    )
    def register(self, i: int, services: set[str], capacity: int) -> None:
        peer = PEERS[i]
        refs = tuple(svc(s) for s in sorted(services))
        self.registered.add(peer)
        self.step(
            self.router.handle(Register(peer=peer, services=refs, capacity=capacity, name=NAMES[i]), self.now)
        )

    @rule(i=st.integers(0, 2))
    def unregister(self, i: int) -> None:
        self.step(self.router.handle(Unregister(peer=PEERS[i]), self.now))
        self.registered.discard(PEERS[i])
        self.held = {h for h in self.held if h[0] != PEERS[i]}

    @rule(i=st.integers(0, 2))
    def heartbeat(self, i: int) -> None:
        self.step(self.router.handle(Heartbeat(peer=PEERS[i]), self.now))

    @rule(
        c=st.integers(0, 1),
        service=st.sampled_from(SERVICES),
        kind=st.sampled_from(TargetKind),
        names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=2),
        timeout=st.none() | st.integers(1, 400),
    )
    def request(self, c: int, service: str, kind: TargetKind, names: list[str], timeout: int | None) -> None:
        target = Target(kind=kind, names=names if kind is TargetKind.NAMED else ())
        self.step(self.router.handle(req(service, CLIENTS[c], target, timeout), self.now))

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), status=st.sampled_from((200, 200, 500, 102)))
    def reply(self, data: st.DataObject, status: int) -> None:
        w, rid = data.draw(st.sampled_from(sorted(self.held, key=lambda h: (h[0].address, h[1]))))
        if status >= 200:
            self.held.discard((w, rid))
        self.step(self.router.handle(Reply(id=rid, status=status, worker=w), self.now))

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), service=st.sampled_from(SERVICES))
    def forward(self, data: st.DataObject, service: str) -> None:
        # DCP chaining: the worker hands the request it holds on, under the same id. It
        # must not come back under that id to a worker still holding it late.
        w, rid = data.draw(st.sampled_from(sorted(self.held, key=lambda h: (h[0].address, h[1]))))
        self.held.discard((w, rid))
        self.step(self.router.handle(Forward(worker=w, id=rid, service=svc(service), body=(b"f",)), self.now))

    @rule(rid=st.integers(0, 30))
    def bogus_reply(self, rid: int) -> None:
        self.step(self.router.handle(Reply(id=rid, status=200, worker=W1), self.now))

    @rule(rid=st.integers(1, 30))
    def cancel(self, rid: int) -> None:
        self.step(self.router.handle(Cancel(peer=CA, job_id=str(rid)), self.now))

    @rule(c=st.integers(0, 1))
    def client_gone(self, c: int) -> None:
        # Whatever its requests' targets and states, none is left open (white-box: the
        # core finds them through its indexes, checked here against all its jobs).
        self.step(self.router.handle(ClientGone(peer=CLIENTS[c]), self.now))
        assert not any(job.request.reply_to == CLIENTS[c] for job in self.router._jobs.values())

    @rule(dt=st.integers(0, 700))
    def tick(self, dt: int) -> None:
        self.now += dt
        self.step(self.router.tick(self.now))

    @invariant()
    def no_free_worker_idles_while_it_could_serve(self) -> None:
        # White-box on purpose: a part waiting while a suitable worker has a free slot is
        # a stall that the black-box checks would only see as a late 408.
        workers = self.router._workers
        for part in self.router._waiting:
            if part.placeholder:
                assert not any(w.offers(part.job.request.service) for w in workers.values())
            elif part.bound is not None:
                assert not workers[part.bound].free
            elif part.name is None:
                assert not any(
                    w.free and w.offers(part.job.request.service) and not part.avoids(w.peer)
                    for w in workers.values()
                )

    @invariant()
    def nothing_is_overdue(self) -> None:
        # Everything due by `now` was handled by the last tick, and nothing new is due at once.
        due = self.router.next_deadline()
        assert due is None or due > self.now

    def teardown(self) -> None:
        # Let time run out: every worker expires, every request retries, then expires.
        for _ in range(50):
            due = self.router.next_deadline()
            if due is None:
                break
            assert due > self.now
            self.now = due
            self.step(self.router.tick(self.now))
        else:
            raise AssertionError("next_deadline never settled")
        assert not self.open, f"requests never finished: {self.open}"
        stats = self.router.stats()
        assert stats["jobs"] == 0 and stats["queued"] == 0 and stats["in_flight"] == 0
        assert stats["late"] == 0


TestNeverLoseARequest = NeverLoseARequest.TestCase
TestNeverLoseARequest.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
