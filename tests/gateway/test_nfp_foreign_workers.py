"""The NFP edge between NFP clients and workers of other protocols, and between clients
of other protocols and NorFab workers (docs/translation.md "Status mapping", "Interim
replies", "NFP targets across protocols"; docs/protocols/nfp.md):

- a NorFab client gets NorFab's statuses from a worker that is not a NorFab worker (any
  2xx is 200, any other final status NorFab's failure form) and none of its interim
  replies; an NFP spec client gets the worker's status as it was sent;
- a body a NorFab worker cannot take is not sent to it: the client gets its protocol's
  "bad request", and the worker stays free;
- a NorFab client's named target reaches a worker of another protocol only for a
  service that worker offers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from nfgate.codecs import dcp, sada
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Event, Get, Post, Response
from nfgate.codecs.sada.messages import Intr, Ping, Pong, Rep, Req

from .conftest import Running, finish, recv, start_gateway, until
from .nfp_helpers import get, norfab_worker, post, quiet, send, spec_worker

pytestmark = pytest.mark.timeout(60)

# SADA servers answer PINGs only while a test reads their socket: 10 s before one is due.
CONFIG = """
[routing]
queue_expiry_ms = 400

[edges.sada]
heartbeat_ms = 2000
liveness = 5

[edges.nfp]
norfab_worker_capacity = 1
"""
GOOD = b'{"task":"echo","kwargs":{"a":1},"args":[],"timeout":5}'
REASON = "a NorFab worker takes a JSON object {task, kwargs, args}"


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Running]:
    running = start_gateway(tmp_path, CONFIG)
    try:
        yield running
    finally:
        finish(running)


def sada_server(gw: Running, *services: str) -> tuple[zmq.Socket[bytes], str]:
    """A SADA server introduced to the channel edge; (socket, its worker name)."""

    # SADA workers only: a worker of another protocol whose confirmation the test saw
    # may reach the core's list in the same loop iteration as this one.
    def sada_names() -> set[str]:
        return {w.name for w in gw.gateway.router.workers() if w.peer.protocol == "sada"}

    before = sada_names()
    sock = gw.dealer("sada")
    sock.send_multipart(sada.encode(Intr(services=tuple((s, "") for s in services))))
    until(lambda: len(sada_names()) > len(before))
    [name] = sada_names() - before
    return sock, name


def sada_request(sock: zmq.Socket[bytes]) -> Req:
    for _ in range(50):
        message = sada.decode(recv(sock))
        if isinstance(message, Ping):
            sock.send_multipart(sada.encode(Pong(proto=message.proto)))
            continue
        assert isinstance(message, Req), message
        return message
    pytest.fail("only PINGs")


def sada_reply(sock: zmq.Socket[bytes], request: Req, status: int, payload: bytes) -> None:
    sock.send_multipart(sada.encode(Rep(request_id=request.request_id, status=status, payload=payload)))


def dcp_worker(gw: Running, service: bytes, identity: bytes) -> zmq.Socket[bytes]:
    sock = gw.dealer("dcp", identity)
    sock.send_multipart(dcp.encode(Registration(service=service)))
    assert dcp.decode(recv(sock)) == Registration(service=service)
    return sock


def responses(client: zmq.Socket[bytes], dialect: str, count: int) -> list[Response]:
    got = [get(client, dialect) for _ in range(count)]
    assert all(isinstance(r, Response) for r in got), got
    return got  # type: ignore[return-value]


def entry(response: Response, name: str) -> dict[str, Any]:
    value = json.loads(response.body[0])
    assert set(value) == {name}, value
    result: dict[str, Any] = value[name]
    return result


# ------------------------------------------------------------ statuses of other protocols


@pytest.mark.parametrize(
    ("status", "payload", "failed"),
    [
        (201, b'{"made":1}', False),
        (204, b"", False),
        (302, b"elsewhere", True),
        (404, b'{"error":"no such"}', True),
    ],
)
def test_a_norfab_client_gets_norfabs_statuses_from_a_sada_server(
    gw: Running, status: int, payload: bytes, failed: bool
) -> None:
    server, name = sada_server(gw, "odd")
    client = gw.dealer("nfp", b"nfc")
    job = post(client, "odd", GOOD, dialect="norfab")
    sada_reply(server, sada_request(server), status, payload)
    accepted, result = responses(client, "norfab", 2)
    assert accepted.status == 202
    # NorFab's client takes a result from a 200 only: a 201 is its worker's "created"
    # (read for a "worker" key), a 204 or 302 is ignored and the job waits out its timeout.
    assert result.status == 200 and result.uuid == job
    value = entry(result, name)
    assert value["failed"] is failed
    assert value["errors"] == ([f"nfgate: {status} worker error"] if failed else [])
    assert value["result"] == (json.loads(payload) if payload.startswith(b"{") else payload.decode())
    # A GET answers from the store in the same form.
    send(client, Get(header=CLIENT, service="odd", target="all", uuid=job, body=(b"{}",)), "norfab")
    [again] = responses(client, "norfab", 1)
    assert again.status == 200 and entry(again, name) == value


@pytest.mark.parametrize("status", [201, 204, 302, 404])
def test_a_spec_client_gets_the_sada_servers_status_as_sent(gw: Running, status: int) -> None:
    server, _ = sada_server(gw, "odd")
    client = gw.dealer("nfp")
    job = post(client, "odd", b"x")
    sada_reply(server, sada_request(server), status, b"as sent")
    accepted, result = responses(client, "spec", 2)
    assert accepted.status == 202
    assert (result.status, result.uuid, result.body) == (status, job, (b"as sent",))


@pytest.mark.parametrize("dialect", ["norfab", "spec"])
def test_a_sada_servers_interim_reply_is_not_relayed_to_nfp_clients(gw: Running, dialect: str) -> None:
    server, name = sada_server(gw, "slow")
    client = gw.dealer("nfp", b"nfc")
    post(client, "slow", GOOD, dialect=dialect)
    request = sada_request(server)
    assert get(client, dialect).status == 202  # type: ignore[attr-defined]
    sada_reply(server, request, 102, b"[1]")  # NorFab's client read it as its own 102 and died
    assert quiet(client)
    sada_reply(server, request, 200, b'{"ok":1}')
    [result] = responses(client, dialect, 1)
    assert result.status == 200
    if dialect == "norfab":
        assert entry(result, name)["result"] == {"ok": 1}
    else:
        assert result.body == (b'{"ok":1}',)


def test_a_spec_workers_interim_is_not_relayed_to_a_norfab_client_but_a_norfab_workers_is(
    gw: Running,
) -> None:
    spec = spec_worker(gw, "mixed", b"sw")
    client = gw.dealer("nfp", b"nfc")
    job = post(client, "mixed", GOOD, dialect="norfab")
    job_post = get(spec)
    assert isinstance(job_post, Post)
    assert get(client, "norfab").status == 202  # type: ignore[attr-defined]
    for status in (201, 300):  # progress to the gateway; not NorFab's form
        send(spec, Response(header=WORKER, service="mixed", uuid=job_post.uuid, status=status, body=(b"[]",)))
    assert quiet(client)
    send(spec, Response(header=WORKER, service="mixed", uuid=job_post.uuid, status=204, body=(b"done",)))
    [result] = responses(client, "norfab", 1)
    assert result.status == 200 and result.uuid == job
    assert entry(result, "sw")["result"] == "done"
    # A NorFab worker's own 201 and EVENT are NorFab's: relayed as they come.
    nf = norfab_worker(gw, "nf", b"nfw")
    post(client, "nf", GOOD, dialect="norfab")
    assert get(client, "norfab").status == 202  # type: ignore[attr-defined]
    nf_post = get(nf, "norfab")
    assert isinstance(nf_post, Post) and nf_post.client
    created = b'{"worker":"nfw","uuid":"u","status":"ACCEPTED","service":"nf"}'
    send(
        nf,
        Response(header=WORKER, client=nf_post.client, uuid=nf_post.uuid, status=201, body=(created,)),
        "norfab",
    )
    started = b'{"worker":"nfw","event_type":"progress","message":"starting"}'
    send(
        nf,
        Event(header=WORKER, client=nf_post.client, uuid=nf_post.uuid, status=200, body=(started,)),
        "norfab",
    )
    assert get(client, "norfab") == Response(
        header=b"NFPB01", service="nf", uuid=nf_post.uuid, status=201, body=(created,)
    )
    event = get(client, "norfab")
    assert isinstance(event, Event) and event.body == (started,)


# ------------------------------------------------------------ bodies a NorFab worker cannot take


@pytest.mark.parametrize(
    "body",
    [(b"\xff\x00binary",), (), (b"[1,2]",), (b'{"task":["echo"]}',), (b'{"task":"echo","timeout":"soon"}',)],
)
def test_a_body_a_norfab_worker_cannot_take_is_not_sent_and_the_worker_stays_free(
    gw: Running, body: tuple[bytes, ...]
) -> None:
    worker = norfab_worker(gw, "nf", b"nfw")  # one job at a time (norfab_worker_capacity = 1)
    client = gw.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=b"nf", metadata=(b"bad",), data=body)))
    until(lambda: gw.gateway.edges["nfp"].stats().get("bodies_refused") == 1)
    assert gw.gateway.edges["dcp"].stats().get("client_errors_unsent") == 1  # DCP has no error reply
    assert gw.gateway.router.stats()["failed"] == 1
    # The worker got nothing and its one slot is free: the next request goes to it at once.
    client.send_multipart(dcp.encode(DcpRequest(service=b"nf", metadata=(b"good",), data=(GOOD,))))
    job = get(worker, "norfab")
    assert isinstance(job, Post) and job.body == (GOOD,)
    assert client.poll(0) == 0  # nothing came for the refused request


def test_bad_request_answers_for_nfp_and_sada_clients(gw: Running) -> None:
    worker = norfab_worker(gw, "nf", b"nfw")
    spec = gw.dealer("nfp")
    job = post(spec, "nf", b"plain text")
    accepted, refused = responses(spec, "spec", 2)
    assert accepted.status == 202 and refused.status == 400 and refused.uuid == job
    [error] = json.loads(refused.body[0])["errors"]
    assert error.startswith(REASON)
    norfab = gw.dealer("nfp", b"nfc")
    job = post(norfab, "nf", b"[]", dialect="norfab")
    accepted, refused = responses(norfab, "norfab", 2)
    assert refused.status == 200 and refused.uuid == job  # NorFab's failure form
    value = entry(refused, "nfw")
    assert value["failed"] is True
    assert value["errors"] == [f"nfgate: 400 {REASON}, not a JSON array"]
    sada_client = gw.dealer("sada")
    sada_client.send_multipart(
        sada.encode(
            Req(request_id="r-1", service="nf", version="", category="c", action="a", payload=b"\x00")
        )
    )
    rep = sada.decode(recv(sada_client))
    assert isinstance(rep, Rep) and (rep.request_id, rep.status) == ("r-1", 400)
    assert rep.payload.decode().startswith(REASON)
    assert quiet(worker)
    assert gw.gateway.edges["nfp"].stats()["bodies_refused"] == 3


# ------------------------------------------------------------ named targets


def test_a_norfab_clients_names_reach_other_protocols_only_for_their_own_service(gw: Running) -> None:
    dcp_sock = dcp_worker(gw, b"multi", b"d1")
    sada_sock, sada_name = sada_server(gw, "multi")
    spec = spec_worker(gw, "multi", b"sw")
    dcp_name = "dcp-" + b"d1".hex()
    client = gw.dealer("nfp", b"nfc")
    names = json.dumps([dcp_name, sada_name, "sw"])
    # NorFab's broker looks names up among all its workers: the NFP worker of "multi"
    # takes a job for "other"; the DCP and SADA workers would take it as a request for
    # "multi", so they wait for a worker of theirs offering "other" and expire.
    job = post(client, "other", GOOD, target=names, dialect="norfab")
    spec_post = get(spec)
    assert isinstance(spec_post, Post) and spec_post.service == "multi"  # its own service
    send(spec, Response(header=WORKER, service="multi", uuid=spec_post.uuid, status=200, body=(b"ok",)))
    got = responses(client, "norfab", 4)
    assert got[0].status == 202
    by_name = {
        next(iter(json.loads(r.body[0]))): entry(r, next(iter(json.loads(r.body[0])))) for r in got[1:]
    }
    assert by_name["sw"]["failed"] is False
    for name in (dcp_name, sada_name):
        assert by_name[name]["failed"] is True and by_name[name]["errors"][0].startswith("nfgate: 408")
    assert all(r.uuid == job for r in got)
    assert dcp_sock.poll(0) == 0
    # For the service they offer, they are named workers like any other.
    post(client, "multi", GOOD, target=json.dumps([dcp_name, sada_name]), dialect="norfab")
    request = dcp.decode(recv(dcp_sock))
    assert isinstance(request, DcpRequest) and request.service == b"multi"
    dcp_sock.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"d",)))
    )
    sada_req = sada_request(sada_sock)
    assert sada_req.service == "multi"
    sada_reply(sada_sock, sada_req, 200, b"s")
    got = responses(client, "norfab", 3)
    assert got[0].status == 202 and [r.status for r in got[1:]] == [200, 200]
