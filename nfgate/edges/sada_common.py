"""What the SADA channel edge (:mod:`nfgate.edges.sada`) and server edge
(:mod:`nfgate.edges.sada_server`) share: their ROUTER socket, the translation of a REQ
into a core request and back (docs/translation-sada.md), and encoding with counting.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, cast

import zmq

from nfgate.codecs import sada as wire
from nfgate.codecs.sada import payload as msgpack_payload
from nfgate.codecs.sada.messages import PROTO_ASCII, Rep
from nfgate.codecs.sada.session import piran_evidence
from nfgate.errors import TransportError
from nfgate.model import Action, ServiceRef, Status
from nfgate.transports.curve import Curve
from nfgate.transports.zmq import Limits, RouterEndpoint, allow_ipv6

if TYPE_CHECKING:
    from nfgate.model import Request

__all__ = [
    "DEFAULT_ACTION",
    "DEFAULT_CATEGORY",
    "WireCache",
    "client_status",
    "connect",
    "join_body",
    "rejection",
    "rejection_dialect",
    "req_fields",
    "resolve_port",
    "sada_router",
    "service_ref",
]

# A request from a protocol without SADA's (category, action) -- NFP, DCP, MemoDB --
# still needs both frames, non-empty, in the REQ Command.
DEFAULT_CATEGORY = "default"
DEFAULT_ACTION = "default"


class _Preset:
    """A stand-in for the context that sets ``options`` on the socket it makes before
    anything else, so :class:`RouterEndpoint` binds a ROUTER that already carries its
    identity (libzmq copies socket options into the listener at bind time, so an
    identity set after the bind would not reach the peers that connect)."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], options: dict[int, bytes]) -> None:
        self._context = context
        self._options = options

    def socket(self, kind: int) -> zmq.Socket[bytes]:
        sock = self._context.socket(kind)
        for option, value in self._options.items():
            sock.setsockopt(option, value)
        return sock


def sada_router(
    context: zmq.Context[zmq.Socket[bytes]],
    url: str,
    limits: Limits,
    *,
    identity: bytes | None = None,
    curve: Curve | None = None,
    domain: str = "",
) -> RouterEndpoint:
    """A :class:`RouterEndpoint` bound to ``url`` whose ROUTER identity is ``identity``
    (a channel's public endpoint), a CURVE server under ZAP domain ``domain`` when
    ``curve`` is given. Raises :class:`TransportError` when it cannot bind."""
    options: dict[int, bytes] = {int(zmq.ROUTING_ID): identity} if identity else {}
    preset = cast("zmq.Context[zmq.Socket[bytes]]", _Preset(context, options))
    return RouterEndpoint(preset, url, limits, curve=curve, domain=domain)


def connect(endpoint: RouterEndpoint, url: str, alias: bytes) -> None:
    """Connect ``endpoint``'s ROUTER out to ``url``, naming that peer ``alias`` on this
    side (ZMQ_CONNECT_ROUTING_ID) whatever identity it sets: the pipe exists at once, so
    what is sent before the connection is up is queued, and the name survives the peer's
    restarts (libzmq reconnects by itself). Raises :class:`TransportError`."""
    try:
        endpoint.socket.setsockopt(zmq.CONNECT_ROUTING_ID, alias)
        allow_ipv6(endpoint.socket, url)
        endpoint.socket.connect(url)
    except zmq.ZMQError as exc:
        raise TransportError(f"cannot connect to {url}: {exc.strerror}") from None


def resolve_port(url: str) -> str:
    """``url`` with a wildcard port (``*`` or ``0``) replaced by a free one.

    A channel's identity must name its port before it binds, so the port cannot be left
    to the bind. Raises :class:`TransportError` when no port can be had.
    """
    head, sep, port = url.rpartition(":")
    if not sep or port not in ("*", "0") or not head.startswith("tcp://"):
        return url
    host = head.removeprefix("tcp://").strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host if host not in ("*", "") else "", 0))
            free = probe.getsockname()[1]
    except OSError as exc:
        raise TransportError(f"cannot find a free port for {url}: {exc.strerror}") from None
    return f"{head}:{free}"


def service_ref(name: str, version: str) -> ServiceRef:
    """A SADA (name, version) as the core's ref: an empty version matches any."""
    return ServiceRef(name=name, version=version or None)


def client_status(status: int, reason: str) -> int:
    """The REP status a SADA client gets for a reply the core produced with ``reason``.

    design.md "Translation rules": no worker within the queue expiry is 503 for SADA
    (the core says 408, NFP's code); worker timeout 504 and internal 500 pass as they are.
    """
    if reason and status == Status.REQUEST_TIMEOUT:
        return int(Status.UNAVAILABLE)
    return status


def join_body(body: tuple[bytes, ...]) -> bytes:
    """The one payload frame a REQ or REP carries, from a body of any number of frames.

    One frame passes untouched, none is an empty payload; several (DCP data parts,
    NFP frames) become one msgpack array of binaries -- the spec's suggested encoding,
    and reversible. Raises nothing.
    """
    if len(body) == 1:
        return body[0]
    if not body:
        return b""
    return msgpack_payload.pack(list(body))


def req_fields(request: Request, offered: tuple[ServiceRef, ...]) -> tuple[str, str, str]:
    """(version, category, action) of the REQ carrying ``request`` to a server offering
    ``offered``: the version asked for, else the one the server offers for that name."""
    version = request.service.version
    if version is None:
        version = next((s.version for s in offered if s.name == request.service.name and s.version), "")
    action = request.action
    category = (action.category if action else "") or DEFAULT_CATEGORY
    name = (action.name if action else "") or DEFAULT_ACTION
    return version, category, name


class WireCache:
    """:class:`ServiceRef` and :class:`Action` objects per wire text, built once: attrs
    validation is a measurable part of a relay (see ``Edge.peer``). Reset beyond
    ``limit`` entries, so a peer inventing names cannot grow it without bound."""

    __slots__ = ("_actions", "_limit", "_refs")

    def __init__(self, limit: int = 100_000) -> None:
        self._limit = limit
        self._refs: dict[tuple[str, str], ServiceRef] = {}
        self._actions: dict[tuple[str, str], Action] = {}

    def ref(self, name: str, version: str) -> ServiceRef:
        key = (name, version)
        ref = self._refs.get(key)
        if ref is None:
            if len(self._refs) >= self._limit:
                self._refs.clear()
            ref = self._refs[key] = service_ref(name, version)
        return ref

    def action(self, category: str, name: str) -> Action:
        key = (category, name)
        action = self._actions.get(key)
        if action is None:
            if len(self._actions) >= self._limit:
                self._actions.clear()
            action = self._actions[key] = Action(name=name, category=category)
        return action


DEFAULT_PROTO = PROTO_ASCII  # design.md: SADA1 when we speak first (PIRAN's form)


def refusal(request: wire.Req) -> Rep:
    """REP 400 for a REQ that decodes but names no service: the codec takes an empty
    name (no spec forbids one), the core names every service, so it is answered as a
    REQ that does not decode is (:func:`rejection`). Never raises (a REQ's request id
    is never empty)."""
    return Rep(proto=request.proto, request_id=request.request_id, status=400, payload=b"")


def rejection(frames: list[bytes]) -> Rep | None:
    """REP 400 for a REQ that does not decode but whose request id reads (sada.md), so
    its sender is answered rather than left to time out; None for anything else."""
    if len(frames) < 4 or frames[2] != b"REQ" or frames[1] not in wire.PROTOS:
        return None
    try:
        return Rep(proto=frames[1], request_id=frames[3].decode("utf-8"), status=400, payload=b"")
    except (UnicodeDecodeError, ValueError):
        return None


def rejection_dialect(known: str, rep: Rep, identity: bytes = b"") -> str:
    """The dialect to send :func:`rejection`'s ``rep`` in: ``known`` (the peer's, or the
    edge's forced one) unless it is ``auto``, which a REQ that did not decode did not
    settle; then what was read of it shows (a PIRAN ``identity`` or request id). Never
    PIRAN for a version frame other than SADA1, which PIRAN does not read."""
    if rep.proto != PROTO_ASCII:
        return "spec"
    if known != "auto":
        return known
    return (
        "piran" if piran_evidence(identity=identity, request_id=rep.request_id, proto=rep.proto) else "spec"
    )
