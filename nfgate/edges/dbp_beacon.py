"""Where the DBP catalog's beacon (``SHALOM <port>``, specs/dbp.md) goes and the UDP
socket it leaves from. Kept apart from :mod:`nfgate.edges.dbp`, which sends it.
"""

from __future__ import annotations

import ipaddress
import socket

from nfgate.errors import TransportError
from nfgate.transports.udp import Address, UdpEndpoint

__all__ = ["beacon_socket"]


def beacon_socket(
    beacon: Address | None, udp: UdpEndpoint | None
) -> tuple[Address | None, UdpEndpoint | None]:
    """The beacon's target and the socket it leaves from: the heartbeat socket ``udp``
    when that can reach the target, else one of its own (which the caller closes).
    ``(None, None)`` when there is no beacon.

    The target is resolved once, now: ``sendto`` would resolve a host name every
    second, blocking the loop. Raises :class:`TransportError` when it cannot be
    resolved, or its own socket cannot be bound.
    """
    if beacon is None:
        return None, None
    try:
        target = (socket.gethostbyname(beacon[0]), beacon[1])
    except (OSError, UnicodeError) as exc:
        raise TransportError(f"cannot resolve the beacon address {beacon[0]!r}: {exc}") from None
    loopback = ipaddress.IPv4Address(target[0]).is_loopback
    # The beacon is IPv4 (a broadcast): a heartbeat socket on IPv6 cannot send it.
    if (
        udp is not None
        and ":" not in udp.address[0]
        and (udp.address[0] == "0.0.0.0" or ipaddress.IPv4Address(udp.address[0]).is_loopback == loopback)
    ):
        return target, udp
    return target, UdpEndpoint("127.0.0.1" if loopback else "0.0.0.0", 0, broadcast=True)
