"""The core while the gateway drains (``Router.close_admission``): a client's new request
is refused with 503, while the work already taken finishes, including what it needs."""

from __future__ import annotations

from nfgate.model import Forward, Request
from nfgate.routing import Router
from nfgate.routing_types import Accepted, Deliver, Dispatch

from .routing_helpers import CA, CB, CFG, W1, W2, W3, answer, dispatched, of, reg, req, submit, svc


def test_a_new_request_from_a_client_is_refused_with_503_and_counted() -> None:
    r = Router(CFG)
    reg(r, W1)
    r.close_admission()
    out = r.handle(req(client=CB), 0)
    (refused,) = of(out, Deliver)
    assert refused.reply.status == 503 and refused.reason == "gateway shutting down"
    assert refused.final and refused.request.reply_to == CB
    assert not of(out, Dispatch) and not of(out, Accepted)  # the free worker was not given it
    assert r.stats()["rejected"] == 1 and r.stats()["jobs"] == 0


def test_what_was_taken_before_finishes_queued_work_included() -> None:
    r = Router(CFG)
    reg(r, W1)
    first, out = submit(r, req())
    second, _ = submit(r, req())  # queued behind the busy worker
    assert dispatched(out) == [(W1, first)]
    r.close_admission()
    out = answer(r, W1, first)
    assert of(out, Deliver)[0].reply.status == 200
    assert dispatched(out) == [(W1, second)]  # accepted before the drain: still served
    assert of(answer(r, W1, second), Deliver)[0].final
    assert r.stats()["in_flight"] == 0 and r.stats()["rejected"] == 0


def test_a_worker_chaining_the_request_it_holds_is_still_served() -> None:
    # DCP chaining: the request at the worker moves on to another service; refusing it
    # would fail work the drain is waiting for.
    r = Router(CFG)
    reg(r, W1, 0, svc("stage1"))
    reg(r, W2, 0, svc("stage2"))
    rid, _ = submit(r, req("stage1"))
    r.close_admission()
    out = r.handle(Forward(worker=W1, id=rid, service=svc("stage2"), body=(b"half",)), 0)
    (moved,) = of(out, Dispatch)
    assert (moved.worker, moved.request.id, moved.request.reply_to) == (W2, rid, CA)
    (done,) = of(answer(r, W2, rid), Deliver)
    assert done.final and done.reply.status == 200


def test_a_request_a_worker_sends_in_its_own_name_is_still_served() -> None:
    # A worker asking another service for something while it works (its own address as
    # the client): the answer is part of the work in flight.
    r = Router(CFG)
    reg(r, W1, 0, svc("stage1"))
    reg(r, W3, 0, svc("lookup"))
    submit(r, req("stage1"))
    r.close_admission()
    out = r.handle(Request(service=svc("lookup"), reply_to=W1, body=(b"q",)), 0)
    assert [p for p, _ in dispatched(out)] == [W3]
    assert r.stats()["rejected"] == 0
