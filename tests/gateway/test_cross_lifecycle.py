"""Random lives of requests that cross protocols: NFP and DCP clients served by NFP and
DCP workers, one gateway, workers coming, answering and dying, time passing.

In process, one loop iteration at a time, both edges on memory transports and a clock
the test moves. At the end the survivors answer what they hold, fresh workers of both
protocols come, and time runs past every expiry. Then every NFP job answered 202 has
exactly one final answer (its own result, or an error); every DCP request has at most
one REPLY, its own (DCP has no error message: a request that cannot be served gets
none), and one REPLY exactly when some worker answered it.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Ping, Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Keepalive, Open, Post, Ready, Response
from nfgate.edges import RouterEdge
from nfgate.edges.dcp import DcpEdge
from nfgate.edges.nfp import NfpEdge
from nfgate.gateway import Gateway
from nfgate.routing import Router
from nfgate.routing_types import RouterConfig
from tests.conftest import scaled

from .lives import HEARTBEAT, Lives
from .recording import Recorded

pytestmark = pytest.mark.timeout(300)

# peer -> its edge
CLIENTS = {b"c1": "nfp", b"k1": "dcp", b"k2": "dcp"}
WORKERS = {b"w1": "nfp", b"w2": "nfp", b"d1": "dcp", b"d2": "dcp"}


class CrossLives(Lives):
    ROSTER = WORKERS

    def __init__(self) -> None:
        super().__init__()
        nfp_edge = NfpEdge(self.settings("nfp"), store=self.store)
        dcp_edge = DcpEdge(self.settings("dcp"))
        self.edges: dict[str, RouterEdge] = {"nfp": nfp_edge, "dcp": dcp_edge}
        self.memory = {name: Recorded(edge, lambda frames: None, []) for name, edge in self.edges.items()}
        config = RouterConfig(
            queue_expiry_ms=2_000, max_redispatch=1, liveness={"nfp": HEARTBEAT, "dcp": HEARTBEAT}
        )
        self.gateway = Gateway(Router(config), [nfp_edge, dcp_edge], clock=lambda: self.now)
        for edge in self.edges.values():
            edge.attach(self.gateway)
        self.serial = 0
        self.posted: dict[bytes, bytes] = {}  # request key -> client
        self.accepted: set[bytes] = set()  # NFP jobs answered 202
        self.answered: set[bytes] = set()  # keys some worker answered

    # ------------------------------------------------------------------ plumbing

    def iterate(self, *messages: tuple[bytes, object]) -> None:
        for name, memory in self.memory.items():
            mine = [(peer, m) for peer, m in messages if (CLIENTS.get(peer) or self.workers[peer]) == name]
            memory.give([(peer, (nfp if name == "nfp" else dcp).encode(m)) for peer, m in mine])  # type: ignore[attr-defined]
            self.gateway.feed(self.edges[name].receive(self.now, 256), self.now)
        self.gateway.step(0)
        for name, memory in self.memory.items():
            for peer, frames in memory.take():
                self.seen(name, peer, frames)
        assert self.gateway.internal_errors == 0

    def seen(self, edge: str, peer: bytes, frames: list[bytes]) -> None:
        message = nfp.decode(frames, "spec") if edge == "nfp" else dcp.decode(frames)
        if peer in CLIENTS:
            if isinstance(message, Response):
                key = message.uuid.encode()
                if message.status == 202:
                    self.accepted.add(key)
                    return
            elif isinstance(message, DcpReply):
                key = message.metadata[0]
            else:
                return
            assert self.posted.get(key) == peer, f"{peer!r} got an answer for {key!r}, not its request"
            status = message.status if isinstance(message, Response) else 200
            self.finals.setdefault(key, []).append(
                (status, b"".join(message.data if edge == "dcp" else message.body))
            )  # type: ignore[union-attr]
        elif isinstance(message, Post):
            assert peer in self.registered or peer in self.silent
            self.held[peer][message.uuid.encode()] = (message.body[0], None)
        elif isinstance(message, DcpRequest):
            assert peer in self.registered or peer in self.silent
            self.held[peer][message.data[0]] = (message.data[0], message)

    # --------------------------------------------------------------------- rules

    @rule(client=st.sampled_from(sorted(CLIENTS)))
    def request(self, client: bytes) -> None:
        self.serial += 1
        key = b"%032x" % self.serial
        self.posted[key] = client
        if CLIENTS[client] == "nfp":
            message: object = Post(
                header=CLIENT, service="echo", target="any", uuid=key.decode(), body=(key,)
            )
        else:
            message = DcpRequest(service=b"echo", metadata=(key,), data=(key,))
        self.iterate((client, message))

    @rule(worker=st.sampled_from(sorted(WORKERS)))
    def register(self, worker: bytes) -> None:
        if worker in self.registered or worker in self.silent:
            return
        self.registered.add(worker)
        if self.workers[worker] == "nfp":
            self.iterate((worker, Open(header=WORKER)))
            self.iterate((worker, Ready(header=WORKER, service="echo")))
        else:
            self.iterate((worker, Registration(service=b"echo")))

    def reply(self, worker: bytes, key: bytes) -> None:
        held = self.held[worker].pop(key)
        assert isinstance(held, tuple)
        body, request = held
        self.answered.add(body)
        if request is None:  # an NFP job: the key is its uuid
            message: object = Response(
                header=WORKER, service="echo", uuid=key.decode(), status=200, body=(body,)
            )
        else:
            message = DcpReply(client=request.client, metadata=request.metadata, data=(body,))
        self.iterate((worker, message))

    @rule(ms=st.sampled_from((10, 120, 400, 2500)))
    def time_passes(self, ms: int) -> None:
        self.now += ms
        beats = [
            (w, Keepalive(header=WORKER, service="echo") if self.workers[w] == "nfp" else Ping())
            for w in sorted(self.registered)
        ]
        self.iterate(*beats)

    # ------------------------------------------------------------------ the end

    def settle(self) -> None:
        self.enlist(b"w9", "nfp")
        self.enlist(b"d9", "dcp")
        super().settle()

    def check(self) -> None:
        for key, client in self.posted.items():
            answers = self.finals.get(key, [])
            if CLIENTS[client] == "nfp":
                if key in self.accepted:
                    assert len(answers) == 1, f"NFP job {key!r} (202) ended with {answers}"
            else:
                assert len(answers) == (1 if key in self.answered else 0), f"DCP {key!r}: {answers}"
            for status, body in answers:
                assert status != 200 or body == key, f"{key!r} got another request's result: {body!r}"


CrossLives.TestCase.settings = settings(max_examples=scaled(200), stateful_step_count=50, deadline=None)
test_every_request_across_protocols_ends_once = CrossLives.TestCase
