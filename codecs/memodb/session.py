"""MemoDB's broker-side session state machine (specs/memodb.md "Simple client", "Worker"),
as a table. Pure: no sockets, no clock.

The broker knows a peer only through the ID in a message: READY and JOB are handled
whatever the ID (a READY gets a new worker ID; a JOB is a client's, answered on the
context that asked), every other message is looked up by its worker ID. A worker is:

* ``IDLE`` -- the broker holds its last request (the long-poll) and answers it with a
  JOB when one comes, or with HEARTBEAT after the heartbeat interval;
* ``AWAY`` -- the broker answered HEARTBEAT and waits for the worker's next request (a
  job for it meanwhile waits in the edge, one at most);
* ``BUSY`` -- the worker holds a JOB; its RESULT is due within the job's timeout;
* ``NONE`` -- no worker: an unknown ID (e.g. after a broker restart) or a client.

Inputs are the message types, ``RESULT_DISCONNECTING`` (a RESULT whose optional flag is
true) and three broker-side events: ``job`` (the core gives the worker a job), ``idle``
(the heartbeat interval passed) and ``timeout`` (the job's timeout passed).
"""

from __future__ import annotations

from typing import Final

from nfgate.tables import StateEnum

from .._base import Message
from .codec import _check_bcdb
from .messages import Result

__all__ = ["Action", "WorkerState", "TRANSITIONS", "dialect_of", "input_of", "step"]


class WorkerState(StateEnum):
    """A MemoDB worker as the broker sees it (the module docstring says what each state means)."""

    NONE = "none"
    IDLE = "idle"
    AWAY = "away"
    BUSY = "busy"


class Action(StateEnum):
    """What the broker does for a message or broker-side event (:data:`TRANSITIONS`)."""

    REGISTER = "register"  # READY: assign an ID, register the services, hold the request
    SUBMIT = "submit"  # a client's JOB for the core; its RESULT goes on the same context
    HOLD = "hold"  # hold the worker's request until a job or the heartbeat interval
    RESULT = "result"  # relay the RESULT to the client, hold the request
    RESULT_LEAVE = "result_leave"  # relay it, then unregister and answer DISCONNECT
    STALE_RESULT = "stale_result"  # a RESULT for no job the broker still waits for: drop it, hold
    LEAVE = "leave"  # unregister the worker and answer DISCONNECT (its job goes elsewhere)
    DISCONNECT = "disconnect"  # unknown ID: "out of sync", answer DISCONNECT
    SEND_JOB = "send_job"  # answer the held request with the JOB
    QUEUE_JOB = "queue_job"  # no request held: keep the job until the worker's next request
    CONFLICT = "conflict"  # a job for a worker that holds one: it is treated as gone
    SEND_HEARTBEAT = "send_heartbeat"  # answer the held request with HEARTBEAT
    EXPIRE = "expire"  # the job's timeout passed: the worker is gone, its job goes elsewhere


NO, IDLE, AWAY, BUSY = WorkerState.NONE, WorkerState.IDLE, WorkerState.AWAY, WorkerState.BUSY

TRANSITIONS: Final[dict[tuple[WorkerState, str], tuple[WorkerState, Action]]] = {
    # "A worker starts by sending a READY request" -- whatever ID it carries.
    (NO, "READY"): (IDLE, Action.REGISTER),
    # Simple client: "sending a JOB request to the broker, and waiting for a RESULT reply".
    (NO, "JOB"): (NO, Action.SUBMIT),
    # "it can send a DISCONNECT reply to any request made by the worker" (unknown ID).
    (NO, "RESULT"): (NO, Action.DISCONNECT),
    (NO, "RESULT_DISCONNECTING"): (NO, Action.DISCONNECT),
    (NO, "HEARTBEAT"): (NO, Action.DISCONNECT),
    (NO, "DISCONNECT"): (NO, Action.DISCONNECT),
    # "A worker that receives a HEARTBEAT should reply immediately with another HEARTBEAT".
    (AWAY, "HEARTBEAT"): (IDLE, Action.HOLD),
    # An IDLE worker asking again: its req0 resent the request; the new one replaces it.
    (IDLE, "HEARTBEAT"): (IDLE, Action.HOLD),
    # A HEARTBEAT instead of the RESULT: out of sync; the job is tried on another worker.
    (BUSY, "HEARTBEAT"): (NO, Action.LEAVE),
    (BUSY, "RESULT"): (IDLE, Action.RESULT),
    (IDLE, "RESULT"): (IDLE, Action.STALE_RESULT),
    (AWAY, "RESULT"): (IDLE, Action.STALE_RESULT),
    # "the worker cannot handle any more jobs and the server should reply with DISCONNECT"
    (BUSY, "RESULT_DISCONNECTING"): (NO, Action.RESULT_LEAVE),
    (IDLE, "RESULT_DISCONNECTING"): (NO, Action.LEAVE),
    (AWAY, "RESULT_DISCONNECTING"): (NO, Action.LEAVE),
    # DISCONNECT is broker -> worker in the spec; a worker sending it is taken as leaving.
    (IDLE, "DISCONNECT"): (NO, Action.LEAVE),
    (AWAY, "DISCONNECT"): (NO, Action.LEAVE),
    (BUSY, "DISCONNECT"): (NO, Action.LEAVE),
    # Broker-side events.
    (IDLE, "job"): (BUSY, Action.SEND_JOB),
    (AWAY, "job"): (AWAY, Action.QUEUE_JOB),
    (BUSY, "job"): (BUSY, Action.CONFLICT),
    (NO, "job"): (NO, Action.CONFLICT),
    (IDLE, "idle"): (AWAY, Action.SEND_HEARTBEAT),
    # "if a worker has been processing the job for longer than the timeout, the broker
    # assumes that the worker has disconnected"
    (BUSY, "timeout"): (NO, Action.EXPIRE),
}


def input_of(message: Message) -> str:
    """The table input for a decoded message (a RESULT's true flag is its own input).
    Never raises."""
    if isinstance(message, Result) and message.disconnecting:
        return "RESULT_DISCONNECTING"
    return message.TYPE


def step(state: WorkerState, event: str) -> tuple[WorkerState, Action]:
    """The next state and the broker's action; raises KeyError for a pair the table lacks
    (READY and JOB are only defined for ``NONE``: their ID does not name a worker)."""
    return TRANSITIONS[(state, event)]


def dialect_of(message: Message) -> str:
    """``bcdb`` when bcdb's memodb-broker would accept ``message`` too, else ``spec``:
    a peer that speaks the stricter form is answered in it. Never raises."""
    return "spec" if _check_bcdb(message) else "bcdb"
