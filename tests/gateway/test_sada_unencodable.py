"""What SADA's wire cannot carry: a status outside HTTP's 100..599 (NFP workers may answer
any three digits), a service name that is not printable text (DCP names are bytes). A
SADA client is answered 500, never left to time out; a name is left out of an INTR; a
request the channel cannot send a server fails as the gateway's error
(docs/protocols/sada.md, docs/translation.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import dcp, sada
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.nfp.messages import WORKER, Post, Response
from nfgate.codecs.sada.messages import Intr, Rep, Req
from nfgate.edges import EdgeSettings
from nfgate.edges.sada import SadaChannelEdge
from nfgate.model import Peer, Register, Reply, Request, ServiceRef, Status
from nfgate.routing_types import Dispatch

from . import nfp_helpers
from .conftest import RECV_MS, Running, nothing, recv, until
from .test_sada_edges import served_channel

pytestmark = pytest.mark.timeout(60)


def sada_get(sock: zmq.Socket[bytes]) -> object:
    frames = recv(sock)
    return sada.decode(frames, sada.detect(frames))


def nfp_answers(worker: zmq.Socket[bytes], status: int) -> None:
    """Take one POST and answer it with ``status``."""
    post = nfp_helpers.get(worker)
    assert isinstance(post, Post)
    reply = Response(header=WORKER, service=post.service, uuid=post.uuid, status=status, body=(b"odd",))
    nfp_helpers.send(worker, reply)


def test_a_status_sada_cannot_carry_reaches_a_channel_client_as_500(gw: Running) -> None:
    worker = nfp_helpers.spec_worker(gw, "odd", b"odd-worker")
    client = gw.dealer("sada")
    request = Req(request_id="c-1", service="odd", category="c", action="a", payload=b"p")
    client.send_multipart(sada.encode(request, "spec"))
    nfp_answers(worker, 999)  # three digits: NFP's codec takes it, SADA's REP cannot
    rep = sada_get(client)
    assert isinstance(rep, Rep) and rep.request_id == "c-1" and rep.status == 500
    assert gw.gateway.edges["nfp"].stats()["bad_status"] == 1  # the worker's fault, counted
    # The edge serves on: the next request gets the worker's own status.
    client.send_multipart(sada.encode(Req(request_id="c-2", service="odd", category="c", action="a"), "spec"))
    nfp_answers(worker, 404)
    rep = sada_get(client)
    assert isinstance(rep, Rep) and rep.request_id == "c-2" and rep.status == 404


def test_a_status_sada_cannot_carry_reaches_a_channel_as_500(tmp_path: Path) -> None:
    with served_channel(tmp_path) as (gw, channel):
        worker = nfp_helpers.spec_worker(gw, "odd", b"odd-worker")
        channel.intr_with("odd")
        channel.send(Req(request_id="ch-1", service="odd", category="c", action="a", payload=b"p"))
        nfp_answers(worker, 999)
        rep = channel.get()
        assert isinstance(rep, Rep) and rep.request_id == "ch-1" and rep.status == 500


def test_a_service_name_sada_cannot_carry_is_left_out_of_the_intr(tmp_path: Path) -> None:
    with served_channel(tmp_path) as (gw, channel):
        odd = gw.dealer("dcp")
        odd.send_multipart(dcp.encode(Registration(service=b"bad\x01name")))
        recv(odd)
        plain = gw.dealer("dcp")
        plain.send_multipart(dcp.encode(Registration(service=b"plain")))
        recv(plain)
        until(lambda: len(gw.gateway.router.workers()) == 2)
        intr = channel.intr_with("plain")
        assert intr.services == (("plain", ""),)


@pytest.fixture
def channel_edge() -> Iterator[tuple[SadaChannelEdge, zmq.Socket[bytes]]]:
    """The channel edge driven by hand (no gateway thread) and one server of ``svc``."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    settings = EdgeSettings(
        name="sada",
        protocol="sada",
        url="tcp://127.0.0.1:*",
        context=context,
        options={"heartbeat": (60_000, 3)},
    )
    unit = SadaChannelEdge(settings)
    server = context.socket(zmq.DEALER)
    server.setsockopt(zmq.LINGER, 0)
    server.setsockopt(zmq.RCVTIMEO, RECV_MS)
    server.connect(unit.endpoint)
    try:
        yield unit, server
    finally:
        server.close(0)
        unit.close()
        context.term()


def test_a_request_the_channel_cannot_send_a_server_fails_as_the_gateways_error(
    channel_edge: tuple[SadaChannelEdge, zmq.Socket[bytes]],
) -> None:
    unit, server = channel_edge
    server.send_multipart(sada.encode(Intr(services=(("svc", ""),)), "spec"))
    commands: list[object] = []
    for _ in range(100):
        commands += unit.receive(0, 10)
        if commands:
            break
        unit.transport.socket.poll(50)
    [registered] = commands
    assert isinstance(registered, Register)
    client = Peer(edge="dcp", protocol="dcp", address=b"c")
    # A name no SADA frame may carry (a DCP service is bytes): the server never sees it.
    request = Request(id=3, service=ServiceRef(name="svc\x01"), body=(b"x",), reply_to=client)
    [failed] = unit.emit(Dispatch(worker=registered.peer, request=request), 0)
    assert isinstance(failed, Reply) and failed.id == 3 and failed.status == Status.ERROR
    assert failed.reason.startswith("cannot be sent to a SADA server")  # the gateway's, not the server's
    assert unit.stats()["unencodable"] == 1 and unit.stats()["servers"] == 1  # still registered
    assert nothing(server)
    # The server still gets what it can carry.
    ok = Request(id=4, service=ServiceRef(name="svc"), body=(b"y",), reply_to=client)
    assert unit.emit(Dispatch(worker=registered.peer, request=ok), 0) == []
    sent = sada_get(server)
    assert isinstance(sent, Req) and sent.payload == b"y"
