"""What every protocol codec shares: the message base class, the :class:`Codec`
descriptor the registry hands out, frame-reading helpers and the JSON form.

A codec is sans-I/O: it turns a list of frames (``bytes``) into one frozen message
object and back. Transports have already removed ROUTER identities / NNG contexts;
the leading empty delimiter frame is part of the message wherever the spec lists it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import attrs
import cattrs

from nfgate.errors import ConfigError, DecodeError, EncodeError
from nfgate.frames import bytes_tuple, check_bytes_tuple

__all__ = [
    "Codec",
    "FrameReader",
    "Message",
    "as_frames",
    "bytes_tuple",
    "check_bytes_tuple",
    "ascii_int",
    "load_json",
    "printable",
    "reason_of",
]


class Message:
    """Base of every wire message class.

    Subclasses are ``@attrs.frozen(kw_only=True)`` and set ``TYPE`` to the spec's
    command name in upper case (``"POST"``, ``"JOB"``, ``"INTR"``).

    Construction validates every field, the same way in every built-in codec: a value of
    the wrong Python type raises :class:`TypeError`, one of the right type that the wire
    cannot carry raises :class:`ValueError`. Decoders never let either out (they raise
    :class:`nfgate.errors.DecodeError`).
    """

    TYPE: ClassVar[str] = ""


Decoder = Callable[[list[bytes], str], Message]
Encoder = Callable[[Message, str], list[bytes]]
Detector = Callable[[list[bytes]], str]


def _json_converter() -> cattrs.Converter:
    # Bytes travel as lowercase hex in the JSON form (the `nfgate decode` contract).
    conv = cattrs.Converter()
    conv.register_unstructure_hook(bytes, lambda b: b.hex())
    conv.register_structure_hook(bytes, lambda v, _: _from_hex(v))
    return conv


def _from_hex(value: object) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"expected a hex string, got {type(value).__name__}")
    return bytes.fromhex(value)


_CONVERTER = _json_converter()


@attrs.frozen(kw_only=True)
class Codec:
    """One protocol's codec as the registry exposes it.

    ``dialects[0]`` is the spec dialect. ``single_frame`` is true for protocols whose
    transport carries one opaque message (MemoDB over NNG) rather than ZeroMQ frames.
    Building one checks nothing (the registry checks a plugin's, :func:`nfgate.codecs.get`);
    each method says what it raises.
    """

    name: str
    title: str
    dialects: tuple[str, ...]
    messages: tuple[type[Message], ...]
    decoder: Decoder = attrs.field(repr=False)
    encoder: Encoder = attrs.field(repr=False)
    detector: Detector = attrs.field(repr=False)
    single_frame: bool = False

    def detect(self, frames: Iterable[bytes]) -> str:
        """Return the dialect the frames are written in (the spec's when unsure).

        Never raises on any list of byte strings; raises :class:`DecodeError` for
        anything else (as :meth:`decode` does).
        """
        return self.detector(as_frames(self.name, frames))

    def decode(self, frames: Iterable[bytes], dialect: str | None = None) -> Message:
        """Decode one message.

        ``dialect=None`` (only None: ``""`` is a name like any other) detects it from
        the frames. Raises :class:`DecodeError` for any input that is not a valid
        message of that dialect, and :class:`ConfigError` for a dialect name the codec
        does not know.
        """
        if dialect is not None:
            dialect = self._dialect(dialect)  # the caller's mistake comes first
        data = as_frames(self.name, frames)
        return self.decoder(data, self.detector(data) if dialect is None else dialect)

    def encode(self, message: Message, dialect: str | None = None) -> list[bytes]:
        """Encode ``message`` as frames in ``dialect`` (the spec's when None).

        Raises :class:`nfgate.errors.EncodeError` if the message cannot be expressed in
        that dialect, :class:`ConfigError` for an unknown dialect name (``""`` too).
        """
        return self.encoder(message, self.dialects[0] if dialect is None else self._dialect(dialect))

    def message_type(self, type_name: str) -> type[Message]:
        """The message class for a spec command name; raises :class:`ConfigError`."""
        if not isinstance(type_name, str):
            raise ConfigError(f"{self.name}: a message type is a string, not {type(type_name).__name__}")
        found = self._types.get(type_name.upper())
        if found is None:
            known = ", ".join(sorted(self._types))
            raise ConfigError(f"{self.name}: unknown message type {type_name!r} (known: {known})")
        return found

    def to_json(self, message: Message, dialect: str | None = None) -> dict[str, Any]:
        """The JSON form: ``protocol``, ``dialect``, ``type``, then the fields (bytes as hex).

        ``dialect=None`` is the spec's; raises :class:`ConfigError` for an unknown name,
        :class:`EncodeError` for anything but one of this codec's messages (another
        protocol's would be labelled as this one's).
        """
        if not isinstance(message, self.messages):
            raise EncodeError(self.name, f"not a {self.name} message: {type(message).__name__}")
        body = _CONVERTER.unstructure(message)
        return {
            "protocol": self.name,
            "dialect": self.dialects[0] if dialect is None else self._dialect(dialect),
            "type": message.TYPE,
            **body,
        }

    def from_json(self, obj: dict[str, Any]) -> tuple[Message, str]:
        """Inverse of :meth:`to_json`; returns the message and its dialect.

        Raises :class:`ConfigError` naming what is wrong with the object.
        """
        if not isinstance(obj, dict):
            raise ConfigError(f"{self.name}: expected a JSON object")
        fields = dict(obj)
        protocol = fields.pop("protocol", self.name)
        if protocol != self.name:
            raise ConfigError(f"{self.name}: JSON names protocol {protocol!r}")
        dialect = self._dialect(fields.pop("dialect", self.dialects[0]))
        type_name = fields.pop("type", None)
        if not isinstance(type_name, str):
            raise ConfigError(f"{self.name}: JSON has no string 'type'")
        cls = self.message_type(type_name)
        try:
            return _CONVERTER.structure(fields, cls), dialect
        except Exception as exc:  # cattrs wraps validator errors in groups
            raise ConfigError(f"{self.name}: bad {cls.TYPE} fields: {reason_of(exc)}") from exc

    @functools.cached_property
    def _types(self) -> dict[str, type[Message]]:
        return {cls.TYPE: cls for cls in self.messages}

    def _dialect(self, dialect: str) -> str:
        if dialect not in self.dialects:
            known = ", ".join(self.dialects)
            raise ConfigError(f"{self.name}: unknown dialect {dialect!r} (known: {known})")
        return dialect


def load_json(data: str | bytes | bytearray, **kwargs: Any) -> Any:
    """``json.loads``, raising ValueError (a :class:`json.JSONDecodeError` or plain) for
    anything it refuses, also for JSON nested deeper than the json module goes (there
    it raises RecursionError): network input never gets past a ``except ValueError``."""
    try:
        return json.loads(data, **kwargs)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def reason_of(exc: BaseException) -> str:
    """One readable line for a validation error: attrs validators raise with their
    message first and the attribute, options and value after it (whose repr is a
    screenful), cattrs groups them, a missing field is a KeyError."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(reason_of(e) for e in exc.exceptions)
    if isinstance(exc, KeyError):  # cattrs: a required field the JSON lacks
        return f"missing field {exc.args[0]!r}" if exc.args else "missing field"
    if len(exc.args) > 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc) or type(exc).__name__


def as_frames(protocol: str, frames: Iterable[bytes]) -> list[bytes]:
    """Copy ``frames`` to a list of ``bytes``; raises :class:`DecodeError` for anything else."""
    if isinstance(frames, (bytes, bytearray, memoryview, str)):
        raise DecodeError(protocol, "expected a list of frames, got a single byte string")
    try:
        items = iter(frames)
    except TypeError:  # None, a number: the contract is DecodeError for any input
        raise DecodeError(protocol, f"expected a list of frames, got {type(frames).__name__}") from None
    out: list[bytes] = []
    for frame in items:
        if isinstance(frame, bytes):
            out.append(frame)
        elif isinstance(frame, (bytearray, memoryview)):
            out.append(bytes(frame))
        else:
            raise DecodeError(protocol, f"frame {len(out)} is {type(frame).__name__}, not bytes")
    return out


def printable(protocol: str, frame: bytes, what: str) -> str:
    """Decode a frame the spec calls a printable string (UTF-8, no control characters).

    Raises :class:`DecodeError` naming ``what`` when it is not.
    """
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError:
        raise DecodeError(protocol, f"{what} is not UTF-8: {frame[:32]!r}") from None
    if not text.isprintable():
        raise DecodeError(protocol, f"{what} has non-printable characters: {text[:32]!r}")
    return text


def ascii_int(protocol: str, frame: bytes, what: str) -> int:
    """Parse a frame of ASCII decimal digits; raises :class:`DecodeError` (also for more
    digits than Python's ``int()`` reads, 4300 by default)."""
    if not frame or not frame.isdigit() or not frame.isascii():
        raise DecodeError(protocol, f"{what} is not ASCII decimal digits: {frame[:32]!r}")
    try:
        return int(frame)
    except ValueError:  # sys.get_int_max_str_digits(): the frame is the peer's to choose
        raise DecodeError(protocol, f"{what} has too many digits ({len(frame)})") from None


class FrameReader:
    """Reads frames left to right and raises :class:`DecodeError` with context.

    Keeps the decoders linear and makes every "too few / too many frames" error
    name the message type and the frame that was expected.
    """

    def __init__(self, protocol: str, frames: Sequence[bytes], what: str) -> None:
        self.protocol = protocol
        self.frames = frames
        self.what = what
        self.pos = 0

    def error(self, reason: str) -> DecodeError:
        """The :class:`DecodeError` for ``reason``, prefixed with :attr:`what`, for the
        caller to raise (it does not raise it itself)."""
        return DecodeError(self.protocol, f"{self.what}: {reason}")

    @property
    def remaining(self) -> int:
        """How many frames are left to read. Never raises."""
        return len(self.frames) - self.pos

    def take(self, name: str) -> bytes:
        """Next frame; raises :class:`DecodeError` saying ``name`` is missing when there is none."""
        if self.pos >= len(self.frames):
            raise self.error(f"missing frame {self.pos} ({name})")
        frame = self.frames[self.pos]
        self.pos += 1
        return frame

    def take_empty(self, name: str = "empty delimiter") -> None:
        """Consume the next frame, which must be empty; raises :class:`DecodeError` when
        it is missing or not empty."""
        frame = self.take(name)
        if frame:
            raise self.error(f"frame {self.pos - 1} ({name}) must be empty, got {frame[:32]!r}")

    def take_until_empty(self, name: str) -> tuple[bytes, ...]:
        """Frames up to (and consuming) the next empty frame; raises :class:`DecodeError`
        if there is none."""
        start = self.pos
        while self.pos < len(self.frames):
            if not self.frames[self.pos]:
                self.pos += 1
                return tuple(self.frames[start : self.pos - 1])
            self.pos += 1
        raise self.error(f"{name} not terminated by an empty frame")

    def rest(self) -> tuple[bytes, ...]:
        """Every frame left (possibly none), all consumed. Never raises."""
        out = tuple(self.frames[self.pos :])
        self.pos = len(self.frames)
        return out

    def done(self) -> None:
        """Raise :class:`DecodeError` unless every frame was consumed."""
        if self.pos != len(self.frames):
            raise self.error(f"{len(self.frames) - self.pos} unexpected trailing frame(s)")
