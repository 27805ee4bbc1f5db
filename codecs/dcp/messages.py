"""DCP v1 wire messages (specs/dcp.md). One frozen class per message type.

Service names and addresses are opaque bytes: the spec says a service name "MAY contain
any character", and ZeroMQ identities are binary.

Construction validates every field: a value of the wrong type raises :class:`TypeError`
and one out of range or empty where the spec forbids it raises :class:`ValueError` (the
attrs validators' exceptions). Decoding never lets them out: for bad frames it
raises :class:`nfgate.errors.DecodeError` only.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from .._base import Message, bytes_tuple, check_bytes_tuple

__all__ = ["Ping", "Pong", "Reconnect", "Registration", "Reply", "Request", "DcpMessage"]


def _metadata_parts(
    owner: object, attribute: attrs.Attribute[tuple[bytes, ...]], value: tuple[bytes, ...]
) -> None:
    check_bytes_tuple(owner, attribute, value)
    # "Metadata parts. Any number of non-empty parts" (Requests & Replies): an empty
    # part would be read back as the metadata delimiter. (One validator, not a list of
    # two: a list costs an and-validator call on every REQUEST and REPLY built.)
    if b"" in value:
        raise ValueError(f"{attribute.name} parts must be non-empty")


def _client_address(_: object, attribute: attrs.Attribute[bytes | None], value: bytes | None) -> None:
    # An empty address is indistinguishable from "absent" on the wire; absent is None.
    if value is None:
        return
    if not isinstance(value, bytes):
        raise TypeError(f"{attribute.name} must be None (absent) or bytes, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{attribute.name} must be None (absent) or a non-empty byte string")


@attrs.frozen(kw_only=True)
class Registration(Message):
    """Type 0x01, worker -> broker, echoed back by the broker to confirm (Connection)."""

    TYPE: ClassVar[str] = "REGISTRATION"
    service: bytes = attrs.field(validator=attrs.validators.instance_of(bytes))


@attrs.frozen(kw_only=True)
class Ping(Message):
    """Type 0x02, worker -> broker heartbeat; header only (Heartbeats)."""

    TYPE: ClassVar[str] = "PING"


@attrs.frozen(kw_only=True)
class Pong(Message):
    """Type 0x03, broker -> worker answer to every PING; header only (Heartbeats)."""

    TYPE: ClassVar[str] = "PONG"


@attrs.frozen(kw_only=True)
class Reconnect(Message):
    """Type 0x06, broker -> worker: heartbeat from an unregistered worker (Heartbeats)."""

    TYPE: ClassVar[str] = "RECONNECT"


@attrs.frozen(kw_only=True)
class Request(Message):
    """Type 0x04 (Requests & Replies).

    ``client`` is None when the sender left the client address out (clients may; the
    broker then inserts it). Workers forwarding a request keep the original address.
    """

    TYPE: ClassVar[str] = "REQUEST"
    service: bytes = attrs.field(validator=attrs.validators.instance_of(bytes))
    client: bytes | None = attrs.field(default=None, validator=_client_address)
    metadata: tuple[bytes, ...] = attrs.field(default=(), converter=bytes_tuple, validator=_metadata_parts)
    data: tuple[bytes, ...] = attrs.field(default=(), converter=bytes_tuple, validator=check_bytes_tuple)


@attrs.frozen(kw_only=True)
class Reply(Message):
    """Type 0x05: a request without the service name (Requests & Replies)."""

    TYPE: ClassVar[str] = "REPLY"
    client: bytes | None = attrs.field(default=None, validator=_client_address)
    metadata: tuple[bytes, ...] = attrs.field(default=(), converter=bytes_tuple, validator=_metadata_parts)
    data: tuple[bytes, ...] = attrs.field(default=(), converter=bytes_tuple, validator=check_bytes_tuple)


DcpMessage = Registration | Ping | Pong | Reconnect | Request | Reply
