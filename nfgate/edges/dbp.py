"""The DBP catalog edge (specs/dbp.md), spec and Hermes dialects per peer.

Wiring only: a ROUTER transport for the commands, a UDP socket for heartbeat datagrams
and the beacon, ``nfgate.codecs.dbp`` for the wire, and the tables in
``nfgate.codecs.dbp.session``. Decisions (docs/protocols/dbp.md, docs/translation.md):

- Info requests become a :class:`Lookup`; the core's :class:`Catalog` is merged with the
  last-value cache of DBP registrations (:mod:`nfgate.edges.dbp_catalog`) and sent back as
  the REPLY, in the order the requests came.
- A spec-dialect service whose ``function`` is a non-empty string (and that did not say
  ``"worker": false``) is a worker of the service ``function`` for the core, one request
  at a time (DBP is "strictly synchronous"). Requests reach it as a REQUEST whose query is
  a JSON envelope; its REPLY answers it (:func:`nfgate.codecs.dbp.session.parse_reply`).
  Hermes-dialect services use REQ sockets, which cannot take a request they did not
  ask for: they are listed in the catalog only.
- Liveness is the edge's, per service, at the interval it registered: the core's own
  watchdog for this edge is off by default (kind ``dbp``, ``heartbeat_ms = 0``).
- A name registered again from another connection takes over: the old connection gets
  DISCONNECT (as ROUTER_HANDOVER does for identities).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import ClassVar

import zmq

from nfgate.codecs import dbp as wire
from nfgate.codecs._base import Message
from nfgate.codecs.dbp import Registration as DbpRegistration
from nfgate.codecs.dbp import Reply as DbpReply
from nfgate.codecs.dbp import Update as DbpUpdate
from nfgate.codecs.dbp.session import (
    Action,
    Beat,
    BeatAction,
    Liveness,
    Mode,
    PeerState,
    apply_update,
    check_registration,
    parse_reply,
    request_envelope,
    step,
)
from nfgate.edges import BeatCounts, EdgeSettings, RouterEdge, WireCodec, WireCounts, forget_oldest
from nfgate.edges.dbp_beacon import beacon_socket
from nfgate.edges.dbp_catalog import ServiceCache, answer
from nfgate.edges.dbp_options import BEACON_DEFAULT, UDP_DEFAULT, option_address
from nfgate.edges.dbp_service import Service
from nfgate.edges.kinds import default_heartbeat
from nfgate.errors import DecodeError, EncodeError, TransportError
from nfgate.model import Catalog, Command, Heartbeat, Lookup, Register, Reply, Unregister
from nfgate.routing_types import Accepted, Dispatch, Evict, Output
from nfgate.store import JobStore
from nfgate.transports.udp import Address, UdpEndpoint, parse_address

__all__ = ["DbpEdge", "make"]

# The service commands whose connection the edge notes (RouterEdge.note_connection).
_BY_CONNECTION = frozenset({DbpRegistration.TYPE, wire.Heartbeat.TYPE})

log = logging.getLogger("nfgate.edge.dbp")

MAX_SERVICES = 10_000  # registered at once; beyond it a registration is DENIED
MAX_PENDING = 1_000  # info requests one peer may have unanswered (they are answered at once)
WORKER_PREFIX = "dbp-"  # worker names the core and NFP clients see: dbp-<service name>


class DbpEdge(RouterEdge):
    """Raises :class:`TransportError` at construction when the ROUTER or the UDP socket
    cannot be bound (the ROUTER is closed again then)."""

    protocol = "dbp"
    EVENTS = (
        *RouterEdge.EVENTS,
        "approved",
        "bad_reply",
        "beacons_sent",
        "denied",
        "expired",
        "handover_leftovers",
        "reconnects_sent",
        "switched_to_zmq",
        "taken_over",
        "too_many_pending",
        "udp_beats_in",
        "udp_beats_out",
        "udp_undecodable",
        "udp_unknown_service",
        "udp_wrong_sender",
        "unencodable",
        "unexpected",
        "unexpected_output",
        "unknown_reply",
        "updated",
    )
    wire: ClassVar[WireCodec] = wire
    watches_connections = True

    def __init__(
        self,
        settings: EdgeSettings,
        *,
        udp: Address | None = UDP_DEFAULT,
        beacon: Address | None = BEACON_DEFAULT,
        beacon_interval_ms: int = 1000,
        liveness: int = 3,
    ) -> None:
        super().__init__(settings)
        router_host, self._router_port = parse_address(self.transport.endpoint.partition("://")[2])
        self.udp: UdpEndpoint | None = None
        try:
            if udp == UDP_DEFAULT:
                udp = (router_host, self._router_port)
            self.udp = UdpEndpoint(*udp, broadcast=beacon is not None) if udp is not None else None
            self._beacon, self._beacon_sock = beacon_socket(beacon, self.udp)
        except TransportError:
            self.transport.close()
            if self.udp is not None:
                self.udp.close()
            raise
        self._beacon_data = wire.encode_beacon(self._router_port)
        self._beacon_every = beacon_interval_ms
        self._beacon_due: int | None = 0 if self._beacon is not None else None
        self._liveness = liveness
        self._dialects: OrderedDict[bytes, str] = OrderedDict()
        self._services: dict[bytes, Service] = {}
        self._by_name: dict[str, bytes] = {}
        self._pending: dict[bytes, deque[tuple[str, str]]] = {}
        self.cache = ServiceCache()
        self._deadline: int | None = None
        self._dirty = True
        log.debug(
            "%s: heartbeats on %s, beacon to %s",
            self.name,
            self.udp.endpoint if self.udp else "(no UDP)",
            f"{beacon[0]}:{beacon[1]}" if beacon else "(off)",
        )

    def sockets(self) -> Sequence[zmq.Socket[bytes] | int]:
        socks: list[zmq.Socket[bytes] | int] = [self.transport.socket]
        if self.udp is not None:
            socks.append(self.udp.fileno())
        return socks

    def wires(self) -> Sequence[WireCounts]:
        beacon = self._beacon_sock
        return tuple(w for w in (self.transport, self.udp, beacon if beacon is not self.udp else None) if w)

    # ------------------------------------------------------------------ input

    def receive(self, now_ms: int, budget: int) -> list[Command]:
        out: list[Command] = []
        for address, message, dialect in self.decoded(budget):
            try:
                self._remember(address, dialect)
                self._on_message(address, message, dialect, now_ms, out)
            except Exception:
                self.internal_error(address)
        if self.udp is not None:
            batch = self.udp.recv_batch(budget)
            for data, sender in batch:
                try:
                    self._on_datagram(data, sender, now_ms, out)
                except Exception:
                    self.internal_error(f"{sender[0]}:{sender[1]}".encode())
            if len(batch) == budget:
                self.drained = False  # more datagrams may be waiting
        out.extend(self.lost_messages())
        return out

    def dialect_of(self, address: bytes, frames: list[bytes]) -> str:
        # A peer keeps the dialect it was first seen with (Hermes REQ peers' later frames
        # are ambiguous on their own).
        return self._dialects.get(address) or wire.detect(frames)

    def _remember(self, address: bytes, dialect: str) -> None:
        # "detected from the first message": a peer keeps the dialect it started with.
        dialects = self._dialects
        if address not in dialects:
            dialects[address] = dialect
            if len(dialects) > self.max_peers:
                forget_oldest(dialects, self.max_peers, lambda a, _: a in self._services)

    def _on_message(
        self, address: bytes, message: Message, dialect: str, now: int, out: list[Command]
    ) -> None:
        svc = self._services.get(address)
        if message.TYPE in _BY_CONNECTION:
            if svc is None:
                renamed, closed = self.leftover(address)
                out.extend(closed)
                if renamed:  # an old connection's beat or registration, under libzmq's new name for it
                    self.counters["handover_leftovers"] += 1
                    return
            elif self.moved(address):
                # It reconnected before its old connection's closing was read: as if read first.
                out.extend(self.connection_closed(address))
                svc = None
        _, action = step(PeerState.SERVICE if svc is not None else PeerState.PEER, message.TYPE)
        peer = self.peer(address)
        if svc is not None and svc.beats is not None and action is not Action.LEAVE:
            beat = Beat.ZMQ if action is Action.HEARTBEAT else Beat.OTHER
            svc.beats, _ = svc.beats.on(beat, now)
        match action, message:
            case Action.INFO, wire.Request():
                pending = self._pending.setdefault(address, deque())
                if len(pending) >= MAX_PENDING:
                    self.bad_input(peer, "too_many_pending", "info requests not yet answered")
                    return
                pending.append((message.query, dialect))
                out.append(Lookup(peer=peer, query=message.query))
            case Action.REGISTER, wire.Registration():
                self._register(address, message, dialect, now, out)
            case Action.UPDATE, wire.Update() if svc is not None:
                self._update(svc, message, now, out)
            case Action.DENY, _:
                self.counters["denied"] += 1
                self._send(address, wire.Denied(time=time.time(), reasons=(b"not registered",)), dialect)
            case Action.HEARTBEAT, _ if svc is not None:
                self.note_connection(address)
                svc.beats_heard += 1
                if svc.function:
                    out.append(Heartbeat(peer=peer))
                self._ack_hermes(address, dialect)
            case Action.LEAVE, _ if svc is not None:
                self._forget(svc, out, "DISCONNECT")
                self._ack_hermes(address, dialect)
            case Action.REPLY, wire.Reply() if svc is not None:
                self._reply(svc, message, out)
                self._ack_hermes(address, dialect)  # a Hermes service is never a worker
            case Action.TOUCH | Action.IGNORE, _:
                self._ack_hermes(address, dialect)
            case Action.RECONNECT, _:
                # A beat from a service we do not know (a gateway restart): "This mechanism
                # allows service nodes to re-register after a broker failure and recovery."
                self.counters["reconnects_sent"] += 1
                self._send(address, wire.Disconnect(time=time.time()), dialect)
            case _:
                # "The broker MUST respond to any valid but unexpected command by sending
                # DISCONNECT and then no further commands to that service node."
                self.bad_input(peer, "unexpected", message.TYPE)
                self._send(address, wire.Disconnect(time=time.time()), dialect)
                if svc is not None:
                    self._forget(svc, out, f"unexpected {message.TYPE}")

    def _ack_hermes(self, address: bytes, dialect: str) -> None:
        # Hermes peers use REQ sockets, which wait for one answer to every message: a
        # command that needs none in DBP gets ACK (u.u), Hermes's own acknowledgement.
        if dialect == "hermes":
            self._send(address, wire.Ack(time=time.time()), dialect)

    def _on_datagram(self, data: bytes, sender: Address, now: int, out: list[Command]) -> None:
        try:
            beat = wire.decode_heartbeat_datagram(data)
        except DecodeError as exc:
            self.counters["udp_undecodable"] += 1
            self.bad_inputs += 1
            log.debug("%s: bad datagram from %s:%d: %s", self.name, *sender, exc.reason)
            return
        address = self._by_name.get(beat.service)
        svc = self._services.get(address) if address is not None else None
        if svc is None:
            self.counters["udp_unknown_service"] += 1
            log.debug("%s: heartbeat datagram for unknown service %r", self.name, beat.service)
            return
        if svc.udp_to is not None and sender[0] != svc.udp_to[0]:
            # "The service sends the same datagram, naming itself": another host naming
            # it must not keep a silent service (and the request it holds) alive.
            self.counters["udp_wrong_sender"] += 1
            log.debug("%s: heartbeat for %r from %s, not its host", self.name, beat.service, sender[0])
            return
        self.counters["udp_beats_in"] += 1
        svc.beats_heard += 1
        if svc.beats is not None:
            svc.beats, _ = svc.beats.on(Beat.UDP, now)
        if svc.function:
            out.append(Heartbeat(peer=self.peer(svc.address)))

    # ----------------------------------------------------------- registration

    def _deny(self, address: bytes, dialect: str, reasons: Sequence[str]) -> None:
        self.counters["denied"] += 1
        log.debug("%s: DENIED %s: %s", self.name, address.hex(), "; ".join(reasons))
        frames = tuple(reason.encode("utf-8", "replace") for reason in reasons)
        self._send(address, wire.Denied(time=time.time(), reasons=frames), dialect)

    def _register(
        self, address: bytes, msg: DbpRegistration, dialect: str, now: int, out: list[Command]
    ) -> None:
        try:
            info = wire.service_info(msg)
        except DecodeError as exc:
            self._deny(address, dialect, [exc.reason])
            return
        reasons = check_registration(info, dialect, wire.REQUIRED_KEYS)
        old = self._services.get(address)
        if not reasons and old is None and len(self._services) >= MAX_SERVICES:
            reasons = ["the catalog is full"]
        if reasons:
            self._deny(address, dialect, reasons)
            return
        name: str = info["name"]
        if old is not None:  # registering again: the new information replaces the old
            self._forget(old, out, "registered again", announce=old.name != name)
        holder = self._by_name.get(name)
        if holder is not None and holder != address:
            self.counters["taken_over"] += 1
            taken = self._services[holder]
            self._send(holder, wire.Disconnect(time=time.time()), taken.dialect)
            self._forget(taken, out, "its name was registered from another connection")
        svc = Service(address, name, info, dialect)
        changes = svc.configure(now, udp=self.udp is not None)
        self._dirty = True
        self._services[address] = svc
        self._by_name[name] = address
        self.note_connection(address)
        self.cache.put(name, info)
        self.counters["approved"] += 1
        self._send(address, wire.Approved(time=time.time(), changes=changes), dialect)
        if svc.function:
            out.append(self._register_command(svc))

    def _register_command(self, svc: Service) -> Register:
        return Register(
            peer=self.peer(svc.address),
            services=(self.service(svc.function),),
            capacity=1,  # DBP is "strictly synchronous": one request at a time
            name=WORKER_PREFIX + svc.name,
        )

    def _update(self, svc: Service, msg: DbpUpdate, now: int, out: list[Command]) -> None:
        try:
            update = wire.service_info(msg)
        except DecodeError as exc:
            self._deny(svc.address, svc.dialect, [exc.reason])
            return
        merged, reasons = apply_update(svc.info, update, svc.dialect, wire.REQUIRED_KEYS)
        if reasons:
            self._deny(svc.address, svc.dialect, reasons)
            return
        function = svc.function
        svc.info = merged
        changes = svc.configure(now, udp=self.udp is not None)
        self._dirty = True
        self.cache.put(svc.name, merged)
        self.counters["updated"] += 1
        if svc.dialect == "hermes":  # Hermes acknowledges an UPDATE with u.u
            self._send(svc.address, wire.Ack(time=time.time()), svc.dialect)
        else:
            self._send(svc.address, wire.Approved(time=time.time(), changes=changes), svc.dialect)
        if svc.function != function:
            if function:
                svc.held.clear()
                out.append(Unregister(peer=self.peer(svc.address), reason="function changed"))
            if svc.function:
                out.append(self._register_command(svc))

    def _forget(self, svc: Service, out: list[Command], reason: str, *, announce: bool = True) -> None:
        """Drop ``svc``: unregister its worker, keep its information as inactive (unless
        ``announce`` is False: it is registering again under the same name)."""
        self._services.pop(svc.address, None)
        self.forget_connection(svc.address)
        if self._by_name.get(svc.name) == svc.address:
            del self._by_name[svc.name]
            if announce:
                self.cache.deactivate(svc.name)
        svc.held.clear()
        self._dirty = True
        if svc.function:
            out.append(Unregister(peer=self.peer(svc.address), reason=reason))
        log.debug("%s: service %r gone: %s", self.name, svc.name, reason)

    def connection_closed(self, address: bytes, reason: str = "its connection closed") -> list[Command]:
        # A DBP service beating over UDP would still look alive after its connection
        # went (a process that died; libzmq dropping a reply over max_message_bytes, which
        # nfgate's JSON envelope makes about a third larger than the body): its request
        # would wait for ever, its one slot held. A service still running reconnects on
        # its own and is told DISCONNECT at its next command, after which it registers again.
        svc = self._services.get(address)
        if svc is None:
            return []
        out: list[Command] = []
        self._forget(svc, out, reason)
        return out

    # ----------------------------------------------------------------- worker

    def _reply(self, svc: Service, msg: DbpReply, out: list[Command]) -> None:
        peer = self.peer(svc.address)
        envelope = parse_reply(msg.info)
        if envelope is not None and envelope.request_id is not None:
            request_id = envelope.request_id
        elif len(svc.held) == 1:
            # No id to go by, but one request held: a plain REPLY answers it (the body is
            # the whole information frame when it is not an envelope).
            request_id = next(iter(svc.held))
        else:
            self.bad_input(peer, "unknown_reply", "a REPLY for no request this service holds")
            return
        if svc.held.pop(request_id, None) is None:
            self.bad_input(peer, "unknown_reply", f"a REPLY for request {request_id}, not held")
            return
        body: tuple[bytes, ...]
        if envelope is None:
            status, body = 200, (msg.info,)
        else:
            status, body = envelope.status, envelope.body
            if envelope.problem:
                self.bad_input(peer, "bad_reply", envelope.problem)
        out.append(
            Reply(id=request_id, status=status, body=body, worker=peer, worker_name=WORKER_PREFIX + svc.name)
        )

    # ----------------------------------------------------------------- output

    def emit(self, output: Output, now_ms: int) -> list[Command]:
        match output:
            case Catalog():
                self._catalog(output)
            case Dispatch():
                return self._dispatch(output)
            case Evict():
                svc = self._services.get(output.worker.address)
                if svc is not None:
                    self._send(svc.address, wire.Disconnect(time=time.time()), svc.dialect)
                    svc.function = ""  # the core has dropped the worker already
                    self._forget(svc, [], output.reason)
            case Accepted():
                pass
            case _:
                # DBP clients only ask the catalog: no Deliver can be addressed to them.
                # Nor an Abort: DBP has no cancel, so the core keeps a cancelled request's
                # slot (RouterConfig.cancel_keeps_slot) and the edge keeps the request, so
                # the service's late REPLY still reaches the core and frees it.
                self.counters["unexpected_output"] += 1
        return []

    def _catalog(self, output: Catalog) -> None:
        address = output.peer.address
        pending = self._pending.get(address)
        if not pending:
            self.counters["unexpected_output"] += 1
            return
        query, dialect = pending.popleft()
        if not pending:
            del self._pending[address]
        body = answer(query, output.entries, self.cache, dialect)
        self._send(address, wire.Reply(time=time.time(), info=body), dialect)

    def _dispatch(self, out: Dispatch) -> list[Command]:
        request, address = out.request, out.worker.address
        svc = self._services.get(address)
        if svc is None or not svc.function:  # the core has a worker this edge forgot: reconcile
            return [Unregister(peer=out.worker, reason="unknown to the DBP edge")]
        action = (request.action.name, request.action.category) if request.action is not None else None
        query = request_envelope(
            request_id=request.id,
            service=request.service.name,
            body=request.body,
            action=action,
            version=request.service.version,
        )
        # Capacity 1: the core gives a request only to a worker it counts as free (one
        # whose request timed out or was cancelled keeps that slot until its late REPLY
        # comes, which the core drops), so nothing should still be held; if something is
        # (the core and the edge out of step), a plain REPLY must still find the one
        # request it can answer.
        svc.held.clear()
        svc.held[request.id] = request
        if not self._send(address, wire.Request(time=time.time(), query=query), svc.dialect):
            commands: list[Command] = []
            self._forget(svc, commands, "socket gone")
            return commands
        return []

    def _send(self, address: bytes, message: Message, dialect: str) -> bool:
        try:
            frames = wire.encode(message, dialect)
        except EncodeError as exc:
            self.counters["unencodable"] += 1
            log.debug("%s: cannot send %s: %s", self.name, message.TYPE, exc.reason)
            return False
        return self.send(address, frames)

    # ----------------------------------------------------------------- timers

    def next_deadline(self) -> int | None:
        if self._dirty:
            deadlines = [s.beats.deadline(self._liveness) for s in self._services.values() if s.beats]
            if self._beacon_due is not None:
                deadlines.append(self._beacon_due)
            self._deadline = min(deadlines) if deadlines else None
            self._dirty = False
        return self._deadline

    def tick(self, now_ms: int) -> list[Command]:
        out: list[Command] = []
        if self._beacon_due is not None and now_ms >= self._beacon_due:
            self._send_beacon()
            self._beacon_due = now_ms + self._beacon_every
        for svc in list(self._services.values()):
            if svc.beats is not None:
                self._beat(svc, svc.beats, now_ms, out)
        self._dirty = True
        return out

    def _send_beacon(self) -> None:
        sock, target = self._beacon_sock, self._beacon
        if sock is not None and target is not None and sock.sendto(self._beacon_data, target):
            self.counters["beacons_sent"] += 1

    def beat_record(self, address: bytes) -> BeatCounts | None:
        return self._services.get(address)

    def _beat(self, svc: Service, beats: Liveness, now: int, out: list[Command]) -> None:
        due = beats.due(now, self._liveness)
        if due is not None:
            beats, action = beats.on(due, now)
            if action is BeatAction.EXPIRE:
                self.counters["expired"] += 1
                self._send(svc.address, wire.Disconnect(time=time.time()), svc.dialect)
                self._forget(svc, out, "heartbeat expired")
                return
            if action is BeatAction.SWITCH:
                self.counters["switched_to_zmq"] += 1
                log.debug("%s: %r missed a beat: heartbeats over ZeroMQ", self.name, svc.name)
        if now >= beats.send_ms:
            heartbeat = wire.Heartbeat(time=time.time(), service=svc.name)
            if beats.mode is Mode.UDP and self.udp is not None and svc.udp_to is not None:
                if self.udp.sendto(wire.encode_heartbeat_datagram(heartbeat), svc.udp_to):
                    self.counters["udp_beats_out"] += 1
                    svc.beats_sent += 1
            elif self._send(svc.address, heartbeat, svc.dialect):
                svc.beats_sent += 1
            else:
                self._forget(svc, out, "socket gone")
                return
            beats = Liveness(
                mode=beats.mode,
                interval_ms=beats.interval_ms,
                heard_ms=beats.heard_ms,
                send_ms=now + beats.interval_ms,
            )
        svc.beats = beats

    # --------------------------------------------------------------- shutdown

    def drain(self, now_ms: int) -> None:
        for svc in self._services.values():
            if svc.dialect != "hermes":  # REQ sockets are not waiting for anything from us
                self._send(svc.address, wire.Disconnect(time=time.time()), svc.dialect)

    def close(self) -> None:
        super().close()
        if self.udp is not None:
            self.udp.close()
        if self._beacon_sock is not None and self._beacon_sock is not self.udp:
            self._beacon_sock.close()

    def stats(self) -> dict[str, int]:
        stats = super().stats()
        stats["services"] = len(self._services)
        stats["peers"] = len(self._dialects)
        if self.udp is not None:
            stats["udp_send_errors"] = self.udp.send_errors
        return stats


def make(settings: EdgeSettings, *, store: JobStore) -> DbpEdge:
    """The ``dbp`` edge kind's factory (:mod:`nfgate.edges.kinds`); DBP keeps no job
    records. Raises :class:`TransportError` when a socket cannot be bound."""
    options = settings.options
    heartbeat = options.get("heartbeat", default_heartbeat("dbp"))
    liveness = heartbeat[1] if isinstance(heartbeat, tuple) and len(heartbeat) == 2 else 3
    every = options.get("beacon_interval_ms", 1000)
    return DbpEdge(
        settings,
        udp=option_address(options.get("udp", UDP_DEFAULT), UDP_DEFAULT),
        beacon=option_address(options.get("beacon", BEACON_DEFAULT), BEACON_DEFAULT),
        beacon_interval_ms=every if isinstance(every, int) and every > 0 else 1000,
        liveness=max(1, int(liveness)),
    )
