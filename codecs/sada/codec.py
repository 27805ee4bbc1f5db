"""Safir-Darbaan v1 encoder/decoder, spec dialect and the PIRAN dialect, plus PIRAN's
identity and request-id rules as pure helpers.

Frames here start at the empty delimiter: the ROUTER identity (the spec's frame 0)
belongs to the transport, so the spec's frame N is index N - 1 here, and the frame
numbers in error messages count from the delimiter.

Dialects:
  * ``spec``  -- REP status is ASCII decimal (REP Command example: ``200``).
  * ``piran`` -- PIRAN (Java, jeromq; Safir server and Darbaan channel): REP status is a
    4-byte big-endian int32, the version frame is always ``SADA1``. Every other
    message is byte-for-byte the spec form, so only a REP tells the dialects apart.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from nfgate.errors import ConfigError, DecodeError, EncodeError

from .._base import FrameReader, Message, printable
from .messages import (
    PROTO_ASCII,
    PROTOS,
    STATUS_MAX,
    STATUS_MIN,
    Intr,
    Ping,
    Pong,
    Rep,
    Req,
    Rintr,
)

__all__ = [
    "DIALECTS",
    "NAME",
    "PIRAN_REQUEST_PREFIX",
    "PiranRequestId",
    "channel_identity",
    "decode",
    "detect",
    "encode",
    "identity_endpoint",
    "new_request_id",
    "parse_piran_request_id",
    "piran_checksum",
    "server_identity",
]

NAME = "sada"
DIALECTS = ("spec", "piran")

# Command Header: "Third frame defines the Command name"; RINTR has its own section
# (RINTR Command) although the Command Header's list forgets it.
INTR = b"INTR"
RINTR = b"RINTR"
REQ = b"REQ"
REP = b"REP"
PING = b"PING"
PONG = b"PONG"

_COMMAND_OF: dict[type[Message], bytes] = {
    Intr: INTR,
    Rintr: RINTR,
    Req: REQ,
    Rep: REP,
    Ping: PING,
    Pong: PONG,
}
# PING and PONG command, RINTR Command: "just consist of a command header".
_HEADER_ONLY: dict[bytes, Callable[[bytes], Message]] = {
    RINTR: lambda proto: Rintr(proto=proto),
    PING: lambda proto: Ping(proto=proto),
    PONG: lambda proto: Pong(proto=proto),
}

# REP Command example "frame 5: 200": three ASCII digits cover every HTTP status.
_SPEC_STATUS_WIDTH = 3
# PIRAN writes the status with ByteBuffer.allocate(4).putInt(code): big-endian int32.
_PIRAN_STATUS_WIDTH = 4

# The REP status frame's index here (spec frame 5, minus the identity frame).
_REP_STATUS_INDEX = 4


def detect(frames: list[bytes]) -> str:
    """``piran`` for a REP whose status frame is 4 bytes that are not ASCII digits, else ``spec``.

    Every other PIRAN message is identical on the wire to the spec form, so ``spec`` is
    the right answer for it too. Never raises.
    """
    if len(frames) > _REP_STATUS_INDEX and frames[2] == REP:
        status = frames[_REP_STATUS_INDEX]
        if len(status) == _PIRAN_STATUS_WIDTH and not (status.isdigit() and status.isascii()):
            return "piran"
    return "spec"


def decode(frames: list[bytes], dialect: str) -> Message:
    """Decode one Safir-Darbaan message; raises :class:`DecodeError`."""
    reader = FrameReader(NAME, frames, "message")
    reader.take_empty("empty delimiter")
    proto = _read_proto(reader, dialect)
    command = reader.take("command")
    if command in _HEADER_ONLY:
        reader.what = command.decode("ascii")
        reader.done()
        return _HEADER_ONLY[command](proto)
    if command == INTR:
        reader.what = "INTR"
        return _decode_intr(reader, proto)
    if command == REQ:
        reader.what = "REQ"
        request_id = _read_text(reader, "request id")
        service = _read_text(reader, "service name", allow_empty=True)
        version = _read_text(reader, "service version", allow_empty=True)
        category = _read_text(reader, "action category")
        action = _read_text(reader, "action name")
        payload = _read_payload(reader)
        return Req(
            proto=proto,
            request_id=request_id,
            service=service,
            version=version,
            category=category,
            action=action,
            payload=payload,
        )
    if command == REP:
        reader.what = "REP"
        request_id = _read_text(reader, "request id")
        status = _read_status(reader, dialect)
        payload = _read_payload(reader)
        return Rep(proto=proto, request_id=request_id, status=status, payload=payload)
    raise reader.error(f"unknown command {command[:32]!r}")


def _read_proto(reader: FrameReader, dialect: str) -> bytes:
    proto = reader.take("version")
    if proto not in PROTOS:
        if proto[:4] == b"SADA" and len(proto) > 4:
            raise reader.error(f"unsupported SADA version {proto[4:32]!r} in version frame {proto[:32]!r}")
        raise reader.error(f"version frame must be b'SADA1' or b'SADA\\x01', got {proto[:32]!r}")
    if dialect == "piran" and proto != PROTO_ASCII:
        # PIRAN drops any message whose version frame is not the string "SADA1".
        raise reader.error(f"the piran dialect's version frame is b'SADA1', got {proto!r}")
    return proto


def _read_text(reader: FrameReader, name: str, *, allow_empty: bool = False) -> str:
    frame = reader.take(name)
    text = printable(NAME, frame, f"{reader.what} {name} (frame {reader.pos - 1})")
    if not text and not allow_empty:
        raise reader.error(f"{name} (frame {reader.pos - 1}) must not be empty")
    return text


def _decode_intr(reader: FrameReader, proto: bytes) -> Intr:
    # INTR Command: "two frames for each service", name then version.
    if reader.remaining % 2:
        raise reader.error(
            f"odd number of service frames ({reader.remaining}): each service is a name and a version frame"
        )
    services: list[tuple[str, str]] = []
    while reader.remaining:
        name = _read_text(reader, "service name", allow_empty=True)
        version = _read_text(reader, "service version", allow_empty=True)
        services.append((name, version))
    return Intr(proto=proto, services=tuple(services))


def _read_status(reader: FrameReader, dialect: str) -> int:
    frame = reader.take("status")
    if dialect == "piran":
        if len(frame) != _PIRAN_STATUS_WIDTH:
            raise reader.error(
                f"status must be a 4-byte big-endian int32 in the piran dialect, got {len(frame)} byte(s)"
            )
        status = int.from_bytes(frame, "big", signed=True)
    else:
        if len(frame) != _SPEC_STATUS_WIDTH or not (frame.isdigit() and frame.isascii()):
            hint = ""
            if len(frame) == _PIRAN_STATUS_WIDTH:
                hint = " (a 4-byte binary status is PIRAN's form: the piran dialect)"
            raise reader.error(f"status must be 3 ASCII decimal digits, got {frame[:32]!r}{hint}")
        status = int(frame)
    if not STATUS_MIN <= status <= STATUS_MAX:
        raise reader.error(f"status {status} is not an HTTP status code ({STATUS_MIN}..{STATUS_MAX})")
    return status


def _read_payload(reader: FrameReader) -> bytes:
    # REQ Command "frame nine is the actual request payload body", REP Command "seventh
    # frame is reply payload": exactly one frame, required even when empty.
    payload = reader.take("payload")
    if reader.remaining:
        raise reader.error(
            f"{reader.remaining} unexpected trailing frame(s) after the payload: "
            "a message carries exactly one payload frame"
        )
    return payload


def encode(message: Message, dialect: str) -> list[bytes]:
    """Encode one Safir-Darbaan message; raises :class:`EncodeError`."""
    command = _COMMAND_OF.get(type(message))
    if command is None or not isinstance(message, (Intr, Rintr, Req, Rep, Ping, Pong)):
        raise EncodeError(NAME, f"not a Safir-Darbaan message: {type(message).__name__}")
    if dialect == "piran" and message.proto != PROTO_ASCII:
        raise EncodeError(NAME, f"PIRAN only reads the version frame b'SADA1', not {message.proto!r}")
    frames = [b"", message.proto, command]
    if isinstance(message, Intr):
        for name, version in message.services:
            frames += [name.encode("utf-8"), version.encode("utf-8")]
    elif isinstance(message, Req):
        frames += [
            message.request_id.encode("utf-8"),
            message.service.encode("utf-8"),
            message.version.encode("utf-8"),
            message.category.encode("utf-8"),
            message.action.encode("utf-8"),
            message.payload,
        ]
    elif isinstance(message, Rep):
        frames += [
            message.request_id.encode("utf-8"),
            _status_frame(message.status, dialect),
            message.payload,
        ]
    return frames


def _status_frame(status: int, dialect: str) -> bytes:
    if dialect == "piran":
        return status.to_bytes(_PIRAN_STATUS_WIDTH, "big", signed=True)
    return str(status).encode("ascii")


# --- PIRAN helpers -------------------------------------------------------------------
#
# Pure: callers pass the clock and the randomness in. Sources are PIRAN's Darbaan
# channel (util/IdGenerator.java, util/IdentityUtil.java, Connector.java) and Safir
# server (server/SafirServer.java).

# Darbaan's Constants.ID_REQ_PREFIX: the prefix of every request id a Darbaan channel makes.
PIRAN_REQUEST_PREFIX = "RQ"
# Darbaan's IdGenerator: the 36-symbol alphabet the checksum digits are drawn from.
_PIRAN_ALPHABET = "jsoefaumgcxqzhbntpkdyvliwr5946170382"
# Darbaan's IdGenerator: RandomStringUtils.randomAlphanumeric(8).
_PIRAN_RANDOM_LEN = 8
# Request and Response Routing: an identity is "the address string that servers will use
# to connect", e.g. "tcp://192.168.55.162:5055"; PIRAN drops the scheme.
_TCP = "tcp://"
_WILDCARDS = frozenset({"", "*", "0.0.0.0", "::"})


# Darbaan's millis is a Java long (System.currentTimeMillis()): at most 19 digits, which
# also keeps int() well inside Python's 4300-digit limit for peer-controlled text.
_JAVA_LONG_MAX = 2**63 - 1
_JAVA_LONG_DIGITS = len(str(_JAVA_LONG_MAX))


@attrs.frozen(kw_only=True)
class PiranRequestId:
    """A PIRAN request id, ``<prefix>-<millis>-<random>-<checksum>``; ``str()`` gives it
    back exactly as it was written.

    ``millis_text`` is the millis part as it appeared (``"007"``; the checksum is computed
    over that text, so leading zeros matter), ``millis`` its value; it defaults to
    ``str(millis)``. Raises :class:`ValueError` when ``millis_text`` is not the decimal
    text of ``millis`` within a Java long.
    """

    prefix: str
    millis: int
    rand: str
    checksum: str
    millis_text: str = attrs.field(default=attrs.Factory(lambda self: str(self.millis), takes_self=True))

    def __attrs_post_init__(self) -> None:
        text = self.millis_text
        if not (
            isinstance(text, str)
            and text.isascii()
            and text.isdigit()
            and len(text) <= _JAVA_LONG_DIGITS
            and int(text) == self.millis
        ):
            raise ValueError(
                f"millis_text {str(text)[:32]!r} is not the decimal text of millis {self.millis!r}"
            )

    def __str__(self) -> str:
        return f"{self.prefix}-{self.millis_text}-{self.rand}-{self.checksum}"


def _utf16_sum(text: str) -> int:
    # Java's String.chars() walks UTF-16 code units, so astral characters count as two.
    data = text.encode("utf-16-be", "surrogatepass")
    return sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))


def piran_checksum(prefix: str, millis: str, rand: str) -> str:
    """PIRAN's request-id checksum (Darbaan ``IdGenerator``).

    With ``s`` the sum of the UTF-16 code units of ``prefix`` and ``rand``, each character
    ``c`` of the decimal ``millis`` becomes ``ALPHABET[(ord(c) + s) % 36]``, upper-cased;
    the checksum is as long as ``millis``. Raises nothing for ``str`` arguments.
    """
    total = _utf16_sum(prefix) + _utf16_sum(rand)
    size = len(_PIRAN_ALPHABET)
    return "".join(_PIRAN_ALPHABET[(ord(c) + total) % size] for c in millis).upper()


def new_request_id(prefix: str, millis: int, rand: str) -> str:
    """A request id in PIRAN's form: ``f"{prefix}-{millis}-{RAND}-{checksum}"``.

    ``millis`` is the caller's clock (epoch milliseconds) and ``rand`` the caller's 8
    ASCII letters or digits (upper-cased, as Darbaan does); use
    :data:`PIRAN_REQUEST_PREFIX` for the prefix Darbaan uses. Raises :class:`ValueError`
    for a prefix that is empty, non-printable or contains ``-``, a ``millis`` that is
    negative or beyond a Java long (Darbaan's type), or a ``rand`` that is not 8 ASCII
    alphanumerics (and :class:`TypeError` for wrong types).
    """
    if not isinstance(prefix, str) or not isinstance(rand, str):
        raise TypeError("prefix and rand must be str")
    if not isinstance(millis, int) or isinstance(millis, bool):
        raise TypeError(f"millis must be int, got {type(millis).__name__}")
    if not prefix or "-" in prefix or not prefix.isprintable():
        raise ValueError(f"request id prefix must be non-empty printable text without '-': {prefix!r}")
    if not 0 <= millis <= _JAVA_LONG_MAX:
        raise ValueError(f"millis must be 0..2**63-1 (a Java long), got {millis}")
    if len(rand) != _PIRAN_RANDOM_LEN or not (rand.isascii() and rand.isalnum()):
        raise ValueError(f"rand must be {_PIRAN_RANDOM_LEN} ASCII letters or digits: {rand!r}")
    rand = rand.upper()
    return f"{prefix}-{millis}-{rand}-{piran_checksum(prefix, str(millis), rand)}"


def parse_piran_request_id(text: str, *, verify: bool = True) -> PiranRequestId:
    """Split a PIRAN request id into its parts, checking the checksum unless ``verify=False``.

    Raises :class:`DecodeError` when ``text`` is not four ``-``-separated parts with
    decimal millis that fits a Java long and 8 ASCII alphanumerics, or when the checksum
    does not match.
    """
    if not isinstance(text, str):
        raise DecodeError(NAME, f"request id must be str, got {type(text).__name__}")
    parts = text.split("-")
    if len(parts) != 4 or not all(parts):
        raise DecodeError(NAME, f"not a PIRAN request id (prefix-millis-random-checksum): {text[:64]!r}")
    prefix, millis, rand, checksum = parts
    if not (millis.isascii() and millis.isdigit()):
        raise DecodeError(NAME, f"PIRAN request id millis is not decimal: {millis[:32]!r}")
    if len(millis) > _JAVA_LONG_DIGITS or int(millis) > _JAVA_LONG_MAX:
        raise DecodeError(NAME, f"PIRAN request id millis is beyond a Java long: {millis[:32]!r}")
    if len(rand) != _PIRAN_RANDOM_LEN or not (rand.isascii() and rand.isalnum()):
        raise DecodeError(NAME, f"PIRAN request id random part is not 8 letters or digits: {rand[:32]!r}")
    if verify:
        expected = piran_checksum(prefix, millis, rand)
        if checksum != expected:
            raise DecodeError(
                NAME, f"PIRAN request id checksum mismatch: {checksum[:32]!r}, expected {expected!r}"
            )
    return PiranRequestId(prefix=prefix, millis=int(millis), rand=rand, checksum=checksum, millis_text=millis)


def _check_dialect(dialect: str) -> None:
    if dialect not in DIALECTS:
        raise ConfigError(f"{NAME}: unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})")


def _host_port(endpoint: str) -> tuple[str, int]:
    # An identity is read back by identity_endpoint, which takes printable text only.
    if not isinstance(endpoint, str) or not endpoint.isprintable():
        raise ValueError(f"endpoint must be printable text: {str(endpoint)[:64]!r}")
    rest = endpoint[len(_TCP) :] if endpoint.startswith(_TCP) else endpoint
    if "://" in rest:
        raise ValueError(f"not a tcp:// endpoint: {endpoint[:64]!r}")
    host, sep, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    # At most 5 digits before int(): the text may come from a peer's identity.
    if not sep or not (port.isascii() and port.isdigit() and len(port) <= 5) or not 0 < int(port) < 65536:
        raise ValueError(f"endpoint has no valid port: {endpoint[:64]!r}")
    if host in _WILDCARDS:
        raise ValueError(f"a wildcard address is not a public endpoint: {endpoint!r}")
    return host, int(port)


def channel_identity(endpoint: str, dialect: str = "spec") -> bytes:
    """The ROUTER identity a channel sets for its public ``endpoint``.

    ``spec`` (Request and Response Routing): the endpoint itself,
    ``b"tcp://127.0.0.1:5055"``. ``piran``: ``ip:port`` without the scheme,
    ``b"127.0.0.1:5055"`` (IPv6 hosts without brackets, as PIRAN joins ip and port).
    Raises :class:`ValueError` for an endpoint that is not printable text (which
    :func:`identity_endpoint` could not read back), has no host and port or has a
    wildcard host, :class:`nfgate.errors.ConfigError` for an unknown dialect.
    """
    _check_dialect(dialect)
    host, port = _host_port(endpoint)
    if dialect == "piran":
        return f"{host}:{port}".encode()
    return endpoint.encode("utf-8") if endpoint.startswith(_TCP) else f"{_TCP}{endpoint}".encode()


def server_identity(endpoint: str, dialect: str = "spec") -> bytes | None:
    """The ROUTER identity a server sets: none in the spec (servers "MUST not set an
    identity"), ``ip:port`` of its own address for PIRAN, whose Safir servers set one.

    Raises like :func:`channel_identity` (the endpoint is checked in both dialects).
    """
    _check_dialect(dialect)
    host, port = _host_port(endpoint)
    return f"{host}:{port}".encode() if dialect == "piran" else None


def identity_endpoint(identity: bytes) -> str:
    """The ``tcp://`` endpoint a channel identity names, in either form.

    ``b"tcp://10.0.0.1:5055"`` and ``b"10.0.0.1:5055"`` both give
    ``"tcp://10.0.0.1:5055"``; an IPv6 host gets its brackets back. Raises
    :class:`DecodeError` when the identity is not such an address (or not bytes).
    """
    if type(identity) is not bytes:
        raise DecodeError(NAME, f"channel identity must be bytes, not {type(identity).__name__}")
    text = printable(NAME, identity, "channel identity")
    try:
        host, port = _host_port(text)
    except ValueError as exc:
        raise DecodeError(NAME, f"channel identity is not an endpoint: {exc}") from None
    return f"{_TCP}[{host}]:{port}" if ":" in host else f"{_TCP}{host}:{port}"
