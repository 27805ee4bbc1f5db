"""What the routing core takes as configuration and gives back as outputs.

Split from :mod:`nfgate.routing` so the core module holds only the algorithm.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import attrs
from attrs import validators as v

from nfgate.model import Catalog, Peer, Reply, Request, ServiceRef

STATUS_CANCELLED: Final = 410  # not in model.Status: only the core emits it

# Why the core refused or ended a request at one of its limits (Deliver.reason).
# design.md: "A limit hit is a counter, a log line and the protocol's error reply":
# the core counts it (rejected, expired), the gateway logs it (Edge.limit_hit), the
# client's edge answers it in its protocol's terms.
SERVICE_QUEUE_FULL: Final = "service queue full"
GATEWAY_QUEUE_FULL: Final = "gateway queue full"
QUEUE_EXPIRED: Final = "no worker within the queue expiry"
# Request.give_up_ms passed before a worker took it (a NorFab job's own timeout).
CLIENT_GAVE_UP: Final = "the client's timeout passed before a worker took it"
LIMIT_REASONS: Final = frozenset({SERVICE_QUEUE_FULL, GATEWAY_QUEUE_FULL, QUEUE_EXPIRED})

COUNTERS: Final = (
    "accepted",
    "rejected",
    "dispatched",
    "redispatched",
    "replied",
    "progress",
    "expired",
    "gave_up",
    "timeouts",
    "failed",
    "cancelled",
    "unknown_replies",
    "late_replies",
    "late_replies_relayed",
    "unsendable",
    "unknown_heartbeats",
    "unknown_cancels",
    "workers_registered",
    "workers_lost",
    "evicted",
    "forwarded",
    "unknown_forwards",
    "unforwardable",
)
"""What :meth:`nfgate.routing.Router.stats` counts (besides its gauges)."""

DEFAULT_LIVENESS: Final[Mapping[str, tuple[int, int]]] = MappingProxyType(
    {
        "nfp": (2500, 6),  # NorFab 0.25: 2.5 s heartbeats, 6 missed
        "sada": (5000, 3),  # PIRAN channels: PING every 5 s, 3 retries
        "memodb": (10_000, 3),  # bcdb broker: idle heartbeat after 10 s
        "dcp": (2500, 3),
        # Off: the DBP edge times each service at the interval it registered
        # (docs/protocols/dbp.md, Heartbeats), as the ``dbp`` edge kind's default says.
        "dbp": (0, 3),
    }
)
"""Per-protocol ``(interval_ms, liveness)``; a worker silent ``interval * liveness`` ms is dropped.
The same as each edge kind's ``heartbeat`` in :mod:`nfgate.edges.kinds` (a test holds them
equal), for a core built without a configuration."""


def _liveness_map(value: Mapping[str, tuple[int, int]]) -> Mapping[str, tuple[int, int]]:
    for key, pair in value.items():
        if len(pair) != 2 or any(not isinstance(x, int) or x < 0 for x in pair):
            raise ValueError(f"liveness[{key!r}] must be (interval_ms, liveness), non-negative ints")
    return MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class RouterConfig:
    """Limits and timers of the core; every field has a usable default.

    ``liveness`` maps an edge name or a protocol name (edge first) to
    ``(interval_ms, liveness)``; an interval of 0 disables expiry for those workers
    (e.g. Hermes-dialect DBP services, which send no heartbeats).
    """

    queue_expiry_ms: int = attrs.field(default=300_000, validator=[v.instance_of(int), v.ge(0)])
    max_redispatch: int = attrs.field(default=3, validator=[v.instance_of(int), v.ge(0)])
    max_queue_per_service: int = attrs.field(default=10_000, validator=[v.instance_of(int), v.ge(1)])
    # Over all services: many services with a short queue each add up too (memory).
    max_queued: int = attrs.field(default=50_000, validator=[v.instance_of(int), v.ge(1)])
    liveness: Mapping[str, tuple[int, int]] = attrs.field(default=DEFAULT_LIVENESS, converter=_liveness_map)
    default_liveness: tuple[int, int] = (2500, 3)
    heartbeat_grants_slot: frozenset[str] = attrs.field(default=frozenset({"dcp"}), converter=frozenset)
    # Protocols whose workers cannot be told to stop a request (no cancel message, and
    # their edge does not hold back the next one itself, as MemoDB's does): a request
    # cancelled at such a worker keeps its slot until the worker answers, as a timed-out
    # one does. NFP workers get a DELETE.
    cancel_keeps_slot: frozenset[str] = attrs.field(
        default=frozenset({"dcp", "sada", "dbp"}), converter=frozenset
    )
    # The most requests one worker holds at once (late ones included), whatever its
    # protocol: caps the capacity a worker registers with (NorFab's 5, a SADA server's
    # server_capacity) and the slots a DCP worker's PINGs grant.
    max_in_flight_per_worker: int = attrs.field(default=64, validator=[v.instance_of(int), v.ge(1)])

    def timeout_for(self, peer: Peer) -> int:
        """Milliseconds of silence after which ``peer`` is dropped; 0 means never."""
        interval, liveness = self.liveness.get(
            peer.edge, self.liveness.get(peer.protocol, self.default_liveness)
        )
        return interval * liveness


@attrs.frozen(kw_only=True)
class Accepted:
    """The core took ``request`` (now carrying its core id); ``workers``: assigned so far."""

    request: Request
    workers: tuple[Peer, ...] = ()


@attrs.frozen(kw_only=True)
class Dispatch:
    """Send ``request`` to ``worker``; ``attempt`` is 1 for the first dispatch of this part."""

    worker: Peer
    request: Request
    attempt: int = 1


@attrs.frozen(kw_only=True)
class Deliver:
    """Send ``reply`` to the client of ``request``; ``remaining`` more replies will follow."""

    reply: Reply
    request: Request
    remaining: int = 0
    reason: str = ""  # why the core produced an error reply; "" for a worker's reply

    @property
    def client(self) -> Peer:
        return self.request.reply_to

    @property
    def final(self) -> bool:
        """True when this is the last reply the client gets for this request."""
        return self.remaining == 0


@attrs.frozen(kw_only=True)
class Evict:
    """The core dropped ``worker``: tell it (the protocol's DISCONNECT)."""

    worker: Peer
    reason: str


@attrs.frozen(kw_only=True)
class Abort:
    """``request``, held by ``worker``, was cancelled (NFP DELETE to the worker)."""

    worker: Peer
    request: Request


@attrs.frozen(kw_only=True)
class WorkerInfo:
    """One registered worker as :meth:`nfgate.routing.Router.workers` reports it.

    ``in_flight`` is how many requests it holds, the slots taken of its ``capacity``;
    ``late`` how many of those timed out there: it is still working on them as far as
    the core knows, and its answers to them will be dropped.
    """

    peer: Peer
    name: str
    services: tuple[ServiceRef, ...]
    in_flight: int
    capacity: int
    since_ms: int
    last_seen_ms: int
    timeout_ms: int
    late: int = 0


@attrs.frozen(kw_only=True)
class WorkerChange:
    """A worker joined or left the core's table (:attr:`nfgate.routing.Router.changes`).

    Not an output: nothing is sent for it. The gateway logs it at INFO, as NorFab's
    broker logs a worker registered and a worker whose keepalives expired. ``reason``
    says why a worker left; ``held`` is how many requests it held then (each is
    dispatched again or failed, by the redispatch rules).
    """

    peer: Peer
    name: str
    services: tuple[ServiceRef, ...]
    joined: bool
    reason: str = ""
    held: int = 0


Output = Accepted | Dispatch | Deliver | Evict | Abort | Catalog
