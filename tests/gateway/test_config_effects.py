"""Edge config keys have the effect docs/broker.md and docs/protocols/*.md give them,
checked on one edge built directly (no gateway loop: each step is driven by hand)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import sada
from nfgate.codecs.sada.messages import PROTO_ASCII, Intr
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
