"""The routing core after a per-request timeout: the worker keeps the timed-out request
(and its slot) until it answers or leaves, the retry goes elsewhere or waits, bounded."""

from __future__ import annotations

import attrs

from nfgate.model import ALL, Cancel, Forward, Heartbeat, Reply, Unregister
from nfgate.routing import Router
from nfgate.routing_types import STATUS_CANCELLED, Abort, Deliver

from .routing_helpers import CA, CFG, W1, W2, answer, dispatched, of, reg, req, submit, svc, worker

# Workers stay alive through these tests unless a test lets them expire.
LONG = attrs.evolve(CFG, queue_expiry_ms=10_000, liveness={"memodb": (60_000, 3), "dcp": (60_000, 3)})


def slots(r: Router, peer: object) -> tuple[int, int]:
    """(in_flight, late) of ``peer`` as the worker view reports them."""
    [info] = [w for w in r.workers() if w.peer == peer]
    return info.in_flight, info.late


def test_a_timed_out_request_keeps_its_slot_and_is_not_sent_back_to_that_worker() -> None:
    r = Router(LONG)
    reg(r, W1)
    submit(r, req(timeout_ms=50), 0)
    out = r.tick(50)
    assert dispatched(out) == [] and not of(out, Deliver)  # W1 only one slot, still taken
    assert slots(r, W1) == (1, 1)
    stats = r.stats()
    assert (stats["timeouts"], stats["late"], stats["in_flight"], stats["queued"]) == (1, 1, 0, 1)
    _, out = submit(r, req(), 60)
    assert dispatched(out) == []  # nor anything else while it works on it


def test_the_retry_goes_to_another_free_worker() -> None:
    r = Router(LONG)
    reg(r, W1)
    reg(r, W2)
    rid, out = submit(r, req(timeout_ms=50), 0)
    assert dispatched(out) == [(W1, rid)]
    assert dispatched(r.tick(50)) == [(W2, rid)]
    assert slots(r, W1) == (1, 1) and slots(r, W2) == (1, 0)
    (d,) = of(answer(r, W2, rid, 60), Deliver)
    assert d.final and d.reply.status == 200
    assert r.stats()["late"] == 1  # W1 has not answered yet


def test_a_late_answer_is_dropped_and_frees_the_slot() -> None:
    r = Router(LONG)
    reg(r, W1)
    reg(r, W2)
    rid, _ = submit(r, req(timeout_ms=50), 0)
    r.tick(50)  # retried on W2
    nxt, out = submit(r, req(), 55)
    assert dispatched(out) == []  # both slots taken: W1's by the late request
    out = r.handle(Reply(id=rid, status=102, worker=W1), 60)  # interim: still working
    assert out == [] and slots(r, W1) == (1, 1)
    out = answer(r, W1, rid, 70)
    assert not of(out, Deliver)  # dropped: the request is W2's now
    assert dispatched(out) == [(W1, nxt)]  # the freed slot takes the queued request
    stats = r.stats()
    assert stats["late_replies"] == 2 and stats["unknown_replies"] == 0 and stats["late"] == 0


def test_a_late_answer_while_the_retry_still_waits_is_the_clients_answer() -> None:
    # Slow, not hung: nobody else took the retry, so this answer is the one the client
    # waits for, not work to do again (on that same worker, the only one free).
    r = Router(LONG)
    reg(r, W1)
    rid, _ = submit(r, req(timeout_ms=50), 0)
    r.tick(50)
    out = answer(r, W1, rid, 70)
    (d,) = of(out, Deliver)
    assert d.final and d.reply.status == 200 and dispatched(out) == []
    stats = r.stats()
    assert (stats["late_replies_relayed"], stats["late_replies"], stats["replied"]) == (1, 0, 1)
    assert (stats["jobs"], stats["queued"], stats["late"]) == (0, 0, 0)
    assert r.tick(100) == []  # the retry's timer is spent


def test_a_retry_with_no_other_worker_fails_504_after_its_timeout_not_the_queue_expiry() -> None:
    r = Router(LONG)
    reg(r, W1)
    rid, _ = submit(r, req(timeout_ms=50), 0)
    r.tick(50)
    assert r.next_deadline() == 100  # the retry's wait, not the queue expiry (10 s)
    r.handle(Heartbeat(peer=W1), 90)  # alive, but still on it
    (d,) = of(r.tick(100), Deliver)
    assert (d.reply.id, d.reply.status, d.final) == (rid, 504, True)
    stats = r.stats()
    assert stats["jobs"] == 0 and stats["queued"] == 0 and stats["late"] == 1


def test_a_retry_waits_on_while_a_busy_worker_could_take_it() -> None:
    r = Router(LONG)
    reg(r, W1)
    reg(r, W2)
    long_job, _ = submit(r, req(), 0)  # W1
    rid, out = submit(r, req(timeout_ms=50), 0)
    assert dispatched(out) == [(W2, rid)]
    r.tick(50)  # W2 late; W1 busy with a long job
    assert not of(r.tick(100), Deliver)  # W1 may take it once free: it waits
    assert dispatched(answer(r, W1, long_job, 500)) == [(W1, rid)]


def test_requests_do_not_wait_forever_behind_a_worker_stuck_on_a_timed_out_one() -> None:
    r = Router(LONG)
    reg(r, W1)
    submit(r, req(timeout_ms=50), 0)
    r.tick(50)
    r.tick(100)  # the timed-out request failed 504; W1 never answered
    later, _ = submit(r, req(), 200)
    r.handle(Heartbeat(peer=W1), 5_000)
    (d,) = of(r.tick(10_200), Deliver)  # a stuck worker is not a busy one: 408, not forever
    assert (d.reply.id, d.reply.status) == (later, 408)


def test_a_worker_with_free_slots_skips_the_retry_it_holds_and_takes_what_is_behind() -> None:
    r = Router(LONG)
    reg(r, W1, 0, capacity=2)
    reg(r, W2)
    busy, _ = submit(r, req(), 0)  # W1
    other, _ = submit(r, req(), 0)  # W2
    rid, out = submit(r, req(timeout_ms=50), 0)
    assert dispatched(out) == [(W1, rid)]
    r.tick(50)  # W1: one late, one in flight, no slot; the retry is queued
    behind, out = submit(r, req(), 60)
    assert dispatched(out) == []
    out = answer(r, W1, busy, 70)  # a slot free on W1: not for the retry it still holds
    assert dispatched(out) == [(W1, behind)]
    assert dispatched(answer(r, W2, other, 80)) == [(W2, rid)]


def test_a_worker_leaving_frees_its_late_slots() -> None:
    r = Router(LONG)
    reg(r, W1)
    reg(r, W2)
    submit(r, req(), 0)  # W1
    rid, _ = submit(r, req(timeout_ms=50), 0)  # W2
    r.tick(50)  # W2 late, W1 busy: the retry waits
    r.handle(Unregister(peer=W2, reason="gone"), 60)
    assert r.stats()["late"] == 0
    assert dispatched(reg(r, W2, 70)) == [(W2, rid)]  # back, it has forgotten it: it may take it


def test_an_all_part_that_timed_out_fails_504_and_keeps_the_slot() -> None:
    r = Router(LONG)
    reg(r, W1)
    submit(r, req(target=ALL, timeout_ms=10))
    (d,) = of(r.tick(10), Deliver)
    assert d.reply.status == 504 and slots(r, W1) == (1, 1)


def test_a_hand_on_after_the_timeout_is_a_late_answer() -> None:
    dcp = worker("d", "dcp")
    r = Router(LONG)
    reg(r, dcp)
    rid, _ = submit(r, req(timeout_ms=50), 0)
    r.tick(50)
    out = r.handle(Forward(worker=dcp, id=rid, service=svc("next")), 60)
    assert not of(out, Deliver)
    stats = r.stats()
    assert stats["late_replies"] == 1 and stats["unknown_forwards"] == 0 and stats["late"] == 0


def test_a_dcp_ping_grants_a_slot_over_its_late_ones_but_not_for_that_request() -> None:
    dcp = worker("d", "dcp")
    r = Router(LONG)
    reg(r, dcp)
    submit(r, req(timeout_ms=50), 0)
    r.tick(50)
    out = r.handle(Heartbeat(peer=dcp), 60)  # DagBox: "ready for more"
    assert dispatched(out) == []  # the only thing waiting is the request it holds
    other, out = submit(r, req(), 70)
    assert dispatched(out) == [(dcp, other)]
    [info] = r.workers()
    assert (info.capacity, info.in_flight, info.late) == (2, 2, 1)


def test_with_no_retry_left_it_fails_504_at_once_and_the_slot_stays_taken() -> None:
    r = Router(attrs.evolve(LONG, max_redispatch=0))
    reg(r, W1)
    submit(r, req(timeout_ms=50), 0)
    (d,) = of(r.tick(50), Deliver)
    assert d.reply.status == 504 and d.final
    assert slots(r, W1) == (1, 1) and r.stats()["jobs"] == 0


def test_stats_and_views_balance_once_everyone_is_gone() -> None:
    r = Router(attrs.evolve(LONG, liveness={"memodb": (100, 3)}))
    reg(r, W1)
    reg(r, W2)
    for _ in range(3):
        submit(r, req(timeout_ms=50), 0)
    for _ in range(20):
        due = r.next_deadline()
        if due is None:
            break
        r.tick(due)
    stats = r.stats()
    assert (stats["jobs"], stats["queued"], stats["in_flight"], stats["late"], stats["workers"]) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert r.next_deadline() is None


# --- a worker lost at its request's deadline ----------------------------------------------


def test_a_worker_dropped_at_its_requests_deadline_is_that_requests_timeout() -> None:
    # A MemoDB worker is unregistered at its JOB's timeout, which is the request's own:
    # whichever of the two the core sees first, the client gets the timeout's answer
    # (a retry, then 504), not a lost worker's (a retry waiting for the queue expiry).
    r = Router(LONG)
    reg(r, W1)
    rid, _ = submit(r, req(timeout_ms=50), 0)
    r.handle(Unregister(peer=W1, reason="job timed out"), 50)
    assert r.stats()["timeouts"] == 1
    assert r.next_deadline() == 100  # not the queue expiry at 10 050
    (d,) = of(r.tick(100), Deliver)
    assert (d.reply.id, d.reply.status, d.reason) == (
        rid,
        504,
        "worker timed out, and no other worker took the retry",
    )


def test_a_worker_lost_before_the_deadline_is_a_worker_lost() -> None:
    r = Router(LONG)
    reg(r, W1)
    rid, _ = submit(r, req(timeout_ms=50), 0)
    r.handle(Unregister(peer=W1, reason="gone"), 49)
    assert r.stats()["timeouts"] == 0
    assert not of(r.tick(100), Deliver)  # it waits for a worker, up to the queue expiry
    (d,) = of(r.tick(10_049), Deliver)
    assert (d.reply.id, d.reply.status) == (rid, 408)


def test_an_all_part_whose_worker_is_dropped_at_the_deadline_fails_504() -> None:
    r = Router(LONG)
    reg(r, W1, name="w1")
    submit(r, req(target=ALL, timeout_ms=50), 0)
    (d,) = of(r.handle(Unregister(peer=W1), 50), Deliver)
    assert d.reply.status == 504 and d.final


# --- a request cancelled at a worker that cannot be told -----------------------------


def test_a_request_cancelled_at_a_dcp_worker_keeps_its_slot_until_the_worker_answers() -> None:
    # DCP, SADA and DBP have no cancel: the worker works on. Freeing its slot sent it the
    # next request while it was still busy with the cancelled one.
    dw = worker("d1", "dcp")
    r = Router(LONG)
    reg(r, dw)
    rid, _ = submit(r, req(), 0)
    out = r.handle(Cancel(peer=CA, job_id=str(rid)), 10)
    assert not of(out, Abort)  # its edge keeps the request: the answer comes back to us
    (d,) = of(out, Deliver)
    assert d.reply.status == STATUS_CANCELLED
    assert slots(r, dw) == (1, 1)
    nxt, out = submit(r, req(), 20)
    assert dispatched(out) == []  # not while it works on the cancelled one
    out = answer(r, dw, rid, 30)  # its late answer: dropped, the slot free again
    assert not of(out, Deliver) and dispatched(out) == [(dw, nxt)]
    assert r.stats()["late_replies"] == 1 and r.stats()["late"] == 0


def test_a_request_cancelled_at_an_nfp_worker_frees_the_slot_with_an_abort() -> None:
    nw = worker("n1", "nfp")  # the NFP edge sends the worker a DELETE
    r = Router(LONG)
    reg(r, nw)
    rid, _ = submit(r, req(), 0)
    nxt, _ = submit(r, req(), 1)
    out = r.handle(Cancel(peer=CA, job_id=str(rid)), 10)
    assert [a.request.id for a in of(out, Abort)] == [rid]
    assert dispatched(out) == [(nw, nxt)]


def test_a_retry_handed_on_does_not_go_back_under_its_id_to_the_worker_late_with_it() -> None:
    # W1 (services a and b) times out on a request; its retry at W2 is handed on to b,
    # under the same id. Given to W1, W1's late answer to a would be taken for b's.
    d1, d2 = worker("d1", "dcp"), worker("d2", "dcp")
    r = Router(LONG)
    reg(r, d1, 0, svc("a"), svc("b"))
    reg(r, d2, 0, svc("a"))
    rid, out = submit(r, req("a", timeout_ms=50), 0)
    assert dispatched(out) == [(d1, rid)]
    assert dispatched(r.tick(50)) == [(d2, rid)]
    r.handle(Heartbeat(peer=d1), 55)  # a slot beside the late request: it could take b
    out = r.handle(Forward(worker=d2, id=rid, service=svc("b"), body=(b"y",)), 60)
    assert dispatched(out) == []  # b waits for d1 to be done with a
    out = r.handle(Reply(id=rid, status=200, body=(b"answer to a",), worker=d1), 70)
    assert not of(out, Deliver) and dispatched(out) == [(d1, rid)]  # dropped; now b goes there
    assert r.stats()["late_replies"] == 1
    out = r.handle(Reply(id=rid, status=200, body=(b"answer to b",), worker=d1), 80)
    (d,) = of(out, Deliver)
    assert d.reply.body == (b"answer to b",) and d.request.service.name == "b"
    assert slots(r, d1) == (0, 0)


def test_a_handed_on_retry_waiting_in_the_queue_is_not_given_to_the_late_worker_on_its_next_slot() -> None:
    # As above, but d1's free slot comes after the hand-on: the waiting request is
    # skipped in the queue (as a retry avoiding d1 is), not given to d1 under its id.
    d1, d2 = worker("d1", "dcp"), worker("d2", "dcp")
    r = Router(LONG)
    reg(r, d1, 0, svc("a"), svc("b"))
    reg(r, d2, 0, svc("a"))
    rid, _ = submit(r, req("a", timeout_ms=50), 0)
    r.tick(50)  # late at d1, retried at d2
    r.handle(Forward(worker=d2, id=rid, service=svc("b"), body=(b"y",)), 60)
    other, _ = submit(r, req("b"), 62)  # queued behind it
    out = r.handle(Heartbeat(peer=d1), 65)  # a slot beside the late request
    assert dispatched(out) == [(d1, other)]  # the next one in line it may take
    out = r.handle(Reply(id=rid, status=200, body=(b"answer to a",), worker=d1), 70)
    assert not of(out, Deliver) and dispatched(out) == []  # dropped; d1 still busy with `other`
    out = answer(r, d1, other, 80)
    assert dispatched(out) == [(d1, rid)]  # now the handed-on request goes there


def test_a_late_worker_that_leaves_stops_being_avoided_by_the_request_handed_on() -> None:
    d1, d2 = worker("d1", "dcp"), worker("d2", "dcp")
    r = Router(LONG)
    reg(r, d1, 0, svc("a"), svc("b"))
    reg(r, d2, 0, svc("a"))
    rid, _ = submit(r, req("a", timeout_ms=50), 0)
    r.tick(50)
    r.handle(Forward(worker=d2, id=rid, service=svc("b"), body=(b"y",)), 60)
    r.handle(Unregister(peer=d1), 70)  # gone with the late request
    out = reg(r, d1, 80, svc("a"), svc("b"))  # back, under the same peer: it forgot it
    assert dispatched(out) == [(d1, rid)]
