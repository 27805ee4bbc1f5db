"""Requests the gateway cannot serve as asked, end to end: a body a worker's dialect
cannot carry (the gateway's own failure, never the worker's answer), and a worker that
times out (it keeps the request and its slot; the retry goes elsewhere or fails 504)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import dbp, dcp, sada
from nfgate.codecs.dcp.messages import Ping, Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.memodb.messages import Job
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Post, Response
from nfgate.codecs.sada.messages import Rep, Req

from . import dbp_helpers, memodb_helpers, nfp_helpers
from .conftest import Running, nothing, recv, running_on, until

pytestmark = pytest.mark.timeout(60)

# Workers stay registered for the whole test without answering PINGs; SADA clients give
# up on a worker after 200 ms; a request with no worker at all fails after 1.5 s.
TIMED = """
[routing]
queue_expiry_ms = 1500
[edges.nfp]
heartbeat_ms = 2000
[edges.dcp]
heartbeat_ms = 2000
[edges.sada]
heartbeat_ms = 2000
request_timeout_ms = 200
"""


def sada_call(gw: Running, rid: str, service: str) -> zmq.Socket[bytes]:
    client = gw.dealer("sada")
    request = Req(request_id=rid, service=service, version="", category="c", action="a", payload=b"p")
    client.send_multipart(sada.encode(request))
    return client


def sada_rep(client: zmq.Socket[bytes]) -> Rep:
    rep = sada.decode(recv(client))
    assert isinstance(rep, Rep)
    return rep


# ------------------------------------------------------- a body the worker cannot carry


def nfp_final(sock: zmq.Socket[bytes], dialect: str = "spec") -> Response:
    """The RESPONSE after the 202 acknowledgement."""
    for _ in range(5):
        message = nfp_helpers.get(sock, dialect)
        assert isinstance(message, Response), message
        if message.status != 202:
            return message
    pytest.fail("no final RESPONSE")


def dagbox_worker(gw: Running, service: bytes) -> zmq.Socket[bytes]:
    sock = gw.dealer("dcp")
    sock.send_multipart(dcp.encode(Registration(service=service), "dagbox"))
    assert dcp.decode(recv(sock), "dagbox") == Registration(service=service)
    return sock


def test_a_body_a_dagbox_worker_cannot_carry_fails_as_the_gateways_error(tmp_path: Path) -> None:
    body = (b"", b"x")  # DagBox ends data at the first empty part
    with running_on(tmp_path, TIMED) as gw:
        worker = dagbox_worker(gw, b"dgbx")
        # DCP: no error message, so no reply at all -- not an empty REPLY that reads as success.
        client = gw.dealer("dcp")
        client.send_multipart(dcp.encode(DcpRequest(service=b"dgbx", metadata=(b"m1",), data=body)))
        assert nothing(client, 500)
        stats = gw.gateway.edges["dcp"].stats()
        assert stats["unencodable"] == 1 and stats["client_errors_unsent"] == 1
        # NFP spec: 500, naming why.
        nfp_client = gw.dealer("nfp")
        nfp_helpers.send(nfp_client, Post(header=CLIENT, service="dgbx", target="any", uuid="u1", body=body))
        failed = nfp_final(nfp_client)
        assert failed.status == 500 and b"dagbox" in failed.body[0]
        # NorFab: NorFab's failed result, not labelled as the worker's error.
        norfab = gw.dealer("nfp")
        nfp_helpers.send(
            norfab, Post(header=CLIENT, service="dgbx", target="any", uuid="u2", body=body), "norfab"
        )
        result = nfp_final(norfab, "norfab")
        [entry] = json.loads(result.body[0]).values()
        assert entry["failed"] is True
        assert entry["errors"][0].startswith("nfgate: 500 cannot be sent to a dagbox-dialect DCP worker")
        assert nothing(worker, 200)  # the worker never got any of them
        core = gw.gateway.router.stats()
        assert core["unsendable"] == 3 and core["replied"] == 0 and core["in_flight"] == 0


def test_a_body_a_dagbox_worker_cannot_carry_goes_to_a_worker_that_can(tmp_path: Path) -> None:
    body = (b"", b"x")
    with running_on(tmp_path, TIMED) as gw:
        dagbox = dagbox_worker(gw, b"mixed")
        spec = gw.dealer("dcp")
        spec.send_multipart(dcp.encode(Registration(service=b"mixed")))
        assert dcp.decode(recv(spec)) == Registration(service=b"mixed")
        until(lambda: len(gw.gateway.router.workers()) == 2)
        client = gw.dealer("dcp")
        for n in range(2):  # whichever of the two the core tries first
            metadata = (b"m%d" % n,)
            client.send_multipart(dcp.encode(DcpRequest(service=b"mixed", metadata=metadata, data=body)))
            request = dcp.decode(recv(spec))
            assert isinstance(request, DcpRequest) and request.data == body
            reply = DcpReply(client=request.client, metadata=request.metadata, data=request.data)
            spec.send_multipart(dcp.encode(reply))
            assert dcp.decode(recv(client)) == DcpReply(client=None, metadata=metadata, data=body)
        assert nothing(dagbox, 200)
        dagbox.send_multipart(dcp.encode(Ping(), "dagbox"))  # still registered, still usable
        client.send_multipart(dcp.encode(DcpRequest(service=b"mixed", metadata=(b"k",), data=(b"y",))))
        got = [s for s in (dagbox, spec) if s.poll(3000)]
        assert got, "the plain request reached no worker"


# ------------------------------------------------------------------ a worker times out


def test_a_hung_nfp_worker_gets_one_request_and_keeps_its_slot_until_it_answers(tmp_path: Path) -> None:
    with running_on(tmp_path, TIMED) as gw:
        worker = nfp_helpers.spec_worker(gw, "hung", b"hung-1")
        client = sada_call(gw, "t1", "hung")
        post = nfp_helpers.get(worker)
        assert isinstance(post, Post)
        rep = sada_rep(client)  # its timeout, then its retry's: nobody else to try
        assert (rep.request_id, rep.status) == ("t1", 504)
        stats = gw.gateway.router.stats()
        assert (stats["timeouts"], stats["expired"]) == (1, 0)  # the worker's timeout, not the queue expiry
        assert nfp_helpers.quiet(worker, 100)  # "at most one request a time": not the retry
        [info] = gw.gateway.router.workers()
        assert (info.in_flight, info.late) == (1, 1)  # the core: one slot, held by a late request
        # The MMI tells a worker stuck on a late request from a busy one, in the terms
        # of show_broker and the metrics (in_flight: requests a client still waits for).
        ask = gw.dealer("nfp")
        status, rows = nfp_helpers.mmi_call(ask, "mmi.service.broker", "show_workers", details=True)
        assert status == 200 and [(r["in flight"], r["late"]) for r in rows] == [(0, 1)]  # type: ignore[attr-defined,index]
        status, rows = nfp_helpers.mmi_call(ask, "mmi.service.broker", "show_services")
        assert [(r["service"], r["in flight"], r["late"]) for r in rows] == [("hung", 0, 1)]  # type: ignore[attr-defined,index]
        # Another request does not reach it either ("at most one request a time"), and
        # does not wait on it forever: no worker that may answer, so the queue expiry.
        other = sada_call(gw, "t2", "hung")
        assert sada_rep(other).status == 503
        assert nfp_helpers.quiet(worker, 300)  # one POST in all
        # Its late answer is dropped and frees it: the next request is its.
        late = Response(header=WORKER, service="hung", uuid=post.uuid, status=200, body=(b"late",))
        nfp_helpers.send(worker, late)
        until(lambda: gw.gateway.router.stats()["late"] == 0)
        assert gw.gateway.router.stats()["late_replies"] == 1
        third = sada_call(gw, "t3", "hung")
        post = nfp_helpers.get(worker)
        assert isinstance(post, Post)
        nfp_helpers.send(
            worker, Response(header=WORKER, service="hung", uuid=post.uuid, status=200, body=(b"ok",))
        )
        assert sada_rep(third) == Rep(request_id="t3", status=200, payload=b"ok")
        assert nothing(client, 100) and nothing(other, 100)  # the late answer went nowhere


def test_a_hung_dbp_service_gets_one_request(tmp_path: Path) -> None:
    with running_on(tmp_path, TIMED) as gw:
        service = dbp_helpers.register(gw, "slow", function="slowfn")
        until(lambda: any(w.name == "dbp-slow" for w in gw.gateway.router.workers()))
        peers = memodb_helpers.Peers(gw)
        try:
            client = peers.req(recv_ms=2500)
            memodb_helpers.send(client, Job(service="slowfn", timeout_ms=200, payload=b"q"))
            request = dbp_helpers.get(service)
            assert isinstance(request, dbp.Request)
            assert nothing(service, 1000)  # strictly synchronous: no second REQUEST
            until(lambda: gw.gateway.router.stats()["failed"] == 1)
            assert memodb_helpers.edge_stats(gw)["client_errors_unsent"] == 1
            [info] = gw.gateway.router.workers()
            assert (info.in_flight, info.late) == (1, 1)
        finally:
            peers.close()


def test_a_sada_client_gets_504_when_a_memodb_worker_misses_its_job_timeout(tmp_path: Path) -> None:
    # The queue expiry is a minute here: the 504 must not wait for it.
    toml = TIMED.replace("queue_expiry_ms = 1500", "queue_expiry_ms = 60000")
    with running_on(tmp_path, toml) as gw:
        peers = memodb_helpers.Peers(gw)
        try:
            worker = peers.req()
            memodb_helpers.ready(gw, worker, "memo")
            client = sada_call(gw, "m1", "memo")
            job = memodb_helpers.next_job(worker)
            assert job.timeout_ms == 200  # the SADA request's own timeout
            started = time.monotonic()
            rep = sada_rep(client)  # and the worker never answers
            assert (rep.request_id, rep.status) == ("m1", 504)
            assert time.monotonic() - started < 2
            # The spec: past its JOB's timeout the worker "has disconnected".
            assert memodb_helpers.edge_stats(gw)["job_timeouts"] == 1
            assert not gw.gateway.router.workers()
            stats = gw.gateway.router.stats()
            assert stats["timeouts"] == 1 and stats["late"] == 0 and stats["jobs"] == 0
        finally:
            peers.close()
