"""The SADA channel edge (specs/safir-darbaan.md), spec and PIRAN dialects per peer.

Wiring only: a ROUTER whose identity is its public endpoint + ``nfgate.codecs.sada`` +
the channel table in ``nfgate.codecs.sada.session``. Decisions (docs/protocols/sada.md,
docs/translation.md):

- Servers connect and INTR their services (name + version); they become workers of the
  routing core. An empty version is an unversioned service, matching any version asked.
- The channel gives each REQ its own request id (PIRAN's ``RQ-…`` form, which PIRAN
  servers validate and spec servers take as any unique text) and remembers which core
  request it stands for, per server.
- A registered server silent for one heartbeat interval is sent PING, again each
  interval; the core drops it after ``interval * liveness`` of silence (``Unregister``
  by expiry) and re-dispatches its requests. SADA has no goodbye: the edge forgets it
  and asks it to introduce itself again (RINTR), as it asks any peer that speaks (REP,
  PONG) without being known as a server.
- Servers with an identity of their own are written down in the data dir
  (:mod:`nfgate.edges.sada_recall`) and, after a restart, sent RINTR once they are
  connected again: an idle server would otherwise never be heard of again.
- A peer that sends REQ to the channel is a client: its request is routed to a worker
  of any protocol and answered REP with the request id it chose and an HTTP status
  (queue expiry 503, worker timeout 504, internal 500).
- A client whose connection closes, under an identity libzmq made up for it (a zero
  byte and four more), can never be answered: its requests are cancelled
  (``clients_gone``; queued ones dropped, one at a server finishes as a late one). A
  client with an identity of its own may reconnect under it and is left alone.
- Each peer is answered in its version-frame form (``SADA1`` or ``SADA\\x01``) and its
  dialect (PIRAN's int32 REP status): from an ``ip:port`` identity on its first message,
  else from the request id of its first REQ.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, cast

from nfgate.codecs import sada as wire
from nfgate.codecs._base import Message
from nfgate.codecs.sada.messages import Intr, Ping, Pong, Rep, Req, Rintr
from nfgate.codecs.sada.session import Action, ChannelState, channel_step, piran_evidence, request_id
from nfgate.edges import BeatCounts, EdgeSettings, RouterEdge, WireCodec, forget_oldest, peer_label
from nfgate.edges.kinds import default_heartbeat
from nfgate.edges.router_edge import server_curve
from nfgate.edges.sada_common import (
    DEFAULT_PROTO,
    WireCache,
    client_status,
    join_body,
    refusal,
    rejection,
    rejection_dialect,
    req_fields,
    resolve_port,
    sada_router,
    service_ref,
)
from nfgate.edges.sada_recall import ServerRecall, recall_path
from nfgate.errors import ConfigError, EncodeError, TransportError
from nfgate.model import (
    ClientGone,
    Command,
    Heartbeat,
    Peer,
    Register,
    Reply,
    Request,
    ServiceRef,
    Status,
    Unregister,
)
from nfgate.routing_types import STATUS_CANCELLED, Accepted, Deliver, Dispatch, Evict, Output
from nfgate.store import JobStore
from nfgate.transports.zmq import identity_lasts

__all__ = ["SadaChannelEdge", "make"]

log = logging.getLogger("nfgate.edge.sada")


class _Peer:
    __slots__ = ("beats_heard", "beats_sent", "dialect", "held", "proto", "rintr_at", "services", "state")

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        # PINGs and PONGs sent to and heard from it as a server (show_workers).
        self.beats_sent = self.beats_heard = 0
        self.proto = DEFAULT_PROTO
        self.state = ChannelState.NEW
        self.services: tuple[ServiceRef, ...] = ()
        self.held: dict[str, int] = {}  # request id sent -> core id
        self.rintr_at: int | None = None


class SadaChannelEdge(RouterEdge):
    """The channel. Raises :class:`nfgate.errors.TransportError` when it cannot bind,
    :class:`ConfigError` when its public endpoint cannot be an identity. ``recall``: the
    file its servers are kept in across restarts (None: none kept)."""

    protocol = "sada"
    watches_clients = True
    EVENTS = (
        *RouterEdge.EVENTS,
        "clients_gone",
        "empty_service",
        "pings_sent",
        "rintr_sent",
        "rintr_suppressed",
        "unencodable",
        "unexpected",
        "unexpected_output",
        "unknown_reply",
    )
    wire: ClassVar[WireCodec] = wire

    def __init__(self, settings: EdgeSettings, *, recall: Path | None = None) -> None:
        # RouterEdge's transport cannot set an identity before binding: build our own.
        super(RouterEdge, self).__init__(settings)
        opts = settings.options
        url = resolve_port(settings.url)
        public = str(opts.get("public_endpoint") or "") or url
        head, _, port = public.rpartition(":")
        if port in ("*", "0"):  # the public port is the one bound
            public = f"{head}:{url.rpartition(':')[2]}"
        try:
            identity = wire.channel_identity(public, str(opts.get("identity_form", "spec")))
        except ValueError as exc:
            raise ConfigError(
                f"config: edges.{settings.protocol}: the channel identity is its public endpoint, "
                f"and {public!r} is not one ({exc}); set edges.{settings.protocol}.public_endpoint"
            ) from None
        self.identity = identity
        self._rid_prefix = identity.decode("utf-8", "replace") + "/"
        curve = server_curve(settings)
        self.curve_public_key = curve.public_key.decode() if curve is not None else ""
        self.transport = sada_router(
            settings.context, url, settings.limits, identity=identity, curve=curve, domain=settings.name
        )
        self.transport.on_dropped = self.dropped
        heartbeat = cast("tuple[int, int]", opts.get("heartbeat", default_heartbeat("sada")))
        self._interval = heartbeat[0]
        self._forced = str(opts.get("dialect", "auto"))
        timeout = int(cast("int", opts.get("request_timeout_ms", 0)))
        self._timeout = timeout or None
        self._capacity = int(cast("int", opts.get("server_capacity", 8)))
        self._peers: OrderedDict[bytes, _Peer] = OrderedDict()
        self._servers: dict[bytes, _Peer] = {}
        self._due: OrderedDict[bytes, int] = OrderedDict()  # server -> when it is pinged
        self._seq = 0
        self._wire = WireCache()
        self._recall: ServerRecall | None = None
        if recall is not None:
            window = heartbeat[0] * heartbeat[1] or 30_000
            self._recall = ServerRecall(recall, window_ms=window, limit=self.max_peers)
            if self._recall.pending:
                log.info(
                    "%s: %d SADA server(s) known before the restart are asked to introduce "
                    "themselves again (RINTR) as they connect",
                    self.name,
                    self._recall.pending,
                )

    # ------------------------------------------------------------------ helpers

    def _encode(self, message: Message, dialect: str) -> list[bytes] | None:
        try:
            return wire.encode(message, "spec" if dialect == "auto" else dialect)
        except EncodeError as exc:
            self.counters["unencodable"] += 1
            log.debug("%s: cannot encode %s: %s", self.name, message.TYPE, exc.reason)
            return None

    def _send_message(self, address: bytes, message: Message, dialect: str) -> bool:
        frames = self._encode(message, dialect)
        return frames is not None and self.send(address, frames)

    def _record(self, address: bytes, message: Message, out: list[Command]) -> _Peer:
        p = self._peers.get(address)
        proto: bytes = getattr(message, "proto", DEFAULT_PROTO)
        if p is None:
            dialect = self._forced
            if dialect == "auto" and piran_evidence(identity=address, proto=proto):
                dialect = "piran"
            p = self._peers[address] = _Peer(dialect)
            if len(self._peers) > self.max_peers:
                forget_oldest(
                    self._peers,
                    self.max_peers,
                    lambda _, old: old.state is ChannelState.SERVER,
                    self.forget_client,
                )
            out.extend(self.note_client(address))  # its connection, once (RouterEdge)
        # Only a REP's status differs between dialects, and a REP answers a REQ: without
        # an ip:port identity, a client's first REQ settles it (PIRAN's Darbaan ids).
        if p.dialect == "auto" and isinstance(message, Req):
            p.dialect = "piran" if piran_evidence(request_id=message.request_id, proto=proto) else "spec"
        # PIRAN only reads SADA1: a peer writing SADA\x01 is answered in the spec dialect.
        if proto != p.proto:
            p.proto = proto
            if proto != DEFAULT_PROTO:
                p.dialect = "spec"
        return p

    # ------------------------------------------------------------------ input

    def receive(self, now_ms: int, budget: int) -> list[Command]:
        commands: list[Command] = []
        for address, message, _ in self.decoded(budget):
            try:
                self._on_message(address, message, now_ms, commands)
            except Exception:
                self.internal_error(address)
        return commands

    def undecodable(self, address: bytes, frames: list[bytes]) -> None:
        self._reject(address, frames)

    def over_limit(self, identity: bytes, frames: Sequence[bytes], reason: str) -> None:
        self._reject(identity, list(frames))  # read up to its request id: REP 400

    def _reject(self, address: bytes, frames: list[bytes]) -> None:
        """A REQ that does not decode but whose request id reads is answered 400."""
        rep = rejection(frames)
        if rep is None:
            return
        p = self._peers.get(address)
        known = p.dialect if p is not None else self._forced
        self._send_message(address, rep, rejection_dialect(known, rep, address))

    def _on_message(self, address: bytes, message: Message, now: int, out: list[Command]) -> None:
        p = self._record(address, message, out)
        p.state, action = channel_step(p.state, message.TYPE)
        peer = self.peer(address)
        if address in self._due:  # any conversation counts as a heartbeat (PING and PONG)
            self._due[address] = now + self._interval
            self._due.move_to_end(address)
        match action, message:
            case Action.REGISTER, Intr():
                out.extend(self._register(address, p, message, now))
            case Action.REQUEST, Req() if not message.service:
                self.bad_input(peer, "empty_service", "REQ without a service name")
                self._send_message(address, refusal(message), p.dialect)
            case Action.REQUEST, Req():
                out.append(self._request(peer, message))
            case Action.REPLY, Rep():
                reply = self._reply(peer, p, message)
                if reply is not None:
                    out.append(reply)
            case Action.HEARTBEAT, _:
                p.beats_heard += 1
                out.append(Heartbeat(peer=peer))
            case Action.PONG, _:
                sent = self._send_message(address, Pong(proto=p.proto), p.dialect)
                if address in self._servers:
                    p.beats_heard += 1
                    if sent:
                        p.beats_sent += 1
                    out.append(Heartbeat(peer=peer))
            case Action.RINTR, _:
                self._rintr(address, p, now)
            case _:
                self.bad_input(peer, "unexpected", f"{message.TYPE} from a {p.state.value} peer")

    def _register(self, address: bytes, p: _Peer, msg: Intr, now: int) -> list[Command]:
        peer = self.peer(address)
        named = tuple(pair for pair in msg.services if pair[0])
        if len(named) != len(msg.services):
            # The core names every service: one with no name is left out (as MemoDB's
            # READY's are), the others are registered.
            self.bad_input(peer, "empty_service", "INTR introduces a service with no name")
        services = tuple(dict.fromkeys(service_ref(name, version) for name, version in named))
        p.services = services
        if not services:
            # "INTR with zero services": known (no RINTR), but nothing to route to it.
            if self._recall is not None:
                self._recall.drop(address)
            if self._servers.pop(address, None) is not None:
                self._due.pop(address, None)
                p.held.clear()
                return [Unregister(peer=peer, reason="introduced no services")]
            return []
        if self._servers.get(address) is not p:
            p.beats_sent = p.beats_heard = 0
        self._servers[address] = p
        self._due[address] = now + self._interval
        self._due.move_to_end(address)
        name, lasts = self._label(address), identity_lasts(address)
        if lasts and self._recall is not None:
            self._recall.keep(address, p.proto, p.dialect)
        return [Register(peer=peer, services=services, capacity=self._capacity, name=name, name_lasts=lasts)]

    @staticmethod
    def _label(address: bytes) -> str:
        return "sada-" + peer_label(address)

    def beat_record(self, address: bytes) -> BeatCounts | None:
        return self._servers.get(address)

    def _request(self, peer: Peer, msg: Req) -> Request:
        return Request(
            service=self._wire.ref(msg.service, msg.version),
            action=self._wire.action(msg.category, msg.action),
            body=(msg.payload,),
            timeout_ms=self._timeout,
            reply_to=peer,
            origin=msg.request_id.encode("utf-8"),
            acknowledge=False,  # SADA has no acknowledgement: the REP is the only answer
        )

    def _reply(self, peer: Peer, p: _Peer, msg: Rep) -> Reply | None:
        core_id = p.held.get(msg.request_id)
        if core_id is None:
            self.bad_input(peer, "unknown_reply", f"REP for request id {msg.request_id[:64]!r}")
            return None
        if msg.status >= 200:  # a 1xx REP is relayed as interim; the final REP follows
            del p.held[msg.request_id]
        return Reply(
            id=core_id,
            status=msg.status,
            body=(msg.payload,),
            worker=peer,
            worker_name=self._label(peer.address),
        )

    def _rintr(self, address: bytes, p: _Peer, now: int) -> None:
        # At most one RINTR per heartbeat interval: a server streaming REPs to a channel
        # that forgot it needs to be asked once, not once per message. heartbeat_ms = 0
        # (no PINGs) must not make that once a millisecond: the default interval then.
        every = self._interval if self._interval > 0 else default_heartbeat("sada")[0]
        if p.rintr_at is not None and now - p.rintr_at < every:
            self.counters["rintr_suppressed"] += 1
            return
        p.rintr_at = now
        self.counters["rintr_sent"] += 1
        self._send_message(address, Rintr(proto=p.proto), p.dialect)

    # ----------------------------------------------------------------- output

    def emit(self, output: Output, now_ms: int) -> list[Command]:
        match output:
            case Dispatch():
                return self._dispatch(output, now_ms)
            case Deliver():
                self._deliver(output)
            case Evict():
                # SADA has no DISCONNECT: forget the server and ask it to introduce itself
                # again (RINTR), as other protocols' workers re-register after theirs: an
                # idle server would not speak again (MMI restart, a server taken for dead
                # that was only slow). One that is gone does not read it.
                self._forget(output.worker.address, now_ms)
            case Accepted():
                pass
            case _:
                # Abort included: SADA has no cancel, so the core keeps a cancelled
                # request's slot (RouterConfig.cancel_keeps_slot) and the edge keeps the
                # request id, so the server's late REP still reaches the core and frees it.
                self.counters["unexpected_output"] += 1
        return []

    def client_gone(self, address: bytes) -> list[Command]:
        # Its REPs could never be delivered: the core drops its queued requests and lets
        # those at a server finish as late ones (docs/protocols/sada.md).
        if address not in self._servers:
            self.counters["clients_gone"] += 1
            self._peers.pop(address, None)
            log.debug("%s: client %s gone: its requests are cancelled", self.name, peer_label(address))
        return [ClientGone(peer=self.peer(address))]

    def _forget(self, address: bytes, now: int) -> None:
        """Forget the server at ``address`` and ask it back (RINTR). One not connected
        now (a network break: its socket reconnects by itself) and with an identity of
        its own is asked again once it is back, as after a restart
        (:class:`ServerRecall`); any other is struck off the recall list."""
        p = self._servers.pop(address, None)
        self._due.pop(address, None)
        if p is None:
            return
        p.state = ChannelState.NEW
        p.held.clear()
        p.rintr_at = now
        if self._ask_back(address, p.proto, p.dialect) or self._recall is None:
            return
        if not (identity_lasts(address) and self._recall.expect(address)):
            self._recall.drop(address)

    def _dispatch(self, out: Dispatch, now: int) -> list[Command]:
        address, request = out.worker.address, out.request
        p = self._servers.get(address)
        if p is None:  # the core has a worker this edge forgot: reconcile
            return [Unregister(peer=out.worker, reason="unknown to the SADA channel")]
        self._seq += 1
        rid = request_id(self._seq, time.time_ns() // 1_000_000)
        if p.dialect != "piran":
            # "Channels RECOMMENDED to prepends their id in the request id generated";
            # PIRAN servers validate the bare RQ-... form, so they get it as it is.
            rid = f"{self._rid_prefix}{rid}"
        version, category, action = req_fields(request, p.services)
        try:
            message = Req(
                proto=p.proto,
                request_id=rid,
                service=request.service.name,
                version=version,
                category=category,
                action=action,
                payload=join_body(request.body),
            )
        except (ValueError, TypeError, EncodeError) as exc:
            # A service or action name SADA cannot carry (control characters). The server
            # never sees the request: the reason makes it the gateway's failure, not the
            # server's answer (the core tries a worker of another protocol, else 500).
            self.counters["unencodable"] += 1
            log.debug("%s: cannot send request %d as REQ: %s", self.name, request.id, exc)
            reason = f"cannot be sent to a SADA server: {getattr(exc, 'reason', exc)}"
            return [Reply(id=request.id, status=Status.ERROR, worker=out.worker, reason=reason)]
        p.held[rid] = request.id
        if not self._send_message(address, message, p.dialect):
            self._forget(address, now)
            return [Unregister(peer=out.worker, reason="socket gone")]
        return []

    def _deliver(self, out: Deliver) -> None:
        reply = out.reply
        if reply.interim:
            return  # SADA has one REP per REQ
        if out.reason and reply.status == STATUS_CANCELLED:
            return  # its client is gone (client_gone): no one to tell
        address = out.client.address
        p = self._peers.get(address)
        proto, dialect = (p.proto, p.dialect) if p is not None else (DEFAULT_PROTO, "spec")
        try:
            rep = Rep(
                proto=proto,
                request_id=out.request.origin.decode("utf-8"),
                status=client_status(reply.status, out.reason),
                payload=join_body(reply.body),
            )
        except (ValueError, EncodeError) as exc:
            self.counters["unencodable"] += 1
            log.debug("%s: cannot deliver reply %d: %s", self.name, reply.id, exc)
            return
        self._send_message(address, rep, dialect)

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> list[Command]:
        """PING every server silent for one interval (PING and PONG command); RINTR the
        servers known before a restart that are connected again."""
        out: list[Command] = []
        if self._recall is not None:
            self._recall.ask(now_ms, self._ask_back)
        if self._interval <= 0:
            # heartbeat_ms = 0: no PINGs. The tick still runs for the recall, and every
            # server's due time is its last message's: each would be PINGed every tick.
            return out
        due = self._due
        for _ in range(len(due)):
            address, when = next(iter(due.items()))
            if when > now_ms:
                break
            due[address] = now_ms + self._interval
            due.move_to_end(address)
            p = self._servers[address]
            self.counters["pings_sent"] += 1
            if not self._send_message(address, Ping(proto=p.proto), p.dialect):
                self._forget(address, now_ms)
                out.append(Unregister(peer=self.peer(address), reason="socket gone"))
                continue
            p.beats_sent += 1
        return out

    def _ask_back(self, address: bytes, proto: bytes, dialect: str) -> bool:
        """RINTR to a server the channel does not hold as registered (known before the
        restart, or just evicted); False when it is not connected, which is not counted
        as unroutable: expected until libzmq reconnects it, or of a server gone."""
        try:
            frames = self._encode(Rintr(proto=proto), dialect)
        except (ValueError, ConfigError):  # not a proto or dialect of SADA's: nothing to send
            return False
        try:
            if frames is None or not self.transport.send(address, frames, probe=True):
                return False
        except TransportError as exc:  # the socket itself failed: try again later
            log.warning("%s: RINTR to %s failed: %s", self.name, peer_label(address), exc)
            return False
        self.counters["rintr_sent"] += 1
        return True

    def next_deadline(self) -> int | None:
        recall = self._recall.due() if self._recall is not None else None
        if not self._due or self._interval <= 0:
            return recall
        ping = next(iter(self._due.values()))
        return ping if recall is None else min(ping, recall)

    def stats(self) -> dict[str, int]:
        stats = super().stats()
        stats["servers"] = len(self._servers)
        stats["peers"] = len(self._peers)
        return stats


def make(settings: EdgeSettings, *, store: JobStore) -> SadaChannelEdge:
    """The ``sada`` edge kind's factory (:mod:`nfgate.edges.kinds`); SADA keeps no job
    records, only its servers' identities beside them (:mod:`nfgate.edges.sada_recall`).
    Raises :class:`ConfigError` or :class:`nfgate.errors.TransportError`."""
    return SadaChannelEdge(settings, recall=recall_path(store.path.parent, settings.name))
