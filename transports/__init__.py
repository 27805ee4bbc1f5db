"""The transports: sockets and envelopes, no protocol (ZeroMQ, NNG, UDP)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["Tap", "port_problem"]


class Tap(Protocol):
    """``tap(direction, peer, frames, truncated=None)``: what a transport calls per
    message it moves when capture is on (:mod:`nfgate.capture`); ``peer`` is printable
    (:func:`nfgate.transports.zmq.identity_label`); ``truncated`` says why the transport
    dropped the message and passed only the frames it kept (``"frames"``: too many of
    them, ``"bytes"``: too large), None for a message it moved whole."""

    def __call__(
        self, direction: str, peer: str, frames: Sequence[bytes], truncated: str | None = None
    ) -> None: ...


_PORTED = frozenset({"tcp", "tls+tcp", "tcp4", "tcp6", "tls+tcp4", "tls+tcp6", "ws", "wss", "udp"})


def port_problem(url: str, *, connect: bool) -> str | None:
    """What is wrong with the port of a TCP-like ``url`` (None: nothing, or a URL with no
    port, ``ipc://``, ``inproc://``). A bind may use 0 or ``*`` (any free port), a
    connect needs 1 to 65535. libzmq would take ``:70000`` as port 4464 (the low 16
    bits), silently."""
    scheme, _, rest = url.partition("://")
    if scheme not in _PORTED:
        return None
    address = rest.split("/", 1)[0] if scheme in ("ws", "wss") else rest
    port = address.rpartition(":")[2] if ":" in address else ""
    if connect:
        if port.isdigit() and 1 <= int(port) <= 65535:
            return None
        return f"{url!r} needs a port from 1 to 65535 after the last ':'"
    if port == "*" or (port.isdigit() and int(port) <= 65535):
        return None
    return f"{url!r} needs a port from 0 to 65535 (or *) after the last ':'"
