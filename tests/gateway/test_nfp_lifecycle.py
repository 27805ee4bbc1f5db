"""Random lives of NFP jobs through the edge, the job store and the core: every job
answered 202 ends with exactly one final answer to its client, whatever its workers do.

Driven in process, one loop iteration at a time, on a memory transport and a clock the
test moves (no sockets, no sleeping; the frame is in lives.py). Clients and workers
speak both dialects (spec and NorFab 0.25); workers register, answer, leave with
DISCONNECT, or go silent and are expired; time passes; the gateway is killed and
started again on its job store. At the end the survivors answer
what they hold, a fresh worker comes, time runs past every expiry, and each client's
answers are counted.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from nfgate.codecs import nfp
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Disconnect, Keepalive, Open, Post, Ready, Response
from nfgate.edges.nfp import NfpEdge
from nfgate.gateway import Gateway
from nfgate.routing import Router
from nfgate.routing_types import RouterConfig
from nfgate.store import JobStore
from tests.conftest import scaled

from .lives import HEARTBEAT, Lives
from .recording import Recorded

pytestmark = pytest.mark.timeout(300)

CLIENTS = {b"c1": "spec", b"c2": "spec", b"n1": "norfab"}
WORKERS = {b"w1": "spec", b"w2": "spec", b"v1": "norfab", b"v2": "norfab"}
INTERIM = (201, 202)  # NorFab's 201 and the 202: not the end of a job


class JobLives(Lives):
    ROSTER = WORKERS

    def __init__(self) -> None:
        super().__init__()
        self.boot()
        self.restarts = 0
        self.serial = 0
        self.posted: dict[bytes, bytes] = {}  # uuid -> client
        self.accepted: set[bytes] = set()
        self.left: set[bytes] = set()  # said DISCONNECT and not registered since

    def boot(self) -> None:
        self.edge = NfpEdge(self.settings("nfp"), store=self.store)
        self.memory = Recorded(self.edge, lambda frames: None, [])
        config = RouterConfig(queue_expiry_ms=2_000, max_redispatch=1, liveness={"nfp": HEARTBEAT})
        self.gateway = Gateway(Router(config), [self.edge], clock=lambda: self.now)
        self.edge.attach(self.gateway)

    # ------------------------------------------------------------------ plumbing

    def iterate(self, *messages: tuple[bytes, object]) -> None:
        wire = [(peer, nfp.encode(m, CLIENTS.get(peer) or self.workers[peer])) for peer, m in messages]  # type: ignore[arg-type]
        self.memory.give(wire)
        self.gateway.feed(self.edge.receive(self.now, 256), self.now)
        self.gateway.step(0)
        for peer, frames in self.memory.take():
            self.seen(peer, frames)
        assert self.gateway.internal_errors == 0

    def seen(self, peer: bytes, frames: list[bytes]) -> None:
        if peer in CLIENTS:
            message = nfp.decode(frames, CLIENTS[peer])
            if not isinstance(message, Response):
                return
            uuid = message.uuid.encode()
            assert self.posted.get(uuid) == peer, f"{peer!r} got an answer for {uuid!r}, not its job"
            if message.status == 202:
                # A NorFab client whose job was queued hears a second 202 naming the
                # worker that took it (it waits for the results of the workers named).
                assert uuid not in self.accepted or CLIENTS[peer] == "norfab", f"{uuid!r} accepted twice"
                self.accepted.add(uuid)
            elif message.status not in INTERIM:
                self.finals.setdefault(uuid, []).append((message.status, b"".join(message.body)))
        else:
            message = nfp.decode(frames, self.workers[peer])
            if isinstance(message, Post):
                # A silent worker still gets jobs until its liveness runs out; one that
                # said DISCONNECT gets none.
                assert peer not in self.left, f"a job sent to {peer!r} after its DISCONNECT"
                assert peer in self.registered or peer in self.silent, (
                    f"a job sent to {peer!r}, never registered"
                )
                self.held[peer][message.uuid.encode()] = message.body[0]

    # --------------------------------------------------------------------- rules

    @rule(client=st.sampled_from(sorted(CLIENTS)))
    def post(self, client: bytes) -> None:
        self.serial += 1
        uuid = b"%032x" % self.serial
        self.posted[uuid] = client
        body = b'{"task":"echo","kwargs":{"job":"%s"},"args":[]}' % uuid
        self.iterate(
            (client, Post(header=CLIENT, service="echo", target="any", uuid=uuid.decode(), body=(body,)))
        )

    @rule(worker=st.sampled_from(sorted(WORKERS)))
    def register(self, worker: bytes) -> None:
        if worker in self.registered or worker in self.silent:
            return
        self.registered.add(worker)
        self.left.discard(worker)
        if self.workers[worker] == "spec":
            self.iterate((worker, Open(header=WORKER)))
        self.iterate((worker, Ready(header=WORKER, service="echo")))

    def reply(self, worker: bytes, key: bytes) -> None:
        """``worker`` answers the job it knows as ``key`` with what the job asked."""
        body = self.held[worker].pop(key)
        assert isinstance(body, bytes)
        if self.workers[worker] == "norfab":
            name = worker.decode()
            result = json.dumps({name: {"result": body.decode(), "failed": False}}).encode()
            message = Response(header=WORKER, client=b"x", uuid=key.decode(), status=200, body=(result,))
        else:
            message = Response(header=WORKER, service="echo", uuid=key.decode(), status=200, body=(body,))
        self.iterate((worker, message))

    @rule(worker=st.sampled_from(sorted(WORKERS)))
    def leave(self, worker: bytes) -> None:
        if worker not in self.registered:
            return
        self.registered.discard(worker)
        self.left.add(worker)
        self.held[worker].clear()
        body = None if self.workers[worker] == "norfab" else b"bye"
        self.iterate((worker, Disconnect(header=WORKER, service="echo", body=body)))

    @precondition(lambda self: self.restarts < 2)
    @rule()
    def restart(self) -> None:
        """``kill -9`` between two loop iterations, and a new gateway on the same job
        store: what it answered 202 and had not finished is sent out again. Workers
        register again (the new gateway knows none of them; a real one is told so by
        the DISCONNECT its next KEEPALIVE gets) and forget the jobs they held."""
        self.restarts += 1
        self.store.rollback()  # nothing is open between iterations: kill -9 loses nothing more
        self.gateway.close()
        self.store.close()
        self.store = JobStore(self.dir / "jobs.sqlite3", fsync=False)
        self.boot()
        self.registered.clear()
        self.left.clear()
        for held in self.held.values():
            held.clear()
        self.gateway.recover()
        for peer, frames in self.memory.take():
            self.seen(peer, frames)

    @rule(ms=st.sampled_from((10, 120, 400, 2500)))
    def time_passes(self, ms: int) -> None:
        # The living keep themselves alive, as real workers do between answers.
        self.now += ms
        self.iterate(*((w, Keepalive(header=WORKER, service="echo")) for w in sorted(self.registered)))

    # ------------------------------------------------------------------ the end

    def settle(self) -> None:
        self.enlist(b"w9", "spec")
        super().settle()

    def check(self) -> None:
        for uuid in self.accepted:
            answers = self.finals.get(uuid, [])
            assert len(answers) == 1, f"job {uuid!r} (202) ended with {answers}"
            status, body = answers[0]
            # NorFab reports a failed job in a 200: {"<worker>": {"failed": true, ...}}.
            failed = CLIENTS[self.posted[uuid]] == "norfab" and b'"failed":true' in body
            if status == 200 and not failed:
                assert uuid in body, f"job {uuid!r} got another job's result: {body!r}"
        for uuid in set(self.finals) - self.accepted:
            [(status, _)] = self.finals[uuid]
            assert 400 <= status < 600, f"{uuid!r}: a final {status} without a 202"


JobLives.TestCase.settings = settings(max_examples=scaled(300), stateful_step_count=50, deadline=None)
test_every_accepted_nfp_job_ends_once = JobLives.TestCase
