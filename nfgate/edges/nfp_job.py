"""One NFP job as the NFP edge's job table tracks it, and the mappings the table
applies to every job: the core's status to an NFP status, a parsed target to the core's
:class:`~nfgate.model.Target`, a broker error to a RESPONSE. Pure: no store, no socket.
"""

from __future__ import annotations

import time
from typing import Any

from nfgate.codecs._base import load_json
from nfgate.codecs.nfp import codec as wire
from nfgate.codecs.nfp import session as nfpjson
from nfgate.codecs.nfp.messages import BROKER, CLIENT, Delete, Event, Get, Post, Put, Response, Stream
from nfgate.codecs.nfp.targets import PSEUDO_SERVICE
from nfgate.errors import DecodeError
from nfgate.model import ALL, ANY, Status, Target, TargetKind

__all__ = [
    "INTERIM_CLASS",
    "Job",
    "body_dict",
    "core_status",
    "error_response",
    "job_target",
    "nfp_status",
    "over_limit_response",
    "store_refusal",
    "to_target",
    "wall_ms",
]

# The NFP spec's status list has no 503/504 ("MAY NOT use status codes not defined"):
# a worker timeout is 408 (design.md), a full queue an internal error.
_SPEC_STATUS = {Status.GATEWAY_TIMEOUT: Status.REQUEST_TIMEOUT, Status.UNAVAILABLE: Status.ERROR}
_HTTP_MAX = 599  # nfgate.model.Reply's bound
INTERIM_CLASS: dict[str, type[Response] | type[Event] | type[Stream]] = {
    "event": Event,
    "stream": Stream,
}


def nfp_status(status: int) -> int:
    """The status an NFP client is sent for the core's ``status`` (never raises)."""
    return int(_SPEC_STATUS.get(status, status))  # type: ignore[call-overload]


def core_status(status: int) -> int:
    """A worker's NFP status as the core carries it (never raises). NFP's codec takes any
    three digits, 100 to 999; the core's statuses are HTTP's, 100 to 599, as SADA's REP
    and DBP's envelope carry only those: one beyond is the worker's error, 500 (as a DBP
    envelope's bad status is)."""
    return status if status <= _HTTP_MAX else int(Status.ERROR)


def wall_ms() -> int:
    """Wall-clock milliseconds: job records carry the time a user reads (retention)."""
    return time.time_ns() // 1_000_000


def to_target(parsed: str | tuple[str, ...]) -> Target:
    """The core's target for a parsed NFP target (never raises)."""
    # The shared frozen ANY and ALL: nothing to build for the common targets.
    if parsed == "any":
        return ANY
    if parsed == "all":
        return ALL
    return Target(kind=TargetKind.NAMED, names=tuple(parsed))


def job_target(service: str, parsed: str | tuple[str, ...], *, norfab: bool = False) -> Target:
    """The core's target for a job: NorFab's pseudo-service ``all`` (its names already
    resolved by :func:`pseudo_targets`) takes the named workers whatever their service,
    and so does any named target of a ``norfab`` client: NorFab's broker looks a name up
    among all its workers (``filter_workers``), so a job for ``echo`` naming a worker of
    another service runs there, where the spec's named worker must offer the service.
    Either way only among NFP workers (``any_service`` is for the client's own protocol,
    :func:`nfgate.queues.any_service_for`): a named DCP, MemoDB, SADA or DBP worker
    must offer the job's service, or would take a NorFab task as a request for its own.
    Raises ValueError for the pseudo-service with ``any`` or ``all`` left unresolved."""
    if service == PSEUDO_SERVICE:
        if isinstance(parsed, str):
            raise ValueError(f"pseudo-service target {parsed!r} is not resolved to workers")
        return Target(kind=TargetKind.NAMED, names=parsed, any_service=True)
    if norfab and not isinstance(parsed, str):
        return Target(kind=TargetKind.NAMED, names=parsed, any_service=True)
    return to_target(parsed)


def error_response(service: str, uuid: str, status: int, reason: str) -> Response:
    """The broker's RESPONSE with ``status`` and a NorFab-shaped error body naming ``reason``."""
    body = nfpjson.error_body(uuid, service, "FAILED", [reason])
    return Response(header=BROKER, service=service or "-", uuid=uuid or "-", status=status, body=(body,))


def over_limit_response(frames: list[bytes], reason: str) -> tuple[Response, str] | None:
    """The RESPONSE 400 (and the dialect to send it in) for a client's job message the
    transport dropped for a limit, from ``frames``, those it read before the limit;
    None when they do not hold a client's POST/GET/DELETE/PUT up to its uuid. 400, as
    for a malformed job: sending the same message again cannot help. Never raises."""
    head = [*frames[:6], b""]  # the envelope up to the uuid, and one empty body frame
    dialect = wire.detect(head)
    try:
        msg = wire.decode(head, dialect)
    except DecodeError:
        return None
    if not isinstance(msg, (Post, Get, Delete, Put)) or msg.header != CLIENT:
        return None
    reason = f"message over a limit ({reason}): not taken"
    return error_response(msg.service or "", msg.uuid, Status.UNKNOWN, reason), dialect


class Job:
    """One POSTed job while the edge holds it: its client, how the client speaks, what it
    was told (NorFab's 202 names workers) and which results are in."""

    __slots__ = (
        "announced",
        "answered",
        "client",
        "core_id",
        "dialect",
        "inline",
        "recovered",
        "refused",
        "service",
        "target",
        "told",
        "uuid",
    )

    def __init__(self, *, uuid: str, client: bytes, dialect: str, service: str, target: str) -> None:
        self.uuid = uuid
        self.client = client
        self.dialect = dialect
        self.service = service
        self.target = target
        self.core_id = 0
        self.announced: list[str] = []  # worker names the client was told (NorFab's 202)
        self.answered: set[str] = set()
        self.inline = ""  # the worker whose result the job's row holds (JobStore.add_result)
        self.recovered = False
        self.refused = False  # its record could not be stored: the client gets 500, not 202
        self.told = False  # the client has had that 500


def body_dict(body: tuple[bytes, ...]) -> dict[str, Any]:
    """A stored result's body as the JSON object it holds, or ``{}`` (several frames, not
    JSON, not an object): what a merged NorFab GET can use. Raises nothing."""
    try:
        value = load_json(body[0]) if len(body) == 1 else None
    except (ValueError, UnicodeDecodeError):
        value = None
    return value if isinstance(value, dict) else {}


def store_refusal(exc: BaseException) -> str:
    """The reason a client is given when its job could not be stored (``exc``)."""
    return f"job store unavailable, job not accepted: {exc}"
