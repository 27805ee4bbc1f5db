"""Service names the specs allow but the gateway's other peers cannot take as they are
(found by tests/gateway/test_fuzz.py): none at all, and DCP names that are not UTF-8."""

from __future__ import annotations

import json

import pytest

from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import BROKER, CLIENT, WORKER, Disconnect, Open, Post, Ready, Response

from .conftest import Running, nothing, recv, until
from .dbp_helpers import info
from .nfp_helpers import mmi_call

pytestmark = pytest.mark.timeout(30)

ODD = b"svc-\xc7\xff"  # DCP: "a string of any number of bytes"


def dcp_worker(gw: Running, service: bytes) -> object:
    worker = gw.dealer("dcp")
    worker.send_multipart(dcp.encode(Registration(service=service)))
    assert dcp.decode(recv(worker)) == Registration(service=service)
    until(lambda: gw.gateway.router.workers())
    return worker


def test_a_dcp_service_name_that_is_not_utf8_is_listed_to_json_peers(gw: Running) -> None:
    worker = dcp_worker(gw, ODD)
    status, rows = mmi_call(gw.dealer("nfp"), "mmi.service.broker", "show_workers")
    assert status == 200 and [r["service"] for r in rows] == ["svc-??"]  # type: ignore[union-attr]
    assert list(info(gw, "*")) == ["svc-??"]
    # ...and still served under its own bytes.
    client = gw.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=ODD, metadata=(b"k",), data=(b"x",))))
    request = dcp.decode(recv(worker))  # type: ignore[arg-type]
    assert isinstance(request, DcpRequest) and request.service == ODD
    worker.send_multipart(dcp.encode(DcpReply(client=request.client, metadata=(b"k",), data=(b"y",))))  # type: ignore[attr-defined]
    assert dcp.decode(recv(client)) == DcpReply(metadata=(b"k",), data=(b"y",))
    assert gw.gateway.internal_errors == 0


def test_dcp_request_or_registration_without_a_service_is_bad_input(gw: Running) -> None:
    peer = gw.dealer("dcp")
    peer.send_multipart(dcp.encode(Registration(service=b"")))
    peer.send_multipart(dcp.encode(DcpRequest(service=b"", metadata=(), data=(b"x",))))
    until(lambda: gw.gateway.edges["dcp"].counters["empty_service"] == 2)
    assert nothing(peer)  # not confirmed: not registered; DCP has no error reply
    assert gw.gateway.router.workers() == [] and gw.gateway.internal_errors == 0


def test_nfp_post_without_a_service_is_400_and_ready_without_one_is_disconnected(gw: Running) -> None:
    client = gw.dealer("nfp")
    client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="", target="any", uuid="e" * 32, body=(b"x",)), "spec")
    )
    refused = nfp.decode(recv(client), "spec")
    assert isinstance(refused, Response) and refused.status == 400
    assert json.loads(refused.body[0])["errors"] == ["the service name is empty"]
    worker = gw.dealer("nfp")
    worker.send_multipart(nfp.encode(Open(header=WORKER), "spec"))
    assert nfp.decode(recv(worker), "spec") == Open(header=BROKER)
    worker.send_multipart(nfp.encode(Ready(header=WORKER, service=""), "spec"))
    assert isinstance(nfp.decode(recv(worker), "spec"), Disconnect)
    assert gw.gateway.router.workers() == [] and gw.gateway.internal_errors == 0
