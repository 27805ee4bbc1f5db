"""DBP's UDP datagrams: heartbeats and the catalog beacon. Pure, no sockets.

DBP/Heartbeats says heartbeats go over "raw UDP sockets" but gives only the ZeroMQ frame
layout, and the spec leaves the beacon's format open. nfgate's choices (design.md, DBP
notes):

* heartbeat datagram: the HEARTBEAT's frames after the empty delimiter, joined by one
  space -- ``b"<3 1732251000.5 echo"`` (tag, spec-dialect time text, service name; the
  name may itself contain spaces, it runs to the end of the datagram, and may be empty,
  as the HEARTBEAT's may);
* beacon: ``b"SHALOM <port>"``, the datagram Hermes listens for on UDP port 5245.
"""

from __future__ import annotations

from nfgate.errors import DecodeError, EncodeError

from .._base import printable
from .codec import HEARTBEAT, NAME, decode_time, encode_time
from .messages import Heartbeat

__all__ = [
    "BEACON_PORT",
    "CATALOG_PORT",
    "decode_beacon",
    "decode_heartbeat_datagram",
    "encode_beacon",
    "encode_heartbeat_datagram",
]

# ROUTER Addressing: "The broker MUST use a ROUTER socket on port 5246"; nfgate takes
# heartbeat datagrams on the same port number over UDP (design.md, Default endpoints).
CATALOG_PORT = 5246
# Beacon (design.md, DBP notes): Hermes listens for "SHALOM <port>" on UDP port 5245.
BEACON_PORT = 5245
# Beacon (design.md, DBP notes): the greeting word, then one space, then the port.
BEACON_PREFIX = b"SHALOM "
# DBP/Heartbeats, nfgate's datagram form: the tag and one space open every heartbeat.
_HEARTBEAT_PREFIX = HEARTBEAT + b" "


def _bytes(data: object, what: str) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise DecodeError(NAME, f"{what} must be bytes, got {type(data).__name__}")


def encode_heartbeat_datagram(heartbeat: Heartbeat) -> bytes:
    """One UDP datagram for ``heartbeat``: ``b"<3 " + time + b" " + service``.

    Raises :class:`EncodeError` if ``heartbeat`` is not a :class:`Heartbeat`.
    """
    if not isinstance(heartbeat, Heartbeat):
        raise EncodeError(NAME, f"not a HEARTBEAT: {type(heartbeat).__name__}")
    return _HEARTBEAT_PREFIX + encode_time(heartbeat.time) + b" " + heartbeat.service.encode("utf-8")


def decode_heartbeat_datagram(data: bytes | bytearray | memoryview) -> Heartbeat:
    """Parse a heartbeat datagram; raises :class:`DecodeError` on anything else."""
    datagram = _bytes(data, "heartbeat datagram")
    if not datagram.startswith(_HEARTBEAT_PREFIX):
        raise DecodeError(
            NAME, f"heartbeat datagram must start with {_HEARTBEAT_PREFIX!r}: {datagram[:32]!r}"
        )
    time_text, space, name = datagram[len(_HEARTBEAT_PREFIX) :].partition(b" ")
    if not space:
        raise DecodeError(NAME, "heartbeat datagram has no service name after the time")
    seconds = decode_time(time_text, "spec", "heartbeat datagram time")
    # An empty name (b"<3 1732251000 ") is the HEARTBEAT's empty service frame.
    return Heartbeat(time=seconds, service=printable(NAME, name, "heartbeat datagram service name"))


def encode_beacon(port: int) -> bytes:
    """The beacon datagram announcing the catalog's ROUTER ``port``: ``b"SHALOM 5246"``.

    Raises :class:`EncodeError` unless ``port`` is an int in 1..65535.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise EncodeError(NAME, f"beacon port must be an int in 1..65535, got {port!r}")
    return BEACON_PREFIX + str(port).encode("ascii")


def decode_beacon(data: bytes | bytearray | memoryview) -> int:
    """The port a beacon datagram announces; raises :class:`DecodeError` on anything else."""
    datagram = _bytes(data, "beacon")
    if not datagram.startswith(BEACON_PREFIX):
        raise DecodeError(NAME, f"beacon must start with {BEACON_PREFIX!r}: {datagram[:32]!r}")
    digits = datagram[len(BEACON_PREFIX) :]
    if not digits or len(digits) > 5 or not (digits.isascii() and digits.isdigit()):
        raise DecodeError(NAME, f"beacon port is not 1 to 5 ASCII digits: {digits[:32]!r}")
    port = int(digits)
    if not 0 < port < 65536:
        raise DecodeError(NAME, f"beacon port out of range: {port}")
    return port
