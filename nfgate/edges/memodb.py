"""The MemoDB broker edge (specs/memodb.md), spec and bcdb dialects per peer.

Wiring only: NNG rep0 transport (:mod:`nfgate.transports.nng`, one context per held
request) + ``nfgate.codecs.memodb`` + the worker table in
``nfgate.codecs.memodb.session``. Decisions (docs/protocols/memodb.md, "The broker
edge"):

- A READY gets a new 4-byte worker ID (bcdb's form, valid in the spec too) and its
  request is *held*: answered with a JOB when the core gives the worker one, or with
  HEARTBEAT after the heartbeat interval (10 s by default, bcdb's). The worker answers
  HEARTBEAT with HEARTBEAT, which the core counts as liveness; a worker silent for
  ``interval * liveness`` is dropped by the core.
- A JOB carries its timeout to the core (``Request.timeout_ms``; 0 means none). A JOB
  sent to a MemoDB worker carries the request's timeout, or ``job_timeout_ms`` when the
  client's protocol has none. A worker still without RESULT at that deadline "has
  disconnected" (the spec: "the broker assumes that the worker has disconnected"): the
  edge unregisters it, and its later messages get DISCONNECT. The request is the core's
  to settle: when the deadline is the request's own timeout, the core has timed it out
  at the same moment (a worker lost past its request's deadline counts as that timeout),
  so it is retried on another worker or fails 504 like any timed-out request; with
  ``job_timeout_ms`` it is re-dispatched as for any worker lost. While it works, the
  edge keeps it alive in the core (one ``Heartbeat`` per interval): a job may last minutes.
- A request the edge cannot encode as a JOB is not sent: the core gets a ``Reply``
  whose ``reason`` says why (not the worker's answer) and tries another worker or fails it.
- RESULT with the disconnecting flag: the result is relayed, the worker unregistered
  and answered DISCONNECT. RESULT or HEARTBEAT with an unknown ID: DISCONNECT.
- Simple clients: the RESULT goes back on the context that asked. A request the core
  fails gets **no reply** (the spec: the client times out and retries): the context is
  dropped and counted (``client_errors_unsent``).
- Undecodable input is counted (``undecodable``), logged at DEBUG and left unanswered.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import cast

from nfgate.codecs._base import Message
from nfgate.codecs.memodb import codec as wire
from nfgate.codecs.memodb.messages import Disconnect, Job, Ready, Result
from nfgate.codecs.memodb.messages import Heartbeat as MemoHeartbeat
from nfgate.codecs.memodb.session import Action, WorkerState, dialect_of, input_of, step
from nfgate.edges import BeatCounts, Edge, EdgeSettings, WireCounts, WorkerAccess
from nfgate.edges.kinds import default_heartbeat
from nfgate.edges.memodb_options import check_memodb
from nfgate.edges.memodb_peers import MemodbClient, MemodbWorker
from nfgate.errors import ConfigError, DecodeError, EncodeError, TransportError
from nfgate.model import Cancel, Command, Heartbeat, Peer, Register, Reply, Request, Status, Unregister
from nfgate.routing_types import Abort, Accepted, Deliver, Dispatch, Evict, Output
from nfgate.store import JobStore
from nfgate.transports.nng import RepEndpoint, server_tls

__all__ = ["MemodbEdge", "make"]

log = logging.getLogger("nfgate.edge.memodb")

# The transport's counters in the edge's stats.
_TRANSPORT_COUNTERS = ("received", "received_posted", "refused", "dropped", "orphaned", "send_failed", "held")
_QUIET_MAX = 4  # quiet loop iterations before posted receives are withdrawn
_POST_MAX = 64  # receives kept posted at most (transports/nng.py, RepEndpoint.post)
_BURST = 8  # requests read in one loop iteration that make posting receives worth it
_ID_SPACE = 2**32  # bcdb: "typedef uint32_t WorkerID", sent as 4 raw bytes


class MemodbEdge(Edge):
    """Raises :class:`nfgate.errors.TransportError` when it cannot bind, and
    :class:`ConfigError` naming the key for TLS settings that cannot work."""

    protocol = "memodb"
    EVENTS = (
        *Edge.EVENTS,
        "bad_job",
        "client_errors_unsent",
        "job_conflicts",
        "clients_gone",
        "job_timeouts",
        "late_replies",
        "peer_limit",
        "services_ignored",
        "stale_results",
        "superseded",
        "unencodable",
        "unexpected",
        "unexpected_output",
        "unknown_workers",
        "workers_gone",
        "workers_left",
    )

    def __init__(self, settings: EdgeSettings) -> None:
        super().__init__(settings)
        opts = settings.options
        heartbeat = cast(tuple[int, int], opts.get("heartbeat", default_heartbeat("memodb")))
        self.interval = heartbeat[0]  # 0: idle workers are never sent HEARTBEAT
        self.job_timeout_ms = int(opts.get("job_timeout_ms", 300_000))  # type: ignore[call-overload]
        cert, ca = opts.get("tls_cert_key_file"), opts.get("tls_ca_file")
        tls = None
        # The config loader checked this already; an edge built without it (tests) too.
        check_memodb(opts, (settings.url,), f"edges.{settings.protocol}")
        # Config errors name the key with its section, as the config loader's do.
        cert_key, ca_key = (f"edges.{settings.protocol}.{k}" for k in ("tls_cert_key_file", "tls_ca_file"))
        if cert is not None:
            try:
                tls = server_tls(cert, ca, keys=(cert_key, ca_key))  # type: ignore[arg-type]
            except TransportError as exc:  # a file that does not load: the config's mistake
                raise ConfigError(f"config: {exc}") from None
            if not settings.url.startswith("tls+"):
                # Not an error: one table may serve a tls+tcp:// bind and a local ipc://
                # one. But a certificate beside a plain bind is most often a bind that
                # was meant to be tls+tcp://.
                log.warning(
                    "%s edge: tls_cert_key_file is set but %s is not tls+tcp://: its traffic is not encrypted",
                    settings.name,
                    settings.url,
                )
        # A CA file makes a TLS bind require a client certificate signed by it.
        self._client_certs = tls is not None and ca is not None and settings.url.startswith("tls+")
        self.transport = RepEndpoint(
            settings.url,
            max_contexts=int(opts.get("max_contexts", 4096)),  # type: ignore[call-overload]
            max_message_bytes=settings.limits.max_message_bytes,
            send_timeout_ms=int(opts.get("send_timeout_ms", 30_000)),  # type: ignore[call-overload]
            tls=tls,
        )
        self._workers: dict[bytes, MemodbWorker] = {}
        self._idle: OrderedDict[bytes, int] = OrderedDict()  # held long-polls: id -> since
        self._busy: OrderedDict[bytes, int] = OrderedDict()  # working: id -> last keep-alive
        self._deadlines: list[tuple[int, int, bytes, int]] = []  # (due, seq, worker id, core id)
        self._seq = 0
        self._clients: dict[int, MemodbClient] = {}  # transport key of a client's JOB -> its record
        self._client_pipes: dict[int, set[int]] = {}  # connection -> keys of its clients' JOBs
        self._per_peer = int(opts.get("max_contexts_per_peer", 1024))  # type: ignore[call-overload]
        self._worker_pipes: dict[int, set[bytes]] = {}  # connection -> IDs of its workers
        self._next_id = int.from_bytes(os.urandom(4), "big")  # a restarted broker knows no old ID
        self._reap_at: int | None = None
        self._quiet = 0
        self._taken = 0  # requests read in this loop iteration (a burst: post receives)

    @property
    def endpoint(self) -> str:
        return self.transport.endpoint

    def sockets(self) -> tuple[int, int]:
        return (self.transport.fd, self.transport.event_fd)

    def wires(self) -> Sequence[WireCounts]:
        return (self.transport,)

    # ------------------------------------------------------------------ input

    def pending(self) -> bool:
        return self.transport.pending

    def settle(self) -> None:
        # A request taken by a posted receive wakes no poll: withdraw them once the loop
        # has been quiet for a few iterations, and NNG's fd announces requests again.
        if self.transport.posted:
            self._quiet += 1
            if self._quiet >= _QUIET_MAX:
                self._quiet = 0
                self.transport.unpost()

    def receive(self, now_ms: int, budget: int) -> list[Command]:
        out: list[Command] = []
        recv = self.transport.recv
        for _ in range(budget):
            got = recv()
            if got is None:
                # Empty now; but while receives are posted, NNG's threads complete more
                # all the time, and reading on costs no system call.
                self.drained = not self.transport.posted
                break
            self._taken += 1
            key, pipe, data = got
            try:
                message = wire.decode([data], "spec")
            except DecodeError as exc:
                self.bad_input(self._client(pipe, key), "undecodable", exc.reason)
                self.transport.drop(key)
                continue
            try:
                self._on_message(key, pipe, message, now_ms, out)
            except Exception:
                self.internal_error(b"%d" % pipe)
        if self._taken >= _BURST:
            # A burst: NNG's threads take the rest of it (transports/nng.py, "Posted receives").
            self.transport.post(_POST_MAX)
        for pipe in self.transport.closed_pipes():
            self._pipe_gone(pipe, out)
        return out

    def _pipe_gone(self, pipe: int, out: list[Command]) -> None:
        """A connection closed: its workers are gone (their jobs go elsewhere) and its
        clients' jobs are cancelled (a req0 that reconnects sends its request again)."""
        for wid in self._worker_pipes.pop(pipe, ()):
            worker = self._workers.get(wid)
            if worker is not None:
                self.counters["workers_gone"] += 1
                self._forget(worker)
                out.append(Unregister(peer=worker.peer, reason="connection closed"))
        for key in self._client_pipes.pop(pipe, ()):
            client = self._clients.pop(key, None)
            if client is not None:
                self.counters["clients_gone"] += 1
                self.transport.drop(key)
                if client.core_id:
                    out.append(Cancel(peer=self._client(pipe, key), job_id=str(client.core_id)))

    def _client(self, pipe: int, key: int) -> Peer:
        return Peer(
            edge=self.name,
            protocol=self.protocol,
            address=pipe.to_bytes(4, "big"),
            sub=key.to_bytes(8, "big"),
        )

    def _on_message(self, key: int, pipe: int, message: Message, now: int, out: list[Command]) -> None:
        worker = None
        if not isinstance(message, Ready | Job):
            worker = self._workers.get(message.id)  # type: ignore[attr-defined]
        state = worker.state if worker is not None else WorkerState.NONE
        if worker is not None and worker.pipe != pipe:  # its req0 reconnected
            self._move(worker, pipe)
        _, action = step(state, input_of(message))
        match action, message:
            case Action.SUBMIT, Job():
                self._submit(key, pipe, message, out)
            case Action.REGISTER, Ready():
                self._register(key, pipe, message, now, out)
            case Action.DISCONNECT, _:
                self.counters["unknown_workers"] += 1
                self._answer(key, Disconnect(id=message.id), "spec")  # type: ignore[attr-defined]
            case Action.HOLD, _ if worker is not None:
                worker.beats_heard += 1
                if worker.ctx is not None:  # the worker's req0 resent: the new request replaces it
                    self.counters["superseded"] += 1
                    self.transport.drop(worker.ctx)
                    worker.ctx = None
                out.append(Heartbeat(peer=worker.peer))
                self._hold(worker, key, now, out)
            case Action.RESULT | Action.RESULT_LEAVE, Result() if worker is not None:
                job, worker.job = worker.job, None
                self._busy.pop(worker.id, None)
                if job is not None:
                    out.append(
                        Reply(
                            id=job,
                            status=Status.OK,
                            body=(message.payload,),
                            worker=worker.peer,
                            worker_name=worker.name,
                        )
                    )
                if action is Action.RESULT:
                    self._hold(worker, key, now, out)
                else:
                    self._leave(worker, key, "RESULT with the disconnecting flag", out)
            case Action.STALE_RESULT, _ if worker is not None:
                self.counters["stale_results"] += 1
                out.append(Heartbeat(peer=worker.peer))
                self._hold(worker, key, now, out)
            case Action.LEAVE, _ if worker is not None:
                self._leave(worker, key, f"{message.TYPE} while {worker.state.value}", out)
            case _:  # pragma: no cover - every (state, input) of a decoded message is in the table
                self.bad_input(self._client(pipe, key), "unexpected", message.TYPE)
                self.transport.drop(key)

    def _submit(self, key: int, pipe: int, job: Job, out: list[Command]) -> None:
        if not job.service:
            self.bad_input(self._client(pipe, key), "bad_job", "empty service name")
            self.transport.drop(key)
            return
        client = self._client(pipe, key)
        if len(self._client_pipes.get(pipe, ())) >= self._per_peer:
            # As a request beyond max_contexts: dropped unanswered, the client resends.
            self.bad_input(client, "peer_limit", f"{self._per_peer} JOBs held for this connection")
            self.transport.drop(key)
            return
        self._clients[key] = MemodbClient(job.id, dialect_of(job), pipe)
        self._client_pipes.setdefault(pipe, set()).add(key)
        out.append(
            Request(
                service=self.service(job.service),
                body=(job.payload,),
                timeout_ms=job.timeout_ms or None,  # 0: no timeout
                reply_to=client,
                origin=client.sub,
            )
        )

    def _register(self, key: int, pipe: int, ready: Ready, now: int, out: list[Command]) -> None:
        wid = self._new_id()
        worker = MemodbWorker(wid, self.peer(wid), f"{self.name}-{wid.hex()}", dialect_of(ready), pipe)
        self._workers[wid] = worker
        self._worker_pipes.setdefault(pipe, set()).add(wid)
        # ServiceRef needs a name: empty names (the spec dialect lets them through) and
        # repeats are left out rather than refusing the worker.
        names = [name for name in dict.fromkeys(ready.services) if name]
        if len(names) != len(ready.services):
            self.counters["services_ignored"] += len(ready.services) - len(names)
        services = tuple(self.service(name) for name in names)
        # The name is this registration's id: a worker that comes back gets another.
        out.append(
            Register(peer=worker.peer, services=services, capacity=1, name=worker.name, name_lasts=False)
        )
        self._hold(worker, key, now, out)

    def _new_id(self) -> bytes:
        for _ in range(len(self._workers) + 1):
            wid = self._next_id.to_bytes(4, "big")
            self._next_id = (self._next_id + 1) % _ID_SPACE
            if wid not in self._workers:
                return wid
        raise RuntimeError("no free worker ID")  # pragma: no cover - 2**32 workers

    def _hold(self, worker: MemodbWorker, key: int, now: int, out: list[Command]) -> None:
        """Keep the worker's request until a job comes or the interval passes."""
        worker.ctx = key
        worker.state = WorkerState.IDLE
        pending, worker.pending = worker.pending, None
        if pending is not None:
            refused = self._send_job(worker, pending, now)
            if not refused:
                return
            out.extend(refused)  # not sent: the request is still held, for the next job
        self._idle[worker.id] = now
        self._idle.move_to_end(worker.id)

    def _leave(self, worker: MemodbWorker, key: int, reason: str, out: list[Command]) -> None:
        self.counters["workers_left"] += 1
        self._forget(worker)
        out.append(Unregister(peer=worker.peer, reason=reason))
        self._answer(key, Disconnect(id=worker.id), worker.dialect)

    def _move(self, worker: MemodbWorker, pipe: int) -> None:
        self._unindex(worker)
        worker.pipe = pipe
        self._worker_pipes.setdefault(pipe, set()).add(worker.id)

    def _unindex(self, worker: MemodbWorker) -> None:
        ids = self._worker_pipes.get(worker.pipe)
        if ids is not None:
            ids.discard(worker.id)
            if not ids:
                del self._worker_pipes[worker.pipe]

    def _forget(self, worker: MemodbWorker) -> None:
        self._workers.pop(worker.id, None)
        self._unindex(worker)
        self._idle.pop(worker.id, None)
        self._busy.pop(worker.id, None)
        if worker.ctx is not None:
            self.transport.drop(worker.ctx)
            worker.ctx = None
        worker.state = WorkerState.NONE

    def _answer(self, key: int, message: Message, dialect: str) -> bool:
        try:
            [data] = wire.encode(message, dialect)
        except EncodeError:
            [data] = wire.encode(message, "spec")  # e.g. DISCONNECT echoing a 3-byte ID
        return self.transport.send(key, data)

    # ----------------------------------------------------------------- output

    def emit(self, output: Output, now_ms: int) -> list[Command]:
        if isinstance(output, Dispatch):
            return self._dispatch(output, now_ms)
        if isinstance(output, Deliver):
            self._deliver(output)
        elif isinstance(output, Evict):
            worker = self._workers.get(output.worker.address)
            if worker is not None:
                if worker.ctx is not None:  # still polling: tell it to start again
                    self._answer(worker.ctx, Disconnect(id=worker.id), worker.dialect)
                    worker.ctx = None
                self._forget(worker)
        elif isinstance(output, Abort):
            # MemoDB cannot cancel a JOB: the worker finishes it and its RESULT is dropped.
            worker = self._workers.get(output.worker.address)
            if worker is not None:
                if worker.job == output.request.id:
                    worker.aborted = True
                if worker.pending is not None and worker.pending.id == output.request.id:
                    worker.pending = None
        elif isinstance(output, Accepted):
            client = self._clients.get(int.from_bytes(output.request.origin, "big"))
            if client is not None:
                client.core_id = output.request.id
        else:
            self.counters["unexpected_output"] += 1
        return []

    def _dispatch(self, out: Dispatch, now: int) -> list[Command]:
        worker = self._workers.get(out.worker.address)
        if worker is None:  # the core has a worker this edge forgot: reconcile
            return [Unregister(peer=out.worker, reason="unknown to the MemoDB edge")]
        _, action = step(worker.state, "job")
        if action is Action.SEND_JOB:
            return self._send_job(worker, out.request, now)
        if worker.pending is None and (
            action is Action.QUEUE_JOB or (action is Action.CONFLICT and worker.aborted)
        ):
            worker.pending = out.request
            return []
        # A job for a worker still holding one its client did not cancel. The core keeps
        # a timed-out job's slot taken until the worker answers or is dropped (at the
        # JOB's deadline, in tick), so this is the core and the edge out of step: forget
        # the worker (its next message gets DISCONNECT) and let the core re-dispatch.
        self.counters["job_conflicts"] += 1
        self._forget(worker)
        return [Unregister(peer=worker.peer, reason="given a job while working on another")]

    def _send_job(self, worker: MemodbWorker, request: Request, now: int) -> list[Command]:
        timeout = request.timeout_ms or self.job_timeout_ms
        key = worker.ctx
        try:
            job = Job(
                id=worker.id, service=request.service.name, timeout_ms=timeout, payload=b"".join(request.body)
            )
            [data] = wire.encode(job, worker.dialect)
        except (EncodeError, ValueError) as exc:
            # e.g. a service name with lone surrogates (a DCP name that is not UTF-8). The
            # worker never sees it: the reason makes it the gateway's failure, not the
            # worker's answer (the core tries a worker of another protocol, else 500).
            self.counters["unencodable"] += 1
            log.debug("%s: cannot send request %d: %s", self.name, request.id, exc)
            reason = f"cannot be sent to a MemoDB worker as a JOB: {getattr(exc, 'reason', exc)}"
            return [Reply(id=request.id, status=Status.ERROR, worker=worker.peer, reason=reason)]
        if key is None:  # pragma: no cover - SEND_JOB only for a held request
            worker.pending = request
            return []
        self.transport.send(key, data)
        self._idle.pop(worker.id, None)
        worker.ctx = None
        worker.state, _ = step(worker.state, "job")
        worker.job = request.id
        worker.aborted = False
        self._busy[worker.id] = now
        self._busy.move_to_end(worker.id)
        self._seq += 1
        heapq.heappush(self._deadlines, (now + timeout, self._seq, worker.id, request.id))
        return []

    def _deliver(self, out: Deliver) -> None:
        reply = out.reply
        if reply.interim:
            return  # one RESULT per JOB: NorFab's 201/EVENT are not for MemoDB clients
        key = int.from_bytes(out.request.origin, "big")
        client = self._clients.pop(key, None)
        if client is None:  # its connection closed meanwhile
            self.counters["late_replies"] += 1
            return
        keys = self._client_pipes.get(client.pipe)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._client_pipes[client.pipe]
        if out.reason or reply.status >= 300:
            # The spec's simple client gets no error: "it will drop the connection; the
            # client should eventually time out and retry the request".
            self.counters["client_errors_unsent"] += 1
            log.debug(
                "%s: request %d failed (%d %s); no reply", self.name, reply.id, reply.status, out.reason
            )
            self.transport.drop(key)
            return
        if not self._answer(key, Result(id=client.echo, payload=b"".join(reply.body)), client.dialect):
            self.counters["unroutable"] += 1

    # ----------------------------------------------------------------- timers

    def beat_record(self, address: bytes) -> BeatCounts | None:
        return self._workers.get(address)

    def tick(self, now_ms: int) -> list[Command]:
        out: list[Command] = []
        interval = self.interval
        if interval:
            idle = self._idle
            while idle:
                wid, since = next(iter(idle.items()))
                if since + interval > now_ms:
                    break
                del idle[wid]
                idler = self._workers[wid]
                if idler.ctx is not None:
                    # No job within the interval: "a HEARTBEAT if no jobs are found".
                    if self._answer(idler.ctx, MemoHeartbeat(id=wid), idler.dialect):
                        idler.beats_sent += 1
                    idler.ctx = None
                idler.state, _ = step(idler.state, "idle")
            busy = self._busy
            while busy:
                wid, seen = next(iter(busy.items()))
                if seen + interval > now_ms:
                    break
                busy[wid] = now_ms
                busy.move_to_end(wid)
                # A job may take minutes: the worker is alive until its timeout says otherwise.
                out.append(Heartbeat(peer=self._workers[wid].peer))
        heap = self._deadlines
        while heap and heap[0][0] <= now_ms:
            _, _, wid, job = heapq.heappop(heap)
            worker = self._workers.get(wid)
            if worker is None or worker.job != job or worker.state is not WorkerState.BUSY:
                continue  # answered since, or the worker is gone
            # "The broker assumes that the worker has disconnected": dropped. The core has
            # timed the request out already if this deadline is the request's own.
            step(worker.state, "timeout")  # BUSY -> NONE, Action.EXPIRE
            self.counters["job_timeouts"] += 1
            self._forget(worker)
            out.append(Unregister(peer=worker.peer, reason="job timed out"))
        return out

    def next_deadline(self) -> int | None:
        dues: list[int] = []
        if self.interval:
            if self._idle:
                dues.append(next(iter(self._idle.values())) + self.interval)
            if self._busy:
                dues.append(next(iter(self._busy.values())) + self.interval)
        heap = self._deadlines
        while heap:
            due, _, wid, job = heap[0]
            worker = self._workers.get(wid)
            if worker is not None and worker.job == job:
                dues.append(due)
                break
            heapq.heappop(heap)  # stale: drop it so it does not wake the loop
        if self._reap_at is not None:
            dues.append(self._reap_at)
        return min(dues) if dues else None

    def flush(self, now_ms: int) -> None:
        if self._taken:
            self._taken = self._quiet = 0
        if self.transport.reap():
            wait = self.transport.retry_after_ms()
            self._reap_at = now_ms + (wait or 1)
        else:
            self._reap_at = None

    def drain(self, now_ms: int) -> None:
        for worker in list(self._workers.values()):
            if worker.ctx is not None:  # workers start again with READY at the next broker
                self._answer(worker.ctx, Disconnect(id=worker.id), worker.dialect)
                worker.ctx = None

    def close(self) -> None:
        self.transport.close()

    def stats(self) -> dict[str, int]:
        stats = dict(self.counters)
        for name in _TRANSPORT_COUNTERS:
            stats[name] = getattr(self.transport, name)
        stats["workers"] = len(self._workers)
        return stats

    def worker_access(self) -> WorkerAccess:
        # A CA file makes TLS binds require a client certificate signed by it.
        return "checked" if self._client_certs else "any"


def make(settings: EdgeSettings, *, store: JobStore) -> MemodbEdge:
    """The ``memodb`` edge kind's factory (:mod:`nfgate.edges.kinds`); MemoDB keeps no job
    records (the spec: no persistence). Raises :class:`nfgate.errors.TransportError` or
    :class:`ConfigError` (TLS settings)."""
    return MemodbEdge(settings)
