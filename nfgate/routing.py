"""The routing core: services, workers, queues, dispatch, liveness and timeouts.

Pure and deterministic: :meth:`Router.handle` takes one command and ``now_ms`` and returns
the outputs to send; :meth:`Router.tick` fires expiries; :meth:`Router.next_deadline`
says when the next one is due, so the event loop sleeps exactly that long instead of
keeping a timer per message. Behaviour, data structures and the per-message cost are
described in docs/routing.md; the request state table is ``nfgate.queues.TRANSITIONS``.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from collections.abc import Collection

import attrs

from nfgate import routing_views as views
from nfgate.errors import StateError
from nfgate.model import (
    Cancel,
    Catalog,
    ClientGone,
    Command,
    Fetch,
    Forward,
    Heartbeat,
    Lookup,
    Peer,
    Register,
    Reply,
    Request,
    Status,
    TargetKind,
    Unregister,
)
from nfgate.queues import (
    Event,
    FairQueue,
    Job,
    Part,
    PartState,
    Waitlist,
    WorkerState,
    advance,
    best_queue,
    client_parts,
    forget_in,
    mark_free,
    with_field,
)
from nfgate.routing_types import (
    CLIENT_GAVE_UP,
    COUNTERS,
    GATEWAY_QUEUE_FULL,
    QUEUE_EXPIRED,
    SERVICE_QUEUE_FULL,
    STATUS_CANCELLED,
    Abort,
    Accepted,
    Deliver,
    Dispatch,
    Output,
    RouterConfig,
    WorkerChange,
    WorkerInfo,
)
from nfgate.routing_workers import WorkerSide

__all__ = ["Router"]  # its configuration and outputs: nfgate.routing_types

# The states in which a part's timer (of its dispatch, or of a retry's wait) can fire.
_TIMED = frozenset({PartState.IN_FLIGHT, PartState.QUEUED})

# Worker changes kept for a reader that has not taken them yet: the gateway takes them
# after every iteration, which reads at most 256 messages per edge (gateway.BATCH); a
# core driven without a reader (tests, the path bench) stays bounded.
MAX_CHANGES = 4096


class Router(WorkerSide):
    """The routing core. See the module docstring for behaviour and data structures;
    the worker side (registering, liveness, leaving) is :class:`WorkerSide`, and
    requests that fail or go round again are :class:`nfgate.routing_failures.FailureSide`."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        self._cfg = config if config is not None else RouterConfig()
        self._next_id = 1
        self._seq = 0
        self._jobs: dict[int, Job] = {}
        self._workers: dict[Peer, WorkerState] = {}
        self._by_name: dict[str, Peer] = {}
        self._providers: dict[str, dict[Peer, None]] = {}
        self._free: dict[str, OrderedDict[Peer, None]] = {}
        self._queues: dict[str, dict[str | None, FairQueue]] = {}
        self._all_wait: dict[str, Waitlist] = {}
        self._named_wait: dict[str, Waitlist] = {}
        self._queued_count: dict[str, int] = {}
        self._waiting: OrderedDict[Part, int] = OrderedDict()
        self._liveness: dict[int, OrderedDict[Peer, int]] = {}
        self._timeouts: list[tuple[int, int, int, Part]] = []
        self._give_ups: list[tuple[int, int, Job]] = []  # (due, seq, job): Request.give_up_ms
        self._stats = dict.fromkeys(COUNTERS, 0)
        self._closing = False  # see close_admission()
        # Workers that joined or left, oldest first, for the operator's log: the gateway
        # pops them (popleft) after each iteration.
        self.changes: deque[WorkerChange] = deque(maxlen=MAX_CHANGES)

    # ----------------------------------------------------------------- public API

    def handle(self, command: Command, now_ms: int) -> list[Output]:
        """Apply one command from an edge; return what to send, in order.

        Raises:
            TypeError: ``command`` is not one the core takes (Catalog is an output;
                Fetch is answered by the job store, not the core).
            ValueError: a Request arrived with a non-zero id that is already in use.
        """
        out: list[Output] = []
        match command:
            case Request():
                self._request(command, now_ms, out)
            case Reply():
                self._reply(command, now_ms, out)
            case Heartbeat():
                self._heartbeat(command, now_ms, out)
            case Register():
                self._register(command, now_ms, out)
            case Unregister():
                w = self._workers.get(command.peer)
                if w is not None:
                    self._remove_worker(
                        w, now_ms, out, evict_reason=None, reason=command.reason or "unregistered"
                    )
            case Cancel():
                self._cancel(command, now_ms, out)
            case ClientGone():
                self._client_gone(command, now_ms, out)
            case Lookup():
                out.append(views.catalog(command, self._providers, self._workers))
            case Forward():
                self._forward(command, now_ms, out)
            case Catalog() | Fetch():
                raise TypeError(f"the routing core does not take {type(command).__name__}")
            case _:  # pragma: no cover - the union is exhaustive; guards against new commands
                raise TypeError(f"not a command: {command!r}")
        return out

    def tick(self, now_ms: int) -> list[Output]:
        """Act on everything due at ``now_ms``: dead workers, expired queues, timeouts."""
        out: list[Output] = []
        for timeout, seen in list(self._liveness.items()):
            while seen:
                peer, last = next(iter(seen.items()))
                if last + timeout > now_ms:
                    break
                expired = "heartbeat expired"
                self._remove_worker(self._workers[peer], now_ms, out, evict_reason=expired, reason=expired)
        expiry = self._cfg.queue_expiry_ms
        for _ in range(len(self._waiting)):  # each pass removes one or moves it to the end
            part, since = next(iter(self._waiting.items()))
            if since + expiry > now_ms:
                break
            if expiry and views.has_server(part, self._workers, self._providers):
                # A request waiting for a busy worker that offers it is not a request
                # with no worker (the expiry's case): it waits on, its clock restarted.
                self._waiting[part] = now_ms
                self._waiting.move_to_end(part)
                continue
            self._unqueue(part)
            self._stats["expired"] += 1
            self._finish(part, Event.EXPIRE, Status.REQUEST_TIMEOUT, QUEUE_EXPIRED, out)
        self._give_ups_due(now_ms, out)
        heap = self._timeouts
        while heap and heap[0][0] <= now_ms:
            _, _, dseq, part = heapq.heappop(heap)
            if part.dispatch_seq != dseq:
                continue  # dispatched again or re-queued since
            if part.state is PartState.IN_FLIGHT and part.worker is not None:
                self._timed_out(part, self._workers[part.worker], now_ms, out)
            elif part.state is PartState.QUEUED:
                self._retry_waited(part, now_ms, out)
            # else answered, failed or cancelled since
        return out

    def next_deadline(self) -> int | None:
        """The earliest ``now_ms`` at which :meth:`tick` has something to do, or None.

        Any ``handle`` or ``tick`` may move it (earlier or later), so the event loop asks
        again after each batch of commands before it sleeps.
        """
        best: int | None = None
        for timeout, seen in self._liveness.items():
            if seen:
                due = next(iter(seen.values())) + timeout
                best = due if best is None else min(best, due)
        if self._waiting:
            due = next(iter(self._waiting.values())) + self._cfg.queue_expiry_ms
            best = due if best is None else min(best, due)
        heap = self._timeouts
        while heap:
            due, _, dseq, part = heap[0]
            if part.dispatch_seq == dseq and part.state in _TIMED:
                best = due if best is None else min(best, due)
                break
            heapq.heappop(heap)  # stale: drop it now so it does not wake the loop
        given = self._next_give_up() if self._give_ups else None
        if given is not None:
            best = given if best is None else min(best, given)
        return best

    def close_admission(self) -> None:
        """The gateway is draining: from now on a client's new request is refused with
        503 ("gateway shutting down", counted as ``rejected``), so the requests already
        taken can finish. A request a worker sends (DCP chaining, a worker's own request)
        is still taken: the work in flight may need it."""
        self._closing = True

    def abandon(self, edges: Collection[str]) -> list[Output]:
        """The gateway stops with requests still open: end those whose client is on one
        of ``edges`` with 503 "gateway stopped", so their clients are answered now (a
        SADA client's REP 503; DCP and MemoDB have no error reply) instead of waiting out
        their own timeouts. Edges whose requests outlive a restart (NFP's stored jobs)
        are not named. A queued part leaves its queue; a part at a worker is no longer
        its (no Abort: the worker's edge is closing too) and its answer, if it comes, is
        dropped."""
        out: list[Output] = []
        for job in list(self._jobs.values()):
            if job.request.reply_to.edge not in edges:
                continue
            for part in job.parts:
                if part.state is PartState.QUEUED:
                    self._unqueue(part)
                elif part.state is PartState.IN_FLIGHT and part.worker is not None:
                    del self._workers[part.worker].in_flight[job.request.id]
                    part.worker = None
                else:
                    continue
                self._finish(part, Event.FAIL, Status.UNAVAILABLE, "gateway stopped", out)
        return out

    def stats(self) -> dict[str, int]:
        """Counters since start, plus gauges (workers, jobs, queued, in_flight)."""
        return views.stats(self._stats, self._workers.values(), len(self._jobs), len(self._waiting))

    # ------------------------------------------------------------------ requests

    def _request(
        self,
        cmd: Request,
        now: int,
        out: list[Output],
        *,
        chained: bool = False,
        avoid: set[Peer] | None = None,
    ) -> None:
        """Take a request; ``chained``: handed on by the worker that held it (Forward);
        ``avoid``: workers an ANY request must not go to (Part.avoid)."""
        if cmd.reply_to in self._workers:  # a worker forwarding a request is alive too
            self._touch(self._workers[cmd.reply_to], now)
            chained = True
        chained = chained or cmd.from_worker
        if cmd.id == 0:
            req = with_field(cmd, "id", self._next_id)
            self._next_id += 1
        else:
            # An edge restoring a stored job after a restart keeps its id.
            if cmd.id in self._jobs:
                raise ValueError(f"request id {cmd.id} is already in use")
            req = cmd
            self._next_id = max(self._next_id, cmd.id + 1)
        name = req.service.name
        full = ""
        if self._closing and not chained:
            full = "gateway shutting down"
        elif self._queued_count.get(name, 0) >= self._cfg.max_queue_per_service:
            full = SERVICE_QUEUE_FULL
        elif len(self._waiting) >= self._cfg.max_queued and not self._free.get(name):
            full = GATEWAY_QUEUE_FULL  # a request a free worker takes at once still goes
        elif req.give_up_ms == 0:
            full = CLIENT_GAVE_UP  # a stored job whose timeout passed while the gateway was down
        if full:
            gave_up = full is CLIENT_GAVE_UP
            self._stats["gave_up" if gave_up else "rejected"] += 1
            reply = Reply(id=req.id, status=Status.REQUEST_TIMEOUT if gave_up else Status.UNAVAILABLE)
            out.append(Deliver(reply=reply, request=req, remaining=0, reason=full))
            return
        job = Job(req)
        self._jobs[req.id] = job
        if req.give_up_ms is not None:
            self._watch_give_up(job, now)
        self._stats["accepted"] += 1
        at = len(out)
        kind = req.target.kind
        if kind is TargetKind.ANY:
            self._add_part(job, Part(job))
            part = job.parts[0]
            if avoid:
                # Queued with the retries, the only entries a worker's turn looks past
                # when they avoid it (FairQueue.peek); in line from now, like any new one.
                part.avoid = avoid
                self._seq += 1
                part.seq = self._seq
            self._place_any(part, now, out, retry=avoid is not None)
        elif kind is TargetKind.ALL:
            if not self._fan_out(job, now, out):
                self._add_part(job, Part(job, placeholder=True))
                self._enqueue(job.parts[0], now)
        else:
            touched: dict[Peer, None] = {}
            for wname in dict.fromkeys(req.target.names):
                part = Part(job, name=wname)
                self._add_part(job, part)
                self._enqueue(part, now)
                if part.bound is not None:
                    touched[part.bound] = None
            for peer in touched:
                self._feed(self._workers[peer], now, out)
        if req.acknowledge:
            workers = tuple(p.bound or p.worker for p in job.parts if p.bound or p.worker)
            out.insert(at, Accepted(request=req, workers=tuple(p for p in workers if p is not None)))

    @staticmethod
    def _add_part(job: Job, part: Part) -> None:
        job.parts.append(part)
        job.open += 1

    def _fan_out(self, job: Job, now: int, out: list[Output]) -> bool:
        """Bind one part of an ALL job to each matching worker; False if there is none."""
        ref = job.request.service
        peers = [p for p in self._providers.get(ref.name, ()) if self._workers[p].offers(ref)]
        for peer in peers:
            part = Part(job, bound=peer)
            self._add_part(job, part)
            self._enqueue(part, now)
        for peer in peers:
            self._feed(self._workers[peer], now, out)
        return bool(peers)

    def _place_any(self, part: Part, now: int, out: list[Output], *, retry: bool) -> None:
        ref = part.job.request.service
        free = self._free.get(ref.name)
        if free:
            avoid = part.avoid
            for peer in free:
                if avoid is not None and peer in avoid:
                    continue  # still working on this request, or its edge cannot send it
                w = self._workers[peer]
                if w.offers(ref):
                    self._dispatch(part, w, now, out)
                    mark_free(self._free, w, used=True)
                    return
        self._enqueue(part, now, retry=retry)

    def _enqueue(self, part: Part, now: int, *, retry: bool = False) -> None:
        """Index a QUEUED part for expiry and put it where a worker will find it."""
        self._waiting[part] = now
        name = part.job.request.service.name
        self._queued_count[name] = self._queued_count.get(name, 0) + 1
        self._place(part, retry=retry)

    def _place(self, part: Part, *, retry: bool = False) -> None:
        """Put a QUEUED part in the one waitlist or queue where a worker will look for it."""
        if not retry:
            # A retry keeps its first place in line, so it beats everything queued since.
            self._seq += 1
            part.seq = self._seq
        ref = part.job.request.service
        if part.placeholder:
            self._all_wait.setdefault(ref.name, Waitlist()).push(part)
        elif part.bound is not None:
            self._workers[part.bound].backlog.push(part)
        elif part.name is not None:
            peer = self._by_name.get(part.name)
            if peer is not None and self._workers[peer].takes_named(part.job.request):
                part.bound = peer
                self._workers[peer].backlog.push(part)
            else:
                self._named_wait.setdefault(part.name, Waitlist()).push(part)
        else:
            # get, not setdefault: setdefault would build a FairQueue (a deque and an
            # OrderedDict) for every queued request, to throw it away when the queue exists.
            queues = self._queues.get(ref.name)
            if queues is None:
                queues = self._queues[ref.name] = {}
            queue = queues.get(ref.version)
            if queue is None:
                queue = queues[ref.version] = FairQueue()
            if retry:
                queue.push_retry(part)
            else:
                queue.push(part)

    def _unqueue(self, part: Part) -> None:
        """Take a QUEUED part out of every index (its deque entry is left, dead)."""
        del self._waiting[part]
        ref = part.job.request.service
        self._uncount(ref.name)
        if part.placeholder:
            forget_in(self._all_wait, ref.name)
        elif part.bound is not None:
            self._workers[part.bound].backlog.forget()
        elif part.name is not None:
            forget_in(self._named_wait, part.name)
        else:
            queues = self._queues[ref.name]
            queues[ref.version].forget()
            self._prune_queue(ref.name, ref.version)

    def _uncount(self, name: str) -> None:
        left = self._queued_count[name] - 1
        if left:
            self._queued_count[name] = left
        else:
            del self._queued_count[name]

    def _prune_queue(self, name: str, version: str | None) -> None:
        queues = self._queues[name]
        if not queues[version].live:
            del queues[version]
            if not queues:
                del self._queues[name]

    def _dispatch(self, part: Part, w: WorkerState, now: int, out: list[Output]) -> None:
        if self._waiting.pop(part, None) is not None:
            self._uncount(part.job.request.service.name)
        advance(part, Event.DISPATCH)
        req = part.job.request
        part.worker = w.peer
        part.attempts += 1
        part.dispatch_seq += 1
        w.in_flight[req.id] = part
        self._stats["dispatched"] += 1
        if part.attempts > 1:
            self._stats["redispatched"] += 1
        if req.timeout_ms:
            part.due = due = now + req.timeout_ms
            self._seq += 1
            heapq.heappush(self._timeouts, (due, self._seq, part.dispatch_seq, part))
        out.append(Dispatch(worker=w.peer, request=req, attempt=part.attempts))

    def _feed(self, w: WorkerState, now: int, out: list[Output]) -> None:
        """Give a worker work while it has free slots, oldest waiting part first.

        Its backlog (parts bound to it) and the service queues it can serve compete by
        queueing order, so a stream of ALL requests cannot starve ANY ones, nor the reverse.
        """
        used = False
        while w.free:
            bound = w.backlog.peek()
            shared = best_queue(self._queues, w)
            if shared is not None and (bound is None or shared[0] < bound.seq):
                part = self._pop_queue(shared[1], shared[2], w.peer)
            elif bound is not None:
                part = bound
                w.backlog.pop()
            else:
                break
            self._dispatch(part, w, now, out)
            used = True
        mark_free(self._free, w, used=used)

    def _pop_queue(self, name: str, version: str | None, peer: Peer) -> Part:
        part = self._queues[name][version].pop(peer)
        if part is None:  # pragma: no cover - best_queue just saw a live head
            raise StateError("core", f"queue {name}/{version} emptied under us")
        self._prune_queue(name, version)
        return part

    # ------------------------------------------------------------------- replies

    def _reply(self, cmd: Reply, now: int, out: list[Output]) -> None:
        w = self._workers.get(cmd.worker) if cmd.worker is not None else None
        part = w.in_flight.get(cmd.id) if w is not None else None
        if w is None or part is None:
            if w is not None and cmd.id in w.late:
                self._late_answer(w, cmd.id, now, out, interim=cmd.interim, reply=cmd)
                return
            # Not given to this worker, or already answered: drop it.
            self._stats["unknown_replies"] += 1
            return
        self._touch(w, now)
        if cmd.reason:
            self._unsendable(w, part, cmd, now, out)
            return
        job = part.job
        reply = cmd if cmd.worker_name or not w.name else with_field(cmd, "worker_name", w.name)
        if cmd.interim:
            advance(part, Event.PROGRESS)
            self._stats["progress"] += 1
            out.append(Deliver(reply=reply, request=job.request, remaining=job.open))
            return
        advance(part, Event.REPLY)
        del w.in_flight[cmd.id]
        part.worker = None
        job.open -= 1
        if job.open == 0:
            del self._jobs[job.request.id]
        self._stats["replied"] += 1
        out.append(Deliver(reply=reply, request=job.request, remaining=job.open))
        if w.capacity > w.base:
            w.capacity -= 1  # the slot a heartbeat granted is spent
        self._feed(w, now, out)

    def _forward(self, cmd: Forward, now: int, out: list[Output]) -> None:
        w = self._workers.get(cmd.worker)
        part = w.in_flight.get(cmd.id) if w is not None else None
        if w is None or part is None:
            if w is not None and cmd.id in w.late:
                # Handed on after it timed out here: the retry serves the client, and
                # this is the worker's late answer.
                self._late_answer(w, cmd.id, now, out, interim=False)
                return
            self._stats["unknown_forwards"] += 1
            return
        self._touch(w, now)
        del w.in_flight[cmd.id]
        part.worker = None
        if w.capacity > w.base:
            w.capacity -= 1
        if part.job.request.target.kind is not TargetKind.ANY:
            # One part of an ALL or NAMED request cannot move on whole: it fails, so its
            # client is answered rather than left waiting on a worker that let it go.
            self._stats["unforwardable"] += 1
            self._finish(part, Event.FAIL, Status.ERROR, "handed on, but its target is not any", out)
            self._feed(w, now, out)
            return
        self._stats["forwarded"] += 1
        advance(part, Event.REPLY)  # it leaves this worker as if answered
        del self._jobs[cmd.id]
        moved = attrs.evolve(part.job.request, service=cmd.service, metadata=cmd.metadata, body=cmd.body)
        # Workers that still hold this id as a late request (it timed out there before
        # the retry was handed on here) must not get it under the same id: their late
        # answer would be taken for the new one's. They avoid it until they answer
        # (_late_answer unshuns the job that now has the id).
        late = {p for p in part.avoid or () if p in self._workers and cmd.id in self._workers[p].late}
        at = len(out)
        self._request(
            moved, now, out, chained=True, avoid=set(late) or None
        )  # same id, client and origin: the reply finds its way home
        if at < len(out) and isinstance(out[at], Accepted):
            del out[at]  # the client was told about this request already
        self._feed(w, now, out)

    def worker_name(self, peer: Peer) -> str:
        """The name ``peer`` registered with ("" if it is not a registered worker)."""
        w = self._workers.get(peer)
        return w.name if w is not None else ""

    def workers(self) -> list[WorkerInfo]:
        """A snapshot of the registered workers (for the broker's management services)."""
        return views.worker_infos(self._workers.values(), self._liveness)

    def _cancel(self, cmd: Cancel, now: int, out: list[Output]) -> None:
        job = self._jobs.get(int(cmd.job_id)) if cmd.job_id.isdecimal() else None
        if job is None:
            self._stats["unknown_cancels"] += 1
            return
        self._stats["cancelled"] += 1
        self._cancel_parts(job.parts, "cancelled", now, out)

    def _client_gone(self, cmd: ClientGone, now: int, out: list[Output]) -> None:
        """Every request of a client that can never be answered is cancelled (each job
        counted in ``cancelled``); found through the indexes, not by a walk of all jobs."""
        waits = (*self._named_wait.values(), *self._all_wait.values())
        parts = client_parts(cmd.peer, self._queues, self._workers.values(), waits)
        self._stats["cancelled"] += len({id(part.job) for part in parts})
        self._cancel_parts(parts, "client gone", now, out)

    def _cancel_parts(self, parts: list[Part], reason: str, now: int, out: list[Output]) -> None:
        freed: dict[WorkerState, None] = {}
        for part in parts:
            rid = part.job.request.id
            if part.state is PartState.QUEUED:
                self._unqueue(part)
            elif part.state is PartState.IN_FLIGHT and part.worker is not None:
                w = self._workers[part.worker]
                del w.in_flight[rid]
                if w.peer.protocol in self._cfg.cancel_keeps_slot:
                    # Nothing tells the worker, which works on: the slot stays taken until
                    # it answers (its answer is dropped) or leaves, as after a timeout.
                    # No Abort either: its edge keeps the request, so the answer reaches us.
                    w.late[rid] = part
                    part.worker = None
                else:
                    out.append(Abort(worker=w.peer, request=part.job.request))
                    freed[w] = None
            else:
                continue
            self._finish(part, Event.CANCEL, STATUS_CANCELLED, reason, out)
        for w in freed:
            self._feed(w, now, out)
