"""MemoDB wire messages (specs/memodb.md, "Message format"). One frozen class per
message type.

Every message carries the header's ID field as ``id`` (opaque bytes: empty for clients
and for READY, the broker-assigned worker ID otherwise). JOB and RESULT carry the bytes
after the CBOR header as ``payload``; the spec gives READY, HEARTBEAT and DISCONNECT
"No payload", so they have none.

Construction validates every field: a value of the wrong type raises :class:`TypeError`
and one out of range or empty where the spec forbids it raises :class:`ValueError` (the
attrs validators' exceptions). Decoding never lets them out: for bad frames it
raises :class:`nfgate.errors.DecodeError` only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

import attrs

from .._base import Message

__all__ = ["Disconnect", "Heartbeat", "Job", "MemodbMessage", "Ready", "Result"]

# The largest CBOR unsigned integer (major type 0 with an 8-byte argument).
_UINT64_LIMIT = 2**64


def _str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    # A bare string is iterable too; turning "echo" into ("e", "c", "h", "o") would
    # silently advertise four services.
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"services must be a sequence of strings, not {type(value).__name__}")
    return tuple(value)


def _check_text(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # CBOR text strings are UTF-8 (RFC 8949 §3.1); lone surrogates have no encoding.
        raise ValueError(f"{name} is not encodable as UTF-8: {value[:32]!r}") from None


def _text(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    _check_text(attribute.name, value)


def _services(_: object, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]) -> None:
    for item in value:
        _check_text(f"{attribute.name} item", item)


def _bytes(_: object, attribute: attrs.Attribute[bytes], value: bytes) -> None:
    if not isinstance(value, bytes):
        raise TypeError(f"{attribute.name} must be bytes, got {type(value).__name__}")


def _timeout(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    # bool is an int subclass, but True is not a timeout.
    if type(value) is not int:
        raise TypeError(f"{attribute.name} must be int, got {type(value).__name__}")
    if not 0 <= value < _UINT64_LIMIT:
        raise ValueError(f"{attribute.name} must be an unsigned 64-bit integer, got {value}")


def _optional_bool(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and type(value) is not bool:
        raise TypeError(f"{attribute.name} must be bool or None, got {type(value).__name__}")


@attrs.frozen(kw_only=True)
class Ready(Message):
    """Type 0x01, worker -> broker: the services the worker supports (Worker).

    ``["memo01", 0x01, ID, [service names]]``, no payload. The spec says the ID
    "should be an empty bytestring" for READY; the spec dialect keeps whatever arrived.
    """

    TYPE: ClassVar[str] = "READY"
    id: bytes = attrs.field(default=b"", validator=_bytes)
    services: tuple[str, ...] = attrs.field(converter=_str_tuple, validator=_services)


@attrs.frozen(kw_only=True)
class Job(Message):
    """Type 0x02, client -> broker and broker -> worker (Simple client, Worker).

    ``["memo01", 0x02, ID, service, timeout_ms]`` + payload. ``timeout_ms`` is how long
    the broker waits for the RESULT after handing the job to a worker.
    """

    TYPE: ClassVar[str] = "JOB"
    id: bytes = attrs.field(default=b"", validator=_bytes)
    service: str = attrs.field(validator=_text)
    timeout_ms: int = attrs.field(validator=_timeout)
    payload: bytes = attrs.field(default=b"", validator=_bytes)


@attrs.frozen(kw_only=True)
class Result(Message):
    """Type 0x03, worker -> broker and broker -> client (Simple client, Worker).

    ``["memo01", 0x03, ID]`` or ``["memo01", 0x03, ID, disconnecting]`` + payload.
    ``disconnecting`` is None when the optional bool is absent, so both header forms
    round-trip exactly; True means the worker takes no more jobs.
    """

    TYPE: ClassVar[str] = "RESULT"
    id: bytes = attrs.field(default=b"", validator=_bytes)
    disconnecting: bool | None = attrs.field(default=None, validator=_optional_bool)
    payload: bytes = attrs.field(default=b"", validator=_bytes)


@attrs.frozen(kw_only=True)
class Heartbeat(Message):
    """Type 0x04, broker <-> worker liveness check; ``["memo01", 0x04, ID]`` (Worker)."""

    TYPE: ClassVar[str] = "HEARTBEAT"
    id: bytes = attrs.field(default=b"", validator=_bytes)


@attrs.frozen(kw_only=True)
class Disconnect(Message):
    """Type 0x05, broker -> worker: reset and send READY again; ``["memo01", 0x05, ID]``."""

    TYPE: ClassVar[str] = "DISCONNECT"
    id: bytes = attrs.field(default=b"", validator=_bytes)


MemodbMessage = Ready | Job | Result | Heartbeat | Disconnect
