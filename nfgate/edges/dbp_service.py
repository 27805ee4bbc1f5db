"""What the DBP edge holds for one registered service: its registration, the core
service it works for, its heartbeats and the requests it holds. Kept apart from
:mod:`nfgate.edges.dbp`, which drives it.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from nfgate.codecs.dbp.session import MAX_HEARTBEAT_MS, Liveness, Mode, heartbeat_ms
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

    def configure(self, now: int, *, udp: bool) -> tuple[bytes, ...]:
        """Derive the worker role, heartbeat path and interval from ``info`` (approved:
        :func:`nfgate.codecs.dbp.session.check_registration` passed); ``udp``: the edge
        has a heartbeat socket. Returns the APPROVED configuration changes (the interval,
        when the broker adjusted it). Never raises."""
        info = self.info
        if self.dialect == "hermes":
            return ()
        function = info.get("function")
        self.function = (
            function if isinstance(function, str) and info.get("worker", True) is not False else ""
        )
        self.udp_to = udp_target(info)
        seconds = info["heartbeat"]  # approved: a finite positive number, of any size
        interval = heartbeat_ms(seconds)
        mode = Mode.UDP if self.udp_to is not None and udp else Mode.ZMQ
        if self.beats is None:
            self.beats = Liveness(mode=mode, interval_ms=interval, heard_ms=now, send_ms=now + interval)
        elif self.beats.interval_ms != interval:
            self.beats = Liveness(
                mode=self.beats.mode, interval_ms=interval, heard_ms=now, send_ms=now + interval
            )
        # The service is told the interval when the broker adjusted it (min() first: a
        # huge approved heartbeat would overflow round()).
        if interval != round(min(seconds, MAX_HEARTBEAT_MS) * 1000):
            return (json.dumps({"heartbeat": interval / 1000}).encode(),)
        return ()


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
