"""The edge on one bound ZeroMQ ROUTER socket (NFP, DCP, DBP, SADA channel): the receive
loop through the protocol's codec (:class:`Decoding`), batched sends, the connection
watch that removes a worker whose connection closed (:class:`RouterEdge`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import zmq

from nfgate.codecs._base import Message
from nfgate.edges.base import MAX_DROPPED, Edge, EdgeSettings, WireCodec, WireCounts, WorkerAccess
from nfgate.errors import ConfigError, DecodeError
from nfgate.model import Command, Peer
from nfgate.transports.curve import Curve, load_server_keys
from nfgate.transports.zmq import RouterEndpoint, identity_lasts

log = logging.getLogger("nfgate.edge")


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


def server_curve(settings: EdgeSettings) -> Curve | None:
    """The CURVE server keys (and client allow-list) an edge's options name
    (``curve_secret_key``, ``curve_allow``), or None for no CURVE; warns when the secret
    key file is readable by other users. Raises :class:`ConfigError` naming the key."""
    secret = settings.options.get("curve_secret_key")
    allow = settings.options.get("curve_allow")
    curve = load_server_keys(secret, allow) if isinstance(secret, Path) else None  # type: ignore[arg-type]
    if curve is None and allow is not None:
        raise ConfigError(f"config: edges.{settings.protocol}.curve_allow needs curve_secret_key")
    if isinstance(secret, Path):
        warn_if_others_read(settings.name, secret)
    return curve


def warn_if_others_read(edge: str, secret: Path) -> None:
    """Log a WARNING when the secret key file ``secret`` can be read by other users."""
    # Not an error: the key is the operator's, and NorFab's own key files are 0644. But a
    # secret key other users can read lets them pose as this broker to every peer.
    try:
        mode = secret.stat().st_mode
    except OSError:  # load_server_keys has read it already; a race is not worth a stop
        return
    if mode & 0o077:
        log.warning(
            "%s edge: the CURVE secret key %s can be read by other users (mode %03o): chmod 600 it",
            edge,
            secret,
            mode & 0o777,
        )


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
    _deferred: list[Command] | tuple[()] = ()  # closings read by note_connection, for lost_messages
    # Edges whose workers are removed as soon as their connection closes (a process
    # that died, a connection libzmq dropped for a frame over ZMQ_MAXMSGSIZE), rather
    # than liveness intervals later: the worker's DEALER reconnects on its own, so
    # without this the gateway would take a worker that lost a reply for alive.
    watches_connections: ClassVar[bool] = False
    # Edges whose clients' requests are cancelled when their connection closes and
    # their identity is one libzmq made up (``identity_lasts`` false): such a name is
    # that connection's only, so nothing for it can be delivered any more. A client
    # that set its own identity may come back under it (ROUTER_HANDOVER) and is left
    # alone. The edge calls :meth:`note_client` once per client, and gets
    # :meth:`client_gone` for each one whose connection closed.
    watches_clients: ClassVar[bool] = False

    def __init__(self, settings: EdgeSettings) -> None:
        super().__init__(settings)
        curve = server_curve(settings)
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
        if not (self.watches_connections or self.watches_clients):
            return ()
        self._fd_of: dict[bytes, int] = {}  # a worker's address -> its connection's fd
        self._client_fd: dict[bytes, int] = {}  # a watched client's address -> its fd
        self._by_fd: dict[int, bytes] = {}  # fd -> the worker or watched client on it
        self._reused: dict[int, int] = {}  # fd -> closings still to come of its older connections
        self._gone: list[bytes] = []  # workers found gone by their fd's reuse
        self._gone_clients: list[bytes] = []  # the same for watched clients
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
        if holder is not None and holder != address and self._fd_of.get(holder) != fd:
            # A watched client's: noted at its first message, which may have been read
            # after its closing was (note_client), so no closing need be still to come.
            # Read those pending to tell; their commands go out with lost_messages().
            self._deferred = [*self._deferred, *self._closings(self.transport.closed_connections())]
            holder = self._by_fd.get(fd)
            if holder is not None and holder != address:
                self._holder_gone(fd, holder)  # its closing was read before it spoke
                self._deferred = [*self._deferred, *self._closings([])]
                holder = None
        if holder is not None and holder != address:
            # The fd is another worker's, whose connection closed and whose closing is
            # still to be read (the loop reads those first, but a connection can close
            # and its fd be reused while a batch is being read): that worker is gone, and
            # that closing is not this connection's.
            self._reused[fd] = self._reused.get(fd, 0) + 1
            self._holder_gone(fd, holder)
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
        if fd is not None and self._by_fd.get(fd) == address and self._client_fd.get(address) != fd:
            del self._by_fd[fd]

    def note_client(self, address: bytes) -> list[Command]:
        """Watch the connection of the client at ``address`` if its identity is one
        libzmq made up (call it while handling its first message: such an identity is
        bound to one connection for life, so once is enough). Returns the commands of
        any connection closings read to tell whose the fd is (see below).

        The fd may be noted for another peer. A client's made-up identity is never moved
        to another connection, so a client holder is gone: its connection closed, the
        fd is reused, and that closing is either still to be read (it is read now, and
        handled) or was read before the holder's first message was (the holder is gone
        all the same). A worker holder with an identity of its own may instead have
        reconnected under it, libzmq renaming its old connection to the name this
        message came under: unless the closings read now say the fd closed, this
        client is not watched (:meth:`leftover` decides for that connection)."""
        if not self.watches_clients or self.transport.monitor is None or identity_lasts(address):
            return []
        fd = self.transport.source_fd()
        if fd < 0 or self._client_fd.get(address) == fd:
            return []
        commands: list[Command] = []
        holder = self._by_fd.get(fd)
        if holder is not None and holder != address:
            commands = self._closings(self.transport.closed_connections())
            holder = self._by_fd.get(fd)  # None if the fd's closing was among those
            if holder is not None and holder != address:
                worker = self._client_fd.get(holder) != fd or self._fd_of.get(holder) == fd
                if worker and identity_lasts(holder):
                    # Only an identity of its own moves to a newer connection (handover),
                    # libzmq renaming the old one: this may be that one, still open.
                    return commands
                self._holder_gone(fd, holder)  # its closing was read before it spoke
                commands.extend(self._closings([]))
        self.forget_client(address)
        self._client_fd[address] = fd
        self._by_fd[fd] = address
        return commands

    def forget_client(self, address: bytes) -> None:
        """Stop watching the connection of the client at ``address`` (its record
        forgotten: call it wherever the edge drops a client's record)."""
        if not self.watches_clients or self.transport.monitor is None:
            return
        fd = self._client_fd.pop(address, None)
        if fd is not None and self._by_fd.get(fd) == address and self._fd_of.get(address) != fd:
            del self._by_fd[fd]

    def _holder_gone(self, fd: int, holder: bytes) -> None:
        """``holder``, noted on ``fd``, is gone (the fd is another connection's now)."""
        if self._by_fd.get(fd) == holder:
            del self._by_fd[fd]
        if self._fd_of.get(holder) == fd:
            del self._fd_of[holder]
            self._gone.append(holder)
        if self._client_fd.get(holder) == fd:
            del self._client_fd[holder]
            self._gone_clients.append(holder)

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
        if holder is None or holder == address or self._fd_of.get(holder) != fd:
            return False, []  # not a worker's fd (a client's: see note_client)
        closed = self.transport.closed_connections()
        commands = self._closings(closed)
        renamed = fd not in closed and not identity_lasts(address)
        return renamed, commands

    def _connections_closed(self, now_ms: int) -> list[Command]:
        return self._closings(self.transport.closed_connections())

    def _closings(self, fds: list[int]) -> list[Command]:
        gone, self._gone = self._gone, []
        clients, self._gone_clients = self._gone_clients, []
        for fd in fds:
            if self._reused.get(fd):
                self._reused[fd] -= 1  # an older connection's closing: the fd is in use again
                if not self._reused[fd]:
                    del self._reused[fd]
                continue
            address = self._by_fd.pop(fd, None)
            if address is None:
                continue  # a peer not watched (a client with an identity of its own)
            if self._fd_of.get(address) == fd:
                del self._fd_of[address]
                gone.append(address)
            if self._client_fd.get(address) == fd:  # a worker's own requests too
                del self._client_fd[address]
                clients.append(address)
        commands: list[Command] = []
        for address in clients:  # before the workers: the edge still knows which were
            commands.extend(self.client_gone(address))
        for address in gone:
            self.counters["connections_closed"] += 1
            commands.extend(self.connection_closed(address))
        return commands

    def client_gone(self, address: bytes) -> list[Command]:
        """The connection of the watched client at ``address`` closed (see
        ``watches_clients``): forget it and return the commands that tell the core
        (a ``ClientGone``)."""
        return []

    def connection_closed(self, address: bytes, reason: str = "its connection closed") -> list[Command]:
        """The connection of the worker at ``address`` closed: forget it and return the
        commands that tell the core (an ``Unregister`` with ``reason``)."""
        return []

    def dropped(self, what: str, identity: bytes, reason: str, frames: Sequence[bytes] = ()) -> None:
        super().dropped(what, identity, reason, frames)
        if self.watches_connections and len(self._dropped_from) < MAX_DROPPED:
            self._dropped_from.append(identity)

    def lost_messages(self) -> list[Command]:
        """Workers whose message the transport dropped for a limit (a reply of several
        frames, each under ``max_message_bytes`` and together over it) are handled as if
        their connection had closed, which libzmq does for one frame over the limit: the
        message may have been the reply to a request they hold, which would otherwise
        wait for ever, with the worker busy. Their requests are dispatched again (at most
        ``max_redispatch`` times, then the client's error) and the worker, told it is
        unknown at its next message, registers again. Call after reading: it also returns
        the commands of connection closings :meth:`note_connection` read."""
        commands: list[Command] = []
        if self._deferred:
            commands, self._deferred = list(self._deferred), []
        if not self._dropped_from:
            return commands
        dropped, self._dropped_from = self._dropped_from, []
        for address in dict.fromkeys(dropped):
            commands.extend(self.connection_closed(address, "its message over a limit was dropped"))
        return commands

    def wires(self) -> Sequence[WireCounts]:
        return (self.transport,)

    def send(self, address: bytes, frames: list[bytes]) -> bool:
        """Send to a peer; False (and counted) when it is gone (``unroutable``) or its
        send queue is full (``send_queue_full``, and a rate-limited WARNING).

        What :meth:`send_later` queued goes first, so every peer gets its messages in
        the order the edge produced them.
        """
        if self._outgoing:
            self._send_outgoing()
        return self._send_now(address, frames)

    def _send_now(self, address: bytes, frames: list[bytes]) -> bool:
        transport = self.transport
        if transport.send(address, frames):
            return True
        if transport.last_full:
            self.send_dropped(address, transport.limits.high_water_mark)
        else:
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
        as ``unroutable`` or ``send_queue_full``)."""
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
        guard = self.transport.curve_guard
        if guard is not None:  # CURVE handshakes its ZAP policy refused (client key not allowed)
            stats["curve_refused"] = guard.refused
        return stats

    def worker_access(self) -> WorkerAccess:
        guard = self.transport.curve_guard
        return "any" if guard is None or guard.allowed is None else "checked"
