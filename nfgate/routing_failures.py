"""The routing core's failure side: a request losing its worker (left, timed out, its
edge could not send it), its retry, its end with the core's error, and a worker's late
answer to a request that timed out there.

:class:`FailureSide` is the base of :class:`nfgate.routing_workers.WorkerSide` and so
of :class:`nfgate.routing.Router`, which holds the state they share (declared here for
the type checker) and the request side these methods call (:meth:`Router._feed`,
:meth:`Router._place_any`, ...). Split off only to keep each module readable; there is
one core, described in docs/routing.md ("Timeouts", "Requests an edge cannot send").
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from nfgate import routing_views as views
from nfgate.model import Peer, Reply, Status, TargetKind
from nfgate.queues import Event, Job, Part, PartState, WorkerState, advance, with_field
from nfgate.routing_types import CLIENT_GAVE_UP, Deliver, Output, RouterConfig

__all__ = ["FailureSide"]


class FailureSide:
    """Requests that fail or go round again, for :class:`nfgate.routing.Router`."""

    _cfg: RouterConfig
    _seq: int
    _jobs: dict[int, Job]
    _workers: dict[Peer, WorkerState]
    _providers: dict[str, dict[Peer, None]]
    _timeouts: list[tuple[int, int, int, Part]]
    _give_ups: list[tuple[int, int, Job]]
    _stats: dict[str, int]

    if TYPE_CHECKING:  # the request and worker sides, in Router and WorkerSide

        def _feed(self, w: WorkerState, now: int, out: list[Output]) -> None: ...

        def _place_any(self, part: Part, now: int, out: list[Output], *, retry: bool) -> None: ...

        def _enqueue(self, part: Part, now: int, *, retry: bool = False) -> None: ...

        def _unqueue(self, part: Part) -> None: ...

        def _touch(self, w: WorkerState, now: int) -> None: ...

    def _arm(self, part: Part, now: int) -> None:
        """Time a retry's wait in the queue (see :meth:`_retry_waited`)."""
        self._seq += 1
        due = now + (part.job.request.timeout_ms or 0)
        heapq.heappush(self._timeouts, (due, self._seq, part.dispatch_seq, part))

    def _watch_give_up(self, job: Job, now: int) -> None:
        """Time the moment the client gives up on ``job`` (Request.give_up_ms)."""
        job.give_up_at = due = now + (job.request.give_up_ms or 0)
        self._seq += 1
        heapq.heappush(self._give_ups, (due, self._seq, job))

    def _give_ups_due(self, now: int, out: list[Output]) -> None:
        """Jobs whose client has given up by ``now``: their queued parts fail with 408
        (counted ``gave_up``). Parts at a worker are left to it: no protocol can tell a
        worker to stop, and its answer still reaches the client (NorFab keeps results
        after its client's timeout, for a later GET)."""
        heap = self._give_ups
        while heap and heap[0][0] <= now:
            job = heapq.heappop(heap)[2]
            if self._jobs.get(job.request.id) is not job:
                continue  # ended since
            queued = [part for part in job.parts if part.state is PartState.QUEUED]
            if queued:
                self._stats["gave_up"] += 1
            for part in queued:
                self._unqueue(part)
                self._finish(part, Event.EXPIRE, Status.REQUEST_TIMEOUT, CLIENT_GAVE_UP, out)

    def _next_give_up(self) -> int | None:
        """When :meth:`_give_ups_due` has something to do; ended jobs' entries dropped."""
        heap = self._give_ups
        while heap:
            due, _, job = heap[0]
            if self._jobs.get(job.request.id) is job:
                return due
            heapq.heappop(heap)
        return None

    def _finish(
        self,
        part: Part,
        event: Event,
        status: int,
        reason: str,
        out: list[Output],
        name: str = "",
        body: tuple[bytes, ...] = (),
    ) -> None:
        """End a part with an error reply from the core; ``name``: the worker that lost
        it; ``body``: what an edge that could not send it said (a SADA REP carries it)."""
        advance(part, event)
        job = part.job
        job.open -= 1
        if job.open == 0:
            del self._jobs[job.request.id]
        if event is not Event.CANCEL and event is not Event.EXPIRE:
            self._stats["failed"] += 1
        # A part waiting for a name has no worker: the name says whose part failed.
        reply = Reply(
            id=job.request.id, status=status, body=body, worker=part.bound, worker_name=part.name or name
        )
        out.append(Deliver(reply=reply, request=job.request, remaining=job.open, reason=reason))

    def _lost(
        self,
        part: Part,
        now: int,
        out: list[Output],
        status: int,
        reason: str,
        *,
        timeout: bool = False,
        name: str = "",
    ) -> None:
        """An in-flight part lost its worker (already removed from its in_flight), whose
        ``name`` an error reply carries; ``timeout``: it timed out there."""
        part.worker = None
        all_part = part.name is None and part.bound is not None
        if (
            all_part
            or (timeout and part.name is not None)
            or part.attempts > self._cfg.max_redispatch
            or part.job.given_up(now)  # its client has given up: not dispatched again
        ):
            self._finish(part, Event.FAIL, status, reason, out, name)
            return
        advance(part, Event.REQUEUE)
        part.dispatch_seq += 1  # the timer of the dispatch it lost is stale now
        if part.name is not None:
            part.bound = None
            self._enqueue(part, now)
            if part.bound is not None:
                self._feed(self._workers[part.bound], now, out)
        else:
            self._place_any(part, now, out, retry=True)
            if timeout and part.state is PartState.QUEUED:
                # No other worker free: the retry waits, but not on the worker that
                # timed out (which may never answer) past the request's own timeout.
                self._arm(part, now)

    def _timed_out(self, part: Part, w: WorkerState, now: int, out: list[Output]) -> None:
        """``part``'s timeout passed at its worker: retry it elsewhere, or fail it (504).

        The worker is not told (no protocol has a way to) and, as far as anyone knows,
        is still working on it: an NFP worker "will handle at most one request a time",
        a DBP service is synchronous, a DCP worker gets no more "until it has responded".
        So the request keeps its slot there (``late``) until the worker answers, whose
        answer is dropped, or leaves; and the retry is kept away from it meanwhile.
        """
        rid = part.job.request.id
        del w.in_flight[rid]
        w.late[rid] = part
        part.shun(w.peer)
        self._stats["timeouts"] += 1
        self._lost(part, now, out, Status.GATEWAY_TIMEOUT, "worker timed out", timeout=True, name=w.name)

    def _retry_waited(self, part: Part, now: int, out: list[Output]) -> None:
        """The retry of a timed-out request waited its timeout in the queue. With no
        worker left that may take it (only the one it timed out at, workers stuck on
        timed-out requests of their own, or none at all) it fails 504 now, not at the
        queue expiry: the worker did time out and no other could retry it. While one
        that is only busy is there, it waits on like any queued request."""
        if views.has_server(part, self._workers, self._providers):
            return
        self._unqueue(part)
        self._finish(
            part,
            Event.FAIL,
            Status.GATEWAY_TIMEOUT,
            "worker timed out, and no other worker took the retry",
            out,
        )

    def _release_late(self, peer: Peer, rid: int, part: Part) -> None:
        """``peer`` no longer holds request ``rid`` (``part``) late (it answered, or left):
        a retry may go there again, and so may the request that has that id now, if the
        retry was handed on (Forward) under it, kept away from ``peer`` until now."""
        part.unshun(peer)
        current = self._jobs.get(rid)
        if current is not None and current is not part.job:
            for p in current.parts:
                p.unshun(peer)

    def _late_answer(
        self,
        w: WorkerState,
        rid: int,
        now: int,
        out: list[Output],
        *,
        interim: bool,
        reply: Reply | None = None,
    ) -> None:
        """``w`` answers request ``rid`` after it timed out there; a final answer frees
        the slot. While the retry still waits in a queue (no other worker was free), a
        final ``reply`` is the client's answer: the retry leaves the queue rather than
        have the same work done again, maybe by this same worker (counted
        ``late_replies_relayed``). Otherwise the request was retried elsewhere or failed
        since, and the answer is dropped (``late_replies``); so is an interim one or a
        hand-on (no ``reply``)."""
        self._touch(w, now)
        if interim:
            self._stats["late_replies"] += 1
            return  # still working on it
        part = w.late.pop(rid)
        self._release_late(w.peer, rid, part)
        job = part.job
        current = self._jobs.get(rid)
        if reply is not None and not reply.reason and part.state is PartState.QUEUED and current is job:
            self._unqueue(part)
            advance(part, Event.REPLY)
            job.open -= 1
            if job.open == 0:
                del self._jobs[rid]
            self._stats["replied"] += 1
            self._stats["late_replies_relayed"] += 1
            named = reply if reply.worker_name or not w.name else with_field(reply, "worker_name", w.name)
            out.append(Deliver(reply=named, request=job.request, remaining=job.open))
        else:
            self._stats["late_replies"] += 1
        if w.capacity > w.base:
            w.capacity -= 1  # as for any reply: the slot a heartbeat granted is spent
        self._feed(w, now, out)

    def _unsendable(self, w: WorkerState, part: Part, cmd: Reply, now: int, out: list[Output]) -> None:
        """``w``'s edge could not send it ``part`` (``cmd.reason``): the worker never saw it.

        A request for any worker goes to another one of the service that may take it
        (its edge, or that worker's dialect, may carry what this one could not: a DagBox
        worker cannot take an empty data part before another, a spec DCP worker can),
        within ``max_redispatch``; otherwise it fails with the edge's status and
        reason, the gateway's own failure, which its client's edge reports as one (no DCP REPLY, no
        NorFab "worker error"). A part bound to this worker (ALL, NAMED) can go nowhere
        else and fails at once.
        """
        job = part.job
        del w.in_flight[job.request.id]
        part.worker = None
        self._stats["unsendable"] += 1
        part.shun(w.peer)  # its edge cannot send it there; it stays so if the worker comes back
        if (
            job.request.target.kind is TargetKind.ANY
            and part.attempts <= self._cfg.max_redispatch
            and not job.given_up(now)
            and views.has_server(part, self._workers, self._providers)
        ):
            advance(part, Event.REQUEUE)
            part.dispatch_seq += 1
            self._place_any(part, now, out, retry=True)
        else:
            # The edge's status: 500 (it cannot carry the request), 400 (a body no
            # worker of that kind takes: a NorFab worker's is a JSON object).
            self._finish(part, Event.FAIL, cmd.status, cmd.reason, out, w.name, cmd.body)
        self._feed(w, now, out)
