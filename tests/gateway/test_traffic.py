"""Messages counted on the wire: every edge's traffic, NorFab's get_stats "messaging",
and the Prometheus counters (nfgate/edges Edge.traffic, Gateway.traffic)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import BROKER, CLIENT, WORKER, Event, Keepalive, Open, Post, Ready, Response
from nfgate.edges import Traffic
from nfgate.metrics import render

from .conftest import Running, finish, recv, start_gateway, until

pytestmark = pytest.mark.timeout(30)

# No heartbeat within a test: every message counted is one the test sent or expects.
QUIET = "[edges.nfp]\nheartbeat_ms = 60000\n[edges.dcp]\nheartbeat_ms = 60000\n"


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Running]:
    # NFP and DCP only: the DBP edge's beacon is a datagram sent every second.
    running = start_gateway(tmp_path, QUIET, disabled=["memodb", "dbp", "sada", "sada-server"])
    yield running
    finish(running)


def nfp_send(sock: zmq.Socket[bytes], message: object, dialect: str = "spec") -> None:
    sock.send_multipart(nfp.encode(message, dialect))  # type: ignore[arg-type]


def stats_call(client: zmq.Socket[bytes]) -> dict[str, object]:
    body = json.dumps({"task": "get_stats", "kwargs": {}, "args": []}).encode()
    nfp_send(
        client, Post(header=CLIENT, service="mmi.service.broker", target="any", uuid="s" * 32, body=(body,))
    )
    reply = nfp.decode(recv(client), "spec")
    assert isinstance(reply, Response) and reply.status == 200
    value = json.loads(reply.body[0])
    assert isinstance(value, dict)
    return value


def test_each_edge_counts_the_messages_it_moved_and_refused(gw: Running) -> None:
    # An NFP spec worker serves a DCP client. On the NFP edge: OPEN and its answer, READY
    # and the KEEPALIVE that greets a registered worker, the dispatched POST and the
    # worker's RESPONSE. On the DCP edge: the REQUEST and its REPLY.
    worker = gw.dealer("nfp", b"tw1")
    nfp_send(worker, Open(header=WORKER))
    assert nfp.decode(recv(worker), "spec") == Open(header=BROKER)
    nfp_send(worker, Ready(service="echo"))
    until(lambda: gw.gateway.router.workers())
    client = gw.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=b"echo", metadata=(b"m1",), data=(b"hi",))))
    assert isinstance(nfp.decode(recv(worker), "spec"), Keepalive)
    job = nfp.decode(recv(worker), "spec")
    assert isinstance(job, Post)
    nfp_send(worker, Response(header=WORKER, service="echo", uuid=job.uuid, status=200, body=job.body))
    assert dcp.decode(recv(client)) == DcpReply(metadata=(b"m1",), data=(b"hi",))
    # Two messages no NFP decoder takes: read, refused, unanswered.
    junk = gw.dealer("nfp")
    junk.send_multipart([b"x"])
    junk.send_multipart([b"", b"XXXX01", b"\x04"])
    until(lambda: gw.gateway.edges["nfp"].traffic().receive_failures == 2)
    edges = gw.gateway.edges
    assert edges["nfp"].traffic() == Traffic(received=5, sent=3, receive_failures=2, send_failures=0)
    assert edges["dcp"].traffic() == Traffic(received=1, sent=1)
    assert gw.gateway.traffic() == Traffic(received=6, sent=4, receive_failures=2)
    # NorFab's get_stats "messaging": the whole gateway's, counted when the request for
    # it is read (its own POST in, its answer not yet out).
    messaging = stats_call(gw.dealer("nfp"))["messaging"]
    assert messaging == {
        "sent": 4,
        "received": 7,
        "events_received": 0,
        "send_failures": 0,
        "receive_failures": 2,
    }


def test_get_stats_counts_the_norfab_events_workers_sent(gw: Running) -> None:
    worker = gw.dealer("nfp", b"nfw")
    nfp_send(worker, Ready(header=WORKER, service="nf"), "norfab")
    until(lambda: gw.gateway.router.workers())
    client = gw.dealer("nfp", b"c1")
    body = b'{"task":"t","kwargs":{},"args":[],"timeout":5}'
    nfp_send(client, Post(header=CLIENT, service="nf", target="any", uuid="j" * 32, body=(body,)), "norfab")
    job = nfp.decode(recv(worker), "norfab")
    if isinstance(job, Keepalive):  # a registered worker's greeting
        job = nfp.decode(recv(worker), "norfab")
    assert isinstance(job, Post)
    for step in (b"started", b"progress"):
        event = b'{"worker":"nfw","uuid":"%s","event_type":"%s"}' % (job.uuid.encode(), step)
        nfp_send(
            worker, Event(header=WORKER, client=b"c1", uuid=job.uuid, status=200, body=(event,)), "norfab"
        )
    until(lambda: gw.gateway.edges["nfp"].counters["events_received"] == 2)
    assert stats_call(gw.dealer("nfp"))["messaging"]["events_received"] == 2  # type: ignore[index]


def test_the_metrics_page_has_each_edges_messages_by_direction(gw: Running) -> None:
    client = gw.dealer("dcp")
    client.send_multipart([b"not dcp"])
    until(lambda: gw.gateway.edges["dcp"].traffic().receive_failures == 1)
    page = render(gw.gateway.stats(), {"dcp": "dcp", "nfp": "nfp"}, 1.0).splitlines()
    assert 'nfgate_edge_messages_total{edge="dcp",protocol="dcp",direction="in"} 1' in page
    assert 'nfgate_edge_message_failures_total{edge="dcp",protocol="dcp",direction="in"} 1' in page
    assert 'nfgate_edge_messages_total{edge="nfp",protocol="nfp",direction="out"} 0' in page
    assert "# TYPE nfgate_edge_messages_total counter" in page
