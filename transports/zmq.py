"""ZeroMQ transport: ROUTER sockets for broker edges, DEALER sockets for the suite and tests.

A transport owns sockets and routing envelopes, nothing else: :meth:`RouterEndpoint.recv`
strips the ROUTER identity and hands back the protocol frames; :meth:`RouterEndpoint.send`
puts it back. Which protocol the frames speak is the codec's business.
"""

from __future__ import annotations

import errno
import functools
import logging
import struct
from collections.abc import Callable, Sequence

import attrs
import zmq

from nfgate.errors import TransportError
from nfgate.transports import Tap
from nfgate.transports.curve import Curve, Guard, enable_server

_VISIBLE_ASCII = bytes(range(0x21, 0x7F))  # printable ASCII, space excluded


def identity_label(identity: bytes) -> str:
    """A printable name for a ZeroMQ identity: the text when it is printable ASCII
    (NorFab sets readable identities), else ``id-<hex>`` (libzmq's generated ones)."""
    # Deleting every visible character leaves nothing only if there was nothing else;
    # one C call, where a generator over the bytes was a measurable part of a dispatch.
    if identity and not identity.translate(None, _VISIBLE_ASCII):
        return identity.decode("ascii")
    return "id-" + identity.hex()


def identity_lasts(identity: bytes) -> bool:
    """False for an identity libzmq made up for a peer that set none: five bytes, a zero
    then a 32-bit counter (libzmq's ``router_t::identify_peer``; the guide reserves
    identities starting with a zero byte for it). The peer gets a new one on every
    connection, so it never comes back under it; an identity the peer chose does."""
    return len(identity) != 5 or identity[0] != 0


__all__ = [
    "Limits",
    "RouterEndpoint",
    "allow_ipv6",
    "connect_dealer",
    "identity_label",
    "identity_lasts",
    "wants_ipv6",
]

log = logging.getLogger("nfgate.transports.zmq")

_NOBLOCK = int(zmq.NOBLOCK)
_SRCFD = int(zmq.SRCFD)
_DISCONNECTED = int(zmq.EVENT_DISCONNECTED)
_EVENT = struct.Struct("=HI")  # a monitor event's first frame: event id, value (the fd)
CLOSE_LINGER_MS = 1000  # see RouterEndpoint.close
MAX_EVENTS = 10_000  # monitor events read per call: bounded, the rest wait for the next
_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)
_BaseSocket = zmq.backend.Socket


@attrs.frozen(kw_only=True)
class Limits:
    """Per-socket limits (design.md "Durability, security, limits").

    ``max_message_bytes`` bounds one message: as ZMQ_MAXMSGSIZE, libzmq drops the
    connection of a peer that sends a larger *frame*, before any byte of it reaches
    Python; a message of several frames that adds up to more is read and dropped by
    :meth:`RouterEndpoint.recv` without copying it into Python. ``max_frames`` is
    checked per message there too. ``max_peers`` is read by the
    edge on the socket: the peers whose records (dialect, session) it keeps; beyond it
    the oldest clients' are forgotten, never a worker's (:func:`nfgate.edges.forget_oldest`).
    """

    max_message_bytes: int = 64 * 1024 * 1024
    max_frames: int = 64
    high_water_mark: int = 100_000
    max_peers: int = 100_000


class RouterEndpoint:
    """A bound ROUTER socket.

    Raises :class:`TransportError` with a one-line reason when the address cannot be
    bound (e.g. the port is in use).
    """

    capture_kind = "zmq"
    tap: Tap | None = None  # set by nfgate.capture when --capture is on
    # Told of each message dropped for a limit: (counter name, peer identity, reason,
    # the frames read before the limit). The edge owning the socket logs it and answers
    # it where its protocol can (nfgate.edges.Edge.dropped).
    on_dropped: Callable[[str, bytes, str, list[bytes]], None] | None = None

    def __init__(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        url: str,
        limits: Limits | None = None,
        *,
        curve: Curve | None = None,
        domain: str = "",
    ) -> None:
        self.url = url
        self.limits = limits or Limits()
        self.received = 0  # messages read, the dropped ones included
        self.sent = 0  # messages handed to libzmq
        self.oversized = 0  # messages dropped for having more than max_frames frames
        self.too_large = 0  # messages dropped for adding up to more than max_message_bytes
        self.unroutable = 0  # replies to peers that are gone (EHOSTUNREACH)
        # Messages dropped because the peer's send queue was at its high-water mark
        # (EAGAIN): a peer that does not read, or not fast enough. Counted apart from
        # unroutable: the peer is there, and an operator must hear of it (the edge warns).
        self.queue_full = 0
        self.last_full = False  # whether the last send that failed met a full queue
        self.monitor: zmq.Socket[bytes] | None = None  # see watch_connections()
        self._last: zmq.Frame | None = None  # the identity part of the last message read
        self.curve_guard: Guard | None = None  # a CURVE server's client-key policy and refusals
        sock = context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        # Without ROUTER_MANDATORY a reply to a vanished peer is dropped silently; with
        # it we learn (EHOSTUNREACH) and can count it.
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # A reconnecting peer with the same identity (NorFab workers set one) takes over.
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, self.limits.max_message_bytes)
        sock.setsockopt(zmq.SNDHWM, self.limits.high_water_mark)
        sock.setsockopt(zmq.RCVHWM, self.limits.high_water_mark)
        if curve is not None:
            self.curve_guard = enable_server(sock, curve, domain or url)
        allow_ipv6(sock, url)
        try:
            sock.bind(url)
        except zmq.ZMQError as exc:
            sock.close(0)
            reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise TransportError(f"cannot bind {url}: {reason}") from None
        self.socket = sock
        self._recv = sock.recv
        # The Cython base class's send, bound: pyzmq's Python-level Socket.send wrapper
        # (routing_id/group handling, keyword re-packing) costs about as much as the
        # send itself for small frames (measured: 5-6 vs 6-12 us per 8-frame message).
        self._send: Callable[[bytes, int], object] = functools.partial(_BaseSocket.send, sock)
        self.endpoint: str = sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def recv(self) -> tuple[bytes, list[bytes]] | None:
        """One message as (identity, frames), or None when nothing is waiting or the
        message broke the frame limit (counted in :attr:`oversized`) or the byte limit
        (:attr:`too_large`). A dropped message is read to its end, but no frame past
        the limit is copied out of libzmq: a peer cannot make the gateway hold many
        times the limit (the capture tap sees what was kept of it)."""
        # Frame by frame with int flags: pyzmq's recv_multipart/send_multipart spend a
        # third of their time combining enum flags (measured: 26 vs 18 us per 10-frame
        # round trip). Frames (copy=False) say whether more parts follow without a
        # getsockopt(RCVMORE), which builds a SocketOption enum per call (measured: 17
        # vs 24 us per 8-frame message). The parts of one message arrive together, so
        # NOBLOCK is safe.
        recv = self._recv
        try:
            frame = recv(_NOBLOCK, copy=False)
        except zmq.Again:
            return None
        self._last = frame
        parts = [frame.bytes]
        left = self.limits.max_message_bytes
        room = self.limits.max_frames + 1  # the identity and max_frames frames
        while frame.more:
            frame = recv(_NOBLOCK, copy=False)
            if left >= 0 and len(parts) <= room:
                left -= len(frame)
                if left >= 0:
                    parts.append(frame.bytes)
        self.received += 1
        if self.tap is not None:
            cut = "bytes" if left < 0 else "frames" if len(parts) > room else None
            self.tap("in", identity_label(parts[0]), parts[1:], truncated=cut)
        if left < 0:
            self.too_large += 1
            self._dropped("too_large", parts, f"over {self.limits.max_message_bytes} bytes, dropped")
            return None
        if len(parts) > room:
            self.oversized += 1
            self._dropped("too_many_frames", parts, f"over {self.limits.max_frames} frames, dropped")
            return None
        return parts[0], parts[1:]

    def _dropped(self, what: str, parts: list[bytes], reason: str) -> None:
        """``parts``: the identity, then the frames read before the limit."""
        if self.on_dropped is not None:
            self.on_dropped(what, parts[0], reason, parts[1:])
        else:
            log.debug("%s: message from %s %s", self.url, identity_label(parts[0]), reason)

    def send(self, identity: bytes, frames: Sequence[bytes], *, probe: bool = False) -> bool:
        """Send ``frames`` to the peer ``identity``; False if that peer is gone (counted
        in :attr:`unroutable`) or its queue is full (:attr:`queue_full`;
        :attr:`last_full` then True), uncounted with ``probe``: a send that may find
        the peer not connected yet, as the SADA channel's RINTR after a restart).
        Raises :class:`TransportError` for any other failure."""
        send = self._send
        try:
            # Only the first part can fail (unknown peer, HWM): a message is atomic.
            send(identity, _MORE)
            for frame in frames[:-1]:
                send(frame, _MORE)
            send(frames[-1] if frames else b"", _NOBLOCK)
        except zmq.ZMQError as exc:
            if exc.errno in (zmq.EHOSTUNREACH, zmq.EAGAIN):
                self.last_full = exc.errno == zmq.EAGAIN
                if probe:
                    pass
                elif self.last_full:
                    self.queue_full += 1
                else:
                    self.unroutable += 1
                return False
            raise TransportError(f"send on {self.url} failed: {exc.strerror}") from None
        self.sent += 1
        if self.tap is not None:
            self.tap("out", identity_label(identity), frames)
        return True

    def watch_connections(self) -> zmq.Socket[bytes]:
        """Start watching for peers' connections closing; returns the socket (a libzmq
        monitor) that becomes readable when one did, for the caller's poller. Read it
        with :meth:`closed_connections`; :meth:`source_fd` says which connection the
        last message came by."""
        if self.monitor is None:
            self.monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        return self.monitor

    def closed_connections(self) -> list[int]:
        """The file descriptors of the connections closed since the last call: a peer
        that went away, or one libzmq dropped (a frame over ZMQ_MAXMSGSIZE, a protocol
        error). Reads without waiting; empty when not watching."""
        fds: list[int] = []
        monitor = self.monitor
        if monitor is None:
            return fds
        for _ in range(MAX_EVENTS):
            try:
                head, *_ = monitor.recv_multipart(_NOBLOCK)
            except zmq.Again:
                break
            if len(head) == _EVENT.size:
                event, fd = _EVENT.unpack(head)
                if event == _DISCONNECTED:
                    fds.append(fd)
        return fds

    def source_fd(self) -> int:
        """The file descriptor of the connection the last message read came by (-1 when
        none was read). With :meth:`closed_connections`, how an edge learns that a
        registered peer's connection closed, at once rather than heartbeats later."""
        return -1 if self._last is None else int(self._last.get(_SRCFD))

    @property
    def receive_failures(self) -> int:
        """Messages read and dropped here (:attr:`oversized`, :attr:`too_large`)."""
        return self.oversized + self.too_large

    @property
    def send_failures(self) -> int:
        """Messages that could not be sent (:attr:`unroutable`, :attr:`queue_full`)."""
        return self.unroutable + self.queue_full

    def close(self) -> None:
        if self.monitor is not None:
            self.socket.disable_monitor()
            self.monitor.close(0)
        # What was sent just before (a stop's last replies and DISCONNECTs) may still be
        # in libzmq's queue: it gets CLOSE_LINGER_MS to leave when the context ends. A
        # peer that does not read holds the exit no longer than that.
        self.socket.close(CLOSE_LINGER_MS)


def wants_ipv6(url: str) -> bool:
    """True when ``url``'s host is a bracketed IPv6 address (``tcp://[::1]:5555``,
    ``tcp://[::]:5555`` for every address of both families). Raises nothing."""
    return "://[" in url


def allow_ipv6(sock: zmq.Socket[bytes], url: str) -> None:
    """Turn on ``ZMQ_IPV6`` on ``sock`` when :func:`wants_ipv6` (``url``); raises nothing.

    Without it libzmq refuses an IPv6 address with "No such device". It is not turned
    on for every socket: with it a host *name* resolves to its IPv6 address first, so
    ``tcp://localhost:5555`` would bind ``::1`` alone and IPv4 peers of 127.0.0.1, which
    reach it today, would not. ``tcp://[::]:5555`` takes both families (libzmq clears
    ``IPV6_V6ONLY``).
    """
    if wants_ipv6(url):
        sock.setsockopt(zmq.IPV6, 1)


def connect_dealer(
    context: zmq.Context[zmq.Socket[bytes]], url: str, identity: bytes | None = None
) -> zmq.Socket[bytes]:
    """A DEALER connected to ``url`` with linger 0 (tests and the conformance suite)."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    allow_ipv6(sock, url)
    sock.connect(url)
    return sock
