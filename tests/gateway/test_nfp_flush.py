"""When the NFP edge's held messages leave, against the job store's fsync
(nfgate/edges/nfp_jobs.py, ``NfpJobs.flush``).

Driven in process, one loop iteration at a time, on a recording memory transport
(``recording.Recorded``) with the store's fsync recorded in the same list, so the
order of sends and fsyncs is exact, not a matter of timing.
"""

from __future__ import annotations

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

from .recording import Event, Recorded

pytestmark = pytest.mark.timeout(30)


class Loop:
    """One NFP edge on a memory transport, the core, a store whose fsyncs are recorded."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        import nfgate.store

        self.events: list[Event] = []
        self.failing_syncs = 0  # the next n fsyncs fail

        def datasync(fd: int) -> None:
            self.events.append(("fsync", b"", None))
            if self.failing_syncs:
                self.failing_syncs -= 1
                raise OSError(5, "Input/output error")

        monkeypatch.setattr(nfgate.store, "_datasync", datasync)
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.store = JobStore(tmp_path / "jobs.sqlite3", fsync=True)
        settings = EdgeSettings(name="nfp", protocol="nfp", url="tcp://127.0.0.1:0", context=self.context)
        self.edge = NfpEdge(settings, store=self.store)
        self.memory = Recorded(self.edge, nfp.decode, self.events)
        self.gateway = Gateway(Router(), [self.edge], clock=lambda: 0)
        self.edge.attach(self.gateway)

    def iterate(self, *messages: tuple[bytes, object]) -> list[Event]:
        """Hand the edge ``messages`` (peer, NFP message), run one loop iteration and
        return what happened in it, in order."""
        self.events.clear()
        self.memory.give([(peer, nfp.encode(message)) for peer, message in messages])  # type: ignore[arg-type]
        self.gateway.feed(self.edge.receive(0, 256), 0)
        self.gateway.step(0)
        self.memory.take()
        return list(self.events)

    def close(self) -> None:
        self.gateway.close()
        self.store.close()
        self.context.term()


@pytest.fixture
def loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Loop]:
    running = Loop(tmp_path, monkeypatch)
    running.iterate((b"w1", Open(header=WORKER)), (b"c1", Open(header=CLIENT)), (b"c2", Open(header=CLIENT)))
    running.iterate((b"w1", Ready(service="echo")))
    yield running
    running.close()


def post(uuid: str) -> Post:
    return Post(header=CLIENT, service="echo", target="any", uuid=uuid, body=(b"x",))


def result(uuid: str) -> Response:
    return Response(header=WORKER, service="echo", uuid=uuid, status=200, body=(b"done " + uuid.encode(),))


def where(events: list[Event], peer: bytes, status: int | None = None) -> int:
    """Index of the first send to ``peer`` (with RESPONSE ``status``, if given)."""
    for i, (kind, to, message) in enumerate(events):
        if kind == "send" and to == peer and (status is None or getattr(message, "status", None) == status):
            return i
    raise AssertionError(f"nothing sent to {peer!r} (status {status}) in {events!r}")


def fsync_at(events: list[Event]) -> int:
    syncs = [i for i, (kind, _, _) in enumerate(events) if kind == "fsync"]
    assert len(syncs) == 1, events
    return syncs[0]


def test_the_202_leaves_after_its_records_fsync_and_the_dispatch_before_it(loop: Loop) -> None:
    events = loop.iterate((b"c1", post("job-a")))
    assert where(events, b"w1") < fsync_at(events) < where(events, b"c1", 202)


def test_a_result_does_not_wait_for_another_clients_fsync(loop: Loop) -> None:
    loop.iterate((b"c1", post("job-a")))
    # One iteration: the worker's result for c1's job, and c2's new job (its record
    # makes the iteration's commit fsync). c1's result leaves before that fsync; c2's
    # 202 after it.
    events = loop.iterate((b"w1", result("job-a")), (b"c2", post("job-b")))
    done = where(events, b"c1", 200)
    assert events[done][2].body == (b"done job-a",)  # type: ignore[union-attr]
    assert done < fsync_at(events) < where(events, b"c2", 202)


def test_a_client_with_a_job_in_the_batch_gets_everything_after_the_fsync_in_order(loop: Loop) -> None:
    loop.iterate((b"c1", post("job-a")))
    # c1's result and c1's next job in one iteration: both wait for the fsync, and the
    # result (produced first) still comes first.
    events = loop.iterate((b"w1", result("job-a")), (b"c1", post("job-b")))
    sync = fsync_at(events)
    to_c1 = [(i, m) for i, (kind, peer, m) in enumerate(events) if kind == "send" and peer == b"c1"]
    assert [m.status for _, m in to_c1] == [200, 202]  # type: ignore[attr-defined]
    assert all(i > sync for i, _ in to_c1)


def test_a_failed_fsync_refuses_the_batch_but_an_earlier_jobs_result_is_delivered(loop: Loop) -> None:
    loop.iterate((b"c1", post("job-a")))
    loop.failing_syncs = 1
    events = loop.iterate((b"w1", result("job-a")), (b"c2", post("job-b")))
    assert where(events, b"c1", 200) < fsync_at(events)
    refused = events[where(events, b"c2")][2]
    assert isinstance(refused, Response) and refused.uuid == "job-b" and refused.status == 500
    assert loop.edge.stats()["jobs_refused"] == 1
