"""The routing core, driven with explicit ``now_ms`` values: no sockets, no clock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nfgate.errors import StateError
from nfgate.model import (
    ALL,
    Cancel,
    Catalog,
    Fetch,
    Heartbeat,
    Lookup,
    Peer,
    Register,
    Reply,
    Request,
    ServiceRef,
    Target,
    TargetKind,
    Unregister,
)
from nfgate.queues import TRANSITIONS, Event, Job, Part, PartState, advance
from nfgate.routing import MAX_CHANGES, Router
from nfgate.routing_types import (
    STATUS_CANCELLED,
    Abort,
    Accepted,
    Deliver,
    Dispatch,
    Evict,
    Output,
    RouterConfig,
    WorkerChange,
)

T = TypeVar("T")

# MemoDB workers by default: 10 s x 3 liveness unless a test's config says otherwise.
CFG = RouterConfig(
    queue_expiry_ms=1_000,
    max_redispatch=2,
    liveness={"memodb": (100, 3), "nfp": (100, 3), "sada": (100, 3), "dcp": (100, 3)},
)
LIVE = 300  # interval * liveness above

CA = Peer(edge="nfp", protocol="nfp", address=b"client-a")
CB = Peer(edge="sada", protocol="sada", address=b"client-b")


def worker(name: str, protocol: str = "memodb") -> Peer:
    return Peer(edge=protocol, protocol=protocol, address=name.encode())


W1, W2, W3 = worker("w1"), worker("w2"), worker("w3")


def svc(name: str = "echo", version: str | None = None) -> ServiceRef:
    return ServiceRef(name=name, version=version)


def reg(
    router: Router,
    peer: Peer,
    now: int = 0,
    *services: ServiceRef,
    capacity: int = 1,
    name: str = "",
) -> list[Output]:
    return router.handle(
        Register(peer=peer, services=services or (svc(),), capacity=capacity, name=name), now
    )


def req(
    service: str | ServiceRef = "echo",
    client: Peer = CA,
    target: Target | None = None,
    timeout_ms: int | None = None,
) -> Request:
    ref = svc(service) if isinstance(service, str) else service
    return Request(
        service=ref, reply_to=client, target=target or Target(), timeout_ms=timeout_ms, body=(b"x",)
    )


def of(out: Sequence[object], cls: type[T]) -> list[T]:
    return [o for o in out if isinstance(o, cls)]


def submit(router: Router, request: Request, now: int = 0) -> tuple[int, list[Output]]:
    out = router.handle(request, now)
    accepted = of(out, Accepted)
    assert len(accepted) == 1, out
    return accepted[0].request.id, out


def answer(router: Router, w: Peer, rid: int, now: int = 0, status: int = 200) -> list[Output]:
    return router.handle(Reply(id=rid, status=status, body=(b"r",), worker=w), now)


def dispatched(out: Sequence[object]) -> list[tuple[Peer, int]]:
    return [(d.worker, d.request.id) for d in of(out, Dispatch)]


# --- ANY, ids, LRU ---------------------------------------------------------------------


def test_a_request_that_asks_no_acknowledgement_gets_no_accepted() -> None:
    # DCP and SADA clients have no acknowledgement in their protocol: their edges turn
    # it off, and the request is routed and answered all the same, under a core id.
    r = Router(CFG)
    reg(r, W1)
    out = r.handle(attrs.evolve(req(), acknowledge=False), 5)
    assert not of(out, Accepted)
    assert dispatched(out) == [(W1, 1)]
    assert r.handle(attrs.evolve(req(), acknowledge=False), 6) == []  # W1 is busy: queued, silent
    assert r.stats()["queued"] == 1
    out = answer(r, W1, 1, 7)
    (d,) = of(out, Deliver)
    assert d.reply.id == 1 and d.client == CA
    assert dispatched(out) == [(W1, 2)]  # the queued one, under its own core id
    assert r.handle(req(), 8)[0] == Accepted(request=attrs.evolve(req(), id=3), workers=())


def test_any_request_goes_to_free_worker_and_reply_comes_back() -> None:
    r = Router(CFG)
    assert reg(r, W1) == []
    out = r.handle(req(), 5)
    assert isinstance(out[0], Accepted)  # before the Dispatch, so the edge can map the id
    assert out[0].request.id == 1 and out[0].workers == (W1,)
    assert dispatched(out) == [(W1, 1)]
    assert of(out, Dispatch)[0].attempt == 1
    out = answer(r, W1, 1, 6)
    (d,) = of(out, Deliver)
    assert d.client == CA and d.reply.status == 200 and d.reply.body == (b"r",)
    assert d.final and d.remaining == 0 and d.request.body == (b"x",)
    assert r.stats()["jobs"] == 0 and r.stats()["replied"] == 1


def test_core_ids_are_monotonic_and_explicit_ids_are_kept() -> None:
    r = Router(CFG)
    assert submit(r, req())[0] == 1
    assert submit(r, req())[0] == 2
    restored = Request(id=10, service=svc(), reply_to=CA)  # an edge restoring a stored job
    assert submit(r, restored)[0] == 10
    assert submit(r, req())[0] == 11
    with pytest.raises(ValueError, match="already in use"):
        r.handle(restored, 0)


def test_any_picks_least_recently_used_free_worker() -> None:
    r = Router(CFG)
    for w in (W1, W2, W3):
        reg(r, w, 0, capacity=2)
    out: list[Output] = []
    for _ in range(4):
        out += r.handle(req(), 0)
    assert [w for w, _ in dispatched(out)] == [W1, W2, W3, W1]
    answer(r, W3, 3)  # a reply does not make W3 "used": W2 was dispatched to longest ago
    out = r.handle(req(), 0) + r.handle(req(), 0)
    assert [w for w, _ in dispatched(out)] == [W2, W3]


def test_freed_workers_are_used_in_the_order_they_became_free() -> None:
    r = Router(CFG)
    for w in (W1, W2, W3):
        reg(r, w)
    ids = [submit(r, req())[0] for _ in range(3)]
    answer(r, W3, ids[2])
    answer(r, W1, ids[0])
    out = r.handle(req(), 0) + r.handle(req(), 0)
    assert [w for w, _ in dispatched(out)] == [W3, W1]


def test_request_without_worker_is_queued_until_one_registers() -> None:
    r = Router(CFG)
    rid, out = submit(r, req())
    assert of(out, Accepted)[0].workers == () and not of(out, Dispatch)
    assert r.stats()["queued"] == 1
    assert dispatched(reg(r, W1, 10)) == [(W1, rid)]
    assert r.stats()["queued"] == 0


def test_fair_across_clients_round_robin() -> None:
    r = Router(CFG)
    a_ids = [submit(r, req(client=CA))[0] for _ in range(100)]
    (b_id,) = [submit(r, req(client=CB))[0]]
    order = dispatched(reg(r, W1))
    for _ in range(101):
        (_, rid) = order[-1]
        order += dispatched(answer(r, W1, rid))
    ids = [rid for _, rid in order]
    assert ids[:2] == [a_ids[0], b_id]  # B waits behind one of A's, not a hundred
    assert sorted(ids) == sorted([*a_ids, b_id]) and len(ids) == 101


def test_worker_with_several_services_serves_the_oldest_queued() -> None:
    r = Router(CFG)
    rev, _ = submit(r, req("rev"))
    echo, _ = submit(r, req("echo"))
    out = reg(r, W1, 0, svc("echo"), svc("rev"))
    assert dispatched(out) == [(W1, rev)]
    assert dispatched(answer(r, W1, rev)) == [(W1, echo)]


def test_versions_match_none_as_any() -> None:
    r = Router(CFG)
    v1, v2 = worker("v1", "sada"), worker("v2", "sada")
    reg(r, v2, 0, svc("calc", "2"))
    reg(r, v1, 0, svc("calc", "1"))
    out = r.handle(req(svc("calc", "1")), 0)
    assert [w for w, _ in dispatched(out)] == [v1]  # v2 is LRU but the wrong version
    out = r.handle(req(svc("calc")), 0)  # no version: any will do
    assert [w for w, _ in dispatched(out)] == [v2]
    rid, out = submit(r, req(svc("calc", "1")))
    assert not of(out, Dispatch)
    assert dispatched(answer(r, v2, 2)) == []  # v2 cannot take the v1 request
    assert dispatched(answer(r, v1, 1)) == [(v1, rid)]


# --- capacity ----------------------------------------------------------------------------


def test_capacity_more_than_one() -> None:
    r = Router(CFG)
    reg(r, W1, 0, capacity=3)
    ids = [submit(r, req())[0] for _ in range(4)]
    assert r.stats()["in_flight"] == 3 and r.stats()["queued"] == 1
    assert dispatched(answer(r, W1, ids[1])) == [(W1, ids[3])]


def test_dcp_heartbeat_from_busy_worker_grants_one_more_slot() -> None:
    r = Router(CFG)
    dw = worker("d", "dcp")
    reg(r, dw)
    ids = [submit(r, req())[0] for _ in range(4)]
    assert dispatched(r.handle(Heartbeat(peer=dw), 10)) == [(dw, ids[1])]  # "ready for more"
    assert dispatched(r.handle(Heartbeat(peer=dw), 20)) == [(dw, ids[2])]
    # Each reply first takes a grant back, so the worker must ping again to get more.
    assert dispatched(answer(r, dw, ids[0])) == []
    assert dispatched(answer(r, dw, ids[1])) == []
    assert dispatched(answer(r, dw, ids[2])) == [(dw, ids[3])]  # back to its registered slot


def test_heartbeat_from_other_protocols_grants_nothing() -> None:
    r = Router(CFG)
    reg(r, W1)
    submit(r, req())
    submit(r, req())
    assert r.handle(Heartbeat(peer=W1), 10) == []


# --- ALL ---------------------------------------------------------------------------------


def test_all_gathers_one_reply_per_worker() -> None:
    r = Router(CFG)
    for w in (W1, W2, W3):
        reg(r, w, 0, name=w.address.decode())
    reg(r, worker("other"), 0, svc("rev"))
    rid, out = submit(r, req(target=ALL))
    assert set(of(out, Accepted)[0].workers) == {W1, W2, W3}
    assert sorted(dispatched(out), key=lambda x: x[0].address) == [(W1, rid), (W2, rid), (W3, rid)]
    remaining = []
    for w in (W2, W1, W3):
        (d,) = of(answer(r, w, rid), Deliver)
        assert d.reply.worker == w and d.reply.worker_name == w.address.decode()
        remaining.append(d.remaining)
    assert remaining == [2, 1, 0]
    assert r.stats()["jobs"] == 0
    assert answer(r, W1, rid) == [] and r.stats()["unknown_replies"] == 1  # a duplicate


def test_all_waits_for_busy_workers_in_their_backlog() -> None:
    r = Router(CFG)
    reg(r, W1)
    reg(r, W2)
    busy, _ = submit(r, req())  # W1 busy
    rid, out = submit(r, req(target=ALL))
    assert dispatched(out) == [(W2, rid)]
    assert dispatched(answer(r, W1, busy)) == [(W1, rid)]


def test_all_without_workers_waits_for_the_first() -> None:
    r = Router(CFG)
    rid, out = submit(r, req(target=ALL))
    assert of(out, Accepted)[0].workers == ()
    assert dispatched(reg(r, W1, 10)) == [(W1, rid)]
    assert dispatched(reg(r, W2, 20)) == []  # fanned out already
    (d,) = of(answer(r, W1, rid), Deliver)
    assert d.final


def test_all_without_workers_expires_with_one_reply() -> None:
    r = Router(CFG)
    submit(r, req(target=ALL))
    (d,) = of(r.tick(1_000), Deliver)
    assert d.reply.status == 408 and d.final


def test_all_part_fails_when_its_worker_is_lost() -> None:
    r = Router(CFG)
    reg(r, W1)
    reg(r, W2)
    rid, _ = submit(r, req(target=ALL))
    out = r.handle(Unregister(peer=W1), 1)
    (d,) = of(out, Deliver)
    assert d.reply.status == 500 and d.remaining == 1 and d.reply.worker == W1
    assert not of(out, Dispatch)  # W2 has its own copy
    assert of(answer(r, W2, rid), Deliver)[0].final


# --- NAMED -------------------------------------------------------------------------------


def test_named_waits_for_the_named_worker() -> None:
    r = Router(CFG)
    reg(r, W1, 0, name="w1")
    rid, out = submit(r, req(target=Target(kind=TargetKind.NAMED, names=("w2",))))
    assert not of(out, Dispatch) and of(out, Accepted)[0].workers == ()
    assert reg(r, W3, 5, name="w3") == []
    assert dispatched(reg(r, W2, 10, name="w2")) == [(W2, rid)]
    assert of(answer(r, W2, rid), Deliver)[0].final


def test_named_several_names_one_reply_each_and_worker_must_offer_service() -> None:
    r = Router(CFG)
    reg(r, W1, 0, name="w1")
    reg(r, W2, 0, svc("rev"), name="w2")  # right name, wrong service: not a match
    target = Target(kind=TargetKind.NAMED, names=("w1", "w2", "w1"))
    rid, out = submit(r, req(target=target))
    assert dispatched(out) == [(W1, rid)]
    assert of(out, Accepted)[0].workers == (W1,)
    assert of(answer(r, W1, rid), Deliver)[0].remaining == 1
    (d,) = of(r.tick(1_000), Deliver)
    assert d.reply.status == 408 and d.final


def test_named_any_service_reaches_the_named_workers_whatever_they_offer() -> None:
    # NorFab's pseudo-service "all": the NFP edge resolves it to named workers of any service.
    r = Router(CFG)
    reg(r, W1, 0, name="w1")
    reg(r, W2, 0, svc("rev"), name="w2")
    target = Target(kind=TargetKind.NAMED, names=("w1", "w2"), any_service=True)
    rid, out = submit(r, req("all", target=target))
    assert dispatched(out) == [(W1, rid), (W2, rid)]
    assert of(out, Accepted)[0].workers == (W1, W2)
    assert not of(answer(r, W1, rid), Deliver)[0].final
    assert of(answer(r, W2, rid), Deliver)[0].final
    # A named worker that is gone is waited for under its name, whatever it will offer.
    rid, out = submit(r, req("all", target=Target(kind=TargetKind.NAMED, names=("w3",), any_service=True)))
    assert not of(out, Dispatch)
    assert dispatched(reg(r, W3, 5, svc("other"), name="w3")) == [(W3, rid)]


def test_named_worker_lost_waits_for_it_to_come_back() -> None:
    r = Router(CFG)
    reg(r, W1, 0, name="w1")
    rid, _ = submit(r, req(target=Target(kind=TargetKind.NAMED, names=("w1",))))
    out = r.handle(Unregister(peer=W1), 1)
    assert out == []
    w1b = worker("w1-reconnected")
    out = reg(r, w1b, 2, name="w1")
    assert dispatched(out) == [(w1b, rid)] and of(out, Dispatch)[0].attempt == 2


def test_named_busy_worker_backlog_then_worker_lost() -> None:
    r = Router(CFG)
    reg(r, W1, 0, name="w1")
    busy, _ = submit(r, req())
    rid, out = submit(r, req(target=Target(kind=TargetKind.NAMED, names=("w1",))))
    assert not of(out, Dispatch) and of(out, Accepted)[0].workers == (W1,)
    r.handle(Unregister(peer=W1), 1)  # busy's ANY part is queued again; rid waits for "w1"
    out = reg(r, W2, 2, name="w1")
    assert dispatched(out) == [(W2, busy)]
    assert dispatched(answer(r, W2, busy, 3)) == [(W2, rid)]


def test_named_part_moves_to_a_newer_worker_of_that_name() -> None:
    r = Router(CFG)
    reg(r, W1, 0, name="x")
    busy, _ = submit(r, req())
    rid, _ = submit(r, req(target=Target(kind=TargetKind.NAMED, names=("x",))))  # W1's backlog
    reg(r, W2, 1, name="x")  # the latest registration owns the name
    out = r.handle(Unregister(peer=W1), 2)
    assert dispatched(out) == [(W2, busy)]  # the retry goes to the free W2; rid waits in its backlog
    assert dispatched(answer(r, W2, busy, 3)) == [(W2, rid)]


# --- liveness and redispatch -------------------------------------------------------------


def test_heartbeat_expiry_evicts_and_redispatches() -> None:
    r = Router(CFG)
    reg(r, W1, 0)
    rid, _ = submit(r, req(), 0)
    reg(r, W2, 100)
    assert r.next_deadline() == LIVE
    assert r.tick(LIVE - 1) == []
    r.handle(Heartbeat(peer=W2), 250)
    out = r.tick(LIVE)
    assert of(out, Evict) == [Evict(worker=W1, reason="heartbeat expired")]
    (disp,) = of(out, Dispatch)
    assert (disp.worker, disp.request.id, disp.attempt) == (W2, rid, 2)
    assert r.stats()["redispatched"] == 1 and r.stats()["evicted"] == 1
    assert answer(r, W1, rid) == []  # the dead worker's late reply is ignored
    assert of(answer(r, W2, rid), Deliver)[0].final


def test_any_message_from_a_worker_refreshes_it() -> None:
    r = Router(CFG)
    reg(r, W1, 0)
    rid, _ = submit(r, req(), 0)
    answer(r, W1, rid, 200)
    assert r.next_deadline() == 200 + LIVE
    assert r.tick(LIVE) == []
    r.handle(Register(peer=W1, services=(svc(),)), 400)  # a repeated READY
    assert r.next_deadline() == 400 + LIVE
    assert of(r.tick(700), Evict)


def test_unregister_redispatches_without_evict() -> None:
    r = Router(CFG)
    reg(r, W1)
    reg(r, W2)
    reg(r, W3)
    first, _ = submit(r, req())
    second, _ = submit(r, req())  # W1 and W2 busy, W3 free
    out = r.handle(Unregister(peer=W1, reason="bye"), 1)
    assert not of(out, Evict)
    assert dispatched(out) == [(W3, first)]
    assert r.stats()["workers"] == 2 and second


def test_redispatched_request_goes_before_other_queued_ones() -> None:
    r = Router(CFG)
    reg(r, W1)
    first, _ = submit(r, req(client=CA))
    submit(r, req(client=CB))
    r.handle(Unregister(peer=W1), 1)
    assert dispatched(reg(r, W2, 2)) == [(W2, first)]


def test_max_redispatch_exhausted_gives_500() -> None:
    r = Router(RouterConfig(max_redispatch=1, liveness={"memodb": (100, 3)}))
    reg(r, W1)
    submit(r, req())
    reg(r, W2)
    out = r.handle(Unregister(peer=W1), 1)
    assert of(out, Dispatch)[0].attempt == 2
    out = r.handle(Unregister(peer=W2), 2)
    (d,) = of(out, Deliver)
    assert d.reply.status == 500 and d.final and d.reply.worker is None
    assert r.stats()["jobs"] == 0 and r.stats()["failed"] == 1


def test_reregister_with_other_services_is_a_new_worker() -> None:
    r = Router(CFG)
    reg(r, W1, 0, svc("echo"))
    rid, _ = submit(r, req())
    reg(r, W2, 0, svc("echo"))
    out = reg(r, W1, 1, svc("rev"))
    assert dispatched(out) == [(W2, rid)]
    (cat,) = r.handle(Lookup(peer=CA, query="*"), 2)
    assert isinstance(cat, Catalog)
    assert [(e.service.name, e.workers) for e in cat.entries] == [("echo", 1), ("rev", 1)]


def test_workers_joining_and_leaving_are_noted_with_why_and_what_they_held() -> None:
    r = Router(CFG)
    reg(r, W1, 0, svc("echo"), name="echo-1")
    reg(r, W2, 0, svc("echo"), svc("rev"))
    rid, _ = submit(r, req(), 0)  # W1 holds it
    r.handle(Heartbeat(peer=W2), 250)
    r.tick(LIVE)  # W1 expires; its request goes to W2
    r.handle(Unregister(peer=W2, reason="worker sent DISCONNECT"), LIVE + 1)
    reg(r, W3, LIVE + 2, svc("echo"))
    reg(r, W3, LIVE + 3, svc("rev"))  # the same socket, other services: a new worker
    assert list(r.changes) == [
        WorkerChange(peer=W1, name="echo-1", services=(svc("echo"),), joined=True),
        WorkerChange(peer=W2, name="", services=(svc("echo"), svc("rev")), joined=True),
        WorkerChange(
            peer=W1, name="echo-1", services=(svc("echo"),), joined=False, reason="heartbeat expired", held=1
        ),
        WorkerChange(
            peer=W2,
            name="",
            services=(svc("echo"), svc("rev")),
            joined=False,
            reason="worker sent DISCONNECT",
            held=1,
        ),
        WorkerChange(peer=W3, name="", services=(svc("echo"),), joined=True),  # the request goes to W3
        WorkerChange(
            peer=W3,
            name="",
            services=(svc("echo"),),
            joined=False,
            reason="registered again, as another worker",
            held=1,  # its third try: max_redispatch=2, so it fails now
        ),
        WorkerChange(peer=W3, name="", services=(svc("rev"),), joined=True),
    ]
    assert rid and r.stats()["failed"] == 1
    # A repeated READY changes nothing: no note. Nobody reading them: the notes stay bounded.
    reg(r, W3, LIVE + 4, svc("rev"))
    assert len(r.changes) == 7
    for i in range(MAX_CHANGES + 10):
        reg(r, worker(f"x{i}"), LIVE + 5)
    assert len(r.changes) == r.changes.maxlen


def test_liveness_zero_never_expires() -> None:
    r = Router(RouterConfig(liveness={"dbp": (0, 3)}))
    reg(r, worker("hermes", "dbp"))
    assert r.next_deadline() is None
    assert r.tick(10**9) == []


def test_unknown_heartbeat_and_unregister_are_ignored() -> None:
    r = Router(CFG)
    assert r.handle(Heartbeat(peer=W1), 0) == []
    assert r.handle(Unregister(peer=W1), 0) == []
    assert r.stats()["unknown_heartbeats"] == 1


# --- expiry, timeouts, limits ------------------------------------------------------------


def test_queue_expiry_408() -> None:
    r = Router(CFG)
    rid, _ = submit(r, req(), 100)
    assert r.next_deadline() == 1_100
    assert r.tick(1_099) == []
    (d,) = of(r.tick(1_100), Deliver)
    assert d.reply.id == rid and d.reply.status == 408 and d.final
    assert r.stats()["expired"] == 1 and r.stats()["queued"] == 0
    assert r.next_deadline() is None
    assert reg(r, W1, 1_200) == []


def test_a_request_waiting_for_a_busy_worker_does_not_expire_until_no_worker_offers_it() -> None:
    # The expiry is for requests with no worker: one queued behind a long job of a
    # worker that offers its service waits on (NorFab's broker hands the worker every
    # job at once, and its client waits for its own timeout).
    r = Router(attrs.evolve(CFG, liveness={"memodb": (60_000, 3)}))
    reg(r, W1)
    first, _ = submit(r, req(), 0)
    second, _ = submit(r, req(), 100)
    assert r.tick(1_100) == []  # W1 is busy, not gone: the second waits on
    assert r.stats()["queued"] == 1 and r.stats()["expired"] == 0
    assert r.next_deadline() == 2_100  # its clock restarted when it was found waiting
    assert dispatched(answer(r, W1, first, 1_500)) == [(W1, second)]
    assert r.stats()["expired"] == 0


def test_a_request_whose_workers_all_left_expires_one_expiry_after_it_was_last_seen_served() -> None:
    r = Router(attrs.evolve(CFG, liveness={"memodb": (60_000, 3)}))
    reg(r, W1)
    submit(r, req(), 0)
    second, _ = submit(r, req(), 100)
    assert r.tick(1_100) == []
    r.handle(Unregister(peer=W1, reason="gone"), 1_200)  # the first goes back in the queue too
    out = r.tick(2_100)
    (d,) = [d for d in of(out, Deliver) if d.reply.id == second]
    assert d.reply.status == 408 and d.final


def test_request_timeout_504_after_retries() -> None:
    r = Router(RouterConfig(max_redispatch=1, liveness={"memodb": (10_000, 3)}))
    reg(r, W1)
    reg(r, W2)
    rid, _ = submit(r, req(timeout_ms=50), 0)
    assert r.next_deadline() == 50
    out = r.tick(50)
    assert dispatched(out) == [(W2, rid)]  # the slow worker is used last
    assert r.stats()["timeouts"] == 1
    assert answer(r, W1, rid, 60) == []  # late: counted, ignored
    assert r.stats()["unknown_replies"] == 1
    (d,) = of(r.tick(100), Deliver)
    assert d.reply.status == 504 and d.final


def test_request_timeout_on_bound_part_fails_without_retry() -> None:
    r = Router(CFG)
    reg(r, W1)
    submit(r, req(target=ALL, timeout_ms=10))
    (d,) = of(r.tick(10), Deliver)
    assert d.reply.status == 504


def test_timeout_entry_is_dropped_once_answered() -> None:
    r = Router(RouterConfig(liveness={"memodb": (0, 3)}))
    reg(r, W1)
    rid, _ = submit(r, req(timeout_ms=50))
    answer(r, W1, rid, 10)
    assert r.next_deadline() is None
    assert r.tick(50) == []


def test_queue_full_503_without_accepted() -> None:
    r = Router(RouterConfig(max_queue_per_service=2))
    submit(r, req())
    submit(r, req())
    out = r.handle(req(), 0)
    assert not of(out, Accepted)
    (d,) = of(out, Deliver)
    assert d.reply.status == 503 and d.final and d.reply.id == 3
    assert submit(r, req("other"))[0] == 4  # other services are not affected
    assert r.stats()["rejected"] == 1


def test_the_gateway_wide_queue_limit_refuses_only_what_would_wait() -> None:
    # Many services with a short queue each add up: max_queued bounds them all.
    r = Router(RouterConfig(max_queued=3))
    for name in ("a", "b", "c"):
        submit(r, req(name))
    out = r.handle(req("d"), 0)
    (d,) = of(out, Deliver)
    assert d.reply.status == 503 and d.reason == "gateway queue full" and not of(out, Accepted)
    reg(r, W1, 0, svc("e"))
    rid, out = submit(r, req("e"))  # a free worker takes it at once: not refused
    assert dispatched(out) == [(W1, rid)]
    answer(r, W1, rid)
    r.handle(Cancel(peer=CA, job_id="1"), 0)  # one queued request fewer: room again
    assert submit(r, req("d"))[0] > 0
    assert r.stats()["rejected"] == 1 and r.stats()["queued"] == 3


# --- replies, cancel, lookup -------------------------------------------------------------


def test_unknown_replies_are_ignored_and_counted() -> None:
    r = Router(CFG)
    reg(r, W1)
    reg(r, W2)
    rid, _ = submit(r, req())
    assert answer(r, W2, rid) == []  # not given to W2
    assert answer(r, W1, 99) == []
    assert r.handle(Reply(id=rid, status=200), 0) == []  # no worker named
    assert answer(r, worker("stranger"), rid) == []
    assert of(answer(r, W1, rid), Deliver)
    assert answer(r, W1, rid) == []  # duplicate
    assert r.stats()["unknown_replies"] == 5


def test_progress_reply_is_relayed_but_not_final() -> None:
    r = Router(CFG)
    reg(r, W1)
    rid, _ = submit(r, req())
    (d,) = of(answer(r, W1, rid, status=102), Deliver)
    assert not d.final and d.remaining == 1
    (d,) = of(answer(r, W1, rid), Deliver)
    assert d.final


def test_cancel_queued_and_in_flight() -> None:
    r = Router(CFG)
    reg(r, W1)
    running, _ = submit(r, req())
    queued, _ = submit(r, req())
    out = r.handle(Cancel(peer=CA, job_id=str(queued)), 1)
    (d,) = of(out, Deliver)
    assert d.reply.status == STATUS_CANCELLED and d.final and not of(out, Abort)
    later, _ = submit(r, req())
    out = r.handle(Cancel(peer=CA, job_id=str(running)), 2)
    assert of(out, Abort)[0].worker == W1 and of(out, Abort)[0].request.id == running
    assert of(out, Deliver)[0].reply.status == STATUS_CANCELLED
    assert dispatched(out) == [(W1, later)]  # the freed slot is used
    assert answer(r, W1, running) == []
    assert r.handle(Cancel(peer=CA, job_id=str(running)), 3) == []
    assert r.handle(Cancel(peer=CA, job_id="not-a-core-id"), 3) == []
    assert r.stats()["unknown_cancels"] == 2 and r.stats()["cancelled"] == 2
    assert r.next_deadline() == LIVE  # nothing queued any more; W1 last heard at 0


def test_lookup_catalog() -> None:
    r = Router(CFG)
    reg(r, W1, 0, svc("echo"), svc("rev"))
    reg(r, worker("n", "nfp"), 0, svc("echo"))
    reg(r, worker("s", "sada"), 0, svc("calc", "1"))
    (cat,) = r.handle(Lookup(peer=CA, query="*"), 0)
    assert isinstance(cat, Catalog) and cat.peer == CA
    got = {(e.service.name, e.service.version): (e.workers, e.protocols) for e in cat.entries}
    assert got == {
        ("calc", "1"): (1, ("sada",)),
        ("echo", None): (2, ("memodb", "nfp")),
        ("rev", None): (1, ("memodb",)),
    }
    (one,) = r.handle(Lookup(peer=CA, query="rev"), 0)
    assert isinstance(one, Catalog) and [e.service.name for e in one.entries] == ["rev"]
    (none,) = r.handle(Lookup(peer=CA, query="missing"), 0)
    assert isinstance(none, Catalog) and none.entries == ()


def test_core_refuses_commands_it_does_not_take() -> None:
    r = Router(CFG)
    with pytest.raises(TypeError):
        r.handle(Fetch(peer=CA, job_id="x"), 0)
    with pytest.raises(TypeError):
        r.handle(Catalog(peer=CA, entries=()), 0)


# --- deadlines and the state table -------------------------------------------------------


def test_next_deadline_is_the_earliest_of_everything() -> None:
    r = Router(CFG)
    assert r.next_deadline() is None
    submit(r, req("nobody"), 0)  # expires at 1000
    assert r.next_deadline() == 1_000
    reg(r, W1, 500)  # liveness at 800
    assert r.next_deadline() == 800
    r.handle(Heartbeat(peer=W1), 600)
    assert r.next_deadline() == 900
    rid, _ = submit(r, req(timeout_ms=100), 650)  # in flight at W1 until 750
    assert r.next_deadline() == 750
    out = r.tick(750)
    assert dispatched(out) == [(W1, rid)]  # the only worker gets its retry
    assert r.next_deadline() == 850
    answer(r, W1, rid, 800)  # refreshes W1 too: liveness at 1100
    assert r.next_deadline() == 1_000
    assert of(r.tick(1_000), Deliver)[0].reply.status == 408
    assert r.next_deadline() == 1_100
    assert of(r.tick(1_100), Evict)
    assert r.next_deadline() is None


def test_transition_table_and_illegal_moves() -> None:
    reachable = {s for s, _ in TRANSITIONS} | set(TRANSITIONS.values())
    assert reachable == set(PartState)
    part = Part(Job(req()))
    assert advance(part, Event.DISPATCH) is PartState.IN_FLIGHT
    assert advance(part, Event.REPLY) is PartState.DONE
    with pytest.raises(StateError, match="no transition"):
        advance(part, Event.DISPATCH)


def test_stats_has_counters_and_gauges() -> None:
    stats = Router().stats()
    assert all(isinstance(v, int) for v in stats.values())
    for key in ("dispatched", "replied", "redispatched", "expired", "unknown_replies", "queued", "in_flight"):
        assert key in stats


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        RouterConfig(liveness={"nfp": (100,)})  # type: ignore[dict-item]
    assert RouterConfig().timeout_for(worker("n", "nfp")) == 2500 * 6
    edge_cfg = RouterConfig(liveness={"nfp-2": (10, 2), "nfp": (100, 3)})
    assert edge_cfg.timeout_for(Peer(edge="nfp-2", protocol="nfp", address=b"a")) == 20


# --- property: no request is ever lost ---------------------------------------------------

PEERS = (W1, W2, worker("d", "dcp"))
CLIENTS = (CA, CB)
NAMES = ("w1", "w2", "d")
SERVICES = ("a", "b")


class NeverLoseARequest(RuleBasedStateMachine):
    """Random interleavings: every accepted request ends with exactly one final Deliver,
    its terminal Delivers counting ``remaining`` down by one; nothing is sent to a worker
    that is not registered, and nothing follows a final Deliver."""

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

    def feed(self, out: list[Any]) -> None:
        for o in out:
            if isinstance(o, Accepted):
                assert o.request.id not in self.open and o.request.id not in self.done
                self.open[o.request.id] = None
            elif isinstance(o, Dispatch):
                assert o.worker in self.registered
                assert o.request.id in self.open
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

    @rule(
        i=st.integers(0, 2),
        services=st.sets(st.sampled_from(SERVICES), min_size=1),
        capacity=st.integers(1, 2),
    )
    def register(self, i: int, services: set[str], capacity: int) -> None:
        peer = PEERS[i]
        refs = tuple(svc(s) for s in sorted(services))
        self.registered.add(peer)
        self.feed(
            self.router.handle(Register(peer=peer, services=refs, capacity=capacity, name=NAMES[i]), self.now)
        )

    @rule(i=st.integers(0, 2))
    def unregister(self, i: int) -> None:
        self.feed(self.router.handle(Unregister(peer=PEERS[i]), self.now))
        self.registered.discard(PEERS[i])
        self.held = {h for h in self.held if h[0] != PEERS[i]}

    @rule(i=st.integers(0, 2))
    def heartbeat(self, i: int) -> None:
        self.feed(self.router.handle(Heartbeat(peer=PEERS[i]), self.now))

    @rule(
        c=st.integers(0, 1),
        service=st.sampled_from(SERVICES),
        kind=st.sampled_from(TargetKind),
        names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=2),
        timeout=st.none() | st.integers(1, 400),
    )
    def request(self, c: int, service: str, kind: TargetKind, names: list[str], timeout: int | None) -> None:
        target = Target(kind=kind, names=names if kind is TargetKind.NAMED else ())
        self.feed(self.router.handle(req(service, CLIENTS[c], target, timeout), self.now))

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), status=st.sampled_from((200, 200, 500, 102)))
    def reply(self, data: st.DataObject, status: int) -> None:
        w, rid = data.draw(st.sampled_from(sorted(self.held, key=lambda h: (h[0].address, h[1]))))
        if status >= 200:
            self.held.discard((w, rid))
        self.feed(self.router.handle(Reply(id=rid, status=status, worker=w), self.now))

    @rule(rid=st.integers(0, 30))
    def bogus_reply(self, rid: int) -> None:
        self.feed(self.router.handle(Reply(id=rid, status=200, worker=W1), self.now))

    @rule(rid=st.integers(1, 30))
    def cancel(self, rid: int) -> None:
        self.feed(self.router.handle(Cancel(peer=CA, job_id=str(rid)), self.now))

    @rule(dt=st.integers(0, 700))
    def tick(self, dt: int) -> None:
        self.now += dt
        self.feed(self.router.tick(self.now))

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
                assert not any(w.free and w.offers(part.job.request.service) for w in workers.values())

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
            self.feed(self.router.tick(self.now))
        else:
            raise AssertionError("next_deadline never settled")
        assert not self.open, f"requests never finished: {self.open}"
        stats = self.router.stats()
        assert stats["jobs"] == 0 and stats["queued"] == 0 and stats["in_flight"] == 0


TestNeverLoseARequest = NeverLoseARequest.TestCase
TestNeverLoseARequest.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
