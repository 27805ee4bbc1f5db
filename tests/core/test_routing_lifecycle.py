"""The routing core over time: liveness and redispatch, expiry, timeouts and limits,
replies, cancel and lookup, deadlines and the state table."""

from __future__ import annotations

import attrs
import pytest

from nfgate.errors import StateError
from nfgate.model import ALL, Cancel, Catalog, Fetch, Heartbeat, Lookup, Peer, Register, Reply, Unregister
from nfgate.queues import TRANSITIONS, Event, Job, Part, PartState, advance
from nfgate.routing import MAX_CHANGES, Router
from nfgate.routing_types import (
    STATUS_CANCELLED,
    Abort,
    Accepted,
    Deliver,
    Dispatch,
    Evict,
    RouterConfig,
    WorkerChange,
)

from .routing_helpers import (
    CA,
    CB,
    CFG,
    LIVE,
    W1,
    W2,
    W3,
    answer,
    dispatched,
    of,
    reg,
    req,
    submit,
    svc,
    worker,
)

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
    assert answer(r, W1, rid, 60) == []  # late: counted, dropped; W1's slot is free again
    assert r.stats()["late_replies"] == 1 and r.stats()["unknown_replies"] == 0
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
    assert dispatched(out) == []  # W1 still holds it (late): the retry waits for a worker,
    assert r.next_deadline() == 850  # at most its own timeout
    out = answer(r, W1, rid, 800)  # late, but the retry still waits: it is the answer
    assert dispatched(out) == [] and of(out, Deliver)[0].reply.status == 200
    assert r.next_deadline() == 1_000  # the retry's timer is spent; W1 refreshed: liveness at 1100
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
