"""Edge config keys have the effect docs/broker.md and docs/protocols/*.md give them,
checked on one edge built directly (no gateway loop: each step is driven by hand)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import sada
from nfgate.codecs.sada.messages import PROTO_ASCII, Intr, Rep, Req
from nfgate.codecs.sada.session import request_id
from nfgate.edges import EdgeSettings
from nfgate.model import Register

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


def _receive_until(edge: object, want: type, now: int) -> list[object]:
    """Read the edge until a command of type ``want`` comes (bounded)."""
    got: list[object] = []
    for _ in range(200):
        got += edge.receive(now, 100)  # type: ignore[attr-defined]
        if any(isinstance(c, want) for c in got):
            return got
        edge.sockets()[0].poll(50)  # type: ignore[attr-defined]
    pytest.fail(f"no {want.__name__} from the edge")


def test_sada_heartbeat_ms_0_sends_no_ping_even_while_servers_are_recalled(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path
) -> None:
    # docs/protocols/sada.md: heartbeat_ms = 0 means no PINGs (and no liveness). While
    # servers known before a restart are still asked back, the edge ticks every 200 ms;
    # every server's due time was its last message's, so each tick PINGed every server.
    from nfgate.edges.sada import SadaChannelEdge

    recall = tmp_path / "sada-sada-servers.json"
    ghost = {"identity": b"ghost:1".hex(), "proto": PROTO_ASCII.hex(), "dialect": "spec"}
    recall.write_text(json.dumps({"format": 1, "servers": [ghost]}))  # never reconnects
    settings = EdgeSettings(
        name="sada",
        protocol="sada",
        url="tcp://127.0.0.1:*",
        context=ctx,
        options={"heartbeat": (0, 3)},
    )
    edge = SadaChannelEdge(settings, recall=recall)
    server = ctx.socket(zmq.DEALER)
    server.setsockopt(zmq.LINGER, 0)
    try:
        server.connect(edge.endpoint)
        server.send_multipart(sada.encode(Intr(proto=PROTO_ASCII, services=(("echo", ""),))))
        _receive_until(edge, Register, 1000)
        for now in range(1000, 4000, 200):  # the recall's rounds
            deadline = edge.next_deadline()
            assert deadline is not None  # the recall keeps the edge ticking
            edge.tick(max(now, deadline))
        assert edge.stats()["pings_sent"] == 0
    finally:
        server.close(linger=0)
        edge.close()


SPEC_ID = "client-1/42"
PIRAN_ID = request_id(7, 1_700_000_000_000)  # what PIRAN's Darbaan makes: RQ-<millis>-...


@pytest.mark.parametrize(
    ("dialect", "rid", "status_form"),
    [
        ("auto", SPEC_ID, "spec"),  # told from the REQ's id
        ("auto", PIRAN_ID, "piran"),
        ("spec", PIRAN_ID, "spec"),  # forced: the id says nothing any more
        ("piran", SPEC_ID, "piran"),
    ],
)
def test_sada_channel_dialect_key_sets_the_rep_status_form(
    ctx: zmq.Context[zmq.Socket[bytes]], dialect: str, rid: str, status_form: str
) -> None:
    # docs/protocols/sada.md "Dialect per peer": the dialect changes only the REP status
    # the gateway writes, ASCII "400" or PIRAN's int32; a REQ with no service is answered
    # REP 400 by the edge itself.
    from nfgate.edges.sada import SadaChannelEdge

    settings = EdgeSettings(
        name="sada", protocol="sada", url="tcp://127.0.0.1:*", context=ctx, options={"dialect": dialect}
    )
    edge = SadaChannelEdge(settings)
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    try:
        client.connect(edge.endpoint)
        req = Req(proto=PROTO_ASCII, request_id=rid, service="", category="c", action="a", payload=b"")
        client.send_multipart(sada.encode(req))
        for _ in range(200):
            edge.receive(1000, 100)
            if client.poll(50):
                break
        frames = client.recv_multipart(zmq.NOBLOCK)
        assert sada.detect(frames) == status_form
        rep = sada.decode(frames, status_form)
        assert isinstance(rep, Rep) and rep.status == 400 and rep.request_id == rid
    finally:
        client.close(linger=0)
        edge.close()


@pytest.mark.parametrize(("dialect", "status_form"), [("auto", "spec"), ("piran", "piran")])
def test_sada_server_dialect_key_sets_the_rep_status_form(
    ctx: zmq.Context[zmq.Socket[bytes]], dialect: str, status_form: str
) -> None:
    # The same key on the sada-server edge: a channel's REQ with no service gets REP 400.
    from nfgate.edges.sada_server import SadaServerEdge

    channel = ctx.socket(zmq.ROUTER)
    channel.setsockopt(zmq.LINGER, 0)
    port = channel.bind_to_random_port("tcp://127.0.0.1")
    url = f"tcp://127.0.0.1:{port}"
    channel.setsockopt(zmq.RCVTIMEO, 5000)
    settings = EdgeSettings(
        name="sada-server",
        protocol="sada-server",
        url="",
        context=ctx,
        options={"dialect": dialect, "channels": (url,)},
    )
    edge = SadaServerEdge(settings)
    try:
        server = b""
        for _ in range(200):  # the edge's INTR as its connection comes up (its monitor)
            edge.receive(0, 100)
            if channel.poll(50):
                server = channel.recv_multipart()[0]
                break
        assert server, "no INTR from the sada-server edge"
        req = Req(proto=PROTO_ASCII, request_id=SPEC_ID, service="", category="c", action="a", payload=b"")
        channel.send_multipart([server, *sada.encode(req)])
        frames: list[bytes] = []
        for _ in range(200):
            edge.receive(1000, 100)
            if channel.poll(50):
                frames = channel.recv_multipart()[1:]
                message = sada.decode(frames, sada.detect(frames))
                if isinstance(message, Rep):
                    break
        assert sada.detect(frames) == status_form
        rep = sada.decode(frames, status_form)
        assert isinstance(rep, Rep) and rep.status == 400 and rep.request_id == SPEC_ID
    finally:
        edge.close()
        channel.close(linger=0)
