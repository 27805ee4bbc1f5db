"""Requests crossing protocols: NFP clients served by DCP workers and the other way
round (docs/translation.md)."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Event, Get, Keepalive, Post, Ready, Response

from .conftest import Running, finish, nothing, recv, start_gateway, until

pytestmark = pytest.mark.timeout(30)


def nfp_get(sock: object, dialect: str = "spec") -> object:
    for _ in range(20):
        message = nfp.decode(recv(sock), dialect)  # type: ignore[arg-type]
        if not isinstance(message, Keepalive):
            return message
    pytest.fail("only keepalives")


def dcp_worker(gw: Running, service: bytes) -> object:
    sock = gw.dealer("dcp")
    sock.send_multipart(dcp.encode(Registration(service=service)))
    assert dcp.decode(recv(sock)) == Registration(service=service)
    return sock


@pytest.mark.parametrize("dialect", ["spec", "norfab"])
def test_nfp_client_served_by_dcp_worker(gw: Running, dialect: str) -> None:
    worker = dcp_worker(gw, b"convert")
    client = gw.dealer("nfp", b"nfc")
    job = uuidlib.uuid4().hex
    body = b'{"task":"convert","kwargs":{"x":1},"args":[]}'
    client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="convert", target="any", uuid=job, body=(body,)), dialect)
    )
    accepted = nfp_get(client, dialect)
    assert accepted.status == 202  # type: ignore[attr-defined]
    [name] = json.loads(accepted.body[0])["workers"]  # type: ignore[attr-defined]
    assert name.startswith("dcp-")
    request = dcp.decode(recv(worker))
    assert isinstance(request, DcpRequest) and request.data == (body,)
    assert request.client and request.client.startswith(b"nfgate:")  # a stand-in for a foreign client
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b'{"y":2}',)))
    )
    reply = nfp_get(client, dialect)
    assert isinstance(reply, Response) and reply.status == 200 and reply.uuid == job
    if dialect == "norfab":  # wrapped as NorFab's {worker: Result}
        result = json.loads(reply.body[0])[name]
        assert result["result"] == {"y": 2} and result["failed"] is False
    else:  # passed through untouched
        assert reply.body == (b'{"y":2}',)


def test_dcp_client_served_by_spec_nfp_worker(gw: Running) -> None:
    worker = gw.dealer("nfp", b"nw")
    worker.send_multipart(nfp.encode(Ready(service="upper")))
    until(lambda: gw.gateway.router.workers())
    client = gw.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=b"upper", metadata=(b"req-1",), data=(b"abc",))))
    post = nfp_get(worker)
    assert isinstance(post, Post) and post.body == (b"abc",) and post.service == "upper"
    worker.send_multipart(
        nfp.encode(Response(header=WORKER, service="upper", uuid=post.uuid, status=200, body=(b"ABC",)))
    )
    assert dcp.decode(recv(client)) == DcpReply(client=None, metadata=(b"req-1",), data=(b"ABC",))


def test_dcp_client_served_by_norfab_worker_via_get(gw: Running) -> None:
    worker = gw.dealer("nfp", b"nfw")
    worker.send_multipart(nfp.encode(Ready(service="nf"), "norfab"))
    until(lambda: gw.gateway.router.workers())
    client = gw.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=b"nf", metadata=(b"m",), data=(b'{"task":"t"}',))))
    post = nfp_get(worker, "norfab")
    assert isinstance(post, Post) and post.client
    worker.send_multipart(
        nfp.encode(
            Response(header=WORKER, client=post.client, uuid=post.uuid, status=201, body=(b"{}",)), "norfab"
        )
    )
    ready = b'{"worker":"nfw","event_type":"result_ready"}'
    worker.send_multipart(
        nfp.encode(
            Event(header=WORKER, client=post.client, uuid=post.uuid, status=200, body=(ready,)), "norfab"
        )
    )
    fetch = nfp_get(worker, "norfab")
    assert isinstance(fetch, Get) and fetch.uuid == post.uuid
    assert nothing(client, 100)  # 201 and EVENT are not for DCP clients
    result = b'{"nfw":{"result":"done","failed":false}}'
    worker.send_multipart(
        nfp.encode(
            Response(header=WORKER, client=post.client, uuid=post.uuid, status=200, body=(result,)), "norfab"
        )
    )
    assert dcp.decode(recv(client)) == DcpReply(client=None, metadata=(b"m",), data=(result,))


def test_queue_expiry_gives_nfp_408_and_dcp_nothing(tmp_path: object) -> None:
    gw = start_gateway(tmp_path, "[routing]\nqueue_expiry_ms = 200\n")  # type: ignore[arg-type]
    try:
        client = gw.dealer("nfp")
        job = uuidlib.uuid4().hex
        client.send_multipart(
            nfp.encode(Post(header=CLIENT, service="none", target="any", uuid=job, body=(b"x",)))
        )
        assert nfp_get(client).status == 202  # type: ignore[attr-defined]
        expired = nfp_get(client)
        assert expired.status == 408 and expired.uuid == job  # type: ignore[attr-defined]
        dcp_client = gw.dealer("dcp")
        dcp_client.send_multipart(dcp.encode(DcpRequest(service=b"none", metadata=(b"m",), data=(b"x",))))
        assert nothing(dcp_client, 600)  # DCP has no error reply: the client times out and retries
        until(lambda: gw.gateway.edges["dcp"].stats().get("client_errors_unsent") == 1)
    finally:
        finish(gw)


DEEP = b"[" * 100_000 + b"]" * 100_000  # valid JSON the json module cannot parse (RecursionError)


def test_json_nested_too_deeply_is_bad_input_not_a_lost_job(gw: Running) -> None:
    """A worker's result, a POST's target and a broker-service body nested deeper than
    the json module goes: the result is relayed (as text), the others answered 400;
    no internal error, so no job is left without its answer."""
    worker = dcp_worker(gw, b"deep")
    client = gw.dealer("nfp", b"nfc")
    job = uuidlib.uuid4().hex
    client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="deep", target="any", uuid=job, body=(b"{}",)), "norfab")
    )
    [name] = json.loads(nfp_get(client, "norfab").body[0])["workers"]  # type: ignore[attr-defined]
    request = dcp.decode(recv(worker))
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(DEEP,)))
    )  # type: ignore[attr-defined]
    reply = nfp_get(client, "norfab")
    assert isinstance(reply, Response) and (reply.uuid, reply.status) == (job, 200)
    assert json.loads(reply.body[0])[name]["result"] == DEEP.decode()
    for service, target, body in [
        ("deep", DEEP.decode(), b"{}"),  # the target frame
        ("mmi.service.broker", "any", DEEP),
        ("sid.service.broker", "any", DEEP),
        ("fss.service.broker", "any", DEEP),
    ]:
        other = uuidlib.uuid4().hex
        client.send_multipart(
            nfp.encode(
                Post(header=CLIENT, service=service, target=target, uuid=other, body=(body,)), "norfab"
            )
        )
        refused = nfp_get(client, "norfab")
        assert isinstance(refused, Response) and (refused.uuid, refused.status) == (other, 400), service
    assert gw.gateway.internal_errors == 0
