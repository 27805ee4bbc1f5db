"""A request the NFP edge cannot write as its chosen worker's POST (a part the dialect
cannot carry): the worker never sees it, the edge hands the core a Reply whose reason
makes it the gateway's failure (another worker, else 500 to the client:
tests/core/test_routing_unsendable.py), and the worker stays registered and free. Driven
by hand, no gateway thread. Bodies a NorFab worker cannot take are refused earlier, 400
(test_nfp_foreign_workers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import nfp
from nfgate.codecs.nfp.messages import BROKER, WORKER, Open, Post, Ready
from nfgate.edges import EdgeSettings
from nfgate.edges.nfp import NfpEdge
from nfgate.model import Peer, Register, Reply, Request, ServiceRef, Status
from nfgate.routing_types import Dispatch
from nfgate.store import JobStore

from .conftest import RECV_MS, nothing, recv

pytestmark = pytest.mark.timeout(60)

CLIENT = Peer(edge="dcp", protocol="dcp", address=b"c")


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[tuple[NfpEdge, zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    store = JobStore(tmp_path / "jobs.sqlite3")
    unit = NfpEdge(
        EdgeSettings(name="nfp", protocol="nfp", url="tcp://127.0.0.1:*", context=context), store=store
    )
    worker = context.socket(zmq.DEALER)
    worker.setsockopt(zmq.LINGER, 0)
    worker.setsockopt(zmq.RCVTIMEO, RECV_MS)
    worker.connect(unit.endpoint)
    try:
        yield unit, worker
    finally:
        worker.close(0)
        unit.close()
        store.close()
        context.term()


def registered(unit: NfpEdge, worker: zmq.Socket[bytes]) -> Register:
    worker.send_multipart(nfp.encode(Open(header=WORKER)))
    worker.send_multipart(nfp.encode(Ready(service="svc")))
    commands: list[object] = []
    for _ in range(100):
        commands += unit.receive(0, 10)
        unit.flush_sends(0)
        if any(isinstance(c, Register) for c in commands):
            break
        unit.transport.socket.poll(50)
    assert nfp.decode(recv(worker)) == Open(header=BROKER)
    [register] = [c for c in commands if isinstance(c, Register)]
    return register


def test_a_post_the_spec_worker_cannot_be_sent_fails_as_the_gateways_error(
    edge: tuple[NfpEdge, zmq.Socket[bytes]],
) -> None:
    unit, worker = edge
    w = registered(unit, worker).peer
    # A service name no NFP frame may carry (printable text only; DCP names are bytes).
    bad = Request(id=5, service=ServiceRef(name="svc\x01"), body=(b"x",), reply_to=CLIENT)
    [failed] = unit.emit(Dispatch(worker=w, request=bad), 0)
    assert isinstance(failed, Reply) and (failed.id, failed.status) == (5, Status.ERROR)
    assert failed.reason.startswith("cannot be sent to a spec-dialect NFP worker")
    unit.flush_sends(0)
    assert nothing(worker)
    assert unit.stats()["unencodable"] == 1
    # Still its worker, and nothing of the failed request is held: the next one goes out.
    good = Request(id=6, service=ServiceRef(name="svc"), body=(b"y",), reply_to=CLIENT)
    assert unit.emit(Dispatch(worker=w, request=good), 0) == []
    unit.flush_sends(0)
    post = nfp.decode(recv(worker))
    assert isinstance(post, Post) and post.body == (b"y",)
    # The failed request left nothing behind: a late answer for it could match nothing.
    assert [core_id for core_id, _ in unit._workers[w.address].held.values()] == [6]
