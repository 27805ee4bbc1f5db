"""Edges: one listening socket each, wiring transport + codec + session to the routing core.

An edge turns what arrives on its socket into core commands (:meth:`Edge.receive`), and
the core's outputs addressed to its peers into frames (:meth:`Edge.emit`). It owns
nothing but its socket and per-peer protocol state; routing decisions are the core's.
"""

from __future__ import annotations

import abc
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

import attrs
import zmq

from nfgate.codecs._base import Message
from nfgate.errors import ConfigError, DecodeError
from nfgate.model import Command, Peer, ServiceRef
from nfgate.routing_types import Output
from nfgate.transports.curve import load_server_keys
from nfgate.transports.zmq import Limits, RouterEndpoint, identity_label, identity_lasts

if TYPE_CHECKING:
    from nfgate.gateway import Gateway

MALFORMED_WARN_S = 60.0  # at most one WARNING a minute per edge for malformed input
# Workers whose dropped messages one read may note (RouterEdge.lost_messages): a bound
# against a flood of oversized messages between two reads (one batch reads 256).
MAX_DROPPED = 1024
_clock = time.monotonic  # replaced in tests

__all__ = [
    "BeatCounts",
    "Edge",
    "EdgeSettings",
    "RouterEdge",
    "Traffic",
    "WireCounts",
    "forget_oldest",
    "identity_lasts",
    "peer_label",
]

log = logging.getLogger("nfgate.edge")


class WireCodec(Protocol):
    """What an edge needs of its protocol's codec module."""

    def detect(self, frames: list[bytes]) -> str: ...

    def decode(self, frames: list[bytes], dialect: str) -> Message: ...


K = TypeVar("K")
V = TypeVar("V")


def forget_oldest(records: OrderedDict[K, V], limit: int, keep: Callable[[K, V], bool]) -> None:
    """Forget the oldest of ``records`` until at most ``limit`` are left, passing over
    those ``keep`` protects (a worker's, a server's): each one passed over moves to the
    newest end. Left first in line, one long-lived worker would stop every later call
    from forgetting anything, and the records of a broker whose clients come and go
    (a new identity per connection) would grow for as long as it runs. The newest
    record is never forgotten, and one call looks at each record once at most."""
    for _ in range(len(records) - 1):
        if len(records) <= limit:
            return
        key, value = next(iter(records.items()))
        if keep(key, value):
            records.move_to_end(key)
        else:
            del records[key]


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
    EVENTS: ClassVar[tuple[str, ...]] = ("connections_closed", "internal_errors", "undecodable", "unroutable")
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
        self._malformed_unwarned = 0  # malformed messages since the last WARNING
        self._malformed_warn_at: float | None = None  # monotonic time of the next one
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

    def dropped(self, what: str, identity: bytes, reason: str) -> None:
        """The transport dropped a message from ``identity`` for a limit (counted there)."""
        self.malformed(what, peer_label(identity), reason)

    def malformed(self, what: str, source: str, reason: str) -> None:
        """Log a message that is not the protocol at all (already counted): each at
        DEBUG, and a WARNING for the first and then at most one a minute with the number
        since, so that an operator at INFO learns that a peer speaks something else (a
        misconfigured client, another protocol on the port) without a line per message,
        which a hostile peer could turn into a flood of the log."""
        self._malformed_unwarned += 1
        now = _clock()
        if self._malformed_warn_at is not None and now < self._malformed_warn_at:
            log.debug("%s: %s from %s: %s", self.name, what, source, reason)
            return
        log.warning(
            "%s: %s from %s: %s (%d such message(s) since the last of these warnings, "
            "given at most once a minute; each is logged at DEBUG)",
            self.name,
            what,
            source,
            reason,
            self._malformed_unwarned,
        )
        self._malformed_unwarned = 0
        self._malformed_warn_at = now + MALFORMED_WARN_S


class BeatCounts(Protocol):
    """A worker record that counts heartbeat messages on the wire, both ways."""

    beats_sent: int
    beats_heard: int


class Decoding:
    """Reading a ROUTER transport's waiting messages through the protocol's codec: the
    receive loop every ZeroMQ edge shares. Needs ``transport`` (a RouterEndpoint),
    ``wire`` and the :class:`Edge` methods ``peer`` and ``bad_input``."""

    wire: ClassVar[WireCodec]
    """The protocol's codec (``detect``/``decode``), set by each subclass."""
    transport: RouterEndpoint

    if TYPE_CHECKING:  # provided by Edge, which comes first in the subclasses' MRO
        drained: bool

        def peer(self, address: bytes, sub: bytes = b"") -> Peer: ...

        def bad_input(self, peer: Peer, what: str, reason: str) -> None: ...

    def decoded(self, budget: int) -> Iterator[tuple[bytes, Message, str]]:
        """``(address, message, dialect)`` for up to ``budget`` waiting messages. One that
        does not decode is counted and logged (:meth:`bad_input`), handed to
        :meth:`undecodable` and skipped: network input never raises out of here."""
        recv, decode, dialect_of = self.transport.recv, self.wire.decode, self.dialect_of
        for _ in range(budget):
            got = recv()
            if got is None:
                self.drained = True
                return
            address, frames = got
            dialect = dialect_of(address, frames)
            try:
                message = decode(frames, dialect)
            except DecodeError as exc:
                self.bad_input(self.peer(address), "undecodable", exc.reason)
                self.undecodable(address, frames)
                continue
            yield address, message, dialect

    def dialect_of(self, address: bytes, frames: list[bytes]) -> str:
        """The dialect to decode ``frames`` with (default: detected from the frames)."""
        return self.wire.detect(frames)

    def undecodable(self, address: bytes, frames: list[bytes]) -> None:
        """A message from ``address`` did not decode (already counted): answer it if the
        protocol has an answer for that."""


class RouterEdge(Edge, Decoding):
    """An edge on one bound ZeroMQ ROUTER socket.

    Raises :class:`nfgate.errors.TransportError` at construction when the address cannot
    be bound.
    """

    # Messages queued by send_later, and queued messages that could not be sent. Empty
    # tuples at class level, replaced by lists on first use, so subclasses that build
    # their own transport without RouterEdge.__init__ still have them.
    _outgoing: list[tuple[bytes, list[bytes]]] | tuple[()] = ()
    _unreachable: list[bytes] | tuple[()] = ()
    # Edges whose workers are removed as soon as their connection closes (a process
    # that died, a connection libzmq dropped for a frame over ZMQ_MAXMSGSIZE), rather
    # than liveness intervals later: the worker's DEALER reconnects on its own, so
    # without this the gateway would take a worker that lost a reply for alive.
    watches_connections: ClassVar[bool] = False

    def __init__(self, settings: EdgeSettings) -> None:
        super().__init__(settings)
        secret = settings.options.get("curve_secret_key")
        allow = settings.options.get("curve_allow")
        curve = load_server_keys(secret, allow) if isinstance(secret, Path) else None  # type: ignore[arg-type]
        if curve is None and allow is not None:
            raise ConfigError(f"config: edges.{settings.protocol}.curve_allow needs curve_secret_key")
        self.curve_public_key = curve.public_key.decode() if curve is not None else ""
        self.transport = RouterEndpoint(
            settings.context, settings.url, settings.limits, curve=curve, domain=settings.name
        )
        self.transport.on_dropped = self.dropped
        self._dropped_from: list[bytes] = []  # workers whose message the transport dropped

    @property
    def endpoint(self) -> str:
        return self.transport.endpoint

    def sockets(self) -> Sequence[zmq.Socket[bytes] | int]:
        return (self.transport.socket,)

    def side_inputs(self) -> Sequence[tuple[zmq.Socket[bytes], Callable[[int], list[Command]]]]:
        if not self.watches_connections:
            return ()
        self._fd_of: dict[bytes, int] = {}  # a worker's address -> its connection's fd
        self._by_fd: dict[int, bytes] = {}
        self._reused: dict[int, int] = {}  # fd -> closings still to come of its older connections
        self._gone: list[bytes] = []  # workers found gone by their fd's reuse
        return ((self.transport.watch_connections(), self._connections_closed),)

    def note_connection(self, address: bytes) -> None:
        """Remember which connection the worker at ``address`` sent its last message by
        (call it while handling that message: its registration and heartbeats)."""
        if self.transport.monitor is None:  # not watching (no gateway polls the monitor)
            return
        fd = self.transport.source_fd()
        old = self._fd_of.get(address)
        if old == fd or fd < 0:  # -1: no connection to tell (a transport without one)
            return
        holder = self._by_fd.get(fd)
        if holder is not None and holder != address:
            # The fd is another worker's, whose connection closed and whose closing is
            # still to be read (the loop reads those first, but a connection can close
            # and its fd be reused while a batch is being read): that worker is gone,
            # and that closing is not this connection's.
            self._reused[fd] = self._reused.get(fd, 0) + 1
            del self._fd_of[holder]
            self._gone.append(holder)
        if old is not None and self._by_fd.get(old) == address:
            del self._by_fd[old]
        self._fd_of[address] = fd
        self._by_fd[fd] = address

    def moved(self, address: bytes) -> bool:
        """True when the worker at ``address`` speaks over another connection than the
        one noted while that one's closing is still to be read: a worker that reconnected
        under the same identity (ROUTER_HANDOVER) within one batch. What the gateway sent
        on the old connection may be lost with it, so the caller handles the worker as
        if the closing had come first (:meth:`connection_closed`); the closing itself,
        when read, is then ignored. Counted in ``connections_closed``."""
        if self.transport.monitor is None:
            return False
        old = self._fd_of.get(address)
        if old is None or self._by_fd.get(old) != address or old == self.transport.source_fd():
            return False
        del self._fd_of[address], self._by_fd[old]
        self._reused[old] = self._reused.get(old, 0) + 1  # its closing is still to come
        self.counters["connections_closed"] += 1
        return True

    def forget_connection(self, address: bytes) -> None:
        """Stop watching the connection of ``address`` (a worker forgotten)."""
        if self.transport.monitor is None:
            return
        fd = self._fd_of.pop(address, None)
        if fd is not None and self._by_fd.get(fd) == address:
            del self._by_fd[fd]

    def leftover(self, address: bytes) -> tuple[bool, list[Command]]:
        """Whether the message being handled, from ``address`` (no registered worker),
        is what an older connection of a worker left unread, and the commands of any
        connection closings read to tell. Call it for registrations and heartbeats.

        The message came by the connection noted for another worker. If that
        connection's closing is among those libzmq has to report, the fd is in use
        again by a new connection: the other worker is gone (its ``Unregister`` is
        returned) and the message is not a leftover. If it is not, the connection is
        still open under another name: ROUTER_HANDOVER gave the worker's identity to
        its newer connection and the old one a made-up one (a zero byte and four
        more), and what is still queued on it, a READY or a heartbeat, must not
        register a worker under that name: every job given to it would be lost with
        the connection. The caller drops it."""
        if self.transport.monitor is None:
            return False, []
        fd = self.transport.source_fd()
        holder = self._by_fd.get(fd) if fd >= 0 else None
        if holder is None or holder == address:
            return False, []
        closed = self.transport.closed_connections()
        commands = self._closings(closed)
        renamed = fd not in closed and not identity_lasts(address)
        return renamed, commands

    def _connections_closed(self, now_ms: int) -> list[Command]:
        return self._closings(self.transport.closed_connections())

    def _closings(self, fds: list[int]) -> list[Command]:
        gone, self._gone = self._gone, []
        for fd in fds:
            if self._reused.get(fd):
                self._reused[fd] -= 1  # an older connection's closing: the fd is in use again
                if not self._reused[fd]:
                    del self._reused[fd]
                continue
            address = self._by_fd.pop(fd, None)
            if address is not None and self._fd_of.get(address) == fd:  # else a client's
                del self._fd_of[address]
                gone.append(address)
        commands: list[Command] = []
        for address in gone:
            self.counters["connections_closed"] += 1
            commands.extend(self.connection_closed(address))
        return commands

    def connection_closed(self, address: bytes, reason: str = "its connection closed") -> list[Command]:
        """The connection of the worker at ``address`` closed: forget it and return the
        commands that tell the core (an ``Unregister`` with ``reason``)."""
        return []

    def dropped(self, what: str, identity: bytes, reason: str) -> None:
        super().dropped(what, identity, reason)
        if self.watches_connections and len(self._dropped_from) < MAX_DROPPED:
            self._dropped_from.append(identity)

    def lost_messages(self) -> list[Command]:
        """Workers whose message the transport dropped for a limit (a reply of several
        frames, each under ``max_message_bytes`` and together over it) are handled as if
        their connection had closed, which libzmq does for one frame over the limit: the
        message may have been the reply to a request they hold, which would otherwise
        wait for ever, with the worker busy. Their requests are dispatched again (at most
        ``max_redispatch`` times, then the client's error) and the worker, told it is
        unknown at its next message, registers again. Call after reading."""
        if not self._dropped_from:
            return []
        dropped, self._dropped_from = self._dropped_from, []
        commands: list[Command] = []
        for address in dict.fromkeys(dropped):
            commands.extend(self.connection_closed(address, "its message over a limit was dropped"))
        return commands

    def wires(self) -> Sequence[WireCounts]:
        return (self.transport,)

    def send(self, address: bytes, frames: list[bytes]) -> bool:
        """Send to a peer; False (and counted) when it is gone or not reading.

        What :meth:`send_later` queued goes first, so every peer gets its messages in
        the order the edge produced them.
        """
        if self._outgoing:
            self._send_outgoing()
        return self._send_now(address, frames)

    def _send_now(self, address: bytes, frames: list[bytes]) -> bool:
        if self.transport.send(address, frames):
            return True
        self.counters["unroutable"] += 1
        return False

    def _send_outgoing(self) -> None:
        outgoing, self._outgoing = self._outgoing, []
        for address, frames in outgoing:
            if not self._send_now(address, frames):
                self._unreachable = [*self._unreachable, address]

    def send_later(self, address: bytes, frames: list[bytes]) -> None:
        """Queue a message for :meth:`send_queued`, which the edge runs from its
        ``flush_sends``: after every few messages the gateway reads
        (``nfgate.gateway.SEND_EVERY``) and at the end of the loop iteration.

        Why: a message sent into an idle libzmq pipe wakes the socket's I/O thread; sends
        spread over an iteration's work pay that once per message, back-to-back sends
        about once per batch (measured with py-spy on the relay path: a dispatch sent at
        once cost about three times a batched one).
        """
        if self._outgoing:
            self._outgoing.append((address, frames))
        else:
            self._outgoing = [(address, frames)]

    def send_queued(self) -> list[bytes]:
        """Send what :meth:`send_later` queued, in order; return the addresses of
        queued messages that could not be delivered since the last call (each counted
        as ``unroutable``)."""
        if self._outgoing:
            self._send_outgoing()
        failed, self._unreachable = self._unreachable, []
        return list(failed)

    def close(self) -> None:
        self.transport.close()

    def stats(self) -> dict[str, int]:
        stats = dict(self.counters)
        stats["too_many_frames"] = self.transport.oversized
        stats["too_large"] = self.transport.too_large
        return stats
