"""DBP's per-peer state machines and the catalog's service-information rules. Pure: no
sockets, no clock (time is passed in as milliseconds).

* :data:`TRANSITIONS` -- what the broker does with each command from a peer, by whether
  the peer is a registered service (DBP/Service Registration, "Opening and Closing a
  Connection").
* :data:`BEATS` -- a registered service's heartbeat path: UDP datagrams first, ZeroMQ
  HEARTBEAT after a missed beat (DBP/Heartbeats), gone after ``liveness`` intervals.
* :func:`check_registration` / :func:`apply_update` -- what a REGISTRATION or UPDATE
  must hold to be APPROVED, with the reasons for a DENIED.
* :func:`request_envelope` / :func:`parse_reply` -- the JSON a DBP service that is a
  worker for the gateway receives in a REQUEST and answers in a REPLY (nfgate's choice:
  docs/protocols/dbp.md, "Services as workers").
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from nfgate.tables import StateEnum

from .._base import load_json

__all__ = [
    "BEATS",
    "MIN_HEARTBEAT_MS",
    "TRANSITIONS",
    "Action",
    "Beat",
    "BeatAction",
    "Liveness",
    "Mode",
    "PeerState",
    "apply_update",
    "check_registration",
    "parse_reply",
    "request_envelope",
    "step",
]


# ----------------------------------------------------------------- peer commands


class PeerState(StateEnum):
    """A DBP peer as the catalog sees it: registered as a service or not."""

    PEER = "peer"  # a client, or a service that has not registered (yet, or any more)
    SERVICE = "service"  # registered: APPROVED and not disconnected since


class Action(StateEnum):
    """What the broker does with a command from a peer (:data:`TRANSITIONS`)."""

    INFO = "info"  # answer the info request from the catalog (REPLY)
    REGISTER = "register"  # validate; APPROVED (and register) or DENIED with reasons
    UPDATE = "update"  # validate and merge; APPROVED (hermes: ACK) or DENIED
    DENY = "deny"  # "DENIED ... for unauthorized or unregistered services"
    HEARTBEAT = "heartbeat"  # a ZeroMQ beat from a service
    LEAVE = "leave"  # the service said DISCONNECT: forget it, keep it in the cache as inactive
    REPLY = "reply"  # a service that is a worker answers the request it holds
    TOUCH = "touch"  # any other command from a service "acts as a heartbeat"
    IGNORE = "ignore"  # "MAY send DISCONNECT at any time, including before READY"
    RECONNECT = "reconnect"  # a beat from a peer we do not know: DISCONNECT so it registers again
    UNEXPECTED = "unexpected"  # "any valid but unexpected command": DISCONNECT (and forget)


P, S = PeerState.PEER, PeerState.SERVICE

TRANSITIONS: Final[dict[tuple[PeerState, str], tuple[PeerState, Action]]] = {
    (P, "REQUEST"): (P, Action.INFO),
    (S, "REQUEST"): (S, Action.INFO),  # a service may look others up on its own connection
    (P, "REGISTRATION"): (S, Action.REGISTER),  # stays P when DENIED
    (S, "REGISTRATION"): (S, Action.REGISTER),  # registering again replaces the information
    (P, "UPDATE"): (P, Action.DENY),
    (S, "UPDATE"): (S, Action.UPDATE),
    (P, "HEARTBEAT"): (P, Action.RECONNECT),  # e.g. after a gateway restart: "re-register"
    (S, "HEARTBEAT"): (S, Action.HEARTBEAT),
    (P, "DISCONNECT"): (P, Action.IGNORE),
    (S, "DISCONNECT"): (P, Action.LEAVE),
    (P, "REPLY"): (P, Action.UNEXPECTED),  # nobody gave this peer a request
    (S, "REPLY"): (S, Action.REPLY),
    (P, "ACK"): (P, Action.UNEXPECTED),
    (S, "ACK"): (S, Action.TOUCH),
    # APPROVED and DENIED only go broker -> service.
    (P, "APPROVED"): (P, Action.UNEXPECTED),
    (S, "APPROVED"): (P, Action.UNEXPECTED),
    (P, "DENIED"): (P, Action.UNEXPECTED),
    (S, "DENIED"): (P, Action.UNEXPECTED),
}


def step(state: PeerState, message_type: str) -> tuple[PeerState, Action]:
    """The next state and the broker's action; raises KeyError for a type DBP lacks."""
    return TRANSITIONS[(state, message_type)]


# -------------------------------------------------------------------- heartbeats


class Mode(StateEnum):
    """The path a registered service's heartbeats take (DBP/Heartbeats)."""

    UDP = "udp"  # beats are datagrams, both ways
    ZMQ = "zmq"  # beats are HEARTBEAT commands on the service's ZeroMQ connection


class Beat(StateEnum):
    """What the broker heard from a service, or the silence it noticed (:data:`BEATS`)."""

    UDP = "udp"  # a heartbeat datagram naming the service
    ZMQ = "zmq"  # a HEARTBEAT command from the service
    OTHER = "other"  # any other command from the service
    MISSED = "missed"  # nothing heard for MISSED_AFTER intervals
    EXPIRED = "expired"  # nothing heard for ``liveness`` intervals


class BeatAction(StateEnum):
    """What the broker does about a :class:`Beat` (:data:`BEATS`)."""

    TOUCH = "touch"  # the service is alive
    SWITCH = "switch"  # the broker moves this service to ZeroMQ heartbeats
    NONE = "none"
    EXPIRE = "expire"  # the service is gone: DISCONNECT, unregister, cache it as inactive


BEATS: Final[dict[tuple[Mode, Beat], tuple[Mode, BeatAction]]] = {
    (Mode.UDP, Beat.UDP): (Mode.UDP, BeatAction.TOUCH),
    # The service missed our datagrams and switched first: follow it.
    (Mode.UDP, Beat.ZMQ): (Mode.ZMQ, BeatAction.TOUCH),
    (Mode.UDP, Beat.OTHER): (Mode.UDP, BeatAction.TOUCH),
    # "In the event of a missing beat, heartbeats will switch over to reliable TCP".
    (Mode.UDP, Beat.MISSED): (Mode.ZMQ, BeatAction.SWITCH),
    (Mode.UDP, Beat.EXPIRED): (Mode.UDP, BeatAction.EXPIRE),
    # Once on the reliable path a service stays there until it registers again.
    (Mode.ZMQ, Beat.UDP): (Mode.ZMQ, BeatAction.TOUCH),
    (Mode.ZMQ, Beat.ZMQ): (Mode.ZMQ, BeatAction.TOUCH),
    (Mode.ZMQ, Beat.OTHER): (Mode.ZMQ, BeatAction.TOUCH),
    (Mode.ZMQ, Beat.MISSED): (Mode.ZMQ, BeatAction.NONE),
    (Mode.ZMQ, Beat.EXPIRED): (Mode.ZMQ, BeatAction.EXPIRE),
}

MISSED_AFTER: Final = 1.5  # intervals of silence that count as one missed beat (jitter allowance)
MIN_HEARTBEAT_MS: Final = 50  # a faster registered interval is raised to this (told in APPROVED)
MAX_HEARTBEAT_MS: Final = 3_600_000


@attrs.frozen(kw_only=True)
class Liveness:
    """One service's heartbeat state: the path beats take, how often, and when the
    broker last heard from it and next sends a beat (milliseconds on the caller's clock)."""

    mode: Mode = Mode.UDP
    interval_ms: int = attrs.field(validator=attrs.validators.ge(1))
    heard_ms: int
    send_ms: int

    def on(self, beat: Beat, now_ms: int) -> tuple[Liveness, BeatAction]:
        """Apply ``beat``; a beat or command heard moves :attr:`heard_ms` to ``now_ms``.
        Never raises (:data:`BEATS` has every mode and beat)."""
        mode, action = BEATS[(self.mode, beat)]
        heard = now_ms if action is BeatAction.TOUCH else self.heard_ms
        if action is BeatAction.SWITCH:
            # Beat on the new path at once: the service learns of the switch now.
            return attrs.evolve(self, mode=mode, send_ms=now_ms), action
        return attrs.evolve(self, mode=mode, heard_ms=heard), action

    def due(self, now_ms: int, liveness: int) -> Beat | None:
        """The silence event due at ``now_ms`` (EXPIRED first), or None. Never raises."""
        silent = now_ms - self.heard_ms
        if silent >= self.interval_ms * liveness:
            return Beat.EXPIRED
        if self.mode is Mode.UDP and silent >= self.interval_ms * MISSED_AFTER:
            return Beat.MISSED
        return None

    def deadline(self, liveness: int) -> int:
        """The earliest time anything is due for this service: a beat to send, a miss,
        expiry. Never raises."""
        # Expiry is due after ``liveness`` intervals whatever the mode; a UDP service's
        # miss after MISSED_AFTER, which comes later than expiry when liveness is 1.
        silence = self.interval_ms * (min(MISSED_AFTER, liveness) if self.mode is Mode.UDP else liveness)
        return min(self.send_ms, self.heard_ms + math.ceil(silence))


def heartbeat_ms(seconds: float) -> int:
    """A registered ``heartbeat`` (seconds) as whole milliseconds within the limits.

    Raises :class:`ValueError` for NaN and :class:`OverflowError` for an infinity: pass
    a heartbeat :func:`check_registration` approved (finite and positive). A finite one
    of any size is fine: it is compared with the limit before it is scaled, so ``1e308``
    or a JSON integer of 400 digits is the longest interval, not an overflow.
    """
    if seconds >= MAX_HEARTBEAT_MS / 1000:
        return MAX_HEARTBEAT_MS
    return int(max(MIN_HEARTBEAT_MS, round(seconds * 1000)))


# ----------------------------------------------------------- service information


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    # An int is finite; math.isfinite() would convert it to a float and overflow on a
    # JSON integer of a few hundred digits, which a peer's REGISTRATION may hold.
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _type_reasons(info: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    reasons: list[str] = []
    name = info.get("name")
    if "name" in keys and not (isinstance(name, str) and name and name.isprintable()):
        reasons.append("name must be a non-empty printable string")
    if "ip" in keys and not isinstance(info.get("ip"), str):
        reasons.append("ip must be a string")
    port = info.get("port")
    if "port" in keys and not (isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536):
        reasons.append("port must be an integer 1..65535")
    if "function" in keys and not isinstance(info.get("function"), str):
        reasons.append("function must be a string")
    beat = info.get("heartbeat")
    if "heartbeat" in keys and not (isinstance(beat, (int, float)) and _is_number(beat) and beat > 0):
        reasons.append("heartbeat must be a positive number of seconds")
    return reasons


def check_registration(info: Mapping[str, Any], dialect: str, required: Sequence[str]) -> list[str]:
    """The reasons to deny ``info`` (``service_info``'s result), or ``[]`` to approve.

    Spec dialect: every key of ``required`` present, with a usable type. Hermes dialect
    (design.md): only ``name``; its ``ip``/``port`` are checked when present (they come
    from ``interfaces.router``). Never raises: what is wrong is in the reasons.
    """
    if dialect == "hermes":
        present = [key for key in ("name", "ip", "port") if key in info or key == "name"]
        return _type_reasons(info, present)
    missing = [key for key in required if key not in info]
    if missing:
        return ["missing required key(s): " + ", ".join(missing)]
    return _type_reasons(info, required)


def apply_update(
    info: Mapping[str, Any], update: Mapping[str, Any], dialect: str, required: Sequence[str]
) -> tuple[dict[str, Any], list[str]]:
    """``info`` with the keys of ``update`` replaced, and the reasons to deny it (the
    merged object must still pass :func:`check_registration`; ``name`` may not change:
    a new name is a new registration). Never raises."""
    if "name" in update and update["name"] != info.get("name"):
        return dict(info), ["name cannot be changed by UPDATE: register again"]
    merged = {**info, **update}
    return merged, check_registration(merged, dialect, required)


# --------------------------------------------------------------- worker envelope


def _frames_json(frames: Sequence[bytes]) -> tuple[list[str], str]:
    try:
        return [frame.decode("utf-8") for frame in frames], "utf-8"
    except UnicodeDecodeError:
        return [base64.b64encode(frame).decode("ascii") for frame in frames], "base64"


def request_envelope(
    *,
    request_id: int,
    service: str,
    body: Sequence[bytes],
    action: tuple[str, str] | None = None,
    version: str | None = None,
) -> str:
    """The JSON text of the REQUEST a worker service receives: ``{"id", "service",
    "body": [frame, ...], "encoding": "utf-8"|"base64"}`` plus ``action``/``version``
    when the client gave them. ASCII-only, so the REQUEST's printable query holds it.
    Never raises for the core's request ids and byte frames."""
    frames, encoding = _frames_json(body)
    envelope: dict[str, Any] = {"id": str(request_id), "service": service}
    if version is not None:
        envelope["version"] = version
    if action is not None:
        envelope["action"] = {"name": action[0], "category": action[1]}
    envelope["body"] = frames
    envelope["encoding"] = encoding
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=True)


@attrs.frozen(kw_only=True)
class WorkerReply:
    """A worker's REPLY read as an envelope: the request id it names (None: none named),
    the status and body frames, and what was wrong with it ("" when nothing)."""

    request_id: int | None
    status: int
    body: tuple[bytes, ...]
    problem: str = ""


def _body_frames(value: object, encoding: str) -> tuple[bytes, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    frames: list[bytes] = []
    for item in items:
        if isinstance(item, str):
            frames.append(base64.b64decode(item, validate=True) if encoding == "base64" else item.encode())
        else:  # any other JSON value is one frame holding its JSON text
            # allow_nan=False: 1e999 parsed as inf must not go out as "Infinity" (not JSON).
            frames.append(
                json.dumps(item, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            )
    return tuple(frames)


# Request ids are the core's ints; 20 digits hold any 64-bit one.
_MAX_ID_DIGITS = 20


def parse_reply(info: bytes) -> WorkerReply | None:
    """Read a worker's REPLY body. None when it is not an envelope (not a JSON object
    naming an ``id``): the caller may then take the whole body as the answer.

    An ``id`` that is not a request number (a non-negative int, or its decimal text of
    at most 20 significant digits) is read as none named (``request_id=None``). An
    envelope with a bad ``status`` (not an int 200..599), ``encoding`` or ``body``
    comes back with status 500 and :attr:`WorkerReply.problem` set. Never raises.
    """
    try:
        obj = load_json(info.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(obj, dict) or "id" not in obj:
        return None
    raw_id = obj["id"]
    request_id: int | None = None
    if isinstance(raw_id, str) and raw_id.isascii() and raw_id.isdigit():
        # int() refuses text beyond 4300 digits (ValueError); ids the gateway sends are
        # far shorter, so longer text names no request (None, like any other bad id).
        digits = raw_id.lstrip("0") or "0"
        request_id = int(digits) if len(digits) <= _MAX_ID_DIGITS else None
    elif isinstance(raw_id, int) and not isinstance(raw_id, bool) and raw_id >= 0:
        request_id = raw_id
    status = obj.get("status", 200)
    encoding = obj.get("encoding", "utf-8")
    if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
        return WorkerReply(request_id=request_id, status=500, body=(), problem=f"bad status {status!r}")
    if encoding not in ("utf-8", "base64"):
        return WorkerReply(request_id=request_id, status=500, body=(), problem=f"bad encoding {encoding!r}")
    try:
        body = _body_frames(obj.get("body"), encoding)
    except (binascii.Error, ValueError) as exc:
        return WorkerReply(request_id=request_id, status=500, body=(), problem=f"bad body: {exc}")
    return WorkerReply(request_id=request_id, status=status, body=body)
