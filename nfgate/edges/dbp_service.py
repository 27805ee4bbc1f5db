"""What the DBP edge holds for one registered service: its registration, the core
service it works for, its heartbeats and the requests it holds. Kept apart from
:mod:`nfgate.edges.dbp`, which drives it.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from nfgate.codecs.dbp.session import Liveness
from nfgate.model import Request
from nfgate.transports.udp import Address

__all__ = ["Service", "udp_target"]


class Service:
    """One registered DBP service (one ROUTER identity)."""

    __slots__ = (
        "address",
        "beats",
        "beats_heard",
        "beats_sent",
        "dialect",
        "function",
        "held",
        "info",
        "name",
        "udp_to",
    )

    def __init__(self, address: bytes, name: str, info: dict[str, Any], dialect: str) -> None:
        self.address = address
        self.name = name
        self.info = info
        self.dialect = dialect
        self.function = ""  # the core service it works for; "" when only catalogued
        self.beats: Liveness | None = None  # None: no heartbeats (Hermes)
        self.beats_sent = self.beats_heard = 0  # <3 both ways, UDP or ZeroMQ (show_workers)
        self.udp_to: Address | None = None
        self.held: dict[int, Request] = {}


def udp_target(info: dict[str, Any]) -> Address | None:
    """Where a service's UDP heartbeats go: the ``ip`` and ``port`` of its registration,
    or None when they are not an IPv4 literal and a port (never raises)."""
    # Only IPv4 literals: resolving a host name here would block the event loop.
    ip, port = info.get("ip"), info.get("port")
    if not isinstance(ip, str) or not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        return None
    try:
        return (str(ipaddress.IPv4Address(ip)), port)
    except ValueError:
        return None
