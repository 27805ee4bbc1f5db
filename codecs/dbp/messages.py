"""DBP wire messages (specs/dbp.md). One frozen class per command.

Every DBP command carries a ``time`` part ("current epoch time"); it is held as a float
of epoch seconds whatever the dialect writes on the wire (ASCII decimal in the spec
dialect, a float32 in Hermes's). Service information and other bodies stay the exact
bytes that travelled: the codec never re-serialises JSON (``service_info`` in
:mod:`.codec` parses it).

Construction validates every field: a value of the wrong type raises :class:`TypeError`
and one out of range or empty where the spec forbids it raises :class:`ValueError` (the
attrs validators' exceptions). Decoding never lets them out: for bad frames it
raises :class:`nfgate.errors.DecodeError` only.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs

from .._base import Message, bytes_tuple, check_bytes_tuple

__all__ = [
    "Ack",
    "Approved",
    "DbpMessage",
    "Denied",
    "Disconnect",
    "Heartbeat",
    "Registration",
    "Reply",
    "Request",
    "Update",
]


def _to_time(value: float) -> float:
    # bool is an int: refuse it rather than read True as epoch 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"time must be a number of epoch seconds, got {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:
        raise ValueError("time is too large for a float") from None
    return seconds + 0.0  # folds -0.0 into 0.0, which is what the wire can say


def _check_time(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    # "time (current epoch time)": a finite, non-negative count of seconds.
    if not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be finite, got {value!r}")
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value!r}")


def _time_field() -> Any:
    return attrs.field(converter=_to_time, validator=_check_time)


def _printable(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    # The spec's "printable string": UTF-8 text without control characters.
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be str, got {type(value).__name__}")
    if not value.isprintable():
        raise ValueError(f"{attribute.name} has non-printable characters: {value[:32]!r}")


def _not_empty(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not value:
        raise ValueError(f"{attribute.name} must not be empty")


@attrs.frozen(kw_only=True)
class Request(Message):
    """``u_U``, client -> broker info request (DBP/Info Request).

    ``query`` is a service name; an empty query or ``"*"`` asks for the whole catalog.
    """

    TYPE: ClassVar[str] = "REQUEST"
    time: float = _time_field()
    query: str = attrs.field(validator=_printable)


@attrs.frozen(kw_only=True)
class Reply(Message):
    """``o_O``, broker -> client: ``info`` is the serialized JSON answer (DBP/Info Request).

    The spec's frame 0, "Message Reply Address", is the ROUTER identity: the transport's.
    """

    TYPE: ClassVar[str] = "REPLY"
    time: float = _time_field()
    info: bytes = attrs.field(validator=attrs.validators.instance_of(bytes))


@attrs.frozen(kw_only=True)
class Registration(Message):
    """``UwU``, service -> broker (DBP/Service Registration).

    ``info`` holds frames 3+, the serialized JSON service information (at least one
    frame); :func:`nfgate.codecs.dbp.service_info` parses it.
    """

    TYPE: ClassVar[str] = "REGISTRATION"
    time: float = _time_field()
    info: tuple[bytes, ...] = attrs.field(converter=bytes_tuple, validator=[check_bytes_tuple, _not_empty])


@attrs.frozen(kw_only=True)
class Update(Message):
    """``UoU``, service -> broker config update; ``info`` holds the updated values
    (frames 3+, serialized JSON, at least one frame) (DBP/Service Registration)."""

    TYPE: ClassVar[str] = "UPDATE"
    time: float = _time_field()
    info: tuple[bytes, ...] = attrs.field(converter=bytes_tuple, validator=[check_bytes_tuple, _not_empty])


@attrs.frozen(kw_only=True)
class Approved(Message):
    """``OwO``, broker -> service: ``changes`` are the optional configuration-change
    frames (DBP/Service Registration). Hermes sends none (one empty frame instead)."""

    TYPE: ClassVar[str] = "APPROVED"
    time: float = _time_field()
    changes: tuple[bytes, ...] = attrs.field(default=(), converter=bytes_tuple, validator=check_bytes_tuple)


@attrs.frozen(kw_only=True)
class Denied(Message):
    """``(O_O)`` (Hermes: ``OmO``), broker -> service: ``reasons`` are frames 3+
    (DBP/Service Registration)."""

    TYPE: ClassVar[str] = "DENIED"
    time: float = _time_field()
    reasons: tuple[bytes, ...] = attrs.field(default=(), converter=bytes_tuple, validator=check_bytes_tuple)


@attrs.frozen(kw_only=True)
class Heartbeat(Message):
    """``<3``, either direction, naming the service (DBP/Heartbeats).

    ``service`` may be empty, as in every nfgate codec: the spec does not forbid it, and
    refusing a name is the catalog's decision, not the wire's (docs/library.md). Over UDP
    the same message travels as one datagram (:mod:`.udp`).
    """

    TYPE: ClassVar[str] = "HEARTBEAT"
    time: float = _time_field()
    service: str = attrs.field(validator=_printable)


@attrs.frozen(kw_only=True)
class Disconnect(Message):
    """``</3``, either direction: header only (DBP/Heartbeats)."""

    TYPE: ClassVar[str] = "DISCONNECT"
    time: float = _time_field()


@attrs.frozen(kw_only=True)
class Ack(Message):
    """``u.u``, the spec's "AWK" (mislabelled DISCONNECT there): header only
    (DBP/Heartbeats). Hermes acknowledges an UPDATE with it."""

    TYPE: ClassVar[str] = "ACK"
    time: float = _time_field()


DbpMessage = Request | Reply | Registration | Update | Approved | Denied | Heartbeat | Disconnect | Ack
