"""MemoDB's pure broker-side worker table (nfgate.codecs.memodb.session)."""

from __future__ import annotations

import pytest

from nfgate.codecs import memodb
from nfgate.codecs.memodb.messages import Disconnect, Heartbeat, Job, Ready, Result
from nfgate.codecs.memodb.session import TRANSITIONS, Action, WorkerState, dialect_of, input_of, step

pytestmark = pytest.mark.timeout(30)

TYPES = {cls.TYPE for cls in memodb.CODEC.messages}
WORKER_INPUTS = (TYPES - {"READY", "JOB"}) | {"RESULT_DISCONNECTING"}
S = WorkerState


def test_every_known_worker_state_handles_every_worker_message() -> None:
    for state in (S.IDLE, S.AWAY, S.BUSY, S.NONE):
        for event in WORKER_INPUTS:
            assert (state, event) in TRANSITIONS, (state, event)


def test_ready_and_job_are_only_looked_up_without_a_worker() -> None:
    assert step(S.NONE, "READY") == (S.IDLE, Action.REGISTER)
    assert step(S.NONE, "JOB") == (S.NONE, Action.SUBMIT)
    with pytest.raises(KeyError):
        step(S.IDLE, "READY")


def test_unknown_ids_get_disconnect() -> None:
    for event in WORKER_INPUTS:
        assert step(S.NONE, event) == (S.NONE, Action.DISCONNECT)


def test_worker_cycle_ready_job_result_heartbeat() -> None:
    state, action = step(S.NONE, "READY")
    state, action = step(state, "job")
    assert (state, action) == (S.BUSY, Action.SEND_JOB)
    state, action = step(state, "RESULT")
    assert (state, action) == (S.IDLE, Action.RESULT)
    state, action = step(state, "idle")
    assert (state, action) == (S.AWAY, Action.SEND_HEARTBEAT)
    assert step(state, "job") == (S.AWAY, Action.QUEUE_JOB)  # no request held yet
    assert step(state, "HEARTBEAT") == (S.IDLE, Action.HOLD)


def test_leaving_and_being_out_of_sync() -> None:
    assert step(S.BUSY, "RESULT_DISCONNECTING") == (S.NONE, Action.RESULT_LEAVE)
    assert step(S.BUSY, "HEARTBEAT") == (S.NONE, Action.LEAVE)
    assert step(S.BUSY, "timeout") == (S.NONE, Action.EXPIRE)
    assert step(S.BUSY, "job") == (S.BUSY, Action.CONFLICT)
    assert step(S.IDLE, "RESULT") == (S.IDLE, Action.STALE_RESULT)
    for state in (S.IDLE, S.AWAY, S.BUSY):
        assert step(state, "DISCONNECT") == (S.NONE, Action.LEAVE)


def test_input_of_splits_the_disconnecting_flag() -> None:
    assert input_of(Result(id=b"1234")) == "RESULT"
    assert input_of(Result(id=b"1234", disconnecting=False)) == "RESULT"
    assert input_of(Result(id=b"1234", disconnecting=True)) == "RESULT_DISCONNECTING"
    assert input_of(Heartbeat(id=b"1234")) == "HEARTBEAT"


def test_dialect_of_tells_what_bcdb_would_accept() -> None:
    assert dialect_of(Ready(services=("b", "ab"))) == "bcdb"
    assert dialect_of(Ready(services=("ab", "b"))) == "spec"  # not canonical order
    assert dialect_of(Job(service="s", timeout_ms=1)) == "bcdb"
    assert dialect_of(Result(id=b"1234", disconnecting=True)) == "spec"
    assert dialect_of(Heartbeat(id=b"12")) == "spec"
    assert dialect_of(Disconnect(id=b"1234")) == "bcdb"
