"""The MemoDB edge (specs/memodb.md) against raw pynng req0 peers on a gateway with a fast
heartbeat, and MemoDB requests crossing to DCP and NFP peers."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import cbor2
import pynng
import pytest

from nfgate.codecs import dcp, memodb, nfp
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.memodb.messages import Disconnect, Heartbeat, Job, Ready, Result
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Keepalive, Post, Response
from nfgate.codecs.nfp.messages import Ready as NfpReady
from nfgate.transports.nng import connect_req

from .conftest import Running, beats, finish, recv, start_gateway, until
from .memodb_helpers import FAST, Peers, _echo_worker, edge_stats, get, next_job, ready, send

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fast(tmp_path: Path) -> Iterator[tuple[Running, Peers]]:
    gw = start_gateway(tmp_path, FAST)
    peers = Peers(gw)
    try:
        yield gw, peers
    finally:
        peers.close()
        finish(gw)


# ------------------------------------------------------------------ MemoDB <-> MemoDB


def test_client_job_served_by_worker_result_on_the_same_context(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker, client = peers.req(), peers.req()
    ready(gw, worker, "echo")
    send(client, Job(service="echo", timeout_ms=5000, payload=b"hello"))
    job = next_job(worker)
    assert len(job.id) == 4  # the broker assigns an opaque ID
    assert (job.service, job.timeout_ms, job.payload) == ("echo", 5000, b"hello")
    send(worker, Result(id=job.id, payload=b"HELLO"))
    assert get(client) == Result(id=b"", payload=b"HELLO")
    # the worker's RESULT request is held in turn and answered with the next JOB
    send(client, Job(service="echo", timeout_ms=5000, payload=b"again"))
    second = next_job(worker)
    assert second.id == job.id and second.payload == b"again"
    send(worker, Result(id=job.id, payload=b"AGAIN"))
    assert get(client) == Result(payload=b"AGAIN")
    # Counted on the wire: every request read is answered, or held (the worker's last
    # RESULT waits for its next JOB); heartbeats included on both sides.
    edge = gw.gateway.edges["memodb"]
    rep = edge.transport  # type: ignore[attr-defined]
    until(lambda: edge.traffic().received == edge.traffic().sent + rep.held + rep.dropped)
    assert edge.traffic().received >= 5 and edge.traffic().receive_failures == 0


def test_idle_worker_long_poll_answered_with_heartbeat(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker, client = peers.req(), peers.req()
    ready(gw, worker, "echo")
    started = time.monotonic()
    beat = get(worker)
    assert isinstance(beat, Heartbeat) and len(beat.id) == 4
    assert time.monotonic() - started >= 0.2  # held for the interval, not answered at once
    for _ in range(4):  # past the core's liveness (3 x 0.3 s): HEARTBEATs keep the worker
        send(worker, Heartbeat(id=beat.id))
        assert get(worker) == Heartbeat(id=beat.id)
    assert len(gw.gateway.router.workers()) == 1
    until(lambda: beats(gw, "memodb") == (5, 4))  # HEARTBEATs answered / received
    send(worker, Heartbeat(id=beat.id))
    send(client, Job(service="echo", timeout_ms=1000, payload=b"x"))
    job = next_job(worker)
    assert job.id == beat.id


def test_unknown_worker_id_gets_disconnect(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    stranger = peers.req()
    for message in (
        Heartbeat(id=b"\x00\x00\x00\x07"),
        Result(id=b"\x00\x00\x00\x07", payload=b"late"),
        Result(id=b"abc", disconnecting=True),
    ):
        send(stranger, message)
        assert get(stranger) == Disconnect(id=message.id)
    assert edge_stats(gw)["unknown_workers"] == 3


def test_worker_exceeding_job_timeout_is_gone_and_job_goes_to_another(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    slow, client = peers.req(), peers.req()
    ready(gw, slow, "work")
    send(client, Job(service="work", timeout_ms=400, payload=b"task"))
    first = next_job(slow)
    assert first.payload == b"task"
    other = peers.req()
    ready(gw, other, "work")
    second = next_job(other)  # after 400 ms the job is tried on the other worker
    assert second.payload == b"task" and second.id != first.id
    send(other, Result(id=second.id, payload=b"done"))
    assert get(client) == Result(payload=b"done")
    send(slow, Result(id=first.id, payload=b"too late"))
    assert get(slow) == Disconnect(id=first.id)  # treated as gone
    assert edge_stats(gw)["job_timeouts"] >= 1
    assert [w.name for w in gw.gateway.router.workers()] == [f"memodb-{second.id.hex()}"]


def test_result_with_disconnecting_flag(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker, client = peers.req(), peers.req()
    ready(gw, worker, "echo")
    send(client, Job(service="echo", timeout_ms=5000, payload=b"last"))
    job = next_job(worker)
    send(worker, Result(id=job.id, disconnecting=True, payload=b"bye"))
    assert get(worker) == Disconnect(id=job.id)
    assert get(client) == Result(payload=b"bye")
    until(lambda: not gw.gateway.router.workers())


def test_worker_sending_disconnect_is_unregistered(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker = peers.req()
    ready(gw, worker, "echo")
    beat = get(worker)
    assert isinstance(beat, Heartbeat)
    send(worker, Disconnect(id=beat.id))
    assert get(worker) == Disconnect(id=beat.id)
    until(lambda: not gw.gateway.router.workers())


def test_multi_megabyte_bodies_both_ways(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker, client = peers.req(), peers.req()
    ready(gw, worker, "blob")
    body = bytes(range(256)) * (6 * 4096)  # 6 MiB
    send(client, Job(service="blob", timeout_ms=10_000, payload=body))
    job = next_job(worker)
    assert job.payload == body
    send(worker, Result(id=job.id, payload=body[::-1]))
    assert get(client) == Result(payload=body[::-1])


def test_200_concurrent_clients_served_by_workers_sharing_one_socket(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    shared = peers.req()
    stop = threading.Event()
    served: list[int] = []
    contexts = [shared.new_context() for _ in range(4)]
    threads = [
        threading.Thread(target=_echo_worker, args=(ctx, stop, served), daemon=True) for ctx in contexts
    ]
    for t in threads:
        t.start()
    until(lambda: len(gw.gateway.router.workers()) == 4)
    clients = [peers.req(recv_ms=20_000) for _ in range(200)]
    for i, sock in enumerate(clients):
        send(sock, Job(service="echo", timeout_ms=20_000, payload=b"%d" % i))
    for i, sock in enumerate(clients):
        assert get(sock) == Result(payload=b"%d" % i)
    assert len(served) == 200
    assert edge_stats(gw).get("refused", 0) == 0
    stop.set()
    for t in threads:
        t.join(timeout=5)
    for ctx in contexts:
        ctx.close()


def test_bcdb_style_worker_with_raw_pynng(fast: tuple[Running, Peers]) -> None:
    """A worker written like bcdb's: hand-made CBOR, services in canonical order, 3-element
    RESULT; everything it gets must pass the bcdb dialect's rules."""
    gw, peers = fast
    with pynng.Req0(recv_timeout=3000, send_timeout=3000) as raw:
        raw.dial(peers.url, block=True)
        services = sorted(["b", "ab", "abc"], key=lambda s: (len(s.encode()), s.encode()))
        raw.send(cbor2.dumps(["memo01", 1, b"", services], canonical=True))
        until(lambda: gw.gateway.router.workers())
        beat = memodb.decode([raw.recv()], "bcdb")
        assert isinstance(beat, Heartbeat) and len(beat.id) == 4
        raw.send(cbor2.dumps(["memo01", 4, beat.id]))
        client = peers.req()
        send(client, Job(service="ab", timeout_ms=5000, payload=b"p"), "bcdb")
        job = memodb.decode([raw.recv()], "bcdb")
        assert isinstance(job, Job) and job.id == beat.id and job.service == "ab"
        raw.send(cbor2.dumps(["memo01", 3, job.id]) + b"result")
        assert memodb.decode([client.recv()], "bcdb") == Result(payload=b"result")
        assert isinstance(memodb.decode([raw.recv()], "bcdb"), Heartbeat)


# ------------------------------------------------------------------ across protocols


def test_memodb_client_served_by_dcp_worker(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker = gw.dealer("dcp")
    worker.send_multipart(dcp.encode(Registration(service=b"convert")))
    assert dcp.decode(recv(worker)) == Registration(service=b"convert")
    client = peers.req()
    send(client, Job(service="convert", timeout_ms=5000, payload=b"\x00raw bytes"))
    request = dcp.decode(recv(worker))
    assert isinstance(request, DcpRequest) and request.data == (b"\x00raw bytes",)
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"converted",)))
    )
    assert get(client) == Result(payload=b"converted")


def test_an_empty_payload_crosses_to_and_from_a_dagbox_peer(fast: tuple[Running, Peers]) -> None:
    # MemoDB's empty payload is one empty part; DagBox reads data up to its first empty
    # part, so it gets (and gives) no data parts: the same empty body, both ways.
    gw, peers = fast
    worker = gw.dealer("dcp")
    worker.send_multipart(dcp.encode(Registration(service=b"dbx"), "dagbox"))
    assert dcp.decode(recv(worker), "dagbox") == Registration(service=b"dbx")
    client = peers.req()
    send(client, Job(service="dbx", timeout_ms=5000, payload=b""))
    request = dcp.decode(recv(worker), "dagbox")
    assert isinstance(request, DcpRequest) and request.data == ()
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"ok",)), "dagbox")
    )
    assert get(client) == Result(payload=b"ok")
    # A DagBox client served by a MemoDB worker whose result is empty.
    memo_worker = peers.req()
    ready(gw, memo_worker, "emp")
    dagbox_client = gw.dealer("dcp")
    dagbox_client.send_multipart(
        dcp.encode(DcpRequest(service=b"emp", client=None, metadata=(b"m1",), data=(b"x",)), "dagbox")
    )
    job = next_job(memo_worker)
    send(memo_worker, Result(id=job.id, payload=b""))
    reply = dcp.decode(recv(dagbox_client), "dagbox")
    assert isinstance(reply, DcpReply) and reply.metadata == (b"m1",) and reply.data == ()
    assert gw.gateway.edges["dcp"].stats()["unencodable"] == 0


def _nfp_get(sock: object) -> object:
    for _ in range(20):
        message = nfp.decode(recv(sock))  # type: ignore[arg-type]
        if not isinstance(message, Keepalive):
            return message
    pytest.fail("only keepalives")


def test_spec_nfp_client_served_by_memodb_worker(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker = peers.req()
    ready(gw, worker, "upper")
    client = gw.dealer("nfp", b"nfc")
    body = b'{"task":"upper","kwargs":{},"args":["abc"]}'
    client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="upper", target="any", uuid="j1", body=(body,)))
    )
    accepted = _nfp_get(client)
    assert accepted.status == 202  # type: ignore[attr-defined]
    job = next_job(worker)
    assert job.service == "upper" and job.payload == body
    assert job.timeout_ms == 300_000  # NFP has no per-request timeout: the edge's default
    send(worker, Result(id=job.id, payload=b'"ABC"'))
    reply = _nfp_get(client)
    assert isinstance(reply, Response) and reply.status == 200 and reply.uuid == "j1"
    assert reply.body == (b'"ABC"',)


def test_an_all_part_of_a_memodb_worker_whose_connection_closes_fails_at_once(
    fast: tuple[Running, Peers],
) -> None:
    # A MemoDB worker's name is its registration's id: one that comes back gets another,
    # so its part of an ALL job fails now (500), not after the queue expiry (408).
    gw, peers = fast
    workers = [connect_req(peers.url, recv_timeout_ms=3000) for _ in range(2)]
    peers.socks.append(workers[1])
    for worker in workers:
        ready(gw, worker, "echo")
    client = gw.dealer("nfp", b"nfc")
    client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="echo", target="all", uuid="j1", body=(b"x",)))
    )
    assert _nfp_get(client).status == 202  # type: ignore[attr-defined]
    jobs = [next_job(worker) for worker in workers]
    workers[0].close()
    failed = _nfp_get(client)
    assert isinstance(failed, Response) and failed.status == 500
    send(workers[1], Result(id=jobs[1].id, payload=b"y"))
    done = _nfp_get(client)
    assert isinstance(done, Response) and done.status == 200 and done.body == (b"y",)


def test_memodb_worker_serves_nfp_worker_registered_alongside(fast: tuple[Running, Peers]) -> None:
    """A MemoDB client's job goes to whichever worker of the service is free: here an NFP one."""
    gw, peers = fast
    worker = gw.dealer("nfp", b"nw")
    worker.send_multipart(nfp.encode(NfpReady(service="svc")))
    until(lambda: gw.gateway.router.workers())
    client = peers.req()
    send(client, Job(service="svc", timeout_ms=5000, payload=b"in"))
    post = _nfp_get(worker)
    assert isinstance(post, Post) and post.body == (b"in",)
    worker.send_multipart(
        nfp.encode(Response(header=WORKER, service="svc", uuid=post.uuid, status=200, body=(b"out",)))
    )
    assert get(client) == Result(payload=b"out")


def test_closed_connection_unregisters_its_workers(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    gone = connect_req(peers.url)
    contexts = [gone.new_context(), gone.new_context()]  # two workers on one socket
    for ctx in contexts:
        send(ctx, Ready(services=("echo",)))
    until(lambda: len(gw.gateway.router.workers()) == 2)
    for ctx in contexts:
        ctx.close()
    gone.close()
    until(lambda: not gw.gateway.router.workers())
    assert edge_stats(gw)["workers_gone"] == 2


def test_client_gone_cancels_its_job_and_the_worker_carries_on(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker = peers.req()
    ready(gw, worker, "slow")
    client = connect_req(peers.url)
    send(client, Job(service="slow", timeout_ms=5000, payload=b"abandoned"))
    job = next_job(worker)
    client.close()
    until(lambda: gw.gateway.router.stats()["cancelled"] == 1)
    send(worker, Result(id=job.id, payload=b"nobody wants this"))
    other = peers.req()
    send(other, Job(service="slow", timeout_ms=5000, payload=b"next"))
    assert next_job(worker).payload == b"next"  # the worker was kept and is free again
    assert edge_stats(gw)["clients_gone"] == 1


def test_job_for_a_worker_between_heartbeats_answers_its_next_heartbeat(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker, client = peers.req(), peers.req()
    ready(gw, worker, "echo")
    beat = get(worker)  # the broker answered: no request of the worker is held now
    assert isinstance(beat, Heartbeat)
    send(client, Job(service="echo", timeout_ms=5000, payload=b"waiting"))
    until(lambda: gw.gateway.router.stats()["dispatched"] == 1)
    send(worker, Heartbeat(id=beat.id))
    job = get(worker)  # at once, not after another interval
    assert isinstance(job, Job) and job.payload == b"waiting"


def test_silent_worker_is_dropped_and_later_told_to_disconnect(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    worker = peers.req()
    ready(gw, worker, "echo")
    beat = get(worker)
    assert isinstance(beat, Heartbeat)
    until(lambda: not gw.gateway.router.workers())  # 3 x 300 ms without an answer
    send(worker, Heartbeat(id=beat.id))
    assert get(worker) == Disconnect(id=beat.id)


def _random_message(rng: random.Random, ids: list[bytes]) -> bytes:
    """A valid message in a random state, a mutated one, or plain noise."""
    kind = rng.randrange(8)
    if kind == 0:
        return rng.randbytes(rng.randrange(40))
    message: object
    ident = rng.choice(ids)
    if kind == 1:
        message = Ready(services=rng.sample(["echo", "x", "", "ab", "b"], rng.randrange(4)))
    elif kind == 2:
        message = Job(id=ident, service=rng.choice(["echo", "none", ""]), timeout_ms=rng.randrange(2000))
    elif kind == 3:
        message = Result(id=ident, disconnecting=rng.choice([None, False, True]), payload=b"r")
    elif kind == 4:
        message = Heartbeat(id=ident)
    elif kind == 5:
        message = Disconnect(id=ident)
    else:
        data = bytearray(memodb.encode(Job(id=ident, service="echo", timeout_ms=5))[0])
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    return memodb.encode(message)[0]  # type: ignore[arg-type]


def test_random_messages_in_random_states_never_hurt_the_gateway(fast: tuple[Running, Peers]) -> None:
    gw, peers = fast
    rng = random.Random(20261123)
    known = peers.req()
    ready(gw, known, "echo")
    beat = get(known)
    assert isinstance(beat, Heartbeat)
    ids = [b"", beat.id, b"\x00\x00\x00\x01", b"abc"]
    sock = peers.req()
    contexts = []
    for _ in range(300):
        ctx = sock.new_context()
        ctx.send(_random_message(rng, ids))
        contexts.append(ctx)
    until(lambda: edge_stats(gw)["received"] >= 301, timeout=10)
    for ctx in contexts:
        ctx.close()
    worker, client = peers.req(), peers.req()  # a fresh pair still works
    ready(gw, worker, "fresh")
    send(client, Job(service="fresh", timeout_ms=5000, payload=b"ok?"))
    job = next_job(worker)
    send(worker, Result(id=job.id, payload=b"ok"))
    assert get(client) == Result(payload=b"ok")
    assert gw.gateway.internal_errors == 0
