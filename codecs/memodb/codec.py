"""MemoDB encoder/decoder, spec dialect and the bcdb dialect.

MemoDB runs over NNG req/rep, which has no multi-part messages: one message is one byte
string, so the frame list this codec takes and returns always has exactly one element.
That message is a CBOR header (the first CBOR data item) followed by the payload (every
byte after it, possibly none).

Decoding parses the header with a small hand-written CBOR reader instead of cbor2: a
MemoDB header only ever holds unsigned integers, byte strings, text strings, arrays and
booleans, and a reader that knows that can reject everything else (tags, maps, floats,
null/undefined, indefinite lengths, non-shortest arguments) with a precise reason, never
allocates more than the input's size whatever length a header declares, and never
recurses more than a few levels. The header it read is then re-encoded with cbor2's
deterministic encoder and compared with the bytes it came from, so anything not
deterministically encoded (RFC 8949 §4.2) is rejected even if the reader let it through.

Dialects:
  * ``spec`` -- specs/memodb.md as written.
  * ``bcdb`` -- the C++ ``memodb-broker`` of bcdb. Same wire form, more constraints
    (see :func:`_check_bcdb`); :func:`detect` cannot tell it from the bytes and always
    answers ``spec``.
"""

from __future__ import annotations

from typing import Any, cast

import cbor2

from nfgate.errors import DecodeError, EncodeError

from .._base import Message
from .messages import Disconnect, Heartbeat, Job, MemodbMessage, Ready, Result

NAME = "memodb"
DIALECTS = ("spec", "bcdb")

# Message format, item 1: 'The protocol version field, "memo01"' (a CBOR text string).
VERSION = "memo01"
# Message format, item 2 and the per-type list: the message type numbers.
READY = 0x01
JOB = 0x02
RESULT = 0x03
HEARTBEAT = 0x04
DISCONNECT = 0x05
# Message format: header lengths (version, type, ID, then the per-type fields).
# RESULT's fourth element ("optional bool if disconnecting") may be absent.
_ARITY: dict[int, tuple[int, ...]] = {
    READY: (4,),
    JOB: (5,),
    RESULT: (3, 4),
    HEARTBEAT: (3,),
    DISCONNECT: (3,),
}
_TYPE_NAME = {READY: "READY", JOB: "JOB", RESULT: "RESULT", HEARTBEAT: "HEARTBEAT", DISCONNECT: "DISCONNECT"}
# Message format: READY, HEARTBEAT and DISCONNECT are listed with "No payload".
_NO_PAYLOAD = frozenset({READY, HEARTBEAT, DISCONNECT})

# bcdb memodb-broker (design.md, "Deployed implementations"): worker IDs are a uint32
# copied as 4 raw bytes (``typedef uint32_t WorkerID``, ``Worker::encodeID``).
BCDB_ID_SIZE = 4
# bcdb keeps the JOB timeout in an ``int64_t``.
BCDB_TIMEOUT_LIMIT = 2**63

# Deepest array nesting a valid header has: the header array holding READY's service
# list. Anything deeper is rejected before it can cost recursion.
_MAX_DEPTH = 2

_TYPE_OF: dict[type[Message], int] = {
    Ready: READY,
    Job: JOB,
    Result: RESULT,
    Heartbeat: HEARTBEAT,
    Disconnect: DISCONNECT,
}


def detect(frames: list[bytes]) -> str:
    """Always ``spec``: bcdb writes the same bytes, it only accepts fewer messages.

    Never raises.
    """
    return DIALECTS[0]


# --------------------------------------------------------------------------- decoding

_MAJOR_NAME = {0: "unsigned integer", 1: "integer", 2: "byte string", 3: "text string", 4: "array"}


class _HeaderReader:
    """Reads the first CBOR data item of a message, restricted to what MemoDB headers
    use (RFC 8949 §3): major types 0 (unsigned), 1 (negative, so that a negative
    timeout gets a precise error), 2 (bytes), 3 (text), 4 (array) and the simple values
    false/true. Raises :class:`DecodeError` on anything else."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def error(self, reason: str) -> DecodeError:
        return DecodeError(NAME, reason)

    def truncated(self, what: str, at: int) -> DecodeError:
        return self.error(f"truncated CBOR header: {what} at offset {at} runs past the end of the message")

    def read_item(self, depth: int) -> Any:
        start = self.pos
        if start >= len(self.data):
            raise self.truncated("data item", start)
        initial = self.data[start]
        major, info = initial >> 5, initial & 0x1F
        self.pos += 1
        if major == 7:
            return self._simple(info, start)
        if major == 6:
            raise self.error(f"CBOR tag at offset {start} is not allowed in a MemoDB header")
        if major == 5:
            raise self.error(f"CBOR map at offset {start} is not allowed in a MemoDB header")
        if info == 31:
            if major == 0 or major == 1:
                raise self.error(f"malformed CBOR: integer with additional information 31 at offset {start}")
            raise self.error(
                f"header is not deterministically encoded CBOR: indefinite-length "
                f"{_MAJOR_NAME[major]} at offset {start} (RFC 8949 §4.2.1)"
            )
        arg = self._argument(info, start)
        if major == 0:
            return arg
        if major == 1:
            return -1 - arg
        if major in (2, 3):
            end = self.pos + arg
            if end > len(self.data):  # checked before slicing: a declared length allocates nothing
                raise self.truncated(f"{_MAJOR_NAME[major]} of {arg} bytes", start)
            raw = self.data[self.pos : end]
            self.pos = end
            if major == 2:
                return raw
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                raise self.error(f"text string at offset {start} is not valid UTF-8") from None
        # major == 4: array
        if depth >= _MAX_DEPTH:
            raise self.error(f"arrays nested more than {_MAX_DEPTH} deep (offset {start})")
        if arg > len(self.data) - self.pos:  # every element takes at least one byte
            raise self.truncated(f"array of {arg} elements", start)
        return [self.read_item(depth + 1) for _ in range(arg)]

    def _argument(self, info: int, start: int) -> int:
        if info < 24:
            return info
        if info > 27:
            raise self.error(f"malformed CBOR: reserved additional information {info} at offset {start}")
        size = 1 << (info - 24)
        end = self.pos + size
        if end > len(self.data):
            raise self.truncated("argument", start)
        value = int.from_bytes(self.data[self.pos : end], "big")
        self.pos = end
        # RFC 8949 §4.2.1: "The arguments ... must be as short as possible".
        if value < (24 if size == 1 else 1 << (4 * size)):
            raise self.error(
                f"header is not deterministically encoded CBOR: the argument at offset {start} "
                f"is not in its shortest form (RFC 8949 §4.2.1)"
            )
        return value

    def _simple(self, info: int, start: int) -> bool:
        if info == 20:
            return False
        if info == 21:
            return True
        if info in (25, 26, 27):
            raise self.error(f"floating-point number at offset {start} is not allowed in a MemoDB header")
        if info == 31:
            raise self.error(f"unexpected CBOR break code at offset {start}")
        if info in (28, 29, 30):
            raise self.error(f"malformed CBOR: reserved additional information {info} at offset {start}")
        name = {22: "null", 23: "undefined"}.get(info, f"simple value {info}")
        raise self.error(f"CBOR {name} at offset {start} is not allowed in a MemoDB header")


def _kind(value: object) -> str:
    """What a decoded header value is, in CBOR's words, for error messages."""
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "a boolean"
    if isinstance(value, int):
        return "an unsigned integer" if value >= 0 else "a negative integer"
    if isinstance(value, bytes):
        return "a byte string"
    if isinstance(value, str):
        return "a text string"
    return "an array"


def decode(frames: list[bytes], dialect: str) -> Message:
    """Decode one MemoDB message (one frame: the whole NNG message).

    Raises :class:`DecodeError` for anything that is not a valid message of
    ``dialect``, and nothing else.
    """
    try:
        return _decode(frames, dialect)
    except DecodeError:
        raise
    except Exception as exc:
        # The contract is "a message or DecodeError"; a failure the checks above did
        # not foresee must still not escape as something else.
        raise DecodeError(NAME, f"undecodable message ({type(exc).__name__}: {exc})") from exc


def _decode(frames: list[bytes], dialect: str) -> Message:
    if len(frames) != 1:
        raise DecodeError(NAME, f"expected exactly one frame (the whole NNG message), got {len(frames)}")
    data = frames[0]
    if not data:
        raise DecodeError(NAME, "empty message: no CBOR header")
    reader = _HeaderReader(data)
    header = reader.read_item(0)
    end = reader.pos
    # Belt and braces for RFC 8949 §4.2: the reader rejects non-shortest arguments and
    # indefinite lengths itself; re-encoding catches whatever else could differ.
    if cbor2.dumps(header, canonical=True) != data[:end]:
        raise DecodeError(NAME, "header is not deterministically encoded CBOR (RFC 8949 §4.2)")
    payload = data[end:]

    if not isinstance(header, list):
        raise DecodeError(NAME, f"header must be a CBOR array, got {_kind(header)}")
    if len(header) < 3:
        raise DecodeError(NAME, f"header has {len(header)} element(s); needs at least 3 (version, type, ID)")
    version, kind, ident = header[0], header[1], header[2]
    if not isinstance(version, str):
        raise DecodeError(NAME, f"version field must be the text string {VERSION!r}, got {_kind(version)}")
    if version != VERSION:
        raise DecodeError(NAME, f"unsupported protocol version {version[:32]!r} (expected {VERSION!r})")
    if type(kind) is not int or kind < 0:
        raise DecodeError(NAME, f"message type must be an unsigned integer, got {_kind(kind)}")
    if kind not in _ARITY:
        raise DecodeError(NAME, f"unknown message type 0x{kind:02x}")
    what = _TYPE_NAME[kind]
    if not isinstance(ident, bytes):
        raise DecodeError(NAME, f"{what}: ID must be a byte string, got {_kind(ident)}")
    arity = _ARITY[kind]
    if len(header) not in arity:
        expected = " or ".join(str(n) for n in arity)
        problem = "unexpected trailing element(s)" if len(header) > max(arity) else "missing field(s)"
        raise DecodeError(NAME, f"{what} header has {len(header)} elements, expected {expected}: {problem}")
    if kind in _NO_PAYLOAD and payload:
        raise DecodeError(
            NAME, f"{what} has no payload (Message format), got {len(payload)} trailing byte(s)"
        )

    message = _build(kind, header, ident, payload)
    if dialect == "bcdb":
        refusal = _check_bcdb(message)
        if refusal:
            raise DecodeError(NAME, f"{what}: {refusal} (bcdb dialect)")
    return message


def _build(kind: int, header: list[Any], ident: bytes, payload: bytes) -> Message:
    what = _TYPE_NAME[kind]
    if kind == READY:
        services = header[3]
        if not isinstance(services, list):
            raise DecodeError(NAME, f"READY: service list must be a CBOR array, got {_kind(services)}")
        for i, name in enumerate(services):
            if not isinstance(name, str):
                raise DecodeError(NAME, f"READY: service name {i} must be a text string, got {_kind(name)}")
        return Ready(id=ident, services=tuple(services))
    if kind == JOB:
        service, timeout = header[3], header[4]
        if not isinstance(service, str):
            raise DecodeError(NAME, f"JOB: service name must be a text string, got {_kind(service)}")
        if type(timeout) is not int or timeout < 0:
            raise DecodeError(NAME, f"JOB: timeout must be an unsigned integer, got {_kind(timeout)}")
        return Job(id=ident, service=service, timeout_ms=timeout, payload=payload)
    if kind == RESULT:
        disconnecting = header[3] if len(header) == 4 else None
        if disconnecting is not None and not isinstance(disconnecting, bool):
            raise DecodeError(
                NAME, f"RESULT: disconnecting flag must be a boolean, got {_kind(disconnecting)}"
            )
        return Result(id=ident, disconnecting=disconnecting, payload=payload)
    if kind == HEARTBEAT:
        return Heartbeat(id=ident)
    if kind == DISCONNECT:
        return Disconnect(id=ident)
    raise DecodeError(NAME, f"{what}: no decoder")  # unreachable: _ARITY lists every type


# ------------------------------------------------------------------------------ bcdb


def canonical_order_key(name: str) -> tuple[int, bytes]:
    """Sort key of a text string in CBOR canonical order (RFC 7049 §3.9, the order bcdb
    checks): shorter encoding first, then bytewise. For text strings the encoded length
    grows with the UTF-8 length, so (UTF-8 length, UTF-8 bytes) is that order."""
    raw = name.encode("utf-8")
    return (len(raw), raw)


def _check_bcdb(message: Message) -> str | None:
    """The reason bcdb's memodb-broker would refuse ``message``, or None."""
    if isinstance(message, Ready):
        # handleMessage: READY needs an empty ID. handleWorkerReady: names non-empty and
        # strictly increasing (so no duplicates) in canonical order, else dropped.
        if message.id:
            return "ID must be empty"
        previous: tuple[tuple[int, bytes], str] | None = None
        for name in message.services:
            if not name:
                return "service names must not be empty"
            key = canonical_order_key(name)
            if previous is not None and key <= previous[0]:
                return (
                    f"service list is not in CBOR canonical order (shorter first, then bytewise, "
                    f"no duplicates): {name[:32]!r} after {previous[1][:32]!r}"
                )
            previous = (key, name)
        return None
    if isinstance(message, (Job, Result)):
        # Empty for a client's JOB and the broker's RESULT to a client; the worker ID
        # on the broker's JOB to a worker and the worker's RESULT.
        if message.id and len(message.id) != BCDB_ID_SIZE:
            return f"ID must be empty or {BCDB_ID_SIZE} bytes, got {len(message.id)}"
        if isinstance(message, Job) and message.timeout_ms >= BCDB_TIMEOUT_LIMIT:
            return f"timeout {message.timeout_ms} does not fit bcdb's int64"
        if isinstance(message, Result) and message.disconnecting is not None:
            return "RESULT header must have exactly 3 elements (no disconnecting flag)"
        return None
    if isinstance(message, (Heartbeat, Disconnect)) and len(message.id) != BCDB_ID_SIZE:
        return f"worker ID must be {BCDB_ID_SIZE} bytes, got {len(message.id)}"
    return None


# --------------------------------------------------------------------------- encoding


def encode(message: Message, dialect: str) -> list[bytes]:
    """Encode one MemoDB message as a one-element list (the whole NNG message).

    Raises :class:`EncodeError` if ``message`` is not a MemoDB message or breaks a
    constraint of ``dialect`` (bcdb: nothing is sorted or fixed up for you).
    """
    kind = _TYPE_OF.get(type(message))
    if kind is None:
        raise EncodeError(NAME, f"not a MemoDB message: {type(message).__name__}")
    if dialect == "bcdb":
        problem = _check_bcdb(message)
        if problem:
            raise EncodeError(NAME, f"{message.TYPE}: {problem} (bcdb dialect)")
    header: list[Any] = [VERSION, kind, cast(MemodbMessage, message).id]
    payload = b""
    if isinstance(message, Ready):
        header.append(list(message.services))
    elif isinstance(message, Job):
        header += [message.service, message.timeout_ms]
        payload = message.payload
    elif isinstance(message, Result):
        if message.disconnecting is not None:
            header.append(message.disconnecting)
        payload = message.payload
    try:
        encoded = cbor2.dumps(header, canonical=True)
    except (cbor2.CBOREncodeError, ValueError, TypeError) as exc:  # validators make this unreachable
        raise EncodeError(NAME, f"{message.TYPE}: cannot encode header: {exc}") from exc
    return [encoded + payload]
