"""The transports: sockets and envelopes, no protocol (ZeroMQ, NNG, UDP)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["Tap"]


class Tap(Protocol):
    """``tap(direction, peer, frames, truncated=None)``: what a transport calls per
    message it moves when capture is on (:mod:`nfgate.capture`); ``peer`` is printable
    (:func:`nfgate.transports.zmq.identity_label`); ``truncated`` says why the transport
    dropped the message and passed only the frames it kept (``"frames"``: too many of
    them, ``"bytes"``: too large), None for a message it moved whole."""

    def __call__(
        self, direction: str, peer: str, frames: Sequence[bytes], truncated: str | None = None
    ) -> None: ...
