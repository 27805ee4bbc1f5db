"""UDP transport: one bound, non-blocking datagram socket (IPv4, or IPv6 for an IPv6 host).

It owns the socket and nothing else: which bytes a datagram carries (DBP heartbeats,
the catalog beacon) is the codec's business. The gateway polls :meth:`UdpEndpoint.fileno`
with the ZeroMQ sockets.
"""

from __future__ import annotations

import errno
import socket

from nfgate.errors import TransportError
from nfgate.transports import Tap

__all__ = ["MAX_DATAGRAM", "Address", "UdpEndpoint", "parse_address"]

Address = tuple[str, int]
MAX_DATAGRAM = 65_535  # the largest UDP payload: a read never truncates a datagram
_MAPPED = "::ffff:"  # an IPv4 address as an IPv6 socket names it (RFC 4291 2.5.5.2)


def parse_address(text: str) -> Address:
    """``"host:port"`` as ``(host, port)``; raises :class:`ValueError` for anything else
    (no port, a port that is not 0..65535)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not host:port with a port 0..65535")
    return host.strip("[]"), int(port)


class UdpEndpoint:
    """A UDP socket bound to ``(host, port)`` (port 0: the system picks one).

    Raises :class:`TransportError` with a one-line reason when the address cannot be
    bound (e.g. the port is in use, or the host is not an address of this machine). A
    host with a ``:`` (``::1``) is IPv6, any other IPv4.
    """

    capture_kind = "udp"
    tap: Tap | None = None  # set by nfgate.capture when --capture is on

    def __init__(self, host: str, port: int, *, broadcast: bool = False) -> None:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            if broadcast:  # the beacon may be sent to a broadcast address when the user asks
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            sock.bind((host, port))
        except (OSError, OverflowError) as exc:
            sock.close()
            reason = "address already in use" if getattr(exc, "errno", None) == errno.EADDRINUSE else exc
            raise TransportError(f"cannot bind udp://{host}:{port}: {reason}") from None
        self.socket = sock
        self._v6 = sock.family == socket.AF_INET6
        bound_host, bound_port = sock.getsockname()[:2]
        self.address: Address = (str(bound_host), int(bound_port))
        self.received = 0
        self.sent = 0
        self.send_errors = 0  # datagrams the system refused (unreachable, buffer full)

    @property
    def endpoint(self) -> str:
        host, port = self.address
        return f"udp://[{host}]:{port}" if ":" in host else f"udp://{host}:{port}"

    def fileno(self) -> int:
        return self.socket.fileno()

    def recv_batch(self, limit: int) -> list[tuple[bytes, Address]]:
        """Up to ``limit`` waiting datagrams with their senders; never blocks."""
        out: list[tuple[bytes, Address]] = []
        recvfrom = self.socket.recvfrom
        for _ in range(limit):
            try:
                data, sender = recvfrom(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                # A previous sendto's ICMP "port unreachable" surfaces here on some
                # systems; it says nothing about the datagrams still waiting.
                continue
            host = str(sender[0])
            # An IPv4 peer of a dual-stack IPv6 socket (bound to "::") shows as ::ffff:a.b.c.d:
            # named as the IPv4 address it is, as the edge knows it (a DBP service's "ip").
            out.append(
                (data, (host.removeprefix(_MAPPED) if host.startswith(_MAPPED) else host, int(sender[1])))
            )
        self.received += len(out)
        if self.tap is not None:
            for data, sender in out:
                self.tap("in", f"{sender[0]}:{sender[1]}", (data,))
        return out

    def sendto(self, data: bytes, address: Address) -> bool:
        """Send one datagram; False (and counted) when the system refuses it. UDP gives
        no delivery guarantee either way."""
        if self._v6 and ":" not in address[0]:
            address = (_MAPPED + address[0], address[1])  # an IPv4 peer, from an IPv6 socket
        try:
            self.socket.sendto(data, address)
        except (OSError, OverflowError):
            self.send_errors += 1
            return False
        self.sent += 1
        if self.tap is not None:
            self.tap("out", f"{address[0]}:{address[1]}", (data,))
        return True

    receive_failures = 0
    """A datagram is whole or not read at all: what it says is the edge's to judge."""

    @property
    def send_failures(self) -> int:
        """Datagrams the system refused (:attr:`send_errors`)."""
        return self.send_errors

    def close(self) -> None:
        self.socket.close()
