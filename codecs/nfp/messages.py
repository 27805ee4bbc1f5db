"""NFP wire messages (specs/nfp.md "NFP messages"), spec and NorFab 0.25 forms.

Headers are kept as fields because they say who sent the message (NFPC01 client,
NFPW01 worker, NFPB01 broker). Job commands (POST, GET, DELETE, PUT, MMI request) and
result commands (RESPONSE, EVENT, STREAM, MMI reply) have two layouts:

* *addressed* -- ``service`` (+ ``target`` for jobs) then ``uuid``: the spec's only
  layout, and NorFab's between client and broker;
* *routed*    -- ``client`` address, an empty frame, then ``uuid``: NorFab's layout
  between broker and worker (service and target dropped).

A message is routed exactly when ``client`` is set. NorFab's choice of layout is tied
to the header (routed jobs come from the broker, routed results from a worker), and the
classes refuse a combination that no dialect can put on the wire, so every message that
can be built encodes in at least one dialect and reads back as itself.

Construction validates every field: a value of the wrong type raises :class:`TypeError`
and one out of range, not printable, or a combination of fields no layout has raises
:class:`ValueError` (the attrs validators' exceptions). Decoding never lets them out:
for bad frames it raises :class:`nfgate.errors.DecodeError` only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import attrs
from attrs import validators as v

from .._base import Message, bytes_tuple, check_bytes_tuple

__all__ = [
    "CLIENT",
    "NORFAB_COMMANDS",
    "WORKER",
    "BROKER",
    "Delete",
    "Disconnect",
    "Event",
    "Get",
    "Keepalive",
    "Mmi",
    "NfpMessage",
    "Open",
    "Post",
    "Put",
    "Ready",
    "Response",
    "Stream",
]

# NFP messages: "NFPC01" or "NFPW01" or "NFPB01" (six bytes, NFP/Client, Worker, Broker v0.1)
CLIENT = b"NFPC01"
WORKER = b"NFPW01"
BROKER = b"NFPB01"
# NorFab 0.25 norfab/core/NFP.py: the command frames, ASCII "0x" and two hex digits (the
# codec's command table holds the same; a test checks they agree).
NORFAB_COMMANDS = frozenset(
    {"0x00", "0x01", "0x02", "0x03", "0x04", "0x05", "0x06", "0x07", "0x08", "0x09", "0x10", "0x11"}
)


def _header(*allowed: bytes) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        # bytes first: == alone would take bytearray(b"NFPC01") into a frozen message
        # (unhashable, and changeable after the check). One call, on every decode.
        if type(value) is not bytes:
            raise TypeError(f"{attribute.name} must be bytes, not {type(value).__name__}")
        if value not in allowed:
            raise ValueError(f"{attribute.name} must be one of {allowed!r}, not {value!r}")

    return check


def _text(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    # Service names, targets and uuids are "printable string" frames (empty included: an
    # empty target is the spec's default, all; an empty service name is the broker's to
    # refuse, as the spec does not forbid it).
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be str, got {type(value).__name__}")
    if not value.isprintable():
        raise ValueError(f"{attribute.name} must be a printable string, got {value[:32]!r}")


def _opt_text(inst: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        _text(inst, attribute, value)


def _client(_: object, attribute: attrs.Attribute[Any], value: bytes | None) -> None:
    if value is None:
        return
    if not isinstance(value, bytes):
        raise TypeError(f"client must be None or bytes, got {type(value).__name__}")
    if not value:
        raise ValueError("client must be None or a non-empty address")


def _body(_: object, attribute: attrs.Attribute[Any], value: tuple[bytes, ...]) -> None:
    # POST/RESPONSE/GET/DELETE are "7 or more frames": at least one body frame.
    check_bytes_tuple(_, attribute, value)
    if not value:
        raise ValueError("body needs at least one frame")


def _status(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    # Status Frames: "three digits". Every result has one (None is MMI's request only).
    # bool is an int subclass, but True is not a status.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"status must be int, got {type(value).__name__}")
    if not 100 <= value <= 999:
        raise ValueError(f"status must be a three-digit integer, got {value!r}")


def _opt_status(inst: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None:
        _status(inst, attribute, value)


@attrs.frozen(kw_only=True)
class Open(Message):
    """0x00: peer introduces itself; the broker answers with OPEN."""

    TYPE: ClassVar[str] = "OPEN"
    header: bytes = attrs.field(validator=_header(CLIENT, WORKER, BROKER))
    body: bytes = attrs.field(default=b"", validator=v.instance_of(bytes))


@attrs.frozen(kw_only=True)
class Ready(Message):
    """0x01: worker registers with one service (NFP/Worker)."""

    TYPE: ClassVar[str] = "READY"
    header: bytes = attrs.field(default=WORKER, validator=_header(WORKER))
    service: str = attrs.field(validator=_text)


@attrs.frozen(kw_only=True)
class Keepalive(Message):
    """0x02: heartbeat in either direction (Keepaliving)."""

    TYPE: ClassVar[str] = "KEEPALIVE"
    header: bytes = attrs.field(validator=_header(BROKER, WORKER))
    service: str = attrs.field(validator=_text)


@attrs.frozen(kw_only=True)
class Disconnect(Message):
    """0x03: five frames in the spec (its "3 frames" heading is wrong); NorFab sends
    no body frame (``body=None``).

    ``legacy_order`` is NorFab 0.25's broker form, service *before* the command. Its own
    workers do not recognise it (they read the service as the command), so nfgate
    decodes it but sends the normal order.
    """

    TYPE: ClassVar[str] = "DISCONNECT"
    header: bytes = attrs.field(validator=_header(BROKER, WORKER))
    service: str = attrs.field(validator=_text)
    body: bytes | None = attrs.field(default=b"", validator=v.optional(v.instance_of(bytes)))  # type: ignore[arg-type]
    legacy_order: bool = attrs.field(default=False, validator=v.instance_of(bool))

    def __attrs_post_init__(self) -> None:
        if self.legacy_order and (self.header != BROKER or self.body is not None):
            raise ValueError("legacy_order is NorFab's broker form: header NFPB01 and no body")
        if self.legacy_order and self.service in NORFAB_COMMANDS:
            # "", NFPB01, "0x02", "0x03" is read as the command in frame 2 (KEEPALIVE).
            raise ValueError(
                f"legacy_order: a service named like a command ({self.service!r}) reads back as that command"
            )


@attrs.frozen(kw_only=True)
class _Job(Message):
    # Only NorFab has the command: its layout follows the header (routed from the broker).
    NORFAB_ONLY: ClassVar[bool] = False
    header: bytes = attrs.field(validator=_header(CLIENT, BROKER))
    service: str | None = attrs.field(default=None, validator=_opt_text)
    target: str | None = attrs.field(default=None, validator=_opt_text)
    client: bytes | None = attrs.field(default=None, validator=_client)
    uuid: str = attrs.field(validator=_text)
    body: tuple[bytes, ...] = attrs.field(converter=bytes_tuple, validator=_body)

    def __attrs_post_init__(self) -> None:
        if self.client is None and (self.service is None or self.target is None):
            raise ValueError(f"{self.TYPE}: needs service and target (or a client address when routed)")
        if self.client is not None and (self.service is not None or self.target is not None):
            raise ValueError(f"{self.TYPE}: a routed message carries no service or target")
        if self.client is not None and self.header != BROKER:
            raise ValueError(f"{self.TYPE}: only the broker's (NFPB01) message to a worker is routed")
        if self.NORFAB_ONLY and self.client is None and self.header == BROKER:
            raise ValueError(
                f"{self.TYPE} is NorFab's: the broker's (NFPB01) {self.TYPE} to a worker is routed"
            )

    @property
    def routed(self) -> bool:
        return self.client is not None


@attrs.frozen(kw_only=True)
class Post(_Job):
    """0x04: client -> broker job request; broker -> worker dispatch."""

    TYPE: ClassVar[str] = "POST"


@attrs.frozen(kw_only=True)
class Get(_Job):
    """0x06: client asks for job results; broker relays to workers."""

    TYPE: ClassVar[str] = "GET"


@attrs.frozen(kw_only=True)
class Delete(_Job):
    """0x07: client cancels a job; broker relays to workers."""

    TYPE: ClassVar[str] = "DELETE"


@attrs.frozen(kw_only=True)
class Put(_Job):
    """NorFab 0x10: client input to a running job (same layouts as POST, but routed
    exactly when the header is NFPB01: NorFab has no other broker form)."""

    TYPE: ClassVar[str] = "PUT"
    NORFAB_ONLY: ClassVar[bool] = True


@attrs.frozen(kw_only=True)
class _Result(Message):
    # Only NorFab has the command: its layout follows the header (routed from a worker).
    NORFAB_ONLY: ClassVar[bool] = False
    header: bytes = attrs.field(validator=_header(BROKER, WORKER))
    service: str | None = attrs.field(default=None, validator=_opt_text)
    client: bytes | None = attrs.field(default=None, validator=_client)
    uuid: str = attrs.field(validator=_text)
    status: int = attrs.field(validator=_status)
    status_text: str = attrs.field(default="", validator=v.instance_of(str))
    body: tuple[bytes, ...] = attrs.field(converter=bytes_tuple, validator=_body)

    def __attrs_post_init__(self) -> None:
        if (self.client is None) == (self.service is None):
            raise ValueError(f"{self.TYPE}: needs exactly one of service (addressed) or client (routed)")
        if self.status_text and not self.status_text.isprintable():
            raise ValueError("status_text must be printable")
        if self.status_text and (self.client is not None or self.NORFAB_ONLY):
            # Only the spec dialect writes status text, and it has neither NorFab's
            # commands nor the routed layout: such a message would encode in no dialect.
            raise ValueError(f"{self.TYPE}: status text is the spec's; NorFab's {self.TYPE} has none")
        if self.client is not None and self.header != WORKER:
            raise ValueError(f"{self.TYPE}: only a worker's (NFPW01) result is routed")
        if self.NORFAB_ONLY and self.client is None and self.header == WORKER:
            raise ValueError(f"{self.TYPE} is NorFab's: a worker's (NFPW01) {self.TYPE} is routed")

    @property
    def routed(self) -> bool:
        return self.client is not None


@attrs.frozen(kw_only=True)
class Response(_Result):
    """0x05: worker -> broker result or status; broker -> client relay."""

    TYPE: ClassVar[str] = "RESPONSE"


@attrs.frozen(kw_only=True)
class Event(_Result):
    """NorFab 0x08: job progress events (``result_ready`` ...), relayed to the client.
    Routed exactly when the header is NFPW01."""

    TYPE: ClassVar[str] = "EVENT"
    NORFAB_ONLY: ClassVar[bool] = True


@attrs.frozen(kw_only=True)
class Stream(_Result):
    """NorFab 0x09: raw data chunks from a running job, relayed to the client.
    Routed exactly when the header is NFPW01."""

    TYPE: ClassVar[str] = "STREAM"
    NORFAB_ONLY: ClassVar[bool] = True


@attrs.frozen(kw_only=True)
class Mmi(Message):
    """NorFab 0x11: a management request or its reply. The header decides the layout,
    so the decoder never guesses (docs/protocols/norfab-wire.md):

    * ``NFPC01`` -- a client's request: ``service``, ``target``, ``uuid`` (no status);
    * ``NFPB01`` -- the broker's reply to a client: ``service``, ``uuid``, ``status``
      (no target); or its request to a worker, routed: ``client``, ``uuid`` (no status);
    * ``NFPW01`` -- a worker's reply, routed: ``client``, ``uuid``, ``status``.

    ``uuid`` must not be empty: it is what tells the broker's two forms apart (frame 4
    is the routed form's empty delimiter, the reply's uuid).
    """

    TYPE: ClassVar[str] = "MMI"
    header: bytes = attrs.field(validator=_header(CLIENT, BROKER, WORKER))
    service: str | None = attrs.field(default=None, validator=_opt_text)
    target: str | None = attrs.field(default=None, validator=_opt_text)
    client: bytes | None = attrs.field(default=None, validator=_client)
    uuid: str = attrs.field(validator=_text)
    status: int | None = attrs.field(default=None, validator=_opt_status)
    body: tuple[bytes, ...] = attrs.field(converter=bytes_tuple, validator=_body)

    def __attrs_post_init__(self) -> None:
        if not self.uuid:
            raise ValueError("MMI: uuid must not be empty")
        routed, reply = self.client is not None, self.status is not None
        if self.header == CLIENT:
            ok = not routed and not reply and self.service is not None and self.target is not None
            form = "a client's MMI is a request: service and target, no client or status"
        elif self.header == WORKER:
            ok = routed and reply and self.service is None and self.target is None
            form = "a worker's MMI is a routed reply: client and status, no service or target"
        elif routed:
            ok = not reply and self.service is None and self.target is None
            form = "the broker's routed MMI is a request to a worker: client, no service, target or status"
        else:
            ok = reply and self.service is not None and self.target is None
            form = "the broker's MMI to a client is a reply: service and status, no target"
        if not ok:
            raise ValueError(f"MMI: {form}")


NfpMessage = (
    Open | Ready | Keepalive | Disconnect | Post | Get | Delete | Put | Response | Event | Stream | Mmi
)
