"""The routing core, driven with explicit ``now_ms`` values (no sockets, no clock): ANY,
capacity, ALL and NAMED targets."""

from __future__ import annotations

import attrs
import pytest

from nfgate.model import ALL, Heartbeat, Reply, Request, Target, TargetKind, Unregister
from nfgate.routing import Router
from nfgate.routing_types import Accepted, Deliver, Dispatch, Output

from .routing_helpers import CA, CB, CFG, W1, W2, W3, answer, dispatched, of, reg, req, submit, svc, worker

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


def test_max_in_flight_per_worker_caps_every_workers_capacity() -> None:
    # docs/broker.md [routing]: the most requests one worker holds at once, whatever its
    # protocol. It capped only the slots DCP PINGs grant: a SADA server with
    # server_capacity = 8 was given 8 with the cap at 2.
    r = Router(attrs.evolve(CFG, max_in_flight_per_worker=2))
    server = worker("s", "sada")
    reg(r, server, 0, capacity=8)
    ids = [submit(r, req())[0] for _ in range(4)]
    assert r.stats()["in_flight"] == 2 and r.stats()["queued"] == 2
    assert dispatched(answer(r, server, ids[0])) == [(server, ids[2])]
    reg(r, server, 0, capacity=8)  # registered again (a repeated READY): still capped
    assert r.stats()["in_flight"] == 2 and r.stats()["queued"] == 1
    dw = worker("d", "dcp")  # and PINGs grant slots up to it, as before
    reg(r, dw, 0, svc("calc"))
    calls = [submit(r, req("calc"))[0] for _ in range(4)]
    assert dispatched(r.handle(Heartbeat(peer=dw), 10)) == [(dw, calls[1])]
    assert dispatched(r.handle(Heartbeat(peer=dw), 20)) == []


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


def test_a_reply_with_a_reason_is_the_gateways_error_and_frees_the_worker() -> None:
    # An edge that could not send a dispatched request (a body a NorFab worker cannot
    # take) answers it with Reply.reason: delivered as the core's errors are, not as
    # the worker's answer, and the worker, which never saw it, takes the next at once.
    r = Router(CFG)
    reg(r, W1)
    rid, _ = submit(r, req())
    queued, _ = submit(r, req())
    out = r.handle(Reply(id=rid, status=400, body=(b"why",), worker=W1, reason="why"), 1)
    (d,) = of(out, Deliver)
    assert (d.reply.status, d.reason, d.final) == (400, "why", True)
    assert dispatched(out) == [(W1, queued)]
    assert r.stats()["failed"] == 1 and r.stats()["replied"] == 0
    (d,) = of(answer(r, W1, queued, 2), Deliver)
    assert d.reason == ""  # the worker's own answer


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


def test_all_part_of_a_named_worker_lost_waits_for_that_name() -> None:
    # The client was told which workers serve its ALL job (NorFab's 202): a worker that
    # comes back under its name (killed and restarted, MMI restart) still serves its part.
    r = Router(CFG)
    reg(r, W1, 0, name="w1")
    reg(r, W2, 0, name="w2")
    rid, _ = submit(r, req(target=ALL))
    assert r.handle(Unregister(peer=W1), 1) == []  # nothing failed, nothing sent
    w1b = worker("w1-reconnected")
    out = reg(r, w1b, 2, name="w1")
    assert dispatched(out) == [(w1b, rid)] and of(out, Dispatch)[0].attempt == 2
    assert not of(answer(r, w1b, rid, 3), Deliver)[0].final
    assert of(answer(r, W2, rid, 4), Deliver)[0].final


def test_all_part_in_a_named_workers_backlog_waits_for_that_name() -> None:
    r = Router(CFG)
    reg(r, W1, 0, name="w1")
    busy, _ = submit(r, req())  # W1 busy: the ALL part waits in its backlog
    rid, out = submit(r, req(target=ALL))
    assert not of(out, Dispatch)
    out = r.handle(Unregister(peer=W1), 1)
    assert not of(out, Deliver)
    w1b = worker("w1-reconnected")
    assert dispatched(reg(r, w1b, 2, name="w1")) == [(w1b, busy)]  # the ANY retry first
    assert dispatched(answer(r, w1b, busy, 3)) == [(w1b, rid)]


@pytest.mark.parametrize("busy", [False, True], ids=["in-flight", "in-backlog"])
def test_all_part_of_a_worker_whose_name_dies_with_it_fails_at_once(busy: bool) -> None:
    # A name libzmq or the edge made up (DCP or MemoDB worker with no identity of its
    # own) never comes back: waiting for it would only turn a 500 now into a 408 later.
    r = Router(CFG)
    reg(r, W1, 0, name="dcp-0012345678", name_lasts=False)
    reg(r, W2, 0, name="w2")
    if busy:
        submit(r, req())  # W1 takes it; the ALL part waits in W1's backlog
    rid, _ = submit(r, req(target=ALL))
    out = r.handle(Unregister(peer=W1), 1)
    (d,) = (d for d in of(out, Deliver) if d.reply.id == rid)
    assert d.reply.status == 500 and d.remaining == 1 and d.reply.worker_name == "dcp-0012345678"
    assert of(answer(r, W2, rid, 2), Deliver)[0].final
    assert not of(r.tick(1 + CFG.queue_expiry_ms), Deliver)  # nothing left waiting for the name


def test_all_part_waiting_for_its_lost_worker_expires_under_its_name() -> None:
    r = Router(CFG)
    reg(r, W1, 0, name="w1")
    reg(r, W2, 0, name="w2")
    rid, _ = submit(r, req(target=ALL))
    r.handle(Unregister(peer=W2), 1)
    assert of(answer(r, W1, rid, 2), Deliver)[0].remaining == 1
    (d,) = of(r.tick(1 + CFG.queue_expiry_ms), Deliver)
    # The failure names the worker whose part it was: NorFab's client keys results by it.
    assert d.reply.status == 408 and d.final and d.reply.worker_name == "w2"


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
    n1, n2, n3 = worker("n1", "nfp"), worker("n2", "nfp"), worker("n3", "nfp")
    reg(r, n1, 0, name="w1")
    reg(r, n2, 0, svc("rev"), name="w2")
    target = Target(kind=TargetKind.NAMED, names=("w1", "w2"), any_service=True)
    rid, out = submit(r, req("all", target=target))
    assert dispatched(out) == [(n1, rid), (n2, rid)]
    assert of(out, Accepted)[0].workers == (n1, n2)
    assert not of(answer(r, n1, rid), Deliver)[0].final
    assert of(answer(r, n2, rid), Deliver)[0].final
    # A named worker that is gone is waited for under its name, whatever it will offer.
    rid, out = submit(r, req("all", target=Target(kind=TargetKind.NAMED, names=("w3",), any_service=True)))
    assert not of(out, Dispatch)
    assert dispatched(reg(r, n3, 5, svc("other"), name="w3")) == [(n3, rid)]


def test_named_any_service_takes_workers_of_another_protocol_only_for_their_service() -> None:
    # A NorFab client's names cross services among NFP workers only: a DCP or SADA worker
    # named for a job of another service would take it as a request for its own service.
    r = Router(CFG)
    dcp, sada, nfp = worker("d", "dcp"), worker("s", "sada"), worker("n", "nfp")
    reg(r, dcp, 0, svc("multi"), name="dcp-d")
    reg(r, sada, 0, svc("multi"), name="sada-s")
    reg(r, nfp, 0, svc("multi"), name="nfp-n")
    names = ("dcp-d", "sada-s", "nfp-n")
    rid, out = submit(r, req("other", target=Target(kind=TargetKind.NAMED, names=names, any_service=True)))
    assert dispatched(out) == [(nfp, rid)]  # the others wait for a worker of theirs offering "other"
    assert of(out, Accepted)[0].workers == (nfp,)
    answer(r, nfp, rid, 1)
    for w in (dcp, sada, nfp):
        r.handle(Heartbeat(peer=w), 900)
    waited = of(r.tick(1_000), Deliver)  # and expire, as for a name nobody registered
    assert [(d.reply.worker_name, d.reply.status) for d in waited] == [("dcp-d", 408), ("sada-s", 408)]
    assert waited[-1].final
    # For their own service they are named workers like any other.
    rid, out = submit(
        r, req("multi", target=Target(kind=TargetKind.NAMED, names=names, any_service=True)), 1_000
    )
    assert sorted(w.address for w, _ in dispatched(out)) == [b"d", b"n", b"s"]
    # A worker registering again with other services, holding such a job, is a new worker.
    assert r.stats()["workers_registered"] == 3
    reg(r, sada, 1_001, svc("changed"), name="sada-s")
    assert r.stats()["workers_registered"] == 4


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
