"""A worker that moves on while holding a request: it hands the request on to another
service (``Forward``, DCP chaining), or it changes the services it offers."""

from __future__ import annotations

from nfgate.model import ALL, Forward, Reply
from nfgate.routing import Router
from nfgate.routing_types import Deliver, Dispatch, Evict

from .routing_helpers import CA, CFG, W1, W2, W3, dispatched, of, reg, req, submit, svc


def test_a_request_for_any_worker_moves_on_and_its_reply_goes_home() -> None:
    r = Router(CFG)
    reg(r, W1, 0, svc("stage1"))
    reg(r, W2, 0, svc("stage2"))
    rid, out = submit(r, req("stage1"))
    assert dispatched(out) == [(W1, rid)]
    out = r.handle(Forward(worker=W1, id=rid, service=svc("stage2"), body=(b"half",)), 0)
    (moved,) = of(out, Dispatch)
    assert (moved.worker, moved.request.id, moved.request.body) == (W2, rid, (b"half",))
    assert moved.request.reply_to == CA
    (done,) = of(r.handle(Reply(id=rid, status=200, body=(b"whole",), worker=W2), 0), Deliver)
    assert done.final and done.reply.body == (b"whole",) and done.request.reply_to == CA
    assert r.stats()["forwarded"] == 1


def test_one_part_of_an_all_request_handed_on_fails_instead_of_hanging() -> None:
    # The part was bound to this worker; it cannot move on whole. Its client must get
    # an answer (500) for that worker, the others' parts carry on, the worker is free.
    r = Router(CFG)
    reg(r, W1, 0, svc("stage1"))
    reg(r, W2, 0, svc("stage1"))
    reg(r, W3, 0, svc("stage2"))
    rid, out = submit(r, req("stage1", target=ALL))
    assert sorted(p.address for p, _ in dispatched(out)) == [b"w1", b"w2"]
    out = r.handle(Forward(worker=W1, id=rid, service=svc("stage2"), body=(b"half",)), 0)
    assert not of(out, Dispatch)
    (failed,) = of(out, Deliver)
    assert failed.reply.status == 500 and failed.remaining == 1 and "not any" in failed.reason
    (last,) = of(r.handle(Reply(id=rid, status=200, body=(b"ok",), worker=W2), 0), Deliver)
    assert last.final
    assert r.stats()["unforwardable"] == 1 and r.stats()["in_flight"] == 0
    # W1 was freed by the hand-on: two new requests find two free workers.
    taken = [dispatched(submit(r, req("stage1"))[1]) for _ in range(2)]
    assert sorted(p.address for [(p, _)] in taken) == [b"w1", b"w2"]


def test_a_forward_for_a_request_the_worker_does_not_hold_is_counted() -> None:
    r = Router(CFG)
    reg(r, W1, 0, svc("stage1"))
    assert r.handle(Forward(worker=W1, id=99, service=svc("stage2")), 0) == []
    assert r.stats()["unknown_forwards"] == 1


def test_a_worker_that_changes_its_services_keeps_the_requests_it_still_offers() -> None:
    # SADA: "Servers MAY change their services, after any change it SHOULD resend an
    # INTR". Its requests are not taken away while it still offers their service.
    r = Router(CFG)
    reg(r, W1, 0, svc("calc"))
    reg(r, W2, 0, svc("calc"))
    rid, out = submit(r, req("calc"))
    [(holder, _)] = dispatched(out)
    idle = W2 if holder == W1 else W1
    out = reg(r, holder, 0, svc("calc"), svc("extra"))
    assert not of(out, Dispatch) and not of(out, Evict)  # not re-dispatched to the idle one
    (done,) = of(r.handle(Reply(id=rid, status=200, body=(b"ok",), worker=holder), 0), Deliver)
    assert done.final and r.stats()["workers_registered"] == 2
    extra, out = submit(r, req("extra"))
    assert dispatched(out) == [(holder, extra)]  # the new service is routed to it
    # Dropping the service of a request it holds is registering as another worker:
    # the request goes to one that offers it.
    calc, out = submit(r, req("calc"))
    assert dispatched(out) == [(idle, calc)]
    reg(r, idle, 0, svc("other"))
    assert r.stats()["workers_lost"] == 1 and r.stats()["queued"] == 1  # the holder is busy
    out = r.handle(Reply(id=extra, status=200, body=(b"e",), worker=holder), 0)
    assert dispatched(out) == [(holder, calc)]
