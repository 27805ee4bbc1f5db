"""Safir-Darbaan v1 wire messages (specs/safir-darbaan.md). One frozen class per command.

Every message keeps the version frame it was written with in ``proto`` (``b"SADA1"``, the
form of the spec's examples and of PIRAN, or ``b"SADA\\x01"``, the form of the spec's
Command Header text), so a reply can go out in the form the peer used and
``encode(decode(frames)) == frames``.

Text frames (service names and versions, request ids, action categories and names) are
printable UTF-8 strings: PIRAN reads and writes them as Java strings.

Construction validates every field: a value of the wrong type raises :class:`TypeError`
and one out of range or empty where the spec forbids it raises :class:`ValueError` (the
attrs validators' exceptions). Decoding never lets them out: for bad frames it
raises :class:`nfgate.errors.DecodeError` only.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from .._base import Message

__all__ = [
    "PROTO_ASCII",
    "PROTO_BYTE",
    "PROTOS",
    "Intr",
    "Ping",
    "Pong",
    "Rep",
    "Req",
    "Rintr",
    "SadaMessage",
]

# Command Header: "Second frame SHOULD be "SADA" followed by one byte which specify the
# version of the specification, for instance 0x01 for version 1" -- the text's form.
PROTO_BYTE = b"SADA\x01"
# INTR/RINTR/REQ/REP/PING/PONG Command Message: every example shows frame 2 as "SADA1",
# and PIRAN sends exactly that. nfgate's default.
PROTO_ASCII = b"SADA1"
PROTOS = (PROTO_ASCII, PROTO_BYTE)

# REP Command: the status "is equal to HTTP status codes" -- the HTTP range 100..599.
STATUS_MIN = 100
STATUS_MAX = 599


def _proto(_: object, attribute: attrs.Attribute[bytes], value: bytes) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"{attribute.name} must be bytes, got {type(value).__name__}")
    if value not in PROTOS:
        raise ValueError(f"{attribute.name} must be b'SADA1' or b'SADA\\x01', got {value[:32]!r}")


def _check_text(what: str, value: object, *, allow_empty: bool) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be str, got {type(value).__name__}")
    if not value and not allow_empty:
        raise ValueError(f"{what} must not be empty")
    # Non-printable text includes lone surrogates, so what passes always encodes as UTF-8.
    if not value.isprintable():
        raise ValueError(f"{what} has non-printable characters: {value[:32]!r}")


def _text(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    _check_text(attribute.name, value, allow_empty=False)


def _text_or_empty(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    _check_text(attribute.name, value, allow_empty=True)


def _pairs(value: Any) -> Any:
    """attrs converter: an iterable of (name, version) pairs to a tuple of 2-tuples.

    Anything that does not look like that is passed through for the validator to reject
    (so a stray string is an error, not a silently exploded tuple of characters).
    """
    if isinstance(value, (str, bytes)):
        return value
    try:
        return tuple(tuple(p) if isinstance(p, (list, tuple)) else p for p in value)
    except TypeError:
        return value


def _services(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple):
        raise TypeError(f"{attribute.name} must be a tuple of (name, version) pairs")
    for i, pair in enumerate(value):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"{attribute.name}[{i}] must be a (name, version) pair, got {pair!r}")
        _check_text(f"{attribute.name}[{i}] name", pair[0], allow_empty=True)
        _check_text(f"{attribute.name}[{i}] version", pair[1], allow_empty=True)


def _status(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be int, got {type(value).__name__}")
    if not STATUS_MIN <= value <= STATUS_MAX:
        raise ValueError(f"{attribute.name} must be an HTTP status {STATUS_MIN}..{STATUS_MAX}, got {value}")


def _proto_field() -> Any:
    return attrs.field(default=PROTO_ASCII, validator=_proto)


@attrs.frozen(kw_only=True)
class Intr(Message):
    """INTR, server -> channel: the server's service catalog (INTR Command).

    ``services`` is the (name, version) pairs in wire order. It may be empty (a server
    offering nothing yet; PIRAN sends that). A version may be empty: an unversioned
    service. A name may be empty too, as a service name may be in every nfgate codec:
    the spec does not forbid it, and refusing one is the channel's decision
    (docs/library.md).
    """

    TYPE: ClassVar[str] = "INTR"
    proto: bytes = _proto_field()
    services: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs, validator=_services)


@attrs.frozen(kw_only=True)
class Rintr(Message):
    """RINTR, channel -> server: "send me your INTR again" (RINTR Command)."""

    TYPE: ClassVar[str] = "RINTR"
    proto: bytes = _proto_field()


@attrs.frozen(kw_only=True)
class Req(Message):
    """REQ, channel -> server (REQ Command).

    ``version`` is the service version the request is for; ``""`` means any version.
    ``service`` may be empty (see :class:`Intr`); the request id, category and action
    may not.
    ``payload`` is the one payload frame, opaque (msgpack by the spec's suggestion, JSON
    in PIRAN; see :mod:`nfgate.codecs.sada.payload`).
    """

    TYPE: ClassVar[str] = "REQ"
    proto: bytes = _proto_field()
    request_id: str = attrs.field(validator=_text)
    service: str = attrs.field(validator=_text_or_empty)
    version: str = attrs.field(default="", validator=_text_or_empty)
    category: str = attrs.field(validator=_text)
    action: str = attrs.field(validator=_text)
    payload: bytes = attrs.field(default=b"", validator=attrs.validators.instance_of(bytes))


@attrs.frozen(kw_only=True)
class Rep(Message):
    """REP, server -> channel: the answer to the REQ with the same ``request_id`` (REP Command).

    ``status`` is an HTTP status code; on the wire it is ASCII decimal (spec) or a
    4-byte big-endian int32 (PIRAN).
    """

    TYPE: ClassVar[str] = "REP"
    proto: bytes = _proto_field()
    request_id: str = attrs.field(validator=_text)
    status: int = attrs.field(validator=_status)
    payload: bytes = attrs.field(default=b"", validator=attrs.validators.instance_of(bytes))


@attrs.frozen(kw_only=True)
class Ping(Message):
    """PING, channel -> server; command header only (PING and PONG command)."""

    TYPE: ClassVar[str] = "PING"
    proto: bytes = _proto_field()


@attrs.frozen(kw_only=True)
class Pong(Message):
    """PONG, server -> channel, the answer to PING; command header only (PING and PONG command)."""

    TYPE: ClassVar[str] = "PONG"
    proto: bytes = _proto_field()


SadaMessage = Intr | Rintr | Req | Rep | Ping | Pong
