"""The protocol-neutral command model.

Every edge turns its protocol's messages into these commands for the routing core,
and the core answers with these commands for the edges to encode. Nothing here knows
a wire format: a MemoDB JOB, a DCP REQUEST, an NFP POST and a SADA REQ all become one
:class:`Request`.

All classes are frozen and keyword-only, hold tuples rather than lists, and validate
their fields at construction (raising ``ValueError``/``TypeError``), so a command that
exists is a command the core can act on.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs
from attrs import validators as v

from nfgate.frames import check_bytes_tuple
from nfgate.tables import StateEnum

__all__ = [
    "Action",
    "Cancel",
    "Catalog",
    "CatalogEntry",
    "ClientGone",
    "Command",
    "Fetch",
    "Forward",
    "Heartbeat",
    "Lookup",
    "Peer",
    "Register",
    "Reply",
    "Request",
    "ServiceRef",
    "Status",
    "Target",
    "TargetKind",
    "Unregister",
]


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


def _int_at_least(low: int, high: int | None = None) -> Callable[[object, attrs.Attribute[Any], Any], None]:
    """A validator for an ``int`` in ``[low, high]``: ``TypeError`` for another type,
    ``ValueError`` out of range. One call where ``[instance_of(int), ge(low)]`` makes
    three (the and-validator and its two members), on every Request and Reply built."""

    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, int):
            raise TypeError(f"'{attribute.name}' must be an int, got {value!r}")
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise ValueError(f"'{attribute.name}' must be {bound}: {value!r}")

    return check


def _reply_texts(inst: Any, _: attrs.Attribute[Any], value: Any) -> None:
    """``Reply.progress`` and ``Reply.reason`` are ``str`` (``TypeError``): one call for
    both, on the field declared last (attrs validates once every field is set), as a
    Reply is built for every relayed request."""
    if not isinstance(inst.progress, str) or not isinstance(value, str):
        raise TypeError(f"'progress' and 'reason' must be str, got {inst.progress!r}, {value!r}")


def _nonempty_str(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty string")


class Status(enum.IntEnum):
    """HTTP-style statuses used across protocols (NFP's and SADA's are both HTTP codes)."""

    OK = 200
    CREATED = 201  # NorFab: the worker accepted the job
    ACCEPTED = 202  # NFP: the broker stored and dispatched the job
    PENDING = 300  # NFP GET: no result yet
    UNKNOWN = 400  # NFP: unknown job uuid (also: bad request)
    NOT_FOUND = 404  # NorFab: no such service/worker
    REQUEST_TIMEOUT = 408  # NFP: no worker within the queue expiry, or the worker timed out
    EXPECT_FAILED = 417
    ERROR = 500
    UNAVAILABLE = 503  # SADA: no worker for the service
    GATEWAY_TIMEOUT = 504  # SADA: the worker timed out


# cache_hash: a peer is a dict key in the core (workers, queues, liveness) and is hashed
# about a dozen times per relayed request; it never changes once built.
@attrs.frozen(kw_only=True, cache_hash=True)
class Peer:
    """Where a command came from or goes to.

    ``edge`` names the listening edge (``"nfp"``, ``"dcp-2"``...), ``address`` is the
    transport address (ROUTER identity, NNG pipe id), ``sub`` distinguishes several
    logical peers behind one address (a MemoDB worker id, an NNG context).
    """

    edge: str = attrs.field(validator=_nonempty_str)
    protocol: str = attrs.field(validator=_nonempty_str)
    address: bytes = attrs.field(validator=v.instance_of(bytes))
    sub: bytes = attrs.field(default=b"", validator=v.instance_of(bytes))


@attrs.frozen(kw_only=True)
class ServiceRef:
    """A service name, with a version only for Safir-Darbaan; ``None`` matches any version."""

    name: str = attrs.field(validator=_nonempty_str)
    version: str | None = attrs.field(default=None, validator=v.optional(v.instance_of(str)))

    def matches(self, offered: ServiceRef) -> bool:
        """True if a worker offering ``offered`` can serve a request for ``self``."""
        return self.name == offered.name and (
            self.version is None or offered.version is None or self.version == offered.version
        )


class TargetKind(StateEnum):
    ANY = "any"  # the next free worker
    ALL = "all"  # every worker of the service; one reply per worker
    NAMED = "named"  # only the workers named (NFP unicast)


@attrs.frozen(kw_only=True)
class Target:
    """Which workers of the service. ``any_service`` (NAMED only): a named worker of the
    client's own protocol takes the request whatever services it offers (NorFab's
    pseudo-service ``all`` is resolved to it, and a NorFab client's names mean it); a
    named worker of another protocol must still offer the service."""

    kind: TargetKind = TargetKind.ANY
    names: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    any_service: bool = False

    def __attrs_post_init__(self) -> None:
        if (self.kind is TargetKind.NAMED) != bool(self.names):
            raise ValueError("a NAMED target needs worker names; ANY and ALL take none")
        if self.any_service and self.kind is not TargetKind.NAMED:
            raise ValueError("any_service needs a NAMED target")


ANY = Target()
ALL = Target(kind=TargetKind.ALL)


@attrs.frozen(kw_only=True)
class Action:
    """What to do within a service: SADA's (category, action) or NFP's task name."""

    name: str = attrs.field(validator=v.instance_of(str))
    category: str = attrs.field(default="", validator=v.instance_of(str))


@attrs.frozen(kw_only=True)
class Register:
    """A worker/server offers services. ``capacity`` is how many requests it takes at once.

    ``name`` is what named targets match and what replies are keyed by. ``name_lasts``
    is False for a name that dies with the worker's connection (one libzmq or the edge
    made up): a worker that comes back never has it again, so nothing bound to it waits
    for it to return."""

    peer: Peer
    services: tuple[ServiceRef, ...] = attrs.field(converter=_tuple)
    capacity: int = attrs.field(default=1, validator=_int_at_least(1))
    name: str = attrs.field(default="", validator=v.instance_of(str))  # NFP worker name
    name_lasts: bool = attrs.field(default=True, validator=v.instance_of(bool))


@attrs.frozen(kw_only=True)
class Unregister:
    peer: Peer
    reason: str = ""


@attrs.frozen(kw_only=True)
class Heartbeat:
    peer: Peer


@attrs.frozen(kw_only=True)
class Request:
    """A request for a service.

    ``id`` is the core's own id (assigned by the core; edges pass 0 when submitting).
    ``origin`` is the client protocol's correlation token (NFP job uuid, SADA request
    id, DCP metadata parts joined by the edge, MemoDB context) that must come back in
    the reply untouched. ``metadata`` are DCP metadata parts, echoed exactly. ``body``
    is the payload, frames passed through opaque. ``acknowledge``: the client's edge
    wants the core's ``Accepted`` (NFP answers it with 202, MemoDB learns the core id);
    an edge whose protocol has no acknowledgement turns it off, which spares the core
    an output per request (about a tenth of a DCP relay's processing, measured).
    ``from_worker``: sent for the work a worker holds from a socket other than the
    worker's own (NorFab's worker-embedded client): the core takes it while the gateway
    drains, as it takes a request from a worker's own socket. ``give_up_ms``: the client
    gives up this long after the core takes it (a NorFab job's ``timeout``; None: never):
    from then on none of its parts is dispatched, and one still queued fails with 408.
    """

    id: int = attrs.field(default=0, validator=_int_at_least(0))
    service: ServiceRef
    target: Target = ANY
    action: Action | None = None
    metadata: tuple[bytes, ...] = attrs.field(default=(), converter=_tuple, validator=check_bytes_tuple)
    body: tuple[bytes, ...] = attrs.field(default=(), converter=_tuple, validator=check_bytes_tuple)
    timeout_ms: int | None = attrs.field(default=None, validator=v.optional(v.ge(0)))
    give_up_ms: int | None = attrs.field(default=None, validator=v.optional(v.ge(0)))
    reply_to: Peer
    origin: bytes = attrs.field(default=b"", validator=v.instance_of(bytes))
    acknowledge: bool = True
    from_worker: bool = False


@attrs.frozen(kw_only=True)
class Reply:
    """The answer to :class:`Request` ``id``; ``worker`` is who produced it (None: the core)."""

    id: int = attrs.field(validator=_int_at_least(0))
    status: int = attrs.field(validator=_int_at_least(100, 599))
    body: tuple[bytes, ...] = attrs.field(default=(), converter=_tuple, validator=check_bytes_tuple)
    metadata: tuple[bytes, ...] = attrs.field(default=(), converter=_tuple, validator=check_bytes_tuple)
    worker: Peer | None = None
    worker_name: str = ""
    # Non-empty for an interim message that does not end the request: NorFab's 201
    # ("created"), its EVENT ("event") and STREAM ("stream") chunks. Statuses below 200
    # are interim too. The core relays interim replies and keeps waiting for the final one.
    progress: str = ""  # validated with reason
    # Non-empty when the worker never saw the request: its edge could not send it (a
    # body its dialect cannot carry) and says why. Not the worker's answer, so not
    # relayed as one: the core tries another worker or fails the request with this
    # reason, as it fails the requests it cannot serve itself.
    reason: str = attrs.field(default="", validator=_reply_texts)

    @property
    def interim(self) -> bool:
        return self.status < 200 or bool(self.progress)


@attrs.frozen(kw_only=True)
class CatalogEntry:
    service: ServiceRef
    workers: int
    protocols: tuple[str, ...] = attrs.field(converter=_tuple)
    active: bool = True
    info: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_tuple)


@attrs.frozen(kw_only=True)
class Lookup:
    """A catalog query (DBP info request): a service name, or ``""``/``"*"`` for all."""

    peer: Peer
    query: str = ""


@attrs.frozen(kw_only=True)
class Catalog:
    peer: Peer
    entries: tuple[CatalogEntry, ...] = attrs.field(converter=_tuple)


@attrs.frozen(kw_only=True)
class Fetch:
    """NFP GET: the stored result of job ``job_id``."""

    peer: Peer
    job_id: str = attrs.field(validator=_nonempty_str)


@attrs.frozen(kw_only=True)
class Cancel:
    """NFP DELETE: cancel job ``job_id`` (queued: dropped; running: the worker is told)."""

    peer: Peer
    job_id: str = attrs.field(validator=_nonempty_str)


@attrs.frozen(kw_only=True)
class ClientGone:
    """Client ``peer`` can never be answered again (its connection closed and its
    address was one the transport made up for that connection: a ROUTER identity libzmq
    chose, which no later connection gets): cancel every request it waits on, as a
    Cancel of each would (queued: dropped; at a worker: Abort, or a late slot)."""

    peer: Peer


@attrs.frozen(kw_only=True)
class Forward:
    """A worker hands the request ``id`` it holds on to another service (DCP chaining:
    "respond with a request for another service"). The worker is free again, and the
    final reply still goes to the original client, with the original correlation."""

    worker: Peer
    id: int = attrs.field(validator=_int_at_least(1))
    service: ServiceRef
    metadata: tuple[bytes, ...] = attrs.field(default=(), converter=_tuple, validator=check_bytes_tuple)
    body: tuple[bytes, ...] = attrs.field(default=(), converter=_tuple, validator=check_bytes_tuple)


Command = (
    Register
    | Unregister
    | Heartbeat
    | Request
    | Reply
    | Lookup
    | Catalog
    | Fetch
    | Cancel
    | ClientGone
    | Forward
)
