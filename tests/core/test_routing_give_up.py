"""``Request.give_up_ms``: a client that gives up on its request (a NorFab job's own
timeout; its client sends no DELETE) is never served after it: a part still queued then
fails with 408, a part lost by its worker afterwards is not dispatched again, and a part
already at a worker is left to it."""

from __future__ import annotations

import attrs

from nfgate.model import ALL, Unregister
from nfgate.routing import Router
from nfgate.routing_types import CLIENT_GAVE_UP, Deliver, Dispatch

from .routing_helpers import CFG, W1, W2, answer, dispatched, of, reg, req, submit

# Neither the queue expiry nor liveness is what ends these.
LONG = attrs.evolve(CFG, queue_expiry_ms=60_000, liveness={"memodb": (60_000, 3)})


def test_a_request_still_queued_when_its_client_gives_up_fails_408_and_never_reaches_a_worker() -> None:
    r = Router(LONG)
    rid, _ = submit(r, attrs.evolve(req(), give_up_ms=3_000), 100)
    assert r.next_deadline() == 3_100  # before the queue expiry's 60_100
    assert r.tick(3_099) == []
    (d,) = of(r.tick(3_100), Deliver)
    assert (d.reply.id, d.reply.status, d.reason, d.final) == (rid, 408, CLIENT_GAVE_UP, True)
    assert r.stats()["gave_up"] == 1 and r.stats()["expired"] == 0 and r.stats()["queued"] == 0
    assert of(reg(r, W1, 3_200), Dispatch) == []  # the worker that comes later gets nothing
    assert r.next_deadline() is not None and r.stats()["jobs"] == 0


def test_a_request_at_a_worker_when_its_client_gives_up_is_left_to_it_and_its_answer_relayed() -> None:
    r = Router(LONG)
    reg(r, W1)
    rid, out = submit(r, attrs.evolve(req(), give_up_ms=1_000), 0)
    assert dispatched(out) == [(W1, rid)]
    assert r.tick(1_000) == []
    (d,) = of(answer(r, W1, rid, 1_500), Deliver)
    assert (d.reply.status, d.final) == (200, True)  # NorFab keeps it for a later GET
    assert r.stats()["gave_up"] == 0


def test_a_request_whose_worker_leaves_after_its_client_gave_up_is_not_dispatched_again() -> None:
    r = Router(LONG)
    reg(r, W1)
    reg(r, W2)
    first, _ = submit(r, req(), 0)  # W1 or W2 takes it
    rid, out = submit(r, attrs.evolve(req(), give_up_ms=1_000), 0)
    ((holder, _),) = dispatched(out)
    free = W2 if holder == W1 else W1
    assert dispatched(answer(r, free, first, 500)) == []  # free again, nothing waiting
    out = r.handle(Unregister(peer=holder), 2_000)  # after the give-up: no retry on the free one
    assert dispatched(out) == []
    (d,) = of(out, Deliver)
    assert (d.reply.id, d.final) == (rid, True) and d.reply.status >= 400
    # Before the give-up, the same loss is retried on the free worker.
    rid, out = submit(r, attrs.evolve(req(), give_up_ms=1_000), 3_000)
    ((holder, _),) = dispatched(out)
    other = W2 if holder == W1 else W1
    reg(r, other, 3_000)
    assert dispatched(r.handle(Unregister(peer=holder), 3_500)) == [(other, rid)]


def test_an_all_request_fails_only_its_queued_parts_when_its_client_gives_up() -> None:
    r = Router(LONG)
    reg(r, W1, 0, capacity=1)
    reg(r, W2, 0, capacity=1)
    busy, out = submit(r, req(), 0)
    ((taken, _),) = dispatched(out)
    rid, out = submit(r, attrs.evolve(req(target=ALL), give_up_ms=1_000), 0)
    idle = W2 if taken == W1 else W1
    assert dispatched(out) == [(idle, rid)]  # the busy worker's part waits in its backlog
    (d,) = of(r.tick(1_000), Deliver)
    assert (d.reply.status, d.reply.worker, d.remaining) == (408, taken, 1)
    assert dispatched(answer(r, taken, busy, 1_100)) == []  # its part is gone
    (last,) = of(answer(r, idle, rid, 1_200), Deliver)
    assert (last.reply.status, last.final) == (200, True)


def test_a_request_whose_client_already_gave_up_is_refused_408_even_with_a_worker_free() -> None:
    # A stored NorFab job taken up again after a restart that outlasted its timeout.
    r = Router(LONG)
    reg(r, W1)
    out = r.handle(attrs.evolve(req(), give_up_ms=0), 0)
    assert dispatched(out) == []
    (d,) = of(out, Deliver)
    assert (d.reply.status, d.reason, d.final) == (408, CLIENT_GAVE_UP, True)
    assert r.stats()["gave_up"] == 1 and r.stats()["rejected"] == 0 and r.stats()["jobs"] == 0
