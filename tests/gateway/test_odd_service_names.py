"""Service names the specs allow but the gateway's other peers cannot take as they are
(found by tests/gateway/test_fuzz.py): none at all, and DCP names that are not UTF-8.

Every codec decodes an empty service name (docs/library.md); the core names every
service, so each edge refuses one with its protocol's answer: NFP 400 or DISCONNECT,
SADA REP 400, DBP as a service it does not know, MemoDB and DCP by dropping it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nfgate.codecs import dbp, dcp, nfp
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import BROKER, CLIENT, WORKER, Disconnect, Open, Post, Ready, Response
from nfgate.codecs.sada.messages import Intr, Rep, Req

from .conftest import Running, nothing, recv, until
from .dbp_helpers import get as dbp_get
from .dbp_helpers import info
from .dbp_helpers import send as dbp_send
from .nfp_helpers import mmi_call
from .test_sada_edges import dcp_worker as sada_dcp_worker
from .test_sada_edges import get as sada_get
from .test_sada_edges import send as sada_send
from .test_sada_edges import served_channel

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


def test_sada_req_without_a_service_is_400_and_intr_leaves_a_nameless_one_out(gw: Running) -> None:
    server = gw.dealer("sada")
    sada_send(server, Intr(services=(("", "1"), ("named", ""))))
    until(lambda: gw.gateway.router.workers())
    (worker,) = gw.gateway.router.workers()
    assert [s.name for s in worker.services] == ["named"]
    client = gw.dealer("sada")
    sada_send(client, Req(request_id="r-1", service="", category="c", action="a"))
    assert sada_get(client) == Rep(request_id="r-1", status=400, payload=b"")
    assert gw.gateway.edges["sada"].counters["empty_service"] == 2
    assert gw.gateway.internal_errors == 0


def test_sada_server_edge_answers_a_req_without_a_service_400(tmp_path: Path) -> None:
    with served_channel(tmp_path) as (gw, channel):
        sada_dcp_worker(gw, b"upper")
        channel.intr_with("upper")
        channel.send(Req(request_id="rid-empty", service="", category="c", action="a"))
        assert channel.get() == Rep(request_id="rid-empty", status=400, payload=b"")
        assert gw.gateway.edges["sada-server"].counters["empty_service"] == 1
        assert gw.gateway.internal_errors == 0


def test_dbp_heartbeat_without_a_service_is_an_unknown_services(gw: Running) -> None:
    peer = gw.dealer("dbp")
    dbp_send(peer, dbp.Heartbeat(time=1732251000, service=""))
    # "This mechanism allows service nodes to re-register": told DISCONNECT, as any
    # heartbeat from a service the catalog does not know.
    assert isinstance(dbp_get(peer), dbp.Disconnect)
    assert gw.gateway.internal_errors == 0
