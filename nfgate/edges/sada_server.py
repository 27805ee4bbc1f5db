"""The SADA server edge: the gateway as a Safir-Darbaan *server* of the channels listed in
its config (``[edges.sada-server] channels = ["tcp://…"]``).

Wiring only: one ROUTER that connects out + ``nfgate.codecs.sada`` + the server table in
``nfgate.codecs.sada.session``. Decisions (docs/protocols/sada.md):

- The gateway sets no identity ("Servers … MUST not set an identity"). To speak first
  (INTR) a server must address the channel by its identity; rather than guess it (the
  spec's ``tcp://ip:port``, PIRAN's ``ip:port``, or whatever the channel set), the edge
  names each connection itself (ZMQ_CONNECT_ROUTING_ID, the spec form of the URL): the
  INTR is queued until the connection is up, and the name survives channel restarts.
- The INTR lists the services the routing core has workers for, read from
  ``gateway.router.workers()`` every ``refresh_ms``, and is sent again when that set
  changes. Services whose only workers are SADA servers are left out: SADA channels
  reach those servers directly, and re-introducing them would let two gateways bounce
  requests between each other.
- A drain (the gateway stopping) withdraws the services by INTR, per channel, each once
  the REQs of it that channel left here are answered (:meth:`SadaServerEdge.closing`).
- Each REQ is routed through the core to a worker of any protocol and answered REP with
  the channel's request id and an HTTP status (503 queue expiry, 504 worker timeout,
  500 internal), in the channel's version-frame form and dialect (PIRAN's int32 status
  when its first REQ carries a PIRAN request id).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, cast

import zmq
from zmq.utils.monitor import recv_monitor_message

from nfgate.codecs import sada as wire
from nfgate.codecs._base import Message
from nfgate.codecs.sada.messages import Intr, Pong, Rep, Req
from nfgate.codecs.sada.session import Action, ServerState, piran_evidence, server_step
from nfgate.edges import Decoding, Edge, EdgeSettings, WireCodec, WireCounts, WorkerAccess
from nfgate.edges.router_edge import warn_if_others_read
from nfgate.edges.sada_common import (
    DEFAULT_PROTO,
    WireCache,
    client_status,
    connect,
    join_body,
    refusal,
    rejection,
    rejection_dialect,
    sada_router,
)
from nfgate.errors import ConfigError, EncodeError
from nfgate.model import Command, Request
from nfgate.routing_types import Accepted, Deliver, Output
from nfgate.store import JobStore
from nfgate.transports.curve import (
    HANDSHAKE_EVENTS,
    ClientCurve,
    client_keys,
    enable_client,
    handshake_failure,
)

__all__ = ["SadaServerEdge", "make"]

log = logging.getLogger("nfgate.edge.sada")


class _Channel:
    __slots__ = ("dialect", "held", "identity", "offered", "proto", "state", "url")

    def __init__(self, url: str, identity: bytes, dialect: str) -> None:
        self.url = url
        self.identity = identity  # our name for the connection (ZMQ_CONNECT_ROUTING_ID)
        self.dialect = dialect  # "auto" until its first message settles it
        self.proto = DEFAULT_PROTO
        self.state = ServerState.NEW
        # request id -> service name of each REQ not answered yet: what a drain still offers.
        self.held: dict[str, str] = {}
        self.offered: tuple[tuple[str, str], ...] = ()  # in the last INTR sent


def _client_curve(settings: EdgeSettings) -> ClientCurve | None:
    """The CURVE client keys the options name: ``curve_server_key``, the channels' public
    key (Z85 text or a certificate file's path), and ``curve_secret_key``, the edge's own
    pair (default: one made at start). Raises :class:`ConfigError` naming the key."""
    opts, table = settings.options, f"edges.{settings.protocol}"
    server_key, secret = opts.get("curve_server_key"), opts.get("curve_secret_key")
    if server_key is None:
        if secret is not None:
            raise ConfigError(
                f"config: {table}.curve_secret_key needs {table}.curve_server_key (the channels' public key)"
            )
        return None
    names = (f"config: {table}.curve_server_key", f"config: {table}.curve_secret_key")
    own = secret if isinstance(secret, Path) else None
    if own is not None:
        warn_if_others_read(settings.name, own)
    return client_keys(cast("str", server_key), own, names)


class SadaServerEdge(Edge, Decoding):
    """The server. Raises :class:`ConfigError` for a channel URL that names no
    ``tcp://host:port``, :class:`nfgate.errors.TransportError` if it cannot connect."""

    protocol = "sada"
    EVENTS = (
        *Edge.EVENTS,
        "connections",
        "deliver_unknown",
        "empty_service",
        "handshake_failed",
        "intr_sent",
        "unencodable",
        "unexpected",
        "unexpected_output",
        "unknown_channel",
    )
    wire: ClassVar[WireCodec] = wire

    def __init__(self, settings: EdgeSettings) -> None:
        super().__init__(settings)
        opts = settings.options
        forced = str(opts.get("dialect", "auto"))
        timeout = int(cast("int", opts.get("request_timeout_ms", 0)))
        self._timeout = timeout or None
        self._refresh = max(1, int(cast("int", opts.get("refresh_ms", 1000))))
        self._channels: dict[bytes, _Channel] = {}
        for url in cast("tuple[str, ...]", opts.get("channels", ())):
            try:
                identity = wire.channel_identity(url, "spec")
            except ValueError as exc:
                raise ConfigError(f"config: edges.{settings.protocol}.channels: {url!r}: {exc}") from None
            # Dial the spec form, so a bare ip:port in the config works too.
            self._channels.setdefault(identity, _Channel(identity.decode(), identity, forced))
        self._services: tuple[tuple[str, str], ...] = ()
        self._withdrawn = False  # the gateway drains: offer each channel only what it left here (closing())
        self._next_refresh = 0
        self._wire = WireCache()
        # Bound only to a private inproc name: RouterEndpoint binds, and nobody dials it.
        inproc = f"inproc://nfgate-{settings.name}-{id(self):x}"
        self.transport = sada_router(settings.context, inproc, settings.limits)
        self.transport.on_dropped = self.dropped
        curve = _client_curve(settings)
        self.curve_client_key = curve.public_key.decode() if curve is not None else ""
        if curve is not None:  # libzmq takes it for every connection made from now on
            enable_client(self.transport.socket, curve)
        # A channel that restarts has lost our INTR, and it cannot RINTR a server that
        # set no identity (it does not know its name): re-INTR on every new connection.
        self._monitor: zmq.Socket[bytes] | None = None
        try:
            if self._channels:
                self._monitor = self.transport.socket.get_monitor_socket(HANDSHAKE_EVENTS)
            for channel in self._channels.values():
                connect(self.transport, channel.url, channel.identity)
        except Exception:
            self.close()
            raise

    @property
    def endpoint(self) -> str:
        return ""  # connects out only

    def sockets(self) -> Sequence[zmq.Socket[bytes] | int]:
        if self._monitor is None:
            return (self.transport.socket,)
        return (self.transport.socket, self._monitor)

    def wires(self) -> Sequence[WireCounts]:
        return (self.transport,)

    def close(self) -> None:
        if self._monitor is not None:
            self.transport.socket.disable_monitor()
            self._monitor.close(0)
            self._monitor = None
        self.transport.close()

    # ------------------------------------------------------------------ helpers

    def _send_message(self, channel: _Channel, message: Message, dialect: str | None = None) -> bool:
        """``dialect``: the channel's unless given (a REP 400 to a REQ that settled none)."""
        dialect = dialect or ("spec" if channel.dialect == "auto" else channel.dialect)
        try:
            frames = wire.encode(message, dialect)
        except EncodeError as exc:
            self.counters["unencodable"] += 1
            log.debug("%s: cannot encode %s: %s", self.name, message.TYPE, exc.reason)
            return False
        if self.transport.send(channel.identity, frames):
            return True
        if self.transport.last_full:
            self.send_dropped(channel.identity, self.transport.limits.high_water_mark)
        else:
            self.counters["unroutable"] += 1
        return False

    def undecodable(self, address: bytes, frames: list[bytes]) -> None:
        # As the channel edge does: a REQ whose request id reads is answered 400, so the
        # channel does not wait out its timeout for a reply that will not come.
        rep = rejection(frames)
        channel = self._channels.get(address)
        if rep is not None and channel is not None:
            self._send_message(channel, rep, rejection_dialect(channel.dialect, rep))

    def over_limit(self, identity: bytes, frames: Sequence[bytes], reason: str) -> None:
        self.undecodable(identity, list(frames))  # a REQ read up to its request id: REP 400

    def _for(self, channel: _Channel) -> tuple[tuple[str, str], ...]:
        """The services to introduce to ``channel``: all, or while draining only those of
        the REQs it left here."""
        if not self._withdrawn:
            return self._services
        held = set(channel.held.values())
        return tuple(s for s in self._services if s[0] in held)

    def _intr(self, channel: _Channel) -> None:
        # INTR is the same in both dialects; SADA1 until the channel has spoken (design.md).
        channel.offered = self._for(channel)
        if self._send_message(channel, Intr(proto=channel.proto, services=channel.offered)):
            channel.state = ServerState.INTRODUCED
            self.counters["intr_sent"] += 1

    def _offered(self) -> tuple[tuple[str, str], ...]:
        """(name, version) of every service the core has a non-SADA worker for."""
        gateway = self.gateway
        if gateway is None:
            return ()
        seen: dict[tuple[str, str], None] = {}
        for info in gateway.router.workers():
            if info.peer.protocol == "sada":
                continue
            for ref in info.services:
                version = ref.version or ""
                # INTR frames are printable text: a DCP service named in raw bytes cannot go.
                if ref.name.isprintable() and version.isprintable():
                    seen[(ref.name, version)] = None
        return tuple(sorted(seen))

    # ------------------------------------------------------------------ input

    def _connections(self, budget: int) -> None:
        """Introduce the gateway to each channel whose connection just came up."""
        monitor = self._monitor
        if monitor is None:
            return
        for _ in range(budget):
            try:
                event = recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            url = event["endpoint"].decode("utf-8", "replace") if isinstance(event["endpoint"], bytes) else ""
            if event["event"] != zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._handshake_failed(url, event["event"], event["value"])
                continue
            matched = [c for c in self._channels.values() if c.url == url] or list(self._channels.values())
            for channel in matched:
                self.counters["connections"] += 1
                self._intr(channel)

    def _handshake_failed(self, url: str, kind: int, value: int) -> None:
        """A channel's ZeroMQ handshake failed (libzmq retries, but a CURVE set-up that
        does not match never succeeds): counted, and a WARNING at most once a minute
        naming the likely cause, or the operator would see nothing at all."""
        self.counters["handshake_failed"] += 1
        curve = bool(self.curve_client_key)
        failure = handshake_failure(kind, value)
        if failure == "mechanism":
            why = (
                "the channel does not run CURVE: leave out curve_server_key"
                if curve
                else "the channel runs CURVE: give its public key as curve_server_key"
            )
        elif failure == "refused":
            why = f"the channel refused this edge's CURVE key (ZAP status {value}): list {self.curve_client_key}"
        elif curve:
            why = "is curve_server_key the channel's public key, and does it run CURVE?"
        else:
            why = "is it a ZeroMQ peer? One running CURVE needs curve_server_key"
        self.malformed("handshake_failed", url or "a channel", f"the handshake failed ({value}): {why}")

    def receive(self, now_ms: int, budget: int) -> list[Command]:
        self._connections(budget)
        commands: list[Command] = []
        for address, message, _ in self.decoded(budget):
            channel = self._channels.get(address)
            if channel is None:  # pragma: no cover - every pipe is one we named
                self.bad_input(self.peer(address), "unknown_channel", "a message from no configured channel")
                continue
            try:
                self._settle(channel, message)
                self._on_message(channel, message, commands)
            except Exception:
                self.internal_error(address)
        return commands

    @staticmethod
    def _settle(channel: _Channel, message: Message) -> None:
        proto: bytes = getattr(message, "proto", DEFAULT_PROTO)
        # Only a REP's status differs between dialects, and a REP answers a REQ: the
        # first REQ settles it (PIRAN's Darbaan ids), whatever came before it.
        if channel.dialect == "auto" and isinstance(message, Req):
            piran = piran_evidence(request_id=message.request_id, proto=proto)
            channel.dialect = "piran" if piran else "spec"
        if proto != channel.proto:
            channel.proto = proto
            if proto != DEFAULT_PROTO:
                channel.dialect = "spec"  # PIRAN only reads SADA1

    def _on_message(self, channel: _Channel, message: Message, out: list[Command]) -> None:
        # The state moves only when an INTR is sent (_intr): the table's next state.
        _, action = server_step(channel.state, message.TYPE)
        if action is Action.INTR or (channel.state is ServerState.NEW and action is not Action.UNEXPECTED):
            self._intr(channel)  # asked for, or the channel spoke before our INTR reached it
        match action, message:
            case Action.INTR, _:
                pass
            case Action.PONG, _:
                self._send_message(channel, Pong(proto=channel.proto))
            case Action.REQUEST, Req() if not message.service:
                self.bad_input(self.peer(channel.identity), "empty_service", "REQ without a service name")
                self._send_message(channel, refusal(message))
            case Action.REQUEST, Req():
                out.append(
                    Request(
                        service=self._wire.ref(message.service, message.version),
                        action=self._wire.action(message.category, message.action),
                        body=(message.payload,),
                        timeout_ms=self._timeout,
                        reply_to=self.peer(channel.identity),
                        origin=message.request_id.encode("utf-8"),
                        acknowledge=False,  # SADA has no acknowledgement: the REP is the only answer
                    )
                )
                channel.held[message.request_id] = message.service  # until its REP (_deliver)
            case _:
                self.bad_input(self.peer(channel.identity), "unexpected", f"{message.TYPE} from a channel")

    # ----------------------------------------------------------------- output

    def emit(self, output: Output, now_ms: int) -> list[Command]:
        if isinstance(output, Deliver):
            self._deliver(output)
        elif not isinstance(output, Accepted):
            self.counters["unexpected_output"] += 1  # nothing is dispatched to channels
        return []

    def _deliver(self, out: Deliver) -> None:
        reply = out.reply
        if reply.interim:
            return  # SADA has one REP per REQ
        channel = self._channels.get(out.client.address)
        if channel is None:  # pragma: no cover - requests come from configured channels only
            self.counters["deliver_unknown"] += 1
            return
        request_id = out.request.origin.decode("utf-8")
        service = channel.held.pop(request_id, None)
        try:
            rep = Rep(
                proto=channel.proto,
                request_id=request_id,
                status=client_status(reply.status, out.reason),
                payload=join_body(reply.body),
            )
        except (ValueError, EncodeError) as exc:
            self.counters["unencodable"] += 1
            log.debug("%s: cannot deliver reply %d: %s", self.name, reply.id, exc)
        else:
            self._send_message(channel, rep)
        if self._withdrawn and service is not None and self._for(channel) != channel.offered:
            self._intr(channel)  # after the REP: its last REQ of a service offered is answered

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> list[Command]:
        """Introduce the gateway to every channel not introduced to yet, and again to all
        when the set of services changed (INTR Command: "after any change")."""
        self._next_refresh = now_ms + self._refresh
        if self._withdrawn:
            return []  # draining: INTRs follow the REQs answered (_deliver)
        services = self._offered()
        changed = services != self._services
        self._services = services
        # An INTR is one message of 3 frames and 2 per service; a channel with a frame
        # limit below that (nfgate's own: [limits] max_frames) drops it, and nothing
        # tells this side. Said once per change, where the operator reads.
        frames = 3 + 2 * len(services)
        if changed and frames > self.transport.limits.max_frames:
            log.warning(
                "%s: INTR of %d services is %d frames, over [limits] max_frames (%d): "
                "a channel with that limit drops it; raise max_frames there",
                self.name,
                len(services),
                frames,
                self.transport.limits.max_frames,
            )
        for channel in self._channels.values():
            # A NEW channel is introduced when its connection comes up (the monitor).
            if changed or (channel.state is ServerState.NEW and self._monitor is None):
                self._intr(channel)
        return []

    def closing(self, now_ms: int) -> None:
        """The gateway drains and refuses new requests: tell every channel (INTR Command:
        "after any change") to send its REQs to other servers, not here to be refused
        with 503. A service this channel has a REQ here for is withdrawn only once that
        is answered: a channel may take a server that stops offering the service of a
        REQ it holds for one that will not answer it, and run it again elsewhere (nfgate's
        own channel does, docs/routing.md)."""
        self._withdrawn = True
        for channel in self._channels.values():
            if channel.state is not ServerState.NEW:
                self._intr(channel)

    def next_deadline(self) -> int | None:
        return self._next_refresh if self._channels else None  # no channels: nothing to do

    def stats(self) -> dict[str, int]:
        stats = dict(self.counters)
        stats["channels"] = len(self._channels)
        stats["too_many_frames"] = self.transport.oversized
        stats["too_large"] = self.transport.too_large
        return stats

    def worker_access(self) -> WorkerAccess:
        return "none"  # it connects out to channels and serves the gateway's services there


def make(settings: EdgeSettings, *, store: JobStore) -> SadaServerEdge:
    """The ``sada-server`` edge kind's factory (:mod:`nfgate.edges.kinds`). Raises
    :class:`ConfigError` or :class:`nfgate.errors.TransportError`."""
    return SadaServerEdge(settings)
