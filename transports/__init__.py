"""The transports: sockets and envelopes, no protocol (ZeroMQ, NNG, UDP)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["Tap"]

Tap = Callable[[str, str, Sequence[bytes]], None]
"""``tap(direction, peer, frames)``: what a transport calls per message it moves when
capture is on (:mod:`nfgate.capture`); ``peer`` is printable
(:func:`nfgate.transports.zmq.identity_label`)."""
