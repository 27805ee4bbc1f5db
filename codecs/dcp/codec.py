"""DCP v1 encoder/decoder, spec dialect and the DagBox dialect.

Frames here start at the address delimiter: the ROUTER identity (the "sender address"
part of the spec's header) belongs to the transport.

Dialects:
  * ``spec``   -- message type is one byte (Message Format).
  * ``dagbox`` -- the C++ DagBox implementation (2017): message type is a 4-byte
    little-endian integer, and data parts end at the first empty part.
"""

from __future__ import annotations

import struct

from nfgate.errors import ConfigError, DecodeError, EncodeError

from .._base import FrameReader, Message
from .messages import Ping, Pong, Reconnect, Registration, Reply, Request

NAME = "dcp"
DIALECTS = ("spec", "dagbox")

# Message Format: "5 bytes, the characters DGBX followed by an unsigned 8-bit number".
PROTOCOL = b"DGBX\x01"
# Message Format / Connection / Heartbeats / Requests & Replies: the type numbers.
REGISTRATION = 0x01
PING = 0x02
PONG = 0x03
REQUEST = 0x04
REPLY = 0x05
RECONNECT = 0x06

_TYPE_OF = {
    Registration: REGISTRATION,
    Ping: PING,
    Pong: PONG,
    Request: REQUEST,
    Reply: REPLY,
    Reconnect: RECONNECT,
}
_HEADER_ONLY = {PING: Ping, PONG: Pong, RECONNECT: Reconnect}


def detect(frames: list[bytes]) -> str:
    """``dagbox`` when the type part is 4 bytes, else ``spec``. Never raises on a list of
    byte strings."""
    return "dagbox" if len(frames) >= 3 and len(frames[2]) == 4 else "spec"


def _type_part(kind: int, dialect: str) -> bytes:
    return struct.pack("<I", kind) if dialect == "dagbox" else bytes((kind,))


_TYPE_PART = {d: {kind: _type_part(kind, d) for kind in (REQUEST, REPLY)} for d in DIALECTS}


def _read_type(reader: FrameReader, dialect: str) -> int:
    part = reader.take("message type")
    width = 4 if dialect == "dagbox" else 1
    if len(part) != width:
        raise reader.error(
            f"message type part must be {width} byte(s) in the {dialect} dialect, got {len(part)}"
        )
    return struct.unpack("<I", part)[0] if width == 4 else part[0]


def decode(frames: list[bytes], dialect: str) -> Message:
    """Decode one DCP message; raises :class:`DecodeError`."""
    reader = FrameReader(NAME, frames, "message")
    reader.take_empty("address delimiter")
    protocol = reader.take("protocol")
    if protocol != PROTOCOL:
        if protocol[:4] == PROTOCOL[:4] and len(protocol) == 5:
            raise reader.error(f"unsupported DCP version {protocol[4]}")
        raise reader.error(f"protocol part must be {PROTOCOL!r}, got {protocol[:32]!r}")
    kind = _read_type(reader, dialect)
    if kind in _HEADER_ONLY:
        reader.what = _HEADER_ONLY[kind].TYPE
        reader.done()  # Heartbeats: "MUST NOT contain any parts other than the header"
        return _HEADER_ONLY[kind]()
    if kind == REGISTRATION:
        reader.what = "REGISTRATION"
        service = reader.take("service name")
        reader.done()
        return Registration(service=service)
    if kind == REQUEST:
        reader.what = "REQUEST"
        service = reader.take("service name")
        client, metadata, data = _routed_body(reader, dialect)
        return Request(service=service, client=client, metadata=metadata, data=data)
    if kind == REPLY:
        reader.what = "REPLY"
        client, metadata, data = _routed_body(reader, dialect)
        return Reply(client=client, metadata=metadata, data=data)
    raise DecodeError(NAME, f"unknown message type 0x{kind:02x}")


def _routed_body(
    reader: FrameReader, dialect: str
) -> tuple[bytes | None, tuple[bytes, ...], tuple[bytes, ...]]:
    # Client address, its delimiter, metadata parts, metadata delimiter, data parts.
    # An empty part where the address belongs means the address is absent.
    first = reader.take("client address or delimiter")
    client: bytes | None = None
    if first:
        client = first
        reader.take_empty("client address delimiter")
    metadata = reader.take_until_empty("metadata parts")
    data = reader.rest()
    if dialect == "dagbox" and b"" in data:
        data = data[: data.index(b"")]  # DagBox stops reading data at the first empty part
    return client, metadata, data


def encode(message: Message, dialect: str) -> list[bytes]:
    """Encode one DCP message; raises :class:`EncodeError`."""
    if isinstance(message, Request):
        return request_frames(message.service, message.client, message.metadata, message.data, dialect)
    if isinstance(message, Reply):
        return reply_frames(message.client, message.metadata, message.data, dialect)
    kind = _TYPE_OF.get(type(message))
    if kind is None:
        raise EncodeError(NAME, f"not a DCP message: {type(message).__name__}")
    frames = [b"", PROTOCOL, _type_part(kind, dialect)]
    if isinstance(message, Registration):
        frames.append(message.service)
    return frames


def request_frames(
    service: bytes, client: bytes | None, metadata: tuple[bytes, ...], data: tuple[bytes, ...], dialect: str
) -> list[bytes]:
    """A REQUEST's frames from its parts, without building the :class:`Request` first.

    For a broker re-encoding parts it holds: it saves building one message per relayed
    request, so it checks only what is cheap. Checked: ``service`` is bytes, ``client``
    is None or non-empty bytes, no metadata part is empty, no data part is empty in the
    DagBox dialect, and the dialect is known. *Not* checked: that every metadata and
    data part is bytes (the command model already holds them as bytes); a caller with
    parts of unknown type builds a :class:`Request` and calls :func:`encode`. Raises
    :class:`EncodeError`, and :class:`ConfigError` for a dialect other than ``spec``
    and ``dagbox``.
    """
    if not isinstance(service, bytes):
        raise EncodeError(NAME, f"REQUEST: the service name must be bytes, got {type(service).__name__}")
    return _routed(_kinds(dialect)[REQUEST], service, client, metadata, data, dialect)


def reply_frames(
    client: bytes | None, metadata: tuple[bytes, ...], data: tuple[bytes, ...], dialect: str
) -> list[bytes]:
    """A REPLY's frames from its parts, with the checks :func:`request_frames` makes (and
    the same parts left unchecked). Raises :class:`EncodeError`, and
    :class:`ConfigError` for an unknown dialect."""
    return _routed(_kinds(dialect)[REPLY], None, client, metadata, data, dialect)


def _kinds(dialect: str) -> dict[int, bytes]:
    # The type-part lookup the builders make anyway doubles as the dialect check.
    kinds = _TYPE_PART.get(dialect)
    if kinds is None:
        raise ConfigError(f"{NAME}: unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})")
    return kinds


def _routed(
    kind: bytes,
    service: bytes | None,
    client: bytes | None,
    metadata: tuple[bytes, ...],
    data: tuple[bytes, ...],
    dialect: str,
) -> list[bytes]:
    if b"" in metadata:  # it would read back as the metadata delimiter (Requests & Replies)
        raise EncodeError(NAME, "metadata parts must be non-empty")
    if dialect == "dagbox" and b"" in data:
        raise EncodeError(NAME, "DagBox ends data at the first empty part; empty data parts cannot be sent")
    frames = [b"", PROTOCOL, kind] if service is None else [b"", PROTOCOL, kind, service]
    if client is not None:
        if not client or not isinstance(client, bytes):  # empty is "absent" on the wire
            raise EncodeError(NAME, "a client address must be non-empty bytes")
        frames.append(client)
    frames.append(b"")
    frames.extend(metadata)
    frames.append(b"")
    frames.extend(data)
    return frames
