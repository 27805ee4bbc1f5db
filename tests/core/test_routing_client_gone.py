"""ClientGone: every request of a client that can never be answered again is cancelled
(a DCP or SADA client whose libzmq-made identity died with its connection)."""

from __future__ import annotations

import attrs

from nfgate.model import ALL, ClientGone, Peer, Unregister
from nfgate.routing import Router
from nfgate.routing_types import STATUS_CANCELLED, Abort, Deliver

from .routing_helpers import CFG, answer, dispatched, of, reg, req, submit, worker

LONG = attrs.evolve(CFG, queue_expiry_ms=10_000, liveness={"memodb": (60_000, 3), "dcp": (60_000, 3)})
GONE = Peer(edge="dcp", protocol="dcp", address=b"\x00\x01\x02\x03\x04")
LIVE = Peer(edge="dcp", protocol="dcp", address=b"\x00\x01\x02\x03\x05")
DW = worker("d1", "dcp")


def test_queued_requests_leave_and_the_one_at_a_dcp_worker_keeps_its_slot_until_answered() -> None:
    r = Router(LONG)
    reg(r, DW)
    first, out = submit(r, req(client=GONE), 0)
    assert dispatched(out) == [(DW, first)]
    queued = [submit(r, req(client=GONE), 1)[0] for _ in range(4)]
    mine = submit(r, req(client=LIVE), 2)[0]
    assert r.stats()["queued"] == 5

    out = r.handle(ClientGone(peer=GONE), 3)
    assert not of(out, Abort) and dispatched(out) == []  # DCP cannot be told: the worker works on
    ended = of(out, Deliver)
    assert sorted(d.reply.id for d in ended) == sorted([first, *queued])
    assert all(d.reply.status == STATUS_CANCELLED and d.reason == "client gone" and d.final for d in ended)
    stats = r.stats()
    assert stats["queued"] == 1 and stats["jobs"] == 1 and stats["late"] == 1
    assert stats["cancelled"] == 5

    out = answer(r, DW, first, 4)  # its late answer: dropped, the slot free for the live client
    assert not of(out, Deliver) and dispatched(out) == [(DW, mine)]
    answer(r, DW, mine, 5)
    stats = r.stats()
    assert (stats["jobs"], stats["queued"], stats["in_flight"], stats["late"]) == (0, 0, 0, 0)
    assert stats["late_replies"] == 1


def test_the_request_at_an_nfp_worker_is_aborted_and_its_slot_given_to_the_next() -> None:
    nw = worker("n1", "nfp")
    r = Router(LONG)
    reg(r, nw)
    first, _ = submit(r, req(client=GONE), 0)
    mine, _ = submit(r, req(client=LIVE), 1)
    out = r.handle(ClientGone(peer=GONE), 2)
    assert [a.request.id for a in of(out, Abort)] == [first]
    assert dispatched(out) == [(nw, mine)]


def test_other_clients_requests_stay_and_a_client_with_none_changes_nothing() -> None:
    r = Router(LONG)
    mine = [submit(r, req(client=LIVE), 0)[0] for _ in range(3)]
    assert r.handle(ClientGone(peer=GONE), 1) == []
    assert r.stats()["cancelled"] == 0 and r.stats()["queued"] == 3
    assert dispatched(reg(r, DW, 2)) == [(DW, mine[0])]  # still served, in order
    assert dispatched(answer(r, DW, mine[0], 3)) == [(DW, mine[1])]
    assert dispatched(answer(r, DW, mine[1], 4)) == [(DW, mine[2])]


def test_a_retry_waiting_at_the_head_of_its_queue_is_found() -> None:
    # A worker lost puts its request at the front (the queue's retries), not in the
    # client's own FIFO.
    r = Router(LONG)
    reg(r, DW)
    rid, _ = submit(r, req(client=GONE), 0)
    r.handle(Unregister(peer=DW), 1)
    assert r.stats()["queued"] == 1
    (d,) = of(r.handle(ClientGone(peer=GONE), 2), Deliver)
    assert d.reply.id == rid and d.reply.status == STATUS_CANCELLED
    assert r.stats()["queued"] == 0 and r.stats()["jobs"] == 0


def test_every_part_of_an_all_request_ends_queued_or_in_flight() -> None:
    w1, w2 = worker("w1"), worker("w2")  # MemoDB: an Abort frees the slot
    r = Router(LONG)
    reg(r, w1, name="w1")
    reg(r, w2, name="w2")
    busy, _ = submit(r, req(client=LIVE), 0)  # w1 or w2 busy: one ALL part waits in its backlog
    rid, out = submit(r, req(client=GONE, target=ALL), 1)
    assert len(dispatched(out)) == 1
    out = r.handle(ClientGone(peer=GONE), 2)
    ended = of(out, Deliver)
    assert [d.reply.id for d in ended] == [rid, rid] and ended[-1].final
    assert len(of(out, Abort)) == 1
    assert r.stats()["jobs"] == 1 and r.stats()["queued"] == 0  # the live client's only
    assert busy in {i for _, i in dispatched(out)} or r.stats()["in_flight"] == 1
