"""The edge contract (:class:`Edge`) and what every edge shares: settings, traffic
counts, bounded peer records. The ZeroMQ ROUTER edge is in :mod:`nfgate.edges.router_edge`;
import both from :mod:`nfgate.edges`."""

from __future__ import annotations

import abc
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol, TypeVar

import attrs
import zmq

from nfgate.codecs._base import Message
from nfgate.model import Command, Peer, ServiceRef
from nfgate.routing_types import QUEUE_EXPIRED, Deliver, Output
from nfgate.transports.zmq import Limits, identity_label

if TYPE_CHECKING:
    from nfgate.gateway import Gateway

MALFORMED_WARN_S = 60.0  # at most one WARNING a minute per edge for malformed input
# Workers whose dropped messages one read may note (RouterEdge.lost_messages): a bound
# against a flood of oversized messages between two reads (one batch reads 256).
MAX_DROPPED = 1024
_clock = time.monotonic  # replaced in tests

log = logging.getLogger("nfgate.edge")

WorkerAccess = Literal["any", "checked", "none"]
"""Who may register as a worker (or server) on an edge: any peer that reaches it, only
peers whose key or certificate the edge checks, or nobody (an edge that takes none)."""


class WireCodec(Protocol):
    """What an edge needs of its protocol's codec module."""

    def detect(self, frames: list[bytes]) -> str: ...

    def decode(self, frames: list[bytes], dialect: str) -> Message: ...


K = TypeVar("K")
V = TypeVar("V")


def forget_oldest(
    records: OrderedDict[K, V],
    limit: int,
    keep: Callable[[K, V], bool],
    forgotten: Callable[[K], None] | None = None,
) -> None:
    """Forget the oldest of ``records`` until at most ``limit`` are left, passing over
    those ``keep`` protects (a worker's, a server's): each one passed over moves to the
    newest end. Left first in line, one long-lived worker would stop every later call
    from forgetting anything, and the records of a broker whose clients come and go
    (a new identity per connection) would grow for as long as it runs. The newest
    record is never forgotten, and one call looks at each record once at most.
    ``forgotten`` is called with each key forgotten (what else the edge keeps of it)."""
    for _ in range(len(records) - 1):
        if len(records) <= limit:
            return
        key, value = next(iter(records.items()))
        if keep(key, value):
            records.move_to_end(key)
        else:
            del records[key]
            if forgotten is not None:
                forgotten(key)


class EdgeSettings:
    """What every edge is told at construction; protocol edges add their own options."""

    __slots__ = ("context", "limits", "name", "options", "protocol", "url")

    def __init__(
        self,
        *,
        name: str,
        protocol: str,
        url: str,
        context: zmq.Context[zmq.Socket[bytes]],
        limits: Limits | None = None,
        options: dict[str, object] | None = None,
    ) -> None:
        self.name = name
        self.protocol = protocol
        self.url = url
        self.context = context
        self.limits = limits or Limits()
        self.options = options or {}


peer_label = identity_label
"""A printable name for a transport address: NorFab's readable identities as they are,
others as ``id-<hex>`` (:func:`nfgate.transports.zmq.identity_label`)."""


class WireCounts(Protocol):
    """What a transport counts of the messages it moved (``nfgate.transports``: the
    ZeroMQ ROUTER, the NNG rep0 socket, the UDP socket)."""

    @property
    def received(self) -> int: ...
    @property
    def sent(self) -> int: ...
    @property
    def receive_failures(self) -> int: ...
    @property
    def send_failures(self) -> int: ...


@attrs.frozen
class Traffic:
    """Messages moved on the wire since the edge started: what NorFab's ``get_stats``
    calls "messaging". ``receive_failures``: messages read and refused, by the
    transport (too many frames, too many held requests) or by the edge (bad input);
    ``send_failures``: messages the transport could not send (peer gone, queue full)."""

    received: int = 0
    sent: int = 0
    receive_failures: int = 0
    send_failures: int = 0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(
            received=self.received + other.received,
            sent=self.sent + other.sent,
            receive_failures=self.receive_failures + other.receive_failures,
            send_failures=self.send_failures + other.send_failures,
        )


class Edge(abc.ABC):
    """Base of the protocol edges. Subclasses set :attr:`protocol` and implement the
    abstract methods; every method is called from the gateway's one event-loop thread.

    Network input never raises out of :meth:`receive`: a message that does not decode,
    or breaks the protocol's state machine, is counted (:attr:`counters`), logged at
    DEBUG (never per message at INFO) and answered with the protocol's error where it
    has one. Messages that are not the protocol at all (undecodable, over a size
    limit) also make a WARNING, at most one a minute per edge (:meth:`malformed`).
    """

    protocol: str = ""
    # Every event name the edge counts: its counters start at 0, so each is exported from
    # the start (a Prometheus counter that first appears at 1 hides that first increase).
    # connections_closed: workers' connections seen closing (RouterEdge.watches_connections).
    # send_queue_full: messages dropped because the peer's send queue was full (send_dropped).
    EVENTS: ClassVar[tuple[str, ...]] = (
        "connections_closed",
        "internal_errors",
        "send_queue_full",
        "undecodable",
        "unroutable",
    )
    # True for an edge whose clients' requests outlive a stop (NFP's stored jobs, taken
    # up again after a restart); the others' open requests are ended at exit with their
    # protocol's "unavailable" (Router.abandon).
    keeps_requests: ClassVar[bool] = False
    drained: bool = False
    """Set by :meth:`receive` when it stopped because nothing more was waiting, not
    because its budget ran out: the gateway then reads no further chunk from this edge
    in this iteration (an edge that never sets it is read until a chunk yields no command)."""

    def __init__(self, settings: EdgeSettings) -> None:
        self.name = settings.name
        self.kind = settings.protocol  # its config table, [edges.<kind>]: nfp for nfp-2 too
        self.url = settings.url
        self.counters: Counter[str] = Counter(dict.fromkeys(self.EVENTS, 0))
        self.bad_inputs = 0  # every bad_input() call, whatever its counter
        # Per kind (``what``): messages since its last WARNING, and the monotonic time
        # of the next one. A few fixed kinds per edge, so a few entries at most.
        self._malformed: dict[str, tuple[int, float]] = {}
        # Peers whose records this edge keeps ([limits] max_peers): the Peer and
        # ServiceRef caches are reset beyond it, the protocol edges' records trimmed.
        self.max_peers = settings.limits.max_peers
        self._gateway: Gateway | None = None
        self._peers_seen: dict[bytes, Peer] = {}
        self._services_seen: dict[str, ServiceRef] = {}

    # -- wiring -----------------------------------------------------------------

    def attach(self, gateway: Gateway) -> None:
        """The gateway this edge runs in (management services, worker names, catalog)."""
        self._gateway = gateway

    @property
    def gateway(self) -> Gateway | None:
        return self._gateway

    @property
    @abc.abstractmethod
    def endpoint(self) -> str:
        """The bound address as peers reach it (port resolved), or "" if not listening."""

    @abc.abstractmethod
    def sockets(self) -> Sequence[zmq.Socket[bytes] | int]:
        """Sockets (or file descriptors, e.g. pynng's ``recv_fd`` or a UDP socket) the
        gateway polls for input on this edge's behalf."""

    def side_inputs(self) -> Sequence[tuple[zmq.Socket[bytes], Callable[[int], list[Command]]]]:
        """Sockets the gateway polls besides :meth:`sockets`, each with what to call
        (with the time, in ms) when it is readable: the commands it returns go to the
        core before any of the iteration's messages are read (a connection's end
        before what a new connection on the same file descriptor sent)."""
        return ()

    def peer(self, address: bytes, sub: bytes = b"") -> Peer:
        """The :class:`Peer` for a transport address (cached: built once per peer, not
        per message, since validating attrs classes is a measurable part of a relay)."""
        if sub:
            return Peer(edge=self.name, protocol=self.protocol, address=address, sub=sub)
        peer = self._peers_seen.get(address)
        if peer is None:
            if len(self._peers_seen) >= self.max_peers:
                self._peers_seen.clear()
            peer = self._peers_seen[address] = Peer(edge=self.name, protocol=self.protocol, address=address)
        return peer

    def service(self, name: str) -> ServiceRef:
        """A cached :class:`ServiceRef` for a service name seen on the wire."""
        ref = self._services_seen.get(name)
        if ref is None:
            if len(self._services_seen) >= self.max_peers:
                self._services_seen.clear()
            ref = self._services_seen[name] = ServiceRef(name=name)
        return ref

    # -- traffic ----------------------------------------------------------------

    @abc.abstractmethod
    def receive(self, now_ms: int, budget: int) -> list[Command]:
        """Read at most ``budget`` waiting messages; return the commands for the core."""

    @abc.abstractmethod
    def emit(self, output: Output, now_ms: int) -> list[Command]:
        """Carry out one core output addressed to a peer of this edge. May return
        commands for the core (e.g. a send that failed because the peer is gone)."""

    def flush_sends(self, now_ms: int) -> None:  # noqa: B027 - optional hook
        """Send what was queued: after every few messages the gateway reads, and at the
        end of one loop iteration as its first phase. Every edge's sends go out before
        any edge's :meth:`flush`, so a worker of one protocol starts on a request while
        another edge commits its job records."""

    def flush(self, now_ms: int) -> None:  # noqa: B027 - optional hook
        """End of one loop iteration, second phase: commit (NFP's group commit of job
        records) and send what waited for the commit (NFP's 202s)."""

    def pending(self) -> bool:
        """Input may be waiting that no socket of :meth:`sockets` announces: the gateway
        then reads this edge in every iteration and does not sleep in its poll."""
        return False

    def settle(self) -> None:  # noqa: B027 - optional hook
        """A loop iteration found nothing to do: make :meth:`pending` false unless input
        is really waiting, so that the loop can sleep."""

    def tick(self, now_ms: int) -> list[Command]:
        """Edge timers (heartbeats to send); returns commands for the core."""
        return []

    def next_deadline(self) -> int | None:
        """When :meth:`tick` next has work, or None."""
        return None

    def heartbeats(self, peer: Peer) -> tuple[int, int] | None:
        """(sent, heard): the heartbeat messages this edge has exchanged on the wire with
        its worker ``peer`` since it registered, for the broker's ``show_workers``
        (NorFab's "keepalives tx/rx"); None when ``peer`` is not a worker of this edge
        or the edge does not count them."""
        record = self.beat_record(peer.address) if peer.edge == self.name else None
        return None if record is None else (record.beats_sent, record.beats_heard)

    def beat_record(self, address: bytes) -> BeatCounts | None:
        """The record counting heartbeats with the worker at ``address`` (None: no such
        worker, or this edge does not count them)."""
        return None

    def recover(self, now_ms: int) -> list[Command]:
        """Commands that restore this edge's accepted work after a restart."""
        return []

    def closing(self, now_ms: int) -> None:  # noqa: B027 - optional hook
        """The gateway began to drain (the core refuses new requests from clients): stop
        offering services to peers that would route requests here, where the protocol
        can say so."""

    def drain(self, now_ms: int) -> None:  # noqa: B027 - optional hook
        """The gateway is stopping: say goodbye to peers (DISCONNECT) where the protocol has it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the sockets (linger 0)."""

    def stats(self) -> dict[str, int]:
        return dict(self.counters)

    def worker_access(self) -> WorkerAccess:
        """Who may register as a worker here (default: any peer). Every edge shares one
        namespace of service names, so an edge open to any worker lets any peer serve
        any name, a name clients of a locked-down edge call included."""
        return "any"

    def wires(self) -> Sequence[WireCounts]:
        """The transports this edge reads and writes (for :meth:`traffic`)."""
        return ()

    def traffic(self) -> Traffic:
        """What this edge's transports moved, with the input the edge refused."""
        total = Traffic(receive_failures=self.bad_inputs)
        for w in self.wires():
            total += Traffic(w.received, w.sent, w.receive_failures, w.send_failures)
        return total

    def internal_error(self, address: bytes) -> None:
        """A bug met while handling one message from ``address`` (call it from an
        ``except`` block): logged with its traceback and counted with the gateway's own
        (tests assert the count stays 0). The edge goes on with the next message, so
        the bug costs that one message, not the others read with it."""
        self.counters["internal_errors"] += 1
        if self._gateway is not None:
            self._gateway.internal_errors += 1
        log.exception("%s: internal error on a message from %s", self.name, peer_label(address))

    def bad_input(self, peer: Peer, what: str, reason: str) -> None:
        """Count and log one piece of bad network input."""
        self.counters[what] += 1
        self.bad_inputs += 1
        if what == "undecodable":
            self.malformed(what, peer_label(peer.address), reason)
        else:
            log.debug("%s: %s from %s: %s", self.name, what, peer_label(peer.address), reason)

    def dropped(self, what: str, identity: bytes, reason: str, frames: Sequence[bytes] = ()) -> None:
        """The transport dropped a message from ``identity`` for a limit (counted there);
        ``frames``: those it read before the limit. Logged, then answered where the
        protocol can (:meth:`over_limit`)."""
        self.malformed(what, peer_label(identity), reason)
        self.over_limit(identity, frames, reason)

    def over_limit(self, identity: bytes, frames: Sequence[bytes], reason: str) -> None:
        """Answer a request dropped for a limit with the protocol's error, when the
        ``frames`` read before the limit say who to answer (NFP: a client's job uuid;
        SADA: a REQ's request id). design.md: "A limit hit is a counter, a log line
        and the protocol's error reply". The default: no answer (DCP and MemoDB have
        no error reply; their clients time out and retry)."""
        return

    def limit_hit(self, out: Deliver) -> None:
        """Log a request of this edge's client that the core refused or ended at one of
        its limits (``out.reason`` in :data:`nfgate.routing_types.LIMIT_REASONS`; the
        core counted it, this edge answers it): design.md, "A limit hit is a counter, a
        log line and the protocol's error reply". Rate-limited as :meth:`malformed`:
        a full queue refuses many requests in a row."""
        request = out.request
        kind = "queue_expired" if out.reason == QUEUE_EXPIRED else "queue_full"
        detail = f"request for {request.service.name!r} ({out.reply.status}): {out.reason}"
        self.malformed(kind, peer_label(request.reply_to.address), detail)

    def malformed(self, what: str, source: str, reason: str) -> None:
        """Log a message that is not the protocol at all (already counted): each at
        DEBUG, and a WARNING for the first and then at most one a minute with the number
        since, so that an operator at INFO learns that a peer speaks something else (a
        misconfigured client, another protocol on the port) without a line per message,
        which a hostile peer could turn into a flood of the log. Each kind (``what``)
        has its own minute: one kind's flood does not hide another's first warning.
        (:meth:`limit_hit` logs the requests a limit refused the same way.)"""
        self._warn_limited(what, f"{what} from {source}: {reason}")

    def send_dropped(self, address: bytes, high_water_mark: int) -> None:
        """Count and log a message to ``address`` the transport dropped because the
        peer's send queue was full (``high_water_mark`` messages, EAGAIN): a peer that
        does not read, or not as fast as it is sent to (a client asking without reading
        the answers, a stuck worker). Counted as ``send_queue_full``, and a WARNING
        rate-limited as :meth:`malformed`'s: the message is lost, and a counter alone
        is seen by nobody until it is looked at."""
        self.counters["send_queue_full"] += 1
        self._warn_limited(
            "send_queue_full",
            f"send_queue_full to {peer_label(address)}: message dropped, the peer's send queue "
            f"holds {high_water_mark} messages ([limits] high_water_mark): it does not read, "
            "or not as fast as it is sent to",
        )

    def _warn_limited(self, what: str, text: str) -> None:
        """``text`` at DEBUG, and at WARNING for the first of kind ``what`` and then at
        most once a minute with the number since (:meth:`malformed`)."""
        unwarned, warn_at = self._malformed.get(what, (0, 0.0))
        now = _clock()
        if now < warn_at:
            self._malformed[what] = (unwarned + 1, warn_at)
            log.debug("%s: %s", self.name, text)
            return
        log.warning(
            "%s: %s (%d such message(s) since the last of these warnings, "
            "given at most once a minute; each is logged at DEBUG)",
            self.name,
            text,
            unwarned + 1,
        )
        self._malformed[what] = (0, now + MALFORMED_WARN_S)


class BeatCounts(Protocol):
    """A worker record that counts heartbeat messages on the wire, both ways."""

    beats_sent: int
    beats_heard: int
