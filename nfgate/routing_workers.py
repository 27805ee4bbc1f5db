"""The routing core's worker side: registering, heartbeats and liveness, and a worker
leaving with the requests it held.

:class:`WorkerSide` is the base of :class:`nfgate.routing.Router`, which holds the
state both share (declared here for the type checker) and the request side these
methods call (:meth:`Router._feed`, :meth:`Router._place`, ...). Split off only to keep
each module readable; there is one core, described in docs/routing.md.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING

import attrs

from nfgate.model import Heartbeat, Peer, Register, Status
from nfgate.queues import (
    Event,
    FairQueue,
    Job,
    Part,
    Waitlist,
    WorkerState,
    advance,
    unindex,
)
from nfgate.routing_failures import FailureSide
from nfgate.routing_types import Evict, Output, WorkerChange

__all__ = ["WorkerSide"]


class WorkerSide(FailureSide):
    """Worker registration, liveness and removal for :class:`nfgate.routing.Router`
    (the state it shares with the failure side is declared there)."""

    _by_name: dict[str, Peer]
    _free: dict[str, OrderedDict[Peer, None]]
    _queues: dict[str, dict[str | None, FairQueue]]
    _all_wait: dict[str, Waitlist]
    _named_wait: dict[str, Waitlist]
    _waiting: OrderedDict[Part, int]
    _liveness: dict[int, OrderedDict[Peer, int]]
    changes: deque[WorkerChange]

    if TYPE_CHECKING:  # the request side, in Router

        def _place(self, part: Part, *, retry: bool = False) -> None: ...

        def _fan_out(self, job: Job, now: int, out: list[Output]) -> bool: ...

        def _uncount(self, name: str) -> None: ...

    def _touch(self, w: WorkerState, now: int) -> None:
        if w.timeout:
            seen = self._liveness[w.timeout]
            seen[w.peer] = now
            seen.move_to_end(w.peer)

    def _heartbeat(self, cmd: Heartbeat, now: int, out: list[Output]) -> None:
        w = self._workers.get(cmd.peer)
        if w is None:
            self._stats["unknown_heartbeats"] += 1
            return
        self._touch(w, now)
        if (
            not w.free
            and cmd.peer.protocol in self._cfg.heartbeat_grants_slot
            and w.capacity < self._cfg.max_in_flight_per_worker
        ):
            w.capacity = len(w.in_flight) + len(w.late) + 1
            self._feed(w, now, out)

    def _register(self, cmd: Register, now: int, out: list[Output]) -> None:
        if cmd.capacity > self._cfg.max_in_flight_per_worker:
            # The cap is the gateway's, whatever a worker or its edge asks for (a NorFab
            # worker's norfab_worker_capacity, a SADA server's server_capacity).
            cmd = attrs.evolve(cmd, capacity=self._cfg.max_in_flight_per_worker)
        w = self._workers.get(cmd.peer)
        if w is not None:
            if w.services == cmd.services and w.name == cmd.name:
                # A repeated READY: only the capacity may have changed.
                w.base = w.capacity = cmd.capacity
                self._touch(w, now)
                self._feed(w, now, out)
                return
            if w.keeps_its_work(cmd):
                # New services, still offering what it is working on (a SADA server's INTR
                # "after any change"): the same worker, its requests left with it.
                unindex(self._providers, self._free, w)
                w.reoffer(cmd)
            else:
                reason = "registered again, as another worker"
                self._remove_worker(w, now, out, evict_reason=None, reason=reason)
                w = None
        if w is None:
            w = WorkerState(cmd, self._cfg.timeout_for(cmd.peer), since=now)
            self._workers[w.peer] = w
            self._stats["workers_registered"] += 1
        self.changes.append(WorkerChange(peer=w.peer, name=w.name, services=w.services, joined=True))
        for name in w.names:
            self._providers.setdefault(name, {})[w.peer] = None
        if w.timeout:
            self._liveness.setdefault(w.timeout, OrderedDict())
        self._touch(w, now)
        if w.name:
            self._by_name[w.name] = w.peer
            waiting = self._named_wait.pop(w.name, None)
            for part in waiting.take_all() if waiting is not None else ():
                self._place(part)  # binds it to w when w offers its service; keeps its queueing time
        for name in w.names:
            placeholders = self._all_wait.pop(name, None)
            for part in placeholders.take_all() if placeholders is not None else ():
                if w.offers(part.job.request.service):
                    self._split(part, now, out)
                else:
                    self._all_wait.setdefault(name, Waitlist()).push(part)
        self._feed(w, now, out)

    def _split(self, placeholder: Part, now: int, out: list[Output]) -> None:
        del self._waiting[placeholder]
        self._uncount(placeholder.job.request.service.name)
        advance(placeholder, Event.SPLIT)
        placeholder.job.open -= 1
        self._fan_out(placeholder.job, now, out)

    def _remove_worker(
        self, w: WorkerState, now: int, out: list[Output], *, evict_reason: str | None, reason: str
    ) -> None:
        peer = w.peer
        del self._workers[peer]
        self._stats["workers_lost"] += 1
        held = len(w.in_flight) + w.backlog.live
        self.changes.append(
            WorkerChange(peer=peer, name=w.name, services=w.services, joined=False, reason=reason, held=held)
        )
        if w.timeout:
            self._liveness[w.timeout].pop(peer, None)
        unindex(self._providers, self._free, w)
        if w.name and self._by_name.get(w.name) == peer:
            del self._by_name[w.name]
        if evict_reason is not None:
            self._stats["evicted"] += 1
            out.append(Evict(worker=peer, reason=evict_reason))
        rebound: dict[Peer, None] = {}
        for part in w.backlog.take_all():
            self._name_bound(part, w)
            if part.name is not None:
                part.bound = None
                self._place(part)  # back to waiting for its name, same queueing time
                if part.bound is not None:  # another worker registered under that name
                    rebound[part.bound] = None
            else:
                self._waiting.pop(part)
                self._uncount(part.job.request.service.name)
                self._finish(part, Event.FAIL, Status.ERROR, "worker left", out, w.name)
        for rid, part in w.late.items():
            self._release_late(peer, rid, part)  # one that comes back under this peer forgot it
        w.late.clear()
        parts = list(w.in_flight.values())
        w.in_flight.clear()
        for part in parts:
            self._name_bound(part, w)
            if part.due and part.due <= now:
                # Its deadline passed as the worker went (e.g. a MemoDB worker is dropped at
                # its JOB's timeout, which is the request's own): it timed out, whichever of
                # the two the gateway saw first, and its client gets the timeout's answer.
                self._stats["timeouts"] += 1
                self._lost(
                    part, now, out, Status.GATEWAY_TIMEOUT, "worker timed out", timeout=True, name=w.name
                )
            else:
                self._lost(part, now, out, Status.ERROR, "worker lost", name=w.name)
        for other in rebound:
            self._feed(self._workers[other], now, out)

    @staticmethod
    def _name_bound(part: Part, w: WorkerState) -> None:
        """An ALL part bound to ``w``, which is leaving, waits for ``w``'s name from now on,
        as a NAMED part does: the client was told that worker serves it, and a worker that
        comes back under its name (restarted, reconnected, MMI ``restart``) still does. A
        worker with no name, or one its connection made up (``Register.name_lasts``), has
        nothing to wait for: its part fails."""
        if part.name is None and part.bound == w.peer and w.name and w.name_lasts:
            part.name = w.name
