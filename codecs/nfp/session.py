"""NFP's per-peer state machine (specs/nfp.md "NFP/Client", "NFP/Worker", "Opening and
Closing") as a table, and the JSON bodies a broker writes. Pure: no sockets, no clock.

One ROUTER socket serves clients and workers alike; the header frame says which role a
message speaks for (NFPC01 client, NFPW01 worker). NorFab peers never send OPEN, so a
client may start with a job and a worker with READY; a NorFab identity that has sent
client commands may still become a worker (docs/protocols/norfab-wire.md section 6).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from nfgate.tables import StateEnum

from .._base import load_json
from .messages import CLIENT, WORKER

__all__ = [
    "Action",
    "PeerState",
    "TRANSITIONS",
    "accepted_body",
    "dumps",
    "error_body",
    "failed_body",
    "failed_result",
    "keyed_body",
    "keyed_result",
    "merge",
    "step",
]


class PeerState(StateEnum):
    """An NFP peer as the broker sees it: new, a client, a spec worker that sent OPEN, or a worker."""

    NEW = "new"  # nothing heard yet, or a worker that disconnected
    CLIENT = "client"
    OPENED = "opened"  # a spec worker sent OPEN; READY comes next
    WORKER = "worker"


class Action(StateEnum):
    """What the broker does with a message from a peer (:data:`TRANSITIONS`)."""

    OPEN = "open"  # answer OPEN with OPEN
    JOB = "job"  # POST: accept, store, 202, route
    FETCH = "fetch"  # GET: stored results (200), pending (300) or unknown (400)
    CANCEL = "cancel"  # DELETE
    INPUT = "input"  # NorFab PUT: client input for a running job, to its worker
    MMI = "mmi"  # NorFab MMI request (broker services)
    REGISTER = "register"  # READY
    HEARTBEAT = "heartbeat"  # KEEPALIVE
    RESULT = "result"  # RESPONSE / EVENT / STREAM from a worker
    UNREGISTER = "unregister"  # DISCONNECT from a worker
    STRANGER = "stranger"  # worker traffic from a peer that is not registered: DISCONNECT it
    IGNORE = "ignore"  # harmless repeats (a second READY, DISCONNECT from a stranger)
    UNEXPECTED = "unexpected"  # anything else: counted, and DISCONNECT where the peer is a worker


N, C, OP, W = PeerState.NEW, PeerState.CLIENT, PeerState.OPENED, PeerState.WORKER
_CLIENT_JOBS = {"POST": Action.JOB, "GET": Action.FETCH, "DELETE": Action.CANCEL, "PUT": Action.INPUT}
_WORKER_RESULTS = ("RESPONSE", "EVENT", "STREAM")


def _table() -> dict[tuple[PeerState, bytes, str], tuple[PeerState, Action]]:
    t: dict[tuple[PeerState, bytes, str], tuple[PeerState, Action]] = {}
    for state in (N, C, OP, W):
        after = W if state is W else C  # a worker may also act as a client (NorFab's embedded client)
        for kind, action in _CLIENT_JOBS.items():
            t[(state, CLIENT, kind)] = (after, action)
        t[(state, CLIENT, "MMI")] = (after, Action.MMI)
        t[(state, CLIENT, "OPEN")] = (after, Action.OPEN)
        t[(state, WORKER, "READY")] = (W, Action.IGNORE if state is W else Action.REGISTER)
    t[(N, WORKER, "OPEN")] = (OP, Action.OPEN)
    t[(C, WORKER, "OPEN")] = (OP, Action.OPEN)
    t[(W, WORKER, "KEEPALIVE")] = (W, Action.HEARTBEAT)
    t[(W, WORKER, "DISCONNECT")] = (N, Action.UNREGISTER)
    for kind in _WORKER_RESULTS:
        t[(W, WORKER, kind)] = (W, Action.RESULT)
    for state in (N, C, OP):
        t[(state, WORKER, "KEEPALIVE")] = (state, Action.STRANGER)
        t[(state, WORKER, "DISCONNECT")] = (state, Action.IGNORE)
        for kind in _WORKER_RESULTS:
            t[(state, WORKER, kind)] = (state, Action.STRANGER)
    return t


TRANSITIONS: Final = _table()
"""``(state, header, message type) -> (next state, action)``; what is missing is UNEXPECTED."""


def step(state: PeerState, header: bytes, message_type: str) -> tuple[PeerState, Action]:
    """The next state and the broker's action for one message (never raises)."""
    return TRANSITIONS.get((state, header, message_type), (state, Action.UNEXPECTED))


# One encoder for every body: json.dumps with options builds a JSONEncoder per call,
# which cost about as much as the encoding of a 202 body itself.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _dumps(value: Any) -> bytes:
    text = _ENCODER.encode(value)
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A name carried as surrogate-escaped bytes (a DCP service name may be any bytes)
        # is not UTF-8: its odd bytes become "?" rather than the whole answer failing.
        return text.encode("utf-8", "replace")


def accepted_body(uuid: str, service: str, target: str, workers: Iterable[str]) -> bytes:
    """The 202 body, in NorFab's shape (its client reads ``workers``).

    Never raises for ``str`` arguments; a worker name that is not one raises :class:`TypeError`.
    """
    names = list(workers)
    status = "DISPATCHED" if names else "QUEUED"
    return _dumps({"workers": names, "uuid": uuid, "target": target, "status": status, "service": service})


def error_body(uuid: str, service: str, status: str, errors: Iterable[str]) -> bytes:
    """A broker error body (NorFab's 400 shape: ``status`` text and ``errors`` list).

    Never raises for ``str`` arguments; an error that JSON cannot hold raises :class:`TypeError`.
    """
    return _dumps(
        {"workers": None, "uuid": uuid, "status": status, "service": service, "errors": list(errors)}
    )


def _json_value(body: tuple[bytes, ...]) -> Any:
    """A reply body as a JSON value: parsed when it is one JSON frame, else text."""
    if len(body) == 1:
        try:
            return load_json(body[0])
        except (ValueError, UnicodeDecodeError):
            pass
    return b"".join(body).decode("utf-8", "replace")


def keyed_result(name: str, worker_name: str, body: tuple[bytes, ...]) -> dict[str, Any]:
    """A worker's result as NorFab's client wants it: ``{name: Result}``.

    A NorFab worker's result already is ``{worker_name: Result}``: it is re-keyed to
    ``name`` (the name the client was told in its 202, which differs after a
    re-dispatch). Any other body (a DCP or MemoDB worker's bytes) is wrapped in
    NorFab's ``Result`` fields, the body parsed as JSON when it is JSON. Never raises.
    """
    return _keyed(name, worker_name, _json_value(body))


def keyed_body(name: str, worker_name: str, body: tuple[bytes, ...], *, norfab_worker: bool = False) -> bytes:
    """:func:`keyed_result` as the one body frame NorFab's client reads.

    A result that already is ``{name: Result}`` under the name the client was told (as
    in every job not re-dispatched) is passed on as the worker wrote it, not encoded
    again (that was about a tenth of the NFP edge's work on a NorFab result, measured
    with ``nfgate bench --scenario path``). From a NorFab worker (``norfab_worker``)
    under that name it is not even parsed: NorFab workers key their results by their
    own name and NorFab's broker relays them as bytes, and a result of megabytes would
    otherwise be parsed on the gateway's loop. Any other body is parsed to check it.
    Never raises (a body that is not JSON is carried as text).
    """
    if norfab_worker and name == worker_name and len(body) == 1:
        return body[0]
    value = _json_value(body)
    if (
        name == worker_name
        and len(body) == 1
        and isinstance(value, dict)
        and len(value) == 1
        and name in value
    ):
        return body[0]
    return _dumps(_keyed(name, worker_name, value))


def _keyed(name: str, worker_name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and len(value) == 1 and worker_name in value:
        return {name: value[worker_name]}
    return {
        name: {
            "result": value,
            "failed": False,
            "errors": [],
            "task": f"{worker_name}:",
            "messages": [],
            "juuid": None,
            "resources": [],
            "status": "completed",
        }
    }


def failed_body(name: str, status: int, body: tuple[bytes, ...]) -> bytes:
    """A non-NorFab worker's error status for a NorFab client: NorFab's 200 with
    ``failed`` set, the worker's body kept as the ``result`` (parsed when it is JSON).
    Never raises."""
    value = failed_result(name, status, "worker error")
    value[name]["result"] = _json_value(body)
    return _dumps(value)


def failed_result(name: str, status: int, reason: str) -> dict[str, Any]:
    """NorFab's form of a failed job for one worker: 200 with ``failed`` set. Never raises."""
    return {
        name: {
            "result": None,
            "failed": True,
            "errors": [f"nfgate: {status} {reason}"],
            "task": f"{name}:",
            "messages": [reason],
            "juuid": None,
            "resources": [],
            "status": "failed",
        }
    }


def merge(results: Iterable[Mapping[str, Any]]) -> bytes:
    """One body from several ``{worker: Result}`` dicts (a NorFab GET answer).

    Raises :class:`TypeError` (or :class:`ValueError`, for a circular value) only for a
    result JSON cannot hold; decoded results never are.
    """
    merged: dict[str, Any] = {}
    for item in results:
        merged.update(item)
    return _dumps(merged)


def dumps(value: Any) -> bytes:
    """Compact JSON, as NorFab writes it. Raises :class:`TypeError` for a value JSON
    cannot hold, :class:`ValueError` for a circular one (``json``'s rules)."""
    return _dumps(value)
