"""DBP encoder/decoder, spec dialect and the Hermes dialect, plus service-information
helpers.

Frames here start at the empty delimiter frame: the ROUTER identity (the REPLY's
"Message Reply Address" in the spec) belongs to the transport. Every command is
``["", tag, time, ...]``.

Dialects:
  * ``spec``   -- ``time`` is ASCII decimal epoch seconds (``b"1732251000"`` or
    ``b"1732251000.123"``); DENIED's tag is ``(O_O)``.
  * ``hermes`` -- the LASP author's Python implementation: ``time`` is a 4-byte
    float32 (``struct.pack("f", t)``, little-endian on the x86 hosts it runs on, so
    ``"<f"`` here), DENIED is ``OmO``, APPROVED is exactly ``["", "OwO", t, ""]``.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from nfgate.errors import ConfigError, DecodeError, EncodeError

from .._base import FrameReader, Message, load_json, printable, reason_of
from .messages import (
    Ack,
    Approved,
    Denied,
    Disconnect,
    Heartbeat,
    Registration,
    Reply,
    Request,
    Update,
)
from .session import check_registration

__all__ = [
    "DIALECTS",
    "REQUIRED_KEYS",
    "decode",
    "decode_time",
    "detect",
    "encode",
    "encode_time",
    "make_info",
    "missing_required",
    "service_info",
]

NAME = "dbp"
DIALECTS = ("spec", "hermes")

# DBP/Info Request: "Frame 1: 'u_U' (3 bytes for info request command)".
REQUEST = b"u_U"
# DBP/Info Request: "Frame 2: 'o_O' (3 bytes for info retrieval response)" (frame 1 once
# the reply address is gone).
REPLY = b"o_O"
# DBP/Service Registration: "'UwU' (3 byte, representing REGISTRATION)".
REGISTRATION = b"UwU"
# DBP/Service Registration: "'UoU' (3 byte, representing config update)".
UPDATE = b"UoU"
# DBP/Service Registration: "'OwO' (3 byte, representing APPROVED)".
APPROVED = b"OwO"
# DBP/Service Registration: "'(O_O)' (one byte, representing DENIED)" -- it is five
# bytes; the "one byte" is a slip of the spec (design.md, DBP notes).
DENIED = b"(O_O)"
# Hermes (design.md, Deployed implementations): DENIED is "OmO".
DENIED_HERMES = b"OmO"
# DBP/Heartbeats: "'<3' (two bytes, representing HEARTBEAT)".
HEARTBEAT = b"<3"
# DBP/Heartbeats: "'</3' (3 byte, representing DISCONNECT)".
DISCONNECT = b"</3"
# DBP/Heartbeats: the "AWK" command, "'u.u' (3 byte, representing DISCONNECT)" -- an
# acknowledgement, mislabelled in the spec; Hermes answers UPDATE with it.
ACK = b"u.u"

# DBP/Service Registration: "Service information shall consist of the services name, ip
# address, port, function, and heartbeat timing at a minimum."
REQUIRED_KEYS = ("name", "ip", "port", "function", "heartbeat")

# "time (current epoch time)": nfgate reads ASCII decimal seconds, int or float text
# (design.md, DBP notes). No sign, no exponent, digits on both sides of a point.
_TIME_TEXT = re.compile(rb"[0-9]+(?:\.[0-9]+)?")
# Hermes writes struct.pack("f", time.time()): four bytes, native (little-endian) order.
_HERMES_TIME = struct.Struct("<f")
_TIME_CHARS = frozenset(b"0123456789.")

_TAGS: dict[str, dict[type[Message], bytes]] = {
    "spec": {
        Request: REQUEST,
        Reply: REPLY,
        Registration: REGISTRATION,
        Update: UPDATE,
        Approved: APPROVED,
        Denied: DENIED,
        Heartbeat: HEARTBEAT,
        Disconnect: DISCONNECT,
        Ack: ACK,
    },
}
_TAGS["hermes"] = {**_TAGS["spec"], Denied: DENIED_HERMES}
_CLASS_OF: dict[str, dict[bytes, type[Message]]] = {
    dialect: {tag: cls for cls, tag in tags.items()} for dialect, tags in _TAGS.items()
}


def detect(frames: list[bytes]) -> str:
    """``hermes`` when the tag is ``OmO`` or the time part (frame 2) is 4 bytes that are
    not all ASCII digits or ``.``; ``spec`` otherwise. Never raises for a list of byte strings.

    Ambiguous case: a Hermes float32 whose four bytes happen to be digits/dots (times
    around 1e-7 s, never a real clock) is read as ``spec``.
    """
    if len(frames) >= 2 and frames[1] == DENIED_HERMES:
        return "hermes"
    if len(frames) >= 3 and len(frames[2]) == 4 and not set(frames[2]) <= _TIME_CHARS:
        return "hermes"
    return "spec"


# -- time --------------------------------------------------------------------------


def encode_time(seconds: float, dialect: str = "spec") -> bytes:
    """The time part for ``seconds`` (finite, non-negative) in ``dialect``.

    Spec dialect: a whole number is written without a fractional part (``b"1732251000"``),
    anything else as the shortest decimal that reads back to the same float
    (``b"1732251000.123"``), never in exponent form. Hermes dialect: little-endian float32,
    rounded to the nearest float32 as Hermes's own ``struct.pack`` does (about 128 s of
    resolution around today's epoch, so a Hermes time does not round-trip exactly).
    Raises :class:`EncodeError` for a value the dialect cannot carry (not a number,
    negative, not finite, beyond float32's range), :class:`ConfigError` for a dialect
    name the codec does not know.
    """
    _check_dialect(dialect)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise EncodeError(NAME, f"time must be a number of epoch seconds, got {type(seconds).__name__}")
    try:
        seconds = float(seconds)
    except OverflowError:
        raise EncodeError(NAME, f"time {seconds!r} is too large for a float") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise EncodeError(NAME, f"time must be finite and non-negative, got {seconds!r}")
    # -0.0 passes "< 0" but float32 keeps its sign bit, which decode_time refuses: the
    # wire has no negative zero, so write 0.0 (as the message classes fold it).
    seconds += 0.0
    if dialect == "hermes":
        try:
            return _HERMES_TIME.pack(seconds)
        except OverflowError:
            raise EncodeError(NAME, f"time {seconds!r} does not fit a float32 (hermes dialect)") from None
    if seconds.is_integer():
        return str(int(seconds)).encode("ascii")
    text = repr(seconds)
    if "e" in text:  # repr picks exponent form below 1e-4; the wire form has none
        text = format(Decimal(text), "f")
    return text.encode("ascii")


def _check_dialect(dialect: str) -> None:
    # As Codec.encode/decode: an unknown name (say "HERMES") must not quietly mean the spec.
    if dialect not in DIALECTS:
        raise ConfigError(f"dbp: unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})")


def decode_time(frame: bytes, dialect: str = "spec", what: str = "time") -> float:
    """Parse a time part; raises :class:`DecodeError` naming ``what`` (for anything but
    a valid time part, a ``frame`` that is not bytes included), :class:`ConfigError`
    for a dialect name the codec does not know.

    Spec dialect: ASCII ``digits`` or ``digits.digits``. Hermes dialect: 4-byte
    little-endian float32. Either way the value must be finite and non-negative.
    """
    _check_dialect(dialect)
    if type(frame) is not bytes:
        raise DecodeError(NAME, f"{what} must be bytes, got {type(frame).__name__}")
    if dialect == "hermes":
        if len(frame) != _HERMES_TIME.size:
            raise DecodeError(
                NAME, f"{what} must be 4 bytes (float32) in the hermes dialect, got {len(frame)}"
            )
        (seconds,) = _HERMES_TIME.unpack(frame)
    else:
        if not _TIME_TEXT.fullmatch(frame):
            raise DecodeError(NAME, f"{what} is not ASCII decimal epoch seconds: {frame[:32]!r}")
        seconds = float(frame)
    if not math.isfinite(seconds):
        raise DecodeError(NAME, f"{what} is not a finite number: {frame[:32]!r}")
    if math.copysign(1.0, seconds) < 0:
        raise DecodeError(NAME, f"{what} is negative: {frame[:32]!r}")
    return float(seconds)


# -- decoding ----------------------------------------------------------------------


def decode(frames: list[bytes], dialect: str) -> Message:
    """Decode one DBP message; raises :class:`DecodeError`."""
    reader = FrameReader(NAME, frames, "message")
    reader.take_empty("empty delimiter")
    tag = reader.take("command tag")
    cls = _CLASS_OF[dialect].get(tag)
    if cls is None:
        raise reader.error(f"unknown command tag {tag[:32]!r}{_tag_hint(tag, dialect)}")
    reader.what = cls.TYPE
    seconds = decode_time(reader.take("time"), dialect, f"{cls.TYPE} frame 2 (time)")
    try:
        return _body(cls, reader, seconds, dialect)
    except (TypeError, ValueError) as exc:  # belt and braces: decoders raise DecodeError only
        raise reader.error(reason_of(exc)) from None


def _tag_hint(tag: bytes, dialect: str) -> str:
    for other, classes in _CLASS_OF.items():
        if other != dialect and tag in classes:
            return f" in the {dialect} dialect (it is the {other} dialect's {classes[tag].TYPE})"
    return ""


def _text(reader: FrameReader, name: str) -> str:
    frame = reader.take(name)
    return printable(NAME, frame, f"{reader.what} frame {reader.pos - 1} ({name})")


def _body(cls: type[Message], reader: FrameReader, seconds: float, dialect: str) -> Message:
    message: Message
    if cls is Request:
        message = Request(time=seconds, query=_text(reader, "service query"))
    elif cls is Reply:
        message = Reply(time=seconds, info=reader.take("service information"))
    elif cls is Registration or cls is Update:
        info = (reader.take("service information"), *reader.rest())
        message = (
            Registration(time=seconds, info=info) if cls is Registration else Update(time=seconds, info=info)
        )
    elif cls is Approved:
        if dialect == "hermes":
            # Hermes: exactly ["", "OwO", t, ""]; the empty frame carries no change.
            reader.take_empty("Hermes's empty frame")
            message = Approved(time=seconds)
        else:
            message = Approved(time=seconds, changes=reader.rest())
    elif cls is Denied:
        message = Denied(time=seconds, reasons=reader.rest())
    elif cls is Heartbeat:
        message = Heartbeat(time=seconds, service=_text(reader, "service name"))
    elif cls is Disconnect:
        message = Disconnect(time=seconds)
    else:
        message = Ack(time=seconds)
    reader.done()
    return message


# -- encoding ----------------------------------------------------------------------


def encode(message: Message, dialect: str) -> list[bytes]:
    """Encode one DBP message; raises :class:`EncodeError`."""
    if not isinstance(
        message, (Request, Reply, Registration, Update, Approved, Denied, Heartbeat, Disconnect, Ack)
    ):
        raise EncodeError(NAME, f"not a DBP message: {type(message).__name__}")
    frames = [b"", _TAGS[dialect][type(message)], encode_time(message.time, dialect)]
    if isinstance(message, Request):
        frames.append(message.query.encode("utf-8"))
    elif isinstance(message, Reply):
        frames.append(message.info)
    elif isinstance(message, (Registration, Update)):
        frames.extend(message.info)
    elif isinstance(message, Approved):
        if dialect == "hermes":
            if message.changes:
                raise EncodeError(NAME, "Hermes's APPROVED carries no configuration changes")
            frames.append(b"")
        else:
            frames.extend(message.changes)
    elif isinstance(message, Denied):
        frames.extend(message.reasons)
    elif isinstance(message, Heartbeat):
        frames.append(message.service.encode("utf-8"))
    return frames


# -- service information -----------------------------------------------------------


def service_info(source: Registration | Update | Reply | bytes | Sequence[bytes]) -> dict[str, Any]:
    """Parse the JSON object a REGISTRATION, UPDATE or REPLY carries (or raw bytes, or a
    sequence of frames, which are concatenated: "Frame 3+" hold one serialized object).

    The Hermes registration form ``{"name", "interfaces": {"router": {"ip", "port"}},
    ...}`` is normalised to the spec form: ``ip`` and ``port`` are copied from
    ``interfaces.router`` unless already present. Every key is kept. Raises
    :class:`DecodeError` when the bytes are not UTF-8 JSON or not a JSON object, or
    ``source`` is none of the above.
    """
    if isinstance(source, Reply):
        data = source.info
    elif isinstance(source, (Registration, Update)):
        data = b"".join(source.info)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    else:
        try:
            frames = list(source)
        except TypeError:
            raise DecodeError(
                NAME, f"service information must be bytes or frames, not {type(source).__name__}"
            ) from None
        if not all(isinstance(frame, (bytes, bytearray, memoryview)) for frame in frames):
            # bytes(n) of an int would be n zero bytes: refused, not allocated.
            raise DecodeError(NAME, "service information frames must be bytes")
        data = b"".join(bytes(frame) for frame in frames)
    try:
        obj = load_json(data.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except UnicodeDecodeError:
        raise DecodeError(NAME, f"service information is not UTF-8: {data[:32]!r}") from None
    except ValueError as exc:
        raise DecodeError(NAME, f"service information is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise DecodeError(NAME, f"service information must be a JSON object, got {type(obj).__name__}")
    interfaces = obj.get("interfaces")
    router = interfaces.get("router") if isinstance(interfaces, dict) else None
    if isinstance(router, dict):
        for key in ("ip", "port"):
            if key in router and key not in obj:
                obj[key] = router[key]
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    # 1e999 is valid JSON syntax that no double holds: as inf it would go back out, in
    # the catalog's answers, as Infinity, which is not JSON.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:32]} is beyond what a JSON number can hold here")
    return value


def missing_required(info: Mapping[str, Any]) -> list[str]:
    """The spec-required keys (:data:`REQUIRED_KEYS`) absent from ``info``, in spec order.

    Run it on :func:`service_info`'s result so Hermes's form counts its ``ip``/``port``.
    Never raises for a mapping.
    """
    return [key for key in REQUIRED_KEYS if key not in info]


def make_info(*, name: str, ip: str, port: int, function: str, heartbeat: float, **extra: Any) -> bytes:
    """Service information as compact UTF-8 JSON: the required keys first, then ``extra``.

    Raises :class:`TypeError` for a value of the wrong type, :class:`ValueError` for one
    :func:`nfgate.codecs.dbp.session.check_registration` would deny (the same rule:
    ``name`` non-empty and printable, ``port`` 1..65535, ``heartbeat`` finite and
    positive) or an ``extra`` value JSON cannot hold.
    """
    for key, value in (("name", name), ("ip", ip), ("function", function)):
        if not isinstance(value, str):
            raise TypeError(f"{key} must be str, got {type(value).__name__}")
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"port must be int, got {type(port).__name__}")
    if isinstance(heartbeat, bool) or not isinstance(heartbeat, (int, float)):
        raise TypeError(f"heartbeat must be a number of seconds, got {type(heartbeat).__name__}")
    info = {"name": name, "ip": ip, "port": port, "function": function, "heartbeat": heartbeat, **extra}
    # The catalog's own rule, so that what this makes is APPROVED (spec dialect).
    reasons = check_registration(info, "spec", REQUIRED_KEYS)
    if reasons:
        raise ValueError("; ".join(reasons))
    try:
        return json.dumps(info, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except TypeError as exc:  # an extra value of a type JSON has no form for (a set, bytes)
        raise ValueError(str(exc)) from None
