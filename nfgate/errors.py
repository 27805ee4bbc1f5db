"""The one error hierarchy of nfgate.

Every failure nfgate reports is an :class:`NfgateError`. Protocol failures carry the
protocol's registry name and a reason a person can act on, so a log line or a CLI
message can be built from ``str(error)`` alone::

    NfgateError
    ├── ProtocolError(protocol, reason)
    │   ├── DecodeError   the peer sent bytes that are not a valid message
    │   ├── EncodeError   we tried to build or send an illegal message
    │   └── StateError    a valid message arrived where the protocol forbids it
    ├── TransportError    a socket could not be bound, connected or used
    └── ConfigError       the user's configuration or command line is wrong
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DecodeError",
    "EncodeError",
    "NfgateError",
    "ProtocolError",
    "StateError",
    "TransportError",
]


class NfgateError(Exception):
    """Base class of every error nfgate raises on purpose."""


class ProtocolError(NfgateError):
    """A protocol rule was broken.

    ``protocol`` is the codec registry name (``"nfp"``, ``"dcp"``...), ``reason`` says
    what was wrong in words that do not need the source code to be understood.
    """

    def __init__(self, protocol: str, reason: str) -> None:
        super().__init__(f"{protocol}: {reason}")
        self.protocol = protocol
        self.reason = reason


class DecodeError(ProtocolError):
    """The frames received are not a valid message of the protocol."""


class EncodeError(ProtocolError):
    """The message cannot be put on the wire (e.g. not representable in a dialect)."""


class StateError(ProtocolError):
    """A well-formed message arrived in a state where the protocol does not allow it."""


class TransportError(NfgateError):
    """A socket-level failure: bind, connect, send or receive."""


class ConfigError(NfgateError):
    """Bad configuration or command-line input; the message names the key at fault."""
