"""Random lives of SADA requests through the channel edge and the core: servers that
INTR, answer some of what they hold (several at once), go silent and are expired, and
clients whose REQs must each get exactly one REP (SADA answers failures too: 503 when
no server came in time, 500 when the servers it went to were lost).

In process (the frame is in lives.py), on a memory transport and a test clock.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from nfgate.codecs import sada
from nfgate.codecs.sada.messages import Intr, Ping, Rep, Req
from nfgate.edges.sada import SadaChannelEdge
from nfgate.gateway import Gateway
from nfgate.routing import Router
from nfgate.routing_types import RouterConfig
from tests.conftest import scaled

from .lives import HEARTBEAT, Lives
from .recording import Recorded

pytestmark = pytest.mark.timeout(300)

CLIENTS = (b"a1", b"a2")
SERVERS = {b"s1": "spec", b"s2": "spec", b"s3": "spec"}


class SadaLives(Lives):
    ROSTER = SERVERS

    def __init__(self) -> None:
        super().__init__()
        self.edge = SadaChannelEdge(self.settings("sada"))
        self.memory = Recorded(self.edge, lambda frames: None, [])
        config = RouterConfig(queue_expiry_ms=2_000, max_redispatch=1, liveness={"sada": HEARTBEAT})
        self.gateway = Gateway(Router(config), [self.edge], clock=lambda: self.now)
        self.edge.attach(self.gateway)
        self.serial = 0
        self.asked: dict[bytes, bytes] = {}  # request id -> client

    # ------------------------------------------------------------------ plumbing

    def iterate(self, *messages: tuple[bytes, object]) -> None:
        self.memory.give([(peer, sada.encode(m)) for peer, m in messages])  # type: ignore[arg-type]
        self.gateway.feed(self.edge.receive(self.now, 256), self.now)
        self.gateway.step(0)
        for peer, frames in self.memory.take():
            message = sada.decode(frames)
            if peer in CLIENTS:
                if isinstance(message, Rep):
                    rid = message.request_id.encode()
                    assert self.asked.get(rid) == peer, f"{peer!r} got the REP of {rid!r}"
                    self.finals.setdefault(rid, []).append((message.status, message.payload))
            elif isinstance(message, Req):
                assert peer in self.registered or peer in self.silent, (
                    f"a REQ sent to {peer!r}, never introduced"
                )
                self.held[peer][message.request_id.encode()] = message.payload
        assert self.gateway.internal_errors == 0

    # --------------------------------------------------------------------- rules

    @rule(client=st.sampled_from(CLIENTS))
    def request(self, client: bytes) -> None:
        self.serial += 1
        rid = b"%s-%d" % (client, self.serial)
        self.asked[rid] = client
        req = Req(request_id=rid.decode(), service="echo", category="c", action="a", payload=rid)
        self.iterate((client, req))

    @rule(server=st.sampled_from(sorted(SERVERS)))
    def register(self, server: bytes) -> None:
        if server not in self.registered and server not in self.silent:
            self.registered.add(server)
            self.iterate((server, Intr(services=(("echo", ""),))))

    def reply(self, server: bytes, key: bytes) -> None:
        payload = self.held[server].pop(key)
        assert isinstance(payload, bytes)
        self.iterate((server, Rep(request_id=key.decode(), status=200, payload=payload)))

    @rule(ms=st.sampled_from((10, 120, 400, 2500)))
    def time_passes(self, ms: int) -> None:
        # Live servers keep the conversation going (any message counts as a heartbeat).
        self.now += ms
        self.iterate(*((s, Ping()) for s in sorted(self.registered)))

    # ------------------------------------------------------------------ the end

    def settle(self) -> None:
        self.enlist(b"s9", "spec")
        super().settle()

    def check(self) -> None:
        for rid in self.asked:
            answers = self.finals.get(rid, [])
            assert len(answers) == 1, f"REQ {rid!r} got {answers}"
            status, payload = answers[0]
            assert status != 200 or payload == rid, f"REQ {rid!r} got another's answer {payload!r}"
            assert status in (200, 500, 503, 504), f"REQ {rid!r}: status {status}"


SadaLives.TestCase.settings = settings(max_examples=scaled(200), stateful_step_count=50, deadline=None)
test_every_sada_req_gets_one_rep = SadaLives.TestCase
