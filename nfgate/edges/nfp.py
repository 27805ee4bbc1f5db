"""The NFP broker edge (specs/nfp.md), spec and NorFab 0.25 dialects per peer.

Wiring: ROUTER transport + ``nfgate.codecs.nfp`` + the session table in
``nfgate.codecs.nfp.session``; job records (the client side) are in
:mod:`nfgate.edges.nfp_jobs`, the broker's own services in :mod:`nfgate.edges.nfp_services`.
This module keeps the worker side: registration, keepalives both ways, dispatch, results.

- The dialect is detected from every message's command frame, and a peer is answered in
  the dialect it last spoke (design.md).
- A worker's name is its ZeroMQ identity (NorFab's rule; the spec names none).
- NorFab workers answer a POST with 201 and EVENTs, and give the result only to a GET:
  on their ``result_ready`` EVENT (NorFab 0.24's: its last, "completed" progress event)
  the edge sends that GET itself, so a worker's result reaches clients of every protocol
  without them knowing NorFab's flow.
- The broker sends KEEPALIVE to every worker each heartbeat interval (NorFab workers
  reconnect after 6 silent intervals), and DISCONNECT to a worker it evicts or does not
  know (a NorFab worker answers it with READY, which is how workers come back after a
  gateway restart).
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import ClassVar

from nfgate.codecs._base import Message
from nfgate.codecs.nfp import codec as wire
from nfgate.codecs.nfp import norfab_job
from nfgate.codecs.nfp.messages import (
    BROKER,
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
)
from nfgate.codecs.nfp.session import Action, PeerState, step
from nfgate.edges import (
    BeatCounts,
    EdgeSettings,
    RouterEdge,
    WireCodec,
    forget_oldest,
    identity_lasts,
    peer_label,
)
from nfgate.edges.kinds import NORFAB_WORKER_CAPACITY, default_heartbeat
from nfgate.edges.nfp_job import core_status, over_limit_response
from nfgate.edges.nfp_jobs import NfpJobs
from nfgate.edges.nfp_retention import JobRetention
from nfgate.edges.nfp_services import NfpOptions, NfpServices
from nfgate.errors import EncodeError
from nfgate.model import Command, Heartbeat, Peer, Register, Reply, Request, ServiceRef, Status, Unregister
from nfgate.routing_types import Abort, Accepted, Deliver, Dispatch, Evict, Output
from nfgate.store import JobStore

__all__ = ["NfpEdge", "NfpOptions"]

log = logging.getLogger("nfgate.edge.nfp")

_PROGRESS = {201: "created", 202: "created", 300: "pending"}
# A NorFab worker's answers to a GET: "pending" (300), "waiting for input" (102, with
# the input request), "no such job" (404), or the result (final).
_GET_ANSWERS = frozenset({102, 300, 404})
# What NorFab 0.25 appends to a worker's name for the client it runs inside itself
# (norfab/core/worker.py: NFPClient(..., name=f"{self.name}-NFPClient")).
NORFAB_CLIENT_SUFFIX = b"-NFPClient"
# The worker messages whose connection the edge notes (RouterEdge.note_connection).
_BY_CONNECTION = frozenset({Keepalive.TYPE, Ready.TYPE})
# What the gateway is waiting for a NorFab worker to answer, per uuid (_Peer.asked): a
# client's GET passed on (POLL), its own GET for a result the worker said is ready
# (FETCH), or a POLL after whose answer the FETCH is still to be sent.
POLL, FETCH, POLL_THEN_FETCH = 1, 2, 3


class _Peer:
    __slots__ = ("asked", "beats_heard", "beats_sent", "dialect", "held", "seen", "service", "state")

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.seen = 0  # monotonic ms of its last message
        # KEEPALIVEs sent to and heard from it since it registered (show_workers).
        self.beats_sent = self.beats_heard = 0
        self.state = PeerState.NEW
        self.service = ""
        # uuid sent -> (core id, request): how a worker's RESPONSE finds its request.
        self.held: dict[str, tuple[int, Request]] = {}
        # uuid -> POLL/FETCH/POLL_THEN_FETCH: one GET of a held job at a time, so that
        # the worker does not send a result twice (a subset of held).
        self.asked: dict[str, int] = {}


class NfpEdge(RouterEdge):
    protocol = "nfp"
    watches_connections = True
    keeps_requests = True  # jobs are stored: dispatched again after a restart
    EVENTS = (
        *RouterEdge.EVENTS,
        "accepted_unknown",
        "bad_status",
        "bodies_refused",
        "client_errors",
        "deliver_unknown",
        "empty_service",
        "events_received",
        "expire_errors",
        "handover_leftovers",
        "ignored",
        "input_for_unknown_job",
        "jobs_expired",
        "jobs_refused",
        "jobs_turned_away",
        "mmi_requests",
        "poll_not_found",
        "repeated_ready",
        "store_errors",
        "strangers",
        "unencodable",
        "unexpected",
        "unexpected_output",
        "unknown_broker_service",
        "unknown_result",
    )
    wire: ClassVar[WireCodec] = wire

    def __init__(self, settings: EdgeSettings, *, store: JobStore, options: NfpOptions | None = None) -> None:
        super().__init__(settings)
        self._peers: OrderedDict[bytes, _Peer] = OrderedDict()
        self._workers: dict[bytes, _Peer] = {}
        self.jobs = NfpJobs(self, store)
        self.retention = JobRetention(settings.name, store, self.counters)
        self.services = NfpServices(self, options or NfpOptions())
        heartbeat: tuple[int, int] = settings.options.get("heartbeat", default_heartbeat("nfp"))  # type: ignore[assignment]
        self.heartbeat = heartbeat  # (interval ms, liveness): what this edge announces
        self._interval = heartbeat[0]
        self._next_keepalive: int | None = None
        self._late: list[Command] = []  # Unregisters found by flush(), for the next tick
        # A spec worker takes one job at a time (specs/nfp.md: "Workers will handle at
        # most one request a time"); NorFab's broker sends a worker every job at once and
        # the worker runs max_concurrent_jobs of them (5 by default) in a thread pool, so
        # a NorFab worker is given that many (``norfab_worker_capacity``).
        capacity = settings.options.get("norfab_worker_capacity", NORFAB_WORKER_CAPACITY)
        self._norfab_capacity = capacity if isinstance(capacity, int) else NORFAB_WORKER_CAPACITY

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def peer_name(address: bytes) -> str:
        """A peer's name as NorFab gives it: its identity, which NorFab sets to the
        worker's or client's name as UTF-8 text (``wörker-1`` and ``w 2`` included);
        :func:`peer_label` (``id-<hex>``) for one that is not printable text. The name
        is what named targets match and what a NorFab worker keys its result by, so it
        must be the name the worker knows itself by; logs keep :func:`peer_label`."""
        try:
            text = address.decode("utf-8")
        except UnicodeDecodeError:
            return peer_label(address)
        return text if text.isprintable() and text else peer_label(address)

    def label(self, peer: Peer) -> str:
        return (
            self.peer_name(peer.address)
            if peer.protocol == "nfp"
            else f"{peer.protocol}-{peer.address.hex()}"
        )

    def beat_record(self, address: bytes) -> BeatCounts | None:
        return self._workers.get(address)

    def workers_client(self, address: bytes) -> bool:
        """True when ``address`` is the client a registered NorFab worker runs inside
        itself (NorFab names it ``<worker name>-NFPClient``): its jobs are part of the
        worker's work (a nornir task asking netbox, a fetch_file)."""
        return (
            address.endswith(NORFAB_CLIENT_SUFFIX) and address[: -len(NORFAB_CLIENT_SUFFIX)] in self._workers
        )

    def speaks_norfab(self, peer: Peer) -> bool:
        """True when ``peer`` is a worker of this edge speaking the NorFab dialect."""
        p = self._workers.get(peer.address) if peer.edge == self.name else None
        return p is not None and p.dialect == "norfab"

    def names(self, peers: Iterable[Peer]) -> list[str]:
        router = self._gateway.router if self._gateway is not None else None
        return [(router.worker_name(p) if router else "") or self.label(p) for p in peers]

    def encode(self, message: Message, dialect: str) -> list[bytes] | None:
        try:
            return wire.encode(message, dialect)
        except EncodeError as exc:
            self.unencodable(message.TYPE, dialect, exc)
            return None

    def unencodable(self, what: str, dialect: str, exc: EncodeError) -> None:
        """Count and log a message this edge could not put on the wire."""
        self.counters["unencodable"] += 1
        log.debug("%s: cannot encode %s for a %s peer: %s", self.name, what, dialect, exc.reason)

    def _send_message(self, address: bytes, message: Message, dialect: str) -> bool:
        frames = self.encode(message, dialect)
        return frames is not None and self.send(address, frames)

    def over_limit(self, identity: bytes, frames: Sequence[bytes], reason: str) -> None:
        answer = over_limit_response(list(frames), reason)
        if answer is not None:  # a client's job: its RESPONSE 400, not silence
            self.counters["client_errors"] += 1
            self._send_message(identity, *answer)

    # ------------------------------------------------------------------ input

    def receive(self, now_ms: int, budget: int) -> list[Command]:
        commands: list[Command] = []
        for address, message, dialect in self.decoded(budget):
            try:
                self._on_message(address, message, dialect, now_ms, commands)
            except Exception:
                self.internal_error(address)
        commands.extend(self.lost_messages())
        # Read on even when the socket was empty a moment ago: what arrived meanwhile
        # shares this iteration's COMMIT (and fsync) instead of paying its own.
        self.drained = False
        return commands

    def clients(self, now_ms: int) -> list[tuple[bytes, str, int]]:
        """(address, dialect, ms since last heard) of every peer that acted as a client."""
        return [
            (address, p.dialect, now_ms - p.seen)
            for address, p in self._peers.items()
            if p.state in (PeerState.CLIENT, PeerState.OPENED)
        ]

    def _record(self, address: bytes, dialect: str, now_ms: int) -> _Peer:
        p = self._peers.get(address)
        if p is None:
            p = self._peers[address] = _Peer(dialect)
            if len(self._peers) > self.max_peers:
                forget_oldest(self._peers, self.max_peers, lambda _, old: old.state is PeerState.WORKER)
        p.dialect = dialect
        p.seen = now_ms
        return p

    def _on_message(
        self, address: bytes, message: Message, dialect: str, now_ms: int, out: list[Command]
    ) -> None:
        if message.TYPE in _BY_CONNECTION and address not in self._workers:
            renamed, closed = self.leftover(address)
            out.extend(closed)
            if renamed:  # an old connection's READY or KEEPALIVE, under libzmq's new name for it
                self.counters["handover_leftovers"] += 1
                return
        p = self._record(address, dialect, now_ms)
        if p.state is PeerState.WORKER and message.TYPE in _BY_CONNECTION and self.moved(address):
            # It reconnected before its old connection's closing was read: as if read first.
            out.extend(self.connection_closed(address))
        header: bytes = getattr(message, "header", b"")
        p.state, action = step(p.state, header, message.TYPE)
        peer = self.peer(address)
        match action, message:
            case Action.JOB, Post() if not message.routed:
                out.extend(self.jobs.post(peer, dialect, message))
            case Action.FETCH, Get() if not message.routed:
                self.jobs.get(peer, dialect, message)
            case Action.CANCEL, Delete() if not message.routed:
                out.extend(self.jobs.delete(peer, dialect, message))
            case Action.INPUT, Put() if not message.routed:
                self.jobs.put(peer, dialect, message)
            case Action.MMI, Mmi() if message.status is None and message.client is None:
                self.services.mmi(peer, dialect, message)
            case Action.OPEN, Open():
                self._send_message(address, Open(header=BROKER), dialect)
            case Action.REGISTER, Ready() if not message.service:
                # A READY names the service it offers: one that names none is refused as
                # the spec refuses an unexpected command (DISCONNECT), not registered.
                self.bad_input(peer, "empty_service", "READY without a service name")
                self._disconnect(address, p, "READY without a service name")
                self._forget_worker(address, p)
            case Action.REGISTER, Ready():
                p.service = message.service
                p.beats_sent = p.beats_heard = 0
                self._workers[address] = p
                self.note_connection(address)
                out.append(
                    Register(
                        peer=peer,
                        services=(ServiceRef(name=message.service),),
                        capacity=self._norfab_capacity if dialect == "norfab" else 1,
                        name=self.peer_name(address),
                        name_lasts=identity_lasts(address),
                    )
                )
            case Action.HEARTBEAT, _:
                p.beats_heard += 1
                self.note_connection(address)
                out.append(Heartbeat(peer=peer))
            case Action.RESULT, Response() | Event() | Stream():
                reply = self._result(address, p, message, dialect)
                if reply is not None:
                    out.append(reply)
            case Action.UNREGISTER, _:
                self._forget_worker(address, p)
                out.append(Unregister(peer=peer, reason="worker sent DISCONNECT"))
            case Action.STRANGER, _:
                self.bad_input(peer, "strangers", f"worker's {message.TYPE} from a peer that is no worker")
                self._disconnect(address, p, "unregistered")
            case Action.IGNORE, Ready():
                # specs/nfp.md "Opening and Closing": "The worker MUST NOT send a further
                # READY" and "The broker MUST respond to any valid but unexpected command by
                # sending DISCONNECT and then no further commands to that worker".
                self.counters["repeated_ready"] += 1
                self._disconnect(address, p, "READY sent twice")
                self._forget_worker(address, p)
                out.append(Unregister(peer=peer, reason="worker sent READY twice"))
            case Action.IGNORE, _:
                self.bad_input(peer, "ignored", f"{message.TYPE} from a {p.state.value} peer, ignored")
            case _:
                self.bad_input(peer, "unexpected", f"{message.TYPE} from a {p.state.value} peer")

    def _forget_worker(self, address: bytes, p: _Peer) -> None:
        self.forget_connection(address)
        self._workers.pop(address, None)
        p.state = PeerState.NEW
        p.held.clear()
        p.asked.clear()

    def connection_closed(self, address: bytes, reason: str = "its connection closed") -> list[Command]:
        p = self._workers.get(address)
        if p is None:
            return []
        self._forget_worker(address, p)
        # A worker that is still running reconnects on its own (its DEALER does) and
        # is told DISCONNECT at its next message, after which it registers again.
        return [Unregister(peer=self.peer(address), reason=reason)]

    def _disconnect(self, address: bytes, p: _Peer, reason: str) -> None:
        body = None if p.dialect == "norfab" else reason.encode()
        self._send_message(address, Disconnect(header=BROKER, service=p.service or "-", body=body), p.dialect)

    def _result(self, address: bytes, p: _Peer, msg: Response | Event | Stream, dialect: str) -> Reply | None:
        entry = p.held.get(msg.uuid)
        if entry is None:
            self.bad_input(self.peer(address), "unknown_result", f"{msg.TYPE} for uuid {msg.uuid[:40]!r}")
            return None
        core_id, status = entry[0], core_status(msg.status)
        if status != msg.status:  # the Reply could not carry it: the request would be lost
            self.bad_input(self.peer(address), "bad_status", f"{msg.TYPE} status {msg.status}: not HTTP's")
        if isinstance(msg, Event):
            progress = "event"
            self.counters["events_received"] += 1
            if dialect == "norfab" and norfab_job.result_ready(msg.body[0]):
                # The result is saved on the worker (0.25's result_ready, 0.24's last
                # "completed" event); NorFab hands it out only to a GET.
                if msg.uuid in p.asked:  # a client's GET is out: fetch once it is answered
                    p.asked[msg.uuid] = POLL_THEN_FETCH
                else:
                    self._ask(address, p, msg.uuid, msg.client or b"nfgate", FETCH)
        elif isinstance(msg, Stream):
            progress = "stream"
        else:
            asked = p.asked.pop(msg.uuid, 0) if msg.status in _GET_ANSWERS else 0
            if asked == POLL_THEN_FETCH:
                self._ask(address, p, msg.uuid, msg.client or b"nfgate", FETCH)
            if asked in (POLL, POLL_THEN_FETCH) and msg.status == 404:
                # "JOB NOT FOUND" to a client's GET passed on: the worker has not filed
                # the POST yet (its threads take POST and GET from separate queues).
                # Relayed, it would fail the job at the client; dropped, the client polls again.
                self.counters["poll_not_found"] += 1
                return None
            progress = _PROGRESS.get(msg.status, "")
            if not progress and msg.status >= 200:
                del p.held[msg.uuid]
                p.asked.pop(msg.uuid, None)
        return Reply(id=core_id, status=status, body=msg.body, worker=self.peer(address), progress=progress)

    # ------------------------------------------------------------------ output

    def emit(self, output: Output, now_ms: int) -> list[Command]:
        match output:
            case Dispatch():
                return self._dispatch(output)
            case Deliver():
                self.jobs.deliver(output)
            case Accepted():
                return self.jobs.accepted(output)
            case Evict():
                p = self._workers.get(output.worker.address)
                if p is not None:
                    self._disconnect(output.worker.address, p, output.reason)
                    self._forget_worker(output.worker.address, p)
            case Abort():
                self._abort(output)
            case _:
                self.counters["unexpected_output"] += 1
        return []

    def _client_token(self, request: Request) -> bytes:
        # NorFab workers keep the client address as UTF-8 text and send it back.
        label = self.peer_name(request.reply_to.address) if request.reply_to.edge == self.name else ""
        return (label or f"nfgate-{request.id}").encode()

    def _dispatch(self, out: Dispatch) -> list[Command]:
        address, request = out.worker.address, out.request
        p = self._workers.get(address)
        if p is None:
            return [Unregister(peer=out.worker, reason="unknown to the NFP edge")]
        body = request.body or (b"",)
        if p.dialect == "norfab":
            refused = norfab_job.refusal(body)
            if refused:
                return [self._refuse_body(out, refused)]
        uuid = request.origin.decode("ascii", "replace") if request.reply_to.edge == self.name else ""
        # A NorFab worker keeps its jobs by uuid, across its own restarts, and drops
        # without a word a POST for a uuid it has: a job going out again (its worker
        # given up for dead, a gateway restart) gets a uuid of its own toward workers,
        # or it would wait forever on a record no thread runs. Spec workers keep nothing.
        again = p.dialect == "norfab" and (out.attempt > 1 or self.jobs.recovered(uuid))
        if again or not uuid or not uuid.isprintable() or uuid in p.held:
            uuid = uuidlib.uuid4().hex
        p.held[uuid] = (request.id, request)
        try:
            if p.dialect == "norfab":
                frames = wire.dispatch_frames(uuid, body, p.dialect, client=self._client_token(request))
            else:
                # A job for NorFab's pseudo-service "all" names the worker's own service.
                service = p.service if request.target.any_service else request.service.name
                frames = wire.dispatch_frames(uuid, body, p.dialect, service=service, target="any")
        except EncodeError as exc:
            # What its dialect cannot carry: the worker never sees the request, so this
            # is no answer of its, and the worker is fine (it was taken for gone before,
            # and dropped). The reason makes it the gateway's failure: another worker may
            # carry it; else 500.
            self.unencodable("POST", p.dialect, exc)
            del p.held[uuid]
            reason = f"cannot be sent to a {p.dialect}-dialect NFP worker: {exc.reason}"
            return [Reply(id=request.id, status=Status.ERROR, worker=out.worker, reason=reason)]
        self.send_later(address, frames)  # a worker that is gone is found in flush()
        return []

    def _refuse_body(self, out: Dispatch, reason: str) -> Reply:
        """The answer to a request whose body a NorFab worker cannot take (``reason``,
        from :func:`norfab_job.refusal`). It is not sent: it would stop the worker for
        good. The worker's slot is free again, and the core offers the request to
        another worker of the service that may take it (a DCP worker takes any body);
        with none it fails with 400 and ``reason``, the gateway's own error
        (Reply.reason), so its client gets its protocol's "bad request" (NFP 400 naming
        the reason, SADA REP 400 carrying it, DCP and MemoDB nothing). The reason is the
        body too: a SADA client's REP carries the body."""
        request = out.request
        self.counters["bodies_refused"] += 1
        client = request.reply_to
        self.malformed(
            "bodies_refused",
            f"a {client.protocol} client ({peer_label(client.address)})",
            f"request {request.id} not sent to NorFab worker {self.peer_name(out.worker.address)}: {reason}",
        )
        return Reply(
            id=request.id, status=Status.UNKNOWN, body=(reason.encode(),), worker=out.worker, reason=reason
        )

    def _abort(self, out: Abort) -> None:
        p = self._workers.get(out.worker.address)
        if p is None:
            return
        for uuid, (core_id, request) in list(p.held.items()):
            if core_id == out.request.id:
                del p.held[uuid]
                p.asked.pop(uuid, None)
                if p.dialect == "norfab":
                    message = Delete(
                        header=BROKER, client=self._client_token(request), uuid=uuid, body=(b"{}",)
                    )
                else:
                    service = p.service if request.target.any_service else request.service.name
                    message = Delete(header=BROKER, service=service, target="any", uuid=uuid, body=(b"",))
                self._send_message(out.worker.address, message, p.dialect)

    def _holders(self, core_id: int) -> list[tuple[bytes, _Peer, str, Request]]:
        """(address, worker, uuid it knows the job by, request) for each worker of this
        edge holding the job ``core_id``."""
        return [
            (address, p, uuid, request)
            for address, p in self._workers.items()
            for uuid, (held_id, request) in p.held.items()
            if held_id == core_id
        ]

    def relay_input(self, core_id: int, msg: Put) -> bool:
        """Send a NorFab client's PUT to the workers of this edge that hold its job."""
        sent = False
        for address, p, uuid, request in self._holders(core_id):
            put = Put(header=BROKER, client=self._client_token(request), uuid=uuid, body=msg.body)
            sent = self._send_message(address, put, p.dialect) or sent
        return sent

    def poll(self, core_id: int) -> bool:
        """Pass a NorFab client's GET of a running job on to the NorFab workers holding
        it, as NorFab's broker does; False when none was asked (the caller answers from
        the store). The worker answers from its own records: 300 while it runs, 102 with
        the question when it waits for the client's input (a client that was away when
        the question went out learns it so), or the result, which ends the job as any
        result does (a result lost on the way is found again so). One GET per job and
        worker at a time: a job whose GET is out is answered from the store."""
        asked = False
        for address, p, uuid, request in self._holders(core_id):
            if p.dialect == "norfab" and uuid not in p.asked:
                asked = self._ask(address, p, uuid, self._client_token(request), POLL) or asked
        return asked

    def _ask(self, address: bytes, p: _Peer, uuid: str, client: bytes, why: int) -> bool:
        sent = self._send_message(
            address, Get(header=BROKER, client=client, uuid=uuid, body=(b"{}",)), p.dialect
        )
        if sent:
            p.asked[uuid] = why
        return sent

    # ------------------------------------------------------------------ timers

    def command_later(self, command: Command) -> None:
        """Give ``command`` to the core at the next tick (from :meth:`flush`, which
        returns nothing): the next loop iteration, at once."""
        self._late.append(command)

    def tick(self, now_ms: int) -> list[Command]:
        late, self._late = self._late, []
        self.retention.expire(now_ms)  # when due
        if self._interval <= 0 or (self._next_keepalive is not None and now_ms < self._next_keepalive):
            return late
        self._next_keepalive = now_ms + self._interval
        cache: dict[tuple[str, str], list[bytes] | None] = {}
        for address, p in self._workers.items():
            key = (p.dialect, p.service)
            if key not in cache:
                cache[key] = self.encode(Keepalive(header=BROKER, service=p.service), p.dialect)
            frames = cache[key]
            if frames is not None and self.send(address, frames):
                p.beats_sent += 1
        return late

    def next_deadline(self) -> int | None:
        if self._late:
            return 0
        expiry = self.retention.next_expiry()
        if not self._workers or self._interval <= 0:
            self._next_keepalive = None
            return expiry
        # None: the first tick sets the keepalive schedule
        keepalive = 0 if self._next_keepalive is None else self._next_keepalive
        return keepalive if expiry is None else min(keepalive, expiry)

    def flush_sends(self, now_ms: int) -> None:
        # Dispatches first (the workers start while the job records are committed); a
        # worker that is gone is forgotten and the core told at the next tick, one loop
        # iteration later, which dispatches the request again.
        for address in self.send_queued():
            p = self._workers.get(address)
            if p is not None:
                self._forget_worker(address, p)
                self._late.append(Unregister(peer=self.peer(address), reason="socket gone"))

    def flush(self, now_ms: int) -> None:
        self.flush_sends(now_ms)  # anything queued since (nothing, from the gateway's loop)
        self.jobs.flush()

    def recover(self, now_ms: int) -> list[Command]:
        return self.jobs.recover()

    def drain(self, now_ms: int) -> None:
        self.send_queued()
        self.jobs.flush()
        for address, p in list(self._workers.items()):
            self._disconnect(address, p, "broker shutting down")

    def stats(self) -> dict[str, int]:
        stats = super().stats()
        stats["workers"] = len(self._workers)
        stats["peers"] = len(self._peers)
        stats["jobs_live"] = self.jobs.live
        return stats


def make(settings: EdgeSettings, *, store: JobStore) -> NfpEdge:
    """The ``nfp`` edge kind's factory (:mod:`nfgate.edges.kinds`); reads the inventory and
    checks the files root, raising :class:`ConfigError` for either."""
    options = NfpOptions.load(settings.options.get("inventory"), settings.options.get("files_root"))  # type: ignore[arg-type]
    return NfpEdge(settings, store=store, options=options)
