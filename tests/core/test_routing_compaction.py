"""A queue that never empties does not keep the requests that left it: a service with
no worker whose requests expire while new ones come (a worker down for a day, its
clients still sending) held every expired request, payload and client until the queue
happened to be empty once."""

from __future__ import annotations

from nfgate.model import Target, TargetKind
from nfgate.queues import COMPACT_SLACK, FairQueue, PartState, Waitlist
from nfgate.routing import Router
from nfgate.routing_types import Deliver

from .routing_helpers import CA, CB, CFG, W1, dispatched, of, reg, req, submit


def _held(queue: FairQueue | Waitlist) -> int:
    if isinstance(queue, Waitlist):
        return len(queue.items)
    return len(queue.retry) + sum(len(fifo) for fifo in queue.clients.values())


def _stream(r: Router, target: Target, until: int) -> int:
    """A request every 100 ms from two clients in turn, each expiring after 1 s; the
    queue's live parts never reach 0. Returns how many expired."""
    expired = 0
    for now in range(0, until, 100):
        submit(r, req("nobody", client=CA if now % 200 else CB, target=target), now)
        expired += len(of(r.tick(now), Deliver))
    return expired


def test_an_any_queue_that_never_empties_holds_its_live_parts_and_a_bounded_rest() -> None:
    r = Router(CFG)
    expired = _stream(r, Target(), 60_000)  # 600 requests, about 590 expired
    queue = r._queues["nobody"][None]
    assert expired > 500 and 0 < queue.live <= 11
    assert (
        _held(queue) <= 2 * queue.live + COMPACT_SLACK + 2
    )  # compacted once as many left as are live, + slack
    # What is still held is served, in order, when a worker comes: nothing was lost.
    waiting = [p.job.request.id for p in queue.of_client(CA) + queue.of_client(CB)]
    assert all(
        p.state is PartState.QUEUED
        for fifo in queue.clients.values()
        for p in fifo
        if p.job.request.id in waiting
    )
    out = reg(r, W1, 60_000, *[req("nobody").service])
    assert [rid for _, rid in dispatched(out)] == [min(waiting)]


def test_a_named_waitlist_that_never_empties_is_bounded_too() -> None:
    r = Router(CFG)
    named = Target(kind=TargetKind.NAMED, names=("no-such-worker",))
    expired = _stream(r, named, 60_000)
    waitlist = r._named_wait["no-such-worker"]
    assert expired > 500 and 0 < waitlist.live <= 11
    assert _held(waitlist) <= 2 * waitlist.live + COMPACT_SLACK + 2
