"""Jobs for several workers across a ``kill -9`` of the gateway: after the restart a job
answered 202 goes to the workers its 202 named, those that had not answered, and the
client hears of no other (design.md "Durability"; target ``all`` is the workers
registered when the job was accepted).

Driven in process, one loop iteration at a time, on a memory transport (recording.py);
the kill is a rollback of whatever the store had open and a new gateway on the same
job store, as test_nfp_lifecycle.py does it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import nfp
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Open, Post, Ready, Response
from nfgate.edges import EdgeSettings
from nfgate.edges.nfp import NfpEdge
from nfgate.gateway import Gateway
from nfgate.routing import Router
from nfgate.store import JobStore

from .recording import Recorded

pytestmark = pytest.mark.timeout(30)

UUID = "7" * 32
CLIENT_ID = b"c1"


class Broker:
    """One gateway on a memory transport; :meth:`kill` starts a new one on its store."""

    def __init__(self, data: Path, context: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.data, self.context = data, context
        self.dialects: dict[bytes, str] = {}  # peer -> its dialect, if not the spec's
        self.now = 0  # the loop's clock, moved by hand
        self.boot()

    def boot(self) -> None:
        self.store = JobStore(self.data / "jobs.sqlite3", fsync=False)
        settings = EdgeSettings(name="nfp", protocol="nfp", url="tcp://127.0.0.1:0", context=self.context)
        self.edge = NfpEdge(settings, store=self.store)
        self.memory = Recorded(self.edge, lambda frames: None, [])
        self.gateway = Gateway(Router(), [self.edge], clock=lambda: self.now)
        self.edge.attach(self.gateway)

    def iterate(self, *messages: tuple[bytes, list[bytes]]) -> list[tuple[bytes, object]]:
        """Feed ``messages`` and run one loop iteration; what was sent, decoded."""
        self.memory.give(list(messages))
        self.gateway.feed(self.edge.receive(self.now, 256), self.now)
        self.gateway.step(0)
        sent = [
            (peer, nfp.decode(frames, self.dialects.get(peer, "spec"))) for peer, frames in self.memory.take()
        ]
        assert self.gateway.internal_errors == 0
        return sent

    def kill(self) -> list[tuple[bytes, object]]:
        """``kill -9`` between two iterations, a new gateway on the same store; what the
        recovery sent."""
        self.store.rollback()  # nothing is open between iterations: the kill loses nothing more
        self.gateway.close()
        self.store.close()
        self.boot()
        self.gateway.recover()
        return [
            (peer, nfp.decode(frames, self.dialects.get(peer, "spec"))) for peer, frames in self.memory.take()
        ]

    def close(self) -> None:
        self.gateway.close()
        self.store.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    b = Broker(tmp_path, context)
    try:
        yield b
    finally:
        b.close()
        context.term()


def register(broker: Broker, name: bytes) -> list[tuple[bytes, object]]:
    broker.iterate((name, nfp.encode(Open(header=WORKER))))
    return broker.iterate((name, nfp.encode(Ready(header=WORKER, service="echo"))))


def answer(broker: Broker, name: bytes) -> list[tuple[bytes, object]]:
    result = Response(header=WORKER, service="echo", uuid=UUID, status=200, body=(b"from " + name,))
    return broker.iterate((name, nfp.encode(result)))


def jobs_for(sent: list[tuple[bytes, object]]) -> list[bytes]:
    return sorted(peer for peer, m in sent if isinstance(m, Post) and m.uuid == UUID)


def to_client(sent: list[tuple[bytes, object]]) -> list[Response]:
    return [m for peer, m in sent if peer == CLIENT_ID and isinstance(m, Response)]


def post_all(broker: Broker, dialect: str) -> list[tuple[bytes, object]]:
    broker.dialects[CLIENT_ID] = dialect
    post = Post(header=CLIENT, service="echo", target="all", uuid=UUID, body=(b'{"task":"t"}',))
    return broker.iterate((CLIENT_ID, nfp.encode(post, dialect)))


def results(replies: list[Response], dialect: str) -> set[str]:
    """Whose results the client got: NorFab keys them by worker, the spec sends the
    worker's body as it wrote it ("from <name>")."""
    names: set[str] = set()
    for r in replies:
        if r.status != 200:
            continue
        if dialect == "norfab":
            names |= set(json.loads(r.body[0]))
        else:
            names.add(r.body[0].decode().removeprefix("from "))
    return names


@pytest.mark.parametrize("dialect", ["spec", "norfab"])
def test_an_all_job_goes_after_a_restart_to_every_worker_its_202_named(broker: Broker, dialect: str) -> None:
    register(broker, b"a")
    register(broker, b"b")
    sent = post_all(broker, dialect)
    assert jobs_for(sent) == [b"a", b"b"]
    (accepted,) = to_client(sent)
    assert accepted.status == 202
    assert json.loads(accepted.body[0])["workers"] == ["a", "b"]

    assert broker.kill() == []  # no worker is registered yet: the job waits for its two
    sent = register(broker, b"a")  # the first back must not take the whole job
    assert jobs_for(sent) == [b"a"]
    replies = to_client(answer(broker, b"a"))
    assert [r.status for r in replies] == [200], "a second 202 naming only the first worker back"
    sent = register(broker, b"b")
    assert jobs_for(sent) == [b"b"]
    replies += to_client(answer(broker, b"b"))
    assert results(replies, dialect) == {"a", "b"}
    assert broker.store.get(UUID).state.value == "done"  # type: ignore[union-attr]


@pytest.mark.parametrize("dialect", ["spec", "norfab"])
def test_a_worker_that_answered_before_the_restart_is_not_asked_again(broker: Broker, dialect: str) -> None:
    register(broker, b"a")
    register(broker, b"b")
    post_all(broker, dialect)
    before = to_client(answer(broker, b"a"))
    assert results(before, dialect) == {"a"}

    broker.kill()
    sent = register(broker, b"a") + register(broker, b"b")
    assert jobs_for(sent) == [b"b"]
    replies = to_client(answer(broker, b"b"))
    assert results(replies, dialect) == {"b"}
    assert broker.store.get(UUID).state.value == "done"  # type: ignore[union-attr]


def test_a_job_stored_by_an_older_nfgate_without_worker_names_still_runs(broker: Broker) -> None:
    register(broker, b"a")
    post_all(broker, "spec")
    # The column an older data dir lacks (added empty when opened): what its `all` job had.
    broker.store._db.execute("UPDATE jobs SET workers = NULL")
    broker.kill()
    sent = register(broker, b"b")  # `all` as it was: whichever worker registers
    assert jobs_for(sent) == [b"b"]
    assert results(to_client(answer(broker, b"b")), "spec") == {"b"}
