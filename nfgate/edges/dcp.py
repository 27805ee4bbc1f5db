"""The DCP broker edge (specs/dcp.md), spec and DagBox dialects per peer.

Wiring only: ROUTER transport + ``nfgate.codecs.dcp`` + the session table in
``nfgate.codecs.dcp.session``. What the edge keeps per worker is the correlation DCP
lacks: a REPLY names a client address and metadata, not a request, so the edge
remembers which request it gave each worker under which client address.

Decisions (docs/protocols/dcp.md, docs/translation.md):

- A request from a client of another edge reaches a DCP worker with a stand-in client
  address ``nfgate:<core id>`` (ASCII), so the worker's reply, or its hand-on to another
  service, finds the request again; DCP clients' own addresses are given as they are.
- A worker's REQUEST whose client address and metadata match a request it holds hands
  that request on (``Forward``): "complete the work only partially, then respond with a
  request for another service". Any other worker REQUEST is a new request of its own.
- DCP has no error message: a request the core fails (queue expiry, no worker left)
  gets no reply; it is counted (``client_errors_unsent``) and logged at DEBUG. Clients
  retry, as the spec tells them to.
- A request a worker's dialect cannot carry (DagBox: an empty data part before another)
  is not sent; the edge tells the core with a ``Reply`` whose ``reason`` says why, so
  the core tries another worker or fails the request as its own error, never as this
  worker's answer (which a DCP client would get as an empty REPLY).
- DCP has no DISCONNECT: an evicted worker is forgotten; its next PING gets RECONNECT.
- A client whose connection closes under an identity libzmq made up for it can never
  get a reply (the name was that connection's): its requests are cancelled
  (``ClientGone``, counted ``clients_gone``). One with an identity of its own may come
  back under it and is left alone.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import ClassVar

from nfgate.codecs._base import Message
from nfgate.codecs.dcp import codec as wire
from nfgate.codecs.dcp.messages import Ping, Pong, Reconnect, Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.dcp.session import Action, PeerState, step
from nfgate.edges import BeatCounts, EdgeSettings, RouterEdge, WireCodec, forget_oldest, identity_lasts
from nfgate.errors import EncodeError
from nfgate.model import (
    ClientGone,
    Command,
    Forward,
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

__all__ = ["DcpEdge"]

log = logging.getLogger("nfgate.edge.dcp")

STAND_IN = b"nfgate:"
# The worker messages whose connection the edge notes (RouterEdge.note_connection).
_BY_CONNECTION = frozenset({Ping.TYPE, Registration.TYPE})


def service_text(name: bytes) -> str:
    """A DCP service name (any bytes) as the core's str, reversibly."""
    return name.decode("utf-8", "surrogateescape")


def service_bytes(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


def dagbox_data(data: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """``data`` as a DagBox peer can be sent it. DagBox reads data up to its first empty
    part, so trailing empty parts say nothing it would read: they are left off. That
    is how another protocol's empty payload (MemoDB's, SADA's: one empty part) reaches
    a DagBox peer, as no data parts. An empty part before a non-empty one is kept, and
    the codec refuses it (:class:`EncodeError`): dropping the rest would change the
    body. (Called for DagBox peers only: the spec dialect's path pays no call.)"""
    end = len(data)
    while end and not data[end - 1]:
        end -= 1
    return data[:end]


class _Worker:
    __slots__ = ("beats_heard", "beats_sent", "held", "service")

    def __init__(self, service: bytes) -> None:
        self.service = service
        self.beats_sent = self.beats_heard = 0  # PONGs sent, PINGs heard (show_workers)
        # core id -> (client address given, metadata given): how its REPLY is recognised.
        self.held: dict[int, tuple[bytes, tuple[bytes, ...]]] = {}


class DcpEdge(RouterEdge):
    protocol = "dcp"
    watches_connections = True
    watches_clients = True
    EVENTS = (
        *RouterEdge.EVENTS,
        "client_errors_unsent",
        "clients_gone",
        "empty_service",
        "handover_leftovers",
        "reconnects_sent",
        "reply_metadata_changed",
        "stale_forward",
        "unencodable",
        "unexpected",
        "unexpected_output",
        "unknown_reply",
    )
    wire: ClassVar[WireCodec] = wire

    def __init__(self, settings: EdgeSettings) -> None:
        super().__init__(settings)
        self._dialects: OrderedDict[bytes, str] = OrderedDict()
        self._workers: dict[bytes, _Worker] = {}
        self._pong: dict[str, list[bytes]] = {d: wire.encode(Pong(), d) for d in wire.DIALECTS}
        self._reconnect: dict[str, list[bytes]] = {d: wire.encode(Reconnect(), d) for d in wire.DIALECTS}
        self._late: list[Command] = []  # Unregisters found by flush(), for the next tick

    # ------------------------------------------------------------------ input

    def receive(self, now_ms: int, budget: int) -> list[Command]:
        commands: list[Command] = []
        for address, message, dialect in self.decoded(budget):
            try:
                self._remember(address, dialect, commands)
                self._on_message(address, message, dialect, commands)
            except Exception:
                self.internal_error(address)
        commands.extend(self.lost_messages())
        return commands

    def _remember(self, address: bytes, dialect: str, out: list[Command]) -> None:
        dialects = self._dialects
        if dialects.get(address) != dialect:
            new = address not in dialects
            dialects[address] = dialect
            if len(dialects) > self.max_peers:
                forget_oldest(dialects, self.max_peers, lambda a, _: a in self._workers, self.forget_client)
            if new:  # first seen (or seen again once forgotten): its connection, once
                out.extend(self.note_client(address))

    def _on_message(self, address: bytes, message: Message, dialect: str, out: list[Command]) -> None:
        worker = self._workers.get(address)
        if worker is None and message.TYPE in _BY_CONNECTION:
            renamed, closed = self.leftover(address)
            out.extend(closed)
            if renamed:  # an old connection's PING or registration, under libzmq's new name for it
                self.counters["handover_leftovers"] += 1
                return
        if worker is not None and message.TYPE in _BY_CONNECTION and self.moved(address):
            # It reconnected before its old connection's closing was read: as if read first.
            out.extend(self.connection_closed(address))
            worker = None
        state = PeerState.WORKER if worker is not None else PeerState.CLIENT
        _, action = step(state, message.TYPE)
        peer = self.peer(address)
        match action, message:
            case Action.REQUEST | Action.REGISTER, DcpRequest() | Registration() if not message.service:
                # The spec allows a service name of no bytes; the core names every service,
                # and DCP has no error reply: counted and dropped (a REGISTRATION is not
                # confirmed, so its worker knows it is not registered).
                self.bad_input(peer, "empty_service", message.TYPE)
            case Action.REQUEST, DcpRequest():
                command = self._request(address, worker, message)
                if command is not None:
                    out.append(command)
            case Action.REPLY, DcpReply() if worker is not None:
                reply = self._reply(peer, worker, message)
                if reply is not None:
                    out.append(reply)
            case Action.HEARTBEAT, _:
                sent = self.send(address, self._pong[dialect])
                if worker is not None:
                    self.note_connection(address)
                    worker.beats_heard += 1
                    if sent:
                        worker.beats_sent += 1
                out.append(Heartbeat(peer=peer))
            case Action.REGISTER, Registration():
                if worker is not None and worker.service != message.service:
                    out.append(Unregister(peer=peer, reason="registered again for another service"))
                if worker is None or worker.service != message.service:
                    self._workers[address] = _Worker(message.service)
                self.note_connection(address)
                # "the broker will confirm it by responding with the same message"
                self.send(address, wire.encode(message, dialect))
                service = ServiceRef(name=service_text(message.service))
                out.append(
                    Register(
                        peer=peer,
                        services=(service,),
                        capacity=1,
                        name=self._name(address),
                        name_lasts=identity_lasts(address),
                    )
                )
            case Action.RECONNECT, _:
                self.counters["reconnects_sent"] += 1
                self.send(address, self._reconnect[dialect])
            case _:
                self.bad_input(peer, "unexpected", message.TYPE)

    def beat_record(self, address: bytes) -> BeatCounts | None:
        return self._workers.get(address)

    @staticmethod
    def _name(address: bytes) -> str:
        return "dcp-" + address.hex()

    def _request(self, address: bytes, worker: _Worker | None, msg: DcpRequest) -> Command | None:
        service = self.service(service_text(msg.service))
        if worker is not None and msg.client is not None:
            for core_id, (given, _) in worker.held.items():
                if given == msg.client:
                    del worker.held[core_id]
                    return Forward(
                        worker=self.peer(address),
                        id=core_id,
                        service=service,
                        metadata=msg.metadata,
                        body=msg.data,
                    )
        if msg.client is not None and msg.client.startswith(STAND_IN):
            # The gateway's own stand-in for a client of another protocol, from a worker
            # that no longer holds that request (re-dispatched since): running it again
            # would send its reply to an address no DCP peer has.
            self.bad_input(self.peer(address), "stale_forward", "a REQUEST for a request it does not hold")
            return None
        client = address if msg.client is None else msg.client
        return Request(
            service=service,
            metadata=msg.metadata,
            body=msg.data,
            reply_to=self.peer(client),
            acknowledge=False,  # DCP has no acknowledgement: the REPLY is the only answer
        )

    def _reply(self, peer: Peer, worker: _Worker, msg: DcpReply) -> Reply | None:
        client = msg.client or b""
        match = None
        same_client = []
        for core_id, (given, metadata) in worker.held.items():
            if given == client:
                if metadata == msg.metadata:
                    match = core_id
                    break
                same_client.append(core_id)
        if match is None and len(same_client) == 1:
            # "Workers MUST copy these parts into the reply without any modifications";
            # one that did not is still understood when it holds one request of that
            # client, but it is told in the counters.
            match = same_client[0]
            self.bad_input(peer, "reply_metadata_changed", "a REPLY whose metadata parts were modified")
        if match is None:
            # Several requests of that client held and none with these metadata parts:
            # pinning it on one of them would hand that client a wrong reply.
            self.bad_input(peer, "unknown_reply", "a REPLY for no request this worker holds")
            return None
        del worker.held[match]
        return Reply(
            id=match,
            status=Status.OK,
            body=msg.data,
            metadata=msg.metadata,
            worker=peer,
            worker_name=self._name(peer.address),
        )

    # ----------------------------------------------------------------- output

    def emit(self, output: Output, now_ms: int) -> list[Command]:
        if isinstance(output, Dispatch):
            return self._dispatch(output)
        if isinstance(output, Deliver):
            self._deliver(output)
        elif isinstance(output, Evict):
            # No DISCONNECT in DCP: forget; a later PING gets RECONNECT.
            if output.worker.address in self._workers:
                self._drop_worker(output.worker.address)
        elif not isinstance(output, Accepted):
            # Abort included: DCP has no cancel, so the core keeps a cancelled request's
            # slot (RouterConfig.cancel_keeps_slot) and the edge keeps the request, so
            # the worker's late REPLY still reaches the core and frees it.
            self.counters["unexpected_output"] += 1
        return []

    def _dispatch(self, out: Dispatch) -> list[Command]:
        request, address = out.request, out.worker.address
        worker = self._workers.get(address)
        if worker is None:  # the core has a worker this edge forgot: reconcile
            return [Unregister(peer=out.worker, reason="unknown to the DCP edge")]
        client = request.reply_to
        given = client.address if client.edge == self.name else STAND_IN + str(request.id).encode()
        worker.held[request.id] = (given, request.metadata)
        dialect = self._dialects.get(address, "spec")
        try:
            frames = wire.request_frames(
                service_bytes(request.service.name),
                given,
                request.metadata,
                dagbox_data(request.body) if dialect == "dagbox" else request.body,
                dialect,
            )
        except EncodeError as exc:
            # An empty data part before another for a DagBox worker: it could not read it.
            # The worker never sees the request, so this is no answer of its: the reason
            # makes it the gateway's failure (another worker may carry it; else 500).
            del worker.held[request.id]
            self.counters["unencodable"] += 1
            log.debug("%s: cannot send request %d: %s", self.name, request.id, exc.reason)
            reason = f"cannot be sent to a {dialect}-dialect DCP worker: {exc.reason}"
            return [Reply(id=request.id, status=Status.ERROR, worker=out.worker, reason=reason)]
        self.send_later(address, frames)  # a worker that is gone is found in flush()
        return []

    def _deliver(self, out: Deliver) -> None:
        reply = out.reply
        if reply.interim:
            return  # DCP has one reply per request: NorFab's 201/EVENT are not for DCP clients
        if out.reason:
            if reply.status == STATUS_CANCELLED:
                return  # its client is gone (client_gone): no one to tell
            self.counters["client_errors_unsent"] += 1
            log.debug(
                "%s: request %d failed (%d %s); DCP has no error reply",
                self.name,
                reply.id,
                reply.status,
                out.reason,
            )
            return
        address = out.client.address
        dialect = self._dialects.get(address, "spec")
        try:
            frames = wire.reply_frames(
                address if dialect == "dagbox" else None,
                reply.metadata or out.request.metadata,
                dagbox_data(reply.body) if dialect == "dagbox" else reply.body,
                dialect,
            )
        except EncodeError as exc:
            self.counters["unencodable"] += 1
            self.counters["client_errors_unsent"] += 1  # the client learns nothing: DCP has no error reply
            log.debug("%s: cannot deliver reply %d: %s", self.name, reply.id, exc.reason)
            return
        self.send_later(address, frames)

    # ---------------------------------------------------------------- batching

    def flush_sends(self, now_ms: int) -> None:
        # A dispatch to a worker that is gone: forget it, and tell the core at the next
        # tick (one loop iteration later), which dispatches the request again.
        for address in self.send_queued():
            if self._drop_worker(address):
                self._late.append(Unregister(peer=self.peer(address), reason="socket gone"))

    def _drop_worker(self, address: bytes) -> bool:
        """Forget the worker at ``address``; False if it was not one."""
        self.forget_connection(address)
        return self._workers.pop(address, None) is not None

    def client_gone(self, address: bytes) -> list[Command]:
        # Its requests can never be answered: the core drops the queued ones and lets
        # those at a worker finish as late ones (docs/protocols/dcp.md, "Clients gone").
        # A worker's own requests too, though that is counted as its connection closed.
        if address not in self._workers:
            self.counters["clients_gone"] += 1
            self._dialects.pop(address, None)
            log.debug("%s: client %s gone: its requests are cancelled", self.name, address.hex())
        return [ClientGone(peer=self.peer(address))]

    def connection_closed(self, address: bytes, reason: str = "its connection closed") -> list[Command]:
        # A worker still running reconnects on its own and gets RECONNECT at its next PING.
        if not self._drop_worker(address):
            return []
        return [Unregister(peer=self.peer(address), reason=reason)]

    def tick(self, now_ms: int) -> list[Command]:
        late, self._late = self._late, []
        return late

    def next_deadline(self) -> int | None:
        return 0 if self._late else None

    def drain(self, now_ms: int) -> None:
        self.send_queued()

    def stats(self) -> dict[str, int]:
        stats = super().stats()
        stats["workers"] = len(self._workers)
        stats["peers"] = len(self._dialects)
        return stats


def make(settings: EdgeSettings, *, store: JobStore) -> DcpEdge:
    """The ``dcp`` edge kind's factory (:mod:`nfgate.edges.kinds`); DCP keeps no job records."""
    return DcpEdge(settings)
