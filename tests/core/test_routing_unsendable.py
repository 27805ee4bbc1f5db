"""The routing core when an edge cannot send a dispatched request to its worker (a body
the worker's dialect cannot carry): ``Reply.reason`` says so, and the core tries another
worker or fails the request as its own error, never as the worker's answer."""

from __future__ import annotations

import attrs

from nfgate.model import ALL, Reply, Target, TargetKind
from nfgate.routing import Router
from nfgate.routing_types import Deliver

from .routing_helpers import CFG, W1, W2, answer, dispatched, of, reg, req, submit, worker

LONG = attrs.evolve(CFG, queue_expiry_ms=10_000, liveness={"memodb": (60_000, 3)})
WHY = "cannot be sent to a dagbox-dialect DCP worker: empty data part"


def refuse(r: Router, w: object, rid: int, now: int = 0) -> list[object]:
    return r.handle(Reply(id=rid, status=500, worker=w, reason=WHY), now)  # type: ignore[arg-type]


def test_with_no_other_worker_it_fails_500_with_the_reason_not_as_the_workers_answer() -> None:
    r = Router(LONG)
    reg(r, W1, name="w1")
    rid, out = submit(r, req(), 0)
    assert dispatched(out) == [(W1, rid)]
    (d,) = of(refuse(r, W1, rid), Deliver)
    assert (d.reply.status, d.reason, d.final, d.reply.worker_name) == (500, WHY, True, "w1")
    stats = r.stats()
    assert (stats["unsendable"], stats["failed"], stats["replied"], stats["in_flight"]) == (1, 1, 0, 0)
    nxt, out = submit(r, req(), 10)
    assert dispatched(out) == [(W1, nxt)]  # its slot was never used


def test_another_worker_of_the_service_gets_it() -> None:
    r = Router(LONG)
    reg(r, W1)
    reg(r, W2)
    rid, _ = submit(r, req(), 0)  # W1, least recently used
    out = refuse(r, W1, rid)
    assert dispatched(out) == [(W2, rid)] and not of(out, Deliver)
    (d,) = of(answer(r, W2, rid), Deliver)
    assert d.final and d.reply.status == 200 and not d.reason


def test_it_waits_for_a_busy_worker_that_may_carry_it_and_not_for_the_one_that_cannot() -> None:
    r = Router(LONG)
    reg(r, W1)
    reg(r, W2)
    busy, _ = submit(r, req(), 0)  # W1
    rid, out = submit(r, req(), 0)
    assert dispatched(out) == [(W2, rid)]
    assert dispatched(refuse(r, W2, rid)) == []  # W2 is free again, but not for it
    later, out = submit(r, req(), 10)
    assert dispatched(out) == [(W2, later)]
    assert dispatched(answer(r, W1, busy, 20)) == [(W1, rid)]


def test_a_part_that_can_go_nowhere_else_fails_at_once() -> None:
    r = Router(LONG)
    reg(r, W1, name="w1")
    reg(r, W2, name="w2")
    _, out = submit(r, req(target=Target(kind=TargetKind.NAMED, names=("w1",))), 0)
    [(_, rid)] = dispatched(out)
    (d,) = of(refuse(r, W1, rid), Deliver)
    assert d.reply.status == 500 and d.reason == WHY
    rid, out = submit(r, req(target=ALL), 0)
    assert {w for w, _ in dispatched(out)} == {W1, W2}
    (d,) = of(refuse(r, W2, rid), Deliver)
    assert d.reply.status == 500 and d.remaining == 1  # W1's part goes on


def test_it_is_tried_at_most_max_redispatch_more_times() -> None:
    r = Router(attrs.evolve(LONG, max_redispatch=1))
    for peer in (W1, W2, worker("w3")):
        reg(r, peer)
    rid, out = submit(r, req(), 0)
    [(first, _)] = dispatched(out)
    [(second, _)] = dispatched(refuse(r, first, rid))
    (d,) = of(refuse(r, second, rid), Deliver)  # a third worker is left, but no try
    assert d.reply.status == 500 and r.stats()["unsendable"] == 2
