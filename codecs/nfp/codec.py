"""NFP encoder/decoder: the spec dialect and NorFab 0.25's.

Frames start at the empty delimiter (the transport strips ROUTER identities).

Dialects:
  * ``spec``   -- command frame is one byte (``b"\\x04"``); commands 0x00-0x07; one
    layout per command (specs/nfp.md "NFP messages").
  * ``norfab`` -- NorFab 0.25 on PyPI: command frame is four ASCII bytes (``b"0x04"``),
    extra commands EVENT 0x08, STREAM 0x09, PUT 0x10, MMI 0x11; broker->worker jobs and
    worker->broker results are *routed* (client address + empty frame instead of
    service/target); the broker's DISCONNECT puts the service before the command;
    DISCONNECT carries no body frame. See docs/protocols/norfab-wire.md.
"""

from __future__ import annotations

from nfgate.errors import ConfigError, DecodeError, EncodeError

from .._base import FrameReader, Message, printable, reason_of
from .messages import (
    BROKER,
    CLIENT,
    WORKER,
    Delete,
    Disconnect,
    Event,
    Get,
    Keepalive,
    Mmi,
    Open,
    Post,
    Put,
    Ready,
    Response,
    Stream,
    _Job,
    _Result,
)

NAME = "nfp"
DIALECTS = ("spec", "norfab")
HEADERS = (CLIENT, WORKER, BROKER)

# NFP messages: frame 2 of each command (one byte in the spec).
OPEN, READY, KEEPALIVE, DISCONNECT, POST, RESPONSE, GET, DELETE = range(8)
# NorFab 0.25 norfab/core/NFP.py: extra commands, numbered as ASCII text.
EVENT, STREAM, PUT, MMI = 0x08, 0x09, 0x10, 0x11

_NUMBER = {
    Open: OPEN,
    Ready: READY,
    Keepalive: KEEPALIVE,
    Disconnect: DISCONNECT,
    Post: POST,
    Response: RESPONSE,
    Get: GET,
    Delete: DELETE,
    Event: EVENT,
    Stream: STREAM,
    Put: PUT,
    Mmi: MMI,
}
_CLASS = {n: cls for cls, n in _NUMBER.items()}
_SPEC_COMMANDS = frozenset(range(8))
# NorFab writes the command byte as "0x" + two hex digits ("0x10" is PUT, not 16).
_NORFAB_FRAME = {n: f"0x{n:02x}".encode() for n in _NUMBER.values()}
_NORFAB_NUMBER = {frame: n for n, frame in _NORFAB_FRAME.items()}
_SPEC_FRAMES = frozenset(bytes((n,)) for n in _SPEC_COMMANDS)
_NORFAB_DISCONNECT = _NORFAB_FRAME[DISCONNECT]


def detect(frames: list[bytes]) -> str:
    """``norfab`` when the command frame is ASCII ``0x..`` (or NorFab's swapped
    DISCONNECT), else ``spec``. Never raises on a list of byte strings."""
    if len(frames) >= 3 and frames[2] in _NORFAB_NUMBER:
        return "norfab"
    if _swapped_disconnect(frames):
        return "norfab"
    return "spec"


def _swapped_disconnect(frames: list[bytes]) -> bool:
    # NorFab's broker -> worker DISCONNECT is "", NFPB01, service, "0x03". When frame 2
    # is a command of either dialect the message is that command in the normal order
    # ("", NFPB01, "0x02", "0x03" is a KEEPALIVE for service "0x03"): NorFab's services
    # are names, never commands, so its real DISCONNECTs still read as they were sent.
    return (
        len(frames) == 4
        and frames[1] == BROKER
        and frames[3] == _NORFAB_DISCONNECT
        and frames[2] not in _NORFAB_NUMBER
        and frames[2] not in _SPEC_FRAMES
    )


def decode(frames: list[bytes], dialect: str) -> Message:
    """Decode one NFP message; raises :class:`DecodeError`."""
    reader = FrameReader(NAME, frames, "message")
    reader.take_empty()
    header = reader.take("protocol header")
    if header not in HEADERS:
        raise reader.error(f"protocol header must be NFPC01, NFPW01 or NFPB01, got {header[:16]!r}")
    if dialect == "norfab" and _swapped_disconnect(frames):
        # NorFab broker -> worker DISCONNECT: "", NFPB01, service, "0x03"
        reader.what = "DISCONNECT"
        service = _text(reader, reader.take("service name"), "service name")
        reader.take("command")
        return Disconnect(header=header, service=service, body=None, legacy_order=True)
    number = _command(reader, dialect)
    cls: type[Message] = _CLASS[number]
    reader.what = cls.TYPE
    try:
        return _decode_body(reader, dialect, header, cls)
    except (TypeError, ValueError) as exc:  # a field validator refused what the frames hold
        raise reader.error(reason_of(exc)) from None


def _command(reader: FrameReader, dialect: str) -> int:
    frame = reader.take("command")
    if dialect == "norfab":
        number = _NORFAB_NUMBER.get(frame)
    else:
        number = frame[0] if len(frame) == 1 and frame[0] in _SPEC_COMMANDS else None
    if number is None:
        form = "an ASCII command like b'0x04'" if dialect == "norfab" else "one byte 0x00-0x07"
        raise DecodeError(NAME, f"unknown command {frame[:16]!r} (expected {form})")
    return number


def _decode_body(reader: FrameReader, dialect: str, header: bytes, cls: type[Message]) -> Message:
    take = reader.take
    if cls is Open:
        body = take("open body")
        reader.done()
        return Open(header=header, body=body)
    if cls is Ready or cls is Keepalive:
        service = _text(reader, take("service name"), "service name")
        reader.done()
        return cls(header=header, service=service)
    if cls is Disconnect:
        service = _text(reader, take("service name"), "service name")
        tail = None if dialect == "norfab" else take("disconnect body")
        reader.done()
        return Disconnect(header=header, service=service, body=tail)
    if cls is Mmi:
        return _decode_mmi(reader, header)
    routed = dialect == "norfab" and header == (BROKER if issubclass(cls, _Job) else WORKER)
    if issubclass(cls, _Job):
        if routed:
            client = _client(reader)
            uuid = _text(reader, take("job uuid"), "job uuid")
            return cls(header=header, client=client, uuid=uuid, body=_body(reader))
        service = _text(reader, take("service name"), "service name")
        target = _text(reader, take("target"), "target")
        uuid = _text(reader, take("job uuid"), "job uuid")
        return cls(header=header, service=service, target=target, uuid=uuid, body=_body(reader))
    # RESPONSE, EVENT, STREAM
    address = _client(reader) if routed else None
    name = None if routed else _text(reader, take("service name"), "service name")
    job = _text(reader, take("job uuid"), "job uuid")
    status, text = _status(reader)
    if text and dialect == "norfab":
        # norfab-wire.md section 1: NorFab compares the whole frame (status == "202").
        raise reader.error("a NorFab status is three digits with no text")
    return cls(  # type: ignore[call-arg]
        header=header,
        service=name,
        client=address,
        uuid=job,
        status=status,
        status_text=text,
        body=_body(reader),
    )


def _decode_mmi(reader: FrameReader, header: bytes) -> Mmi:
    # The header says which layout (messages.Mmi): a client's request is addressed, a
    # worker's reply routed; the broker's reply to a client is addressed and its request
    # to a worker routed, told apart by frame 4: the routed form's empty delimiter, or
    # the reply's uuid, which an MMI may not leave empty.
    take = reader.take
    if header == CLIENT:
        routed = reply = False
    elif header == WORKER:
        routed = reply = True
    else:
        routed = len(reader.frames) > 4 and reader.frames[4] == b""
        reply = not routed
    client = _client(reader) if routed else None
    service = None if routed else _text(reader, take("service name"), "service name")
    target = None if (routed or reply) else _text(reader, take("target"), "target")
    uuid = _text(reader, take("job uuid"), "job uuid")
    status: int | None = None
    if reply:
        status, text = _status(reader)
        if text:  # Mmi has no status_text: it would be lost
            raise reader.error("an MMI status is three digits with no text")
    return Mmi(
        header=header,
        service=service,
        target=target,
        client=client,
        uuid=uuid,
        status=status,
        body=_body(reader),
    )


def _text(reader: FrameReader, frame: bytes, what: str) -> str:
    return printable(NAME, frame, f"{reader.what} {what}") if frame else ""


def _client(reader: FrameReader) -> bytes:
    client = reader.take("client address")
    if not client:
        raise reader.error("client address is empty")
    reader.take_empty("client address delimiter")
    return client


def _body(reader: FrameReader) -> tuple[bytes, ...]:
    if reader.remaining < 1:
        raise reader.error("missing body frame (7 or more frames)")
    return reader.rest()


def _status(reader: FrameReader) -> tuple[int, str]:
    # Status Frames: "three digits, optionally followed by a space and descriptive text"
    frame = reader.take("status")
    digits, space, text = frame.partition(b" ")
    if len(digits) != 3 or not digits.isdigit() or (space and b" " not in frame[3:4]):
        raise reader.error(f"status must be three digits, got {frame[:16]!r}")
    if space and not text:  # "200 " would come back "200": its space means text follows
        raise reader.error("status: a space after the digits must be followed by text")
    return int(digits), printable(NAME, text, f"{reader.what} status text") if text else ""


def encode(message: Message, dialect: str) -> list[bytes]:
    """Encode one NFP message; raises :class:`EncodeError`."""
    number = _NUMBER.get(type(message))
    if number is None:
        raise EncodeError(NAME, f"not an NFP message: {type(message).__name__}")
    if dialect == "spec" and number not in _SPEC_COMMANDS:
        raise EncodeError(NAME, f"{message.TYPE} is a NorFab command; the spec dialect has no 0x{number:02x}")
    command = _NORFAB_FRAME[number] if dialect == "norfab" else bytes((number,))
    header: bytes = message.header  # type: ignore[attr-defined]
    out = [b"", header, command]
    if isinstance(message, Open):
        out.append(message.body)
    elif isinstance(message, (Ready, Keepalive)):
        out.append(message.service.encode())
    elif isinstance(message, Disconnect):
        _check_disconnect(message, dialect)
        if message.legacy_order:
            return [b"", header, message.service.encode(), command]
        out.append(message.service.encode())
        if message.body is not None:
            out.append(message.body)
    elif isinstance(message, Mmi):
        # Mmi's validators allow only the layouts _decode_mmi reads back.
        out += _address(message.client, message.service)
        if message.target is not None:
            out.append(message.target.encode())
        out.append(message.uuid.encode())
        if message.status is not None:
            out.append(b"%d" % message.status)
        out += message.body
    elif isinstance(message, (_Job, _Result)):
        _check_routing(message, dialect)
        out += _address(message.client, message.service)
        if isinstance(message, _Job):
            if message.target is not None:
                out.append(message.target.encode())
            out.append(message.uuid.encode())
        else:
            out.append(message.uuid.encode())
            if message.status_text and dialect == "norfab":
                raise EncodeError(NAME, f"{message.TYPE}: a NorFab status is three digits with no text")
            status = b"%d" % message.status
            out.append(status + b" " + message.status_text.encode() if message.status_text else status)
        out += message.body
    return out


def response_frames(
    service: str, uuid: str, status: int, body: tuple[bytes, ...], dialect: str
) -> list[bytes]:
    """The frames of the broker's RESPONSE to a client (header NFPB01, addressed by
    service, no status text) from its parts, without building the :class:`Response`.

    For the broker's hot path (every 202 and every relayed result): it makes the checks
    the message's validators would, and gives what :func:`encode` gives for that
    message. Raises :class:`EncodeError` for parts the message would refuse,
    :class:`ConfigError` for a dialect other than ``spec`` and ``norfab``.
    """
    _check_parts("RESPONSE", body, service=service, uuid=uuid)
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 999:
        raise EncodeError(NAME, f"RESPONSE: status must be a three-digit integer, got {status!r}")
    if dialect == "norfab":
        command = _NORFAB_FRAME[RESPONSE]
    elif dialect == "spec":
        command = _SPEC_RESPONSE
    else:
        raise _unknown_dialect(dialect)
    return [b"", BROKER, command, service.encode(), uuid.encode(), b"%d" % status, *body]


_SPEC_RESPONSE = bytes((RESPONSE,))


def dispatch_frames(
    uuid: str,
    body: tuple[bytes, ...],
    dialect: str,
    *,
    client: bytes = b"",
    service: str = "",
    target: str = "",
) -> list[bytes]:
    """The frames of the broker's POST to a worker (header NFPB01) from its parts,
    without building the :class:`Post`: routed to ``client`` for a NorFab worker
    (NorFab's broker->worker form), addressed to ``service`` and ``target`` for a spec
    worker. The same checks as the message's validators, the same frames as
    :func:`encode`. Raises :class:`EncodeError` for parts the message would refuse,
    :class:`ConfigError` for a dialect other than ``spec`` and ``norfab``.
    """
    if dialect == "norfab":
        _check_parts("POST", body, uuid=uuid)
        if not (isinstance(client, bytes) and client):
            raise EncodeError(NAME, "POST: NorFab's broker->worker form is routed: it needs a client address")
        return [b"", BROKER, _NORFAB_FRAME[POST], client, b"", uuid.encode(), *body]
    if dialect != "spec":
        raise _unknown_dialect(dialect)
    _check_parts("POST", body, uuid=uuid, service=service, target=target)
    return [b"", BROKER, _SPEC_POST, service.encode(), target.encode(), uuid.encode(), *body]


def _check_parts(command: str, body: tuple[bytes, ...], **texts: str) -> None:
    # What the message classes' validators check (messages._text, messages._body), for
    # the frame builders that skip building the message.
    for name, text in texts.items():
        if not (isinstance(text, str) and text.isprintable()):
            raise EncodeError(NAME, f"{command}: {name} must be a printable string")
    if not body or not all(isinstance(frame, bytes) for frame in body):
        raise EncodeError(NAME, f"{command}: the body is one or more byte frames")


_SPEC_POST = bytes((POST,))


def _unknown_dialect(dialect: str) -> ConfigError:
    # What Codec.encode raises for a dialect it does not have: the caller's mistake.
    return ConfigError(f"{NAME}: unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})")


def _address(client: bytes | None, service: str | None) -> list[bytes]:
    return [client, b""] if client is not None else [(service or "").encode()]


def _check_disconnect(message: Disconnect, dialect: str) -> None:
    if dialect == "spec" and message.body is None:
        raise EncodeError(NAME, "DISCONNECT: the spec dialect needs a body frame (5 frames)")
    if dialect == "norfab" and message.body is not None:
        raise EncodeError(NAME, "DISCONNECT: NorFab sends no body frame; use body=None")
    if dialect == "spec" and message.legacy_order:
        raise EncodeError(NAME, "DISCONNECT: legacy_order is a NorFab form")


def _check_routing(message: _Job | _Result, dialect: str) -> None:
    routed_header = BROKER if isinstance(message, _Job) else WORKER
    must_route = dialect == "norfab" and message.header == routed_header
    if message.routed != must_route:
        if dialect == "spec":
            raise EncodeError(NAME, f"{message.TYPE}: the spec dialect has no routed (client address) layout")
        who = "broker->worker" if isinstance(message, _Job) else "worker->broker"
        raise EncodeError(
            NAME,
            f"{message.TYPE}: NorFab's {who} form is routed exactly when the header is {routed_header!r}",
        )
