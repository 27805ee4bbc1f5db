"""A NorFab client gives up on a job at its ``timeout`` ("timeout expired after N
seconds") and sends no DELETE: a job still waiting for a worker then must not run later,
when a worker comes (a configuration push its operator was told had failed). It ends 408
instead, and so does a stored job whose timeout passed while the gateway was down.

Driven in process on a memory transport, the loop's clock moved by hand (the Broker of
test_nfp_restart.py).
"""

from __future__ import annotations

import json

import pytest

from nfgate.codecs import nfp
from nfgate.codecs.nfp.messages import CLIENT, Get, Post, Response
from nfgate.routing_types import CLIENT_GAVE_UP
from nfgate.store import JobState

from .test_nfp_restart import CLIENT_ID, UUID, Broker, broker, jobs_for, register, to_client

pytestmark = pytest.mark.timeout(30)
__all__ = ["broker"]  # the fixture, used by name


def post(b: Broker, body: dict[str, object], dialect: str = "norfab") -> list[tuple[bytes, object]]:
    b.dialects[CLIENT_ID] = dialect
    message = Post(header=CLIENT, service="echo", target="any", uuid=UUID, body=(json.dumps(body).encode(),))
    return b.iterate((CLIENT_ID, nfp.encode(message, dialect)))


def state(b: Broker) -> JobState:
    record = b.store.get(UUID)
    assert record is not None
    return record.state


def test_a_norfab_job_with_no_worker_by_its_timeout_ends_408_and_never_runs(broker: Broker) -> None:
    (accepted,) = to_client(post(broker, {"task": "t", "kwargs": {"timeout": 99}, "timeout": 2}))
    assert accepted.status == 202  # the kwargs' "timeout" is the task's, not the job's
    broker.now = 1_999
    assert broker.iterate() == []
    broker.now = 2_000
    (ended,) = to_client(broker.iterate())
    assert ended.status == 408 and ended.uuid == UUID
    assert CLIENT_GAVE_UP in ended.body[0].decode()
    assert jobs_for(register(broker, b"late")) == []  # the worker that comes later gets nothing
    assert state(broker) is JobState.FAILED
    get = Get(header=CLIENT, service="echo", target="any", uuid=UUID, body=(b"{}",))
    (answer,) = to_client(broker.iterate((CLIENT_ID, nfp.encode(get, "norfab"))))
    assert answer.status == 408  # a later GET says so too


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        ("spec", {"task": "t", "timeout": 2}),  # the spec's POST has no timeout: the body is opaque
        ("norfab", {"task": "t", "timeout": 0}),  # NorFab's client reads 0 as its default
        ("norfab", {"task": "t", "timeout": None}),
        ("norfab", {"task": "t"}),
    ],
)
def test_a_job_without_a_norfab_timeout_waits_for_its_worker(
    broker: Broker, dialect: str, body: dict[str, object]
) -> None:
    post(broker, body, dialect)
    broker.now = 5_000
    assert to_client(broker.iterate()) == []
    assert jobs_for(register(broker, b"w")) == [b"w"]


def test_a_stored_norfab_job_whose_timeout_passed_while_the_gateway_was_down_is_not_run(
    broker: Broker,
) -> None:
    post(broker, {"task": "t", "timeout": 2})
    broker.store.set_state(UUID, JobState.QUEUED)  # as it was stored: no worker yet
    created = broker.store.get(UUID).created_ms  # type: ignore[union-attr]
    broker.now = 0  # a new process: its loop clock starts again
    broker.store.rollback()
    broker.gateway.close()
    broker.store.close()
    broker.boot()
    broker.edge.jobs._clock = lambda: created + 2_000  # type: ignore[attr-defined]  # 2 s down
    broker.gateway.recover()
    sent = [(peer, nfp.decode(f, broker.dialects.get(peer, "spec"))) for peer, f in broker.memory.take()]
    (ended,) = [m for peer, m in sent if peer == CLIENT_ID and isinstance(m, Response)]
    assert ended.status == 408
    assert jobs_for(register(broker, b"w")) == []
    assert state(broker) is JobState.FAILED


def test_a_stored_norfab_job_taken_up_within_its_timeout_keeps_what_is_left_of_it(broker: Broker) -> None:
    post(broker, {"task": "t", "timeout": 2})
    created = broker.store.get(UUID).created_ms  # type: ignore[union-attr]
    broker.store.rollback()
    broker.gateway.close()
    broker.store.close()
    broker.boot()
    broker.edge.jobs._clock = lambda: created + 500  # type: ignore[attr-defined]  # 0.5 s down
    broker.gateway.recover()
    broker.memory.take()
    broker.now = 1_499
    assert to_client(broker.iterate()) == []
    broker.now = 1_500  # 2 s after the POST
    (ended,) = to_client(broker.iterate())
    assert ended.status == 408
