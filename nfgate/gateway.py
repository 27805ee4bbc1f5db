"""The gateway: one event-loop thread wiring the edges to the routing core.

design.md "Performance shape": a blocking ``zmq.Poller`` loop, no per-message timers.
Each iteration polls every edge socket (plus a wake-up fd for signals), lets each
readable edge read a bounded batch, a few messages at a time, feeds the commands to the
core, hands the outputs to the edges they address and has every edge send what it
queued after each few messages; then it fires what is due (:meth:`Router.tick`, edge
heartbeats) and lets every edge flush what it held for the batch (NFP's group commit
of job records).
The poll timeout is the earliest deadline the core or an edge reports, so an idle
gateway sleeps.

Time is the loop's clock (:class:`nfgate.loopclock.LoopClock` by default): monotonic,
less the excess of any stall (a paused process), so that on resume the heartbeats that
waited in the sockets are read before any worker or request is found expired.

Stopping (:meth:`Gateway.stop`, a signal; or MMI ``shutdown``) drains when ``drain_ms``
is not 0: the core refuses new requests from clients with 503
(:meth:`Router.close_admission`), each edge may tell its peers (:meth:`Edge.closing`),
and the loop runs on until no request is at a worker or ``drain_ms`` has passed,
whichever is first. A second signal returns at once.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence

import attrs
import zmq

from nfgate.edges import Edge, Traffic, peer_label
from nfgate.logtext import one_line
from nfgate.loopclock import STALL_MS, LoopClock, monotonic_ms
from nfgate.model import Catalog, Command, Unregister
from nfgate.routing import Router
from nfgate.routing_types import (
    LIMIT_REASONS,
    Abort,
    Accepted,
    Deliver,
    Dispatch,
    Evict,
    Output,
    WorkerChange,
)

__all__ = ["Gateway", "LogRing", "monotonic_ms"]

log = logging.getLogger("nfgate.gateway")

BATCH = 256  # messages one edge may read per iteration: keeps one busy peer from starving the rest
# Every edge sends what it queued after each SEND_EVERY messages read, not only at the end
# of the iteration: a worker freed by a reply early in a batch gets its next request
# without waiting for the rest of the batch, which matters where a worker holds one
# request at a time (DCP, NFP spec). Measured with the relay bench, pipelined, against
# sending once per iteration: nfgate-dcp +11%, nfgate-nfp +25%, nfgate-norfab +8%; sync
# the same. 4 and 16 gave less than 8 (docs/performance.md).
SEND_EVERY = 8
# Upper bound on one poll; signals also wake the loop through wake_fd. Half the loop
# clock's stall threshold (nfgate.loopclock.STALL_MS): an idle loop's poll, overshoot
# included, must never read as a stall.
MAX_SLEEP_MS = 500
PUBLISH_MS = 1000  # how often the counters are copied for the metrics thread
# A timer whose tick raised is tried again after this: its deadline stays due, and the
# loop must not spin on it (a traceback an iteration, a core's worth of CPU).
TICK_RETRY_MS = 1000


class LogRing(logging.Handler):
    """The last ``size`` log records as NorFab's JSONL records (the fields of NorFab's
    ``NorFabJsonFormatter``: ``ts``, ``level``, ``logger``, ``message``, ``pid``,
    ``processName``, ``threadName``, ``role``, ``name``, ``module``, ``function``,
    ``line``, ``filename``), for ``mmi.service.broker``'s ``get_logs``."""

    def __init__(self, size: int = 1000) -> None:
        super().__init__(logging.DEBUG)
        self.lines: deque[str] = deque(maxlen=size)

    def emit(self, record: logging.LogRecord) -> None:
        ts = datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds")
        line = {
            "ts": ts,
            "level": record.levelname,
            "logger": record.name,
            "message": one_line(record.getMessage()),  # as the log shows it; no lone surrogate for orjson
            "pid": record.process,
            "processName": record.processName,
            "threadName": record.threadName,
            "role": "broker",
            "name": "nfgate",
            "module": record.module,
            "function": record.funcName,
            "line": record.lineno,
            "filename": record.filename,
        }
        self.lines.append(json.dumps(line, ensure_ascii=False))


def _describe(change: WorkerChange) -> str:
    """The log line of a worker joining or leaving (NorFab's broker logs both at INFO)."""
    who = f"{change.peer.edge}: worker {change.name or peer_label(change.peer.address)}"
    if change.joined:
        services = ", ".join(
            s.name if s.version is None else f"{s.name} {s.version}" for s in change.services
        )
        return f"{who} registered for {services or 'no service'}"
    held = f"; {change.held} request(s) it held dispatched again or failed" if change.held else ""
    return f"{who} left: {change.reason}{held}"


class Gateway:
    """Runs ``edges`` against ``router`` until :meth:`stop` is called.

    ``wake_fd`` is a readable file descriptor that wakes the poll (``signal.set_wakeup_fd``
    writes to its other end), so a SIGTERM is acted on at once, not at the next timeout.
    ``clock``: the loop's time in ms; by default a :class:`LoopClock` with ``stall_ms``
    as its threshold (0: no stall handling, the monotonic clock as it is).
    """

    def __init__(
        self,
        router: Router,
        edges: Sequence[Edge],
        *,
        clock: Callable[[], int] | None = None,
        stall_ms: int = STALL_MS,
        wake_fd: int | None = None,
        logs: LogRing | None = None,
        drain_ms: int = 0,
    ) -> None:
        self.router = router
        self.edges = {edge.name: edge for edge in edges}
        # A test's clock is its own; the counters of a LoopClock's stalls are exported.
        self.loop_clock: LoopClock | None = None
        if clock is None:
            clock = self.loop_clock = LoopClock(stall_ms=stall_ms)
        self._clock = clock
        self._poller = zmq.Poller()
        self._by_socket: dict[zmq.Socket[bytes] | int, Edge] = {}
        for edge in edges:
            for sock in edge.sockets():
                self._poller.register(sock, zmq.POLLIN)
                self._by_socket[sock] = edge
        self._side: dict[zmq.Socket[bytes], tuple[Edge, Callable[[int], list[Command]]]] = {}
        for edge in edges:
            for sock, handler in edge.side_inputs():
                self._poller.register(sock, zmq.POLLIN)
                self._side[sock] = (edge, handler)
        # End of an iteration, in two phases: every edge's queued sends, then the commits.
        # The first phase also runs after every SEND_EVERY messages read.
        self._senders: list[tuple[Edge, Callable[[int], None]]] = [(edge, edge.flush_sends) for edge in edges]
        self._flushers: list[tuple[Edge, Callable[[int], None]]] = [
            *self._senders,
            *((edge, edge.flush) for edge in edges),
        ]
        # Edges whose input can wait where no socket announces it (MemoDB's posted receives).
        self._eager = [edge for edge in edges if type(edge).pending is not Edge.pending]
        self._wake_fd = wake_fd
        if wake_fd is not None:
            self._poller.register(wake_fd, zmq.POLLIN)
        # Set once, never cleared: a signal that arrives before run() starts still counts.
        # stop() only counts (it runs in signal handlers); the loop acts on the count.
        self._signals = 0
        self._shutdown = False  # mmi shutdown: a stop, but not a signal (a signal after it is the first)
        self._drain_ms = drain_ms
        self._drain_until: int | None = None  # set when a drain starts
        self._closers: list[Callable[[], None]] = []
        self._actions: list[tuple[str, str]] = []
        # What get_logs serves: `nfgate serve` passes one it attached before binding the
        # edges, so that the start-up lines are in it too; run() attaches it otherwise.
        self.logs = logs if logs is not None else LogRing()
        # Counters as of the last publish, for other threads (metrics): swapped, never mutated.
        self.snapshot: dict[str, dict[str, int]] = {}
        self._published: int | None = None
        # What the broker's health probes read (another thread): "starting" until run(),
        # "running", "draining" from the start of a drain, "stopped" once run() returned.
        self.state = "starting"
        self.published_at = 0.0  # time.monotonic() of the last publish: the loop is alive
        # More sections for stats() (the capture's counters), read at each publish.
        self.extra_stats: dict[str, Callable[[], dict[str, int]]] = {}
        self._held_off: dict[str, int] = {}  # timer ("core" or an edge) whose tick raised -> retry at
        self.iterations = 0  # loop iterations, exported with the core's counters
        self.internal_errors = 0

    def now(self) -> int:
        """The loop's time in ms, as the core and the edges are given it (call it from
        the loop's thread: a broker service comparing with a worker's last beat).
        Raises nothing."""
        return self._clock()

    # ------------------------------------------------------------------ running

    def stop(self) -> None:
        """Ask the loop to stop, as a signal does (safe from a signal handler): the first
        call drains (module docstring); a second one, or the first with ``drain_ms`` 0,
        makes it return after the current iteration."""
        self._signals += 1

    def _should_return(self) -> bool:
        """True when run() should return; starts the drain at the first stop."""
        if not self._signals and not self._shutdown:
            return False
        if self._signals > 1 or not self._drain_ms:
            return True
        now = self._clock()
        core = self.router.stats()
        held = core["in_flight"]
        if self._drain_until is None:
            self._begin_drain(now)
            if not held:
                return True
            log.info(
                "draining: new requests refused, waiting up to %d ms for %d request(s) at workers "
                "(a second signal stops at once)",
                self._drain_ms,
                held,
            )
            return False
        waited = now - (self._drain_until - self._drain_ms)
        left = f"; {core['queued']} queued request(s) left" if core["queued"] else ""
        if not held:
            log.info("drained in %d ms: no request left at a worker%s", waited, left)
            return True
        if now >= self._drain_until:
            log.warning("drain: %d request(s) still at workers after %d ms%s; stopping", held, waited, left)
            return True
        return False

    def _begin_drain(self, now: int) -> None:
        self.state = "draining"
        self.router.close_admission()
        self._drain_until = now + self._drain_ms
        self._published = None  # the metrics' draining gauge, at the end of the next iteration
        for edge in self.edges.values():
            try:
                edge.closing(now)
            except Exception:
                self._bug(edge, "closing")

    def on_close(self, closer: Callable[[], None]) -> None:
        """Run ``closer`` after the edges are closed (the job store)."""
        self._closers.append(closer)

    def request(self, action: object) -> None:
        """A management action from the broker's MMI service, carried out after the
        current iteration: ``shutdown``, ``restart`` (every worker is disconnected and
        re-registers) or ``disconnect`` of one named worker."""
        kind = str(getattr(action, "kind", action)).rsplit(".", 1)[-1].lower()
        self._actions.append((kind, str(getattr(action, "worker", "") or "")))

    def _act(self, now: int) -> None:
        actions, self._actions = self._actions, []
        for kind, worker in actions:
            if kind == "shutdown":
                self._shutdown = True
                continue
            for info in self.router.workers():
                # restart, and disconnect without a name, mean every worker (spec: BMMI).
                if kind == "restart" or not worker or info.name == worker:
                    evict = Evict(worker=info.peer, reason=f"mmi {kind}")
                    edge = self.edges.get(info.peer.edge)
                    self.feed([Unregister(peer=info.peer, reason=f"mmi {kind}")], now)
                    if edge is not None:
                        self.feed(edge.emit(evict, now), now)

    def recover(self) -> None:
        """Give the core what the edges had accepted before a restart (stored NFP jobs)."""
        now = self._clock()
        for edge in self.edges.values():
            self.feed(edge.recover(now), now)
        self._flush(now)

    def run(self) -> None:
        """Loop until :meth:`stop`; then every edge drains (says goodbye to its peers)."""
        root = logging.getLogger("nfgate")
        root.addHandler(self.logs)
        self.state, self.published_at = "running", time.monotonic()
        try:
            while not self._should_return():
                self.step()
            now = self._clock()
            self._abandon(now)
            for edge in self.edges.values():
                edge.drain(now)
        finally:
            self.state = "stopped"
            root.removeHandler(self.logs)

    def _abandon(self, now: int) -> None:
        """Answer the clients of requests still open, but for edges that keep theirs
        across a restart: a SADA client's REP 503 now beats its own timeout."""
        gone = [name for name, edge in self.edges.items() if not edge.keeps_requests]
        try:
            outputs = self.router.abandon(gone)
        except Exception:
            self._bug(None, "the core's abandon at exit")
            return
        if outputs:
            log.info(
                "stopping: %d open request(s) of clients that do not outlive it answered unavailable",
                len(outputs),
            )
        for output in outputs:
            edge = self._edge_for(output)
            if edge is not None:
                try:
                    edge.emit(output, now)
                except Exception:
                    self._bug(edge, "emit at exit")
        self._flush(now)

    def step(self, max_wait_ms: int = MAX_SLEEP_MS) -> None:
        """One iteration: poll, read, route, tick, flush."""
        now = self._clock()
        wait = self._wait(now, max_wait_ms)
        ready = self._poller.poll(wait)
        now = self._clock()
        read: list[Edge] = []
        if self._side:
            self._side_inputs(ready, now)
        for sock, _ in ready:
            if sock == self._wake_fd:
                self._drain_wake_fd()
                continue
            if sock in self._side:
                continue
            edge = self._by_socket[sock]
            if edge not in read:  # an edge with two sockets (MemoDB: requests, closed connections) reads once
                read.append(edge)
        quiet = not read  # no socket was ready: only eager edges can have input
        read.extend(edge for edge in self._eager if edge not in read and edge.pending())
        for edge in read:
            try:
                if self._read(edge, now):
                    quiet = False
            except Exception:
                # A bug must not take the broker down for every other peer: log it with
                # its traceback, count it, carry on.
                self._bug(edge, "handling input")
        if quiet:
            for edge in self._eager:
                edge.settle()
        self._tick(now)
        if self._actions:
            self._act(now)
        self._flush(now)
        changes = self.router.changes
        while changes:
            log.info("%s", _describe(changes.popleft()))
        if self._published is None or now - self._published >= PUBLISH_MS:
            self.snapshot, self._published = self.stats(), now
            self.published_at = time.monotonic()
        self.iterations += 1

    # ----------------------------------------------------------------- plumbing

    def _side_inputs(self, ready: Sequence[tuple[object, int]], now: int) -> None:
        """Handle the ready side inputs (connections closed) before any message of the
        iteration is read: a message from a new connection that reuses a closed one's
        file descriptor must not be taken for the old connection's."""
        for sock, _ in ready:
            side = self._side.get(sock)  # type: ignore[call-overload]
            if side is None:
                continue
            edge, handler = side
            try:
                commands = handler(now)
            except Exception:
                self._bug(edge, "handling closed connections")
                continue
            if commands:
                self.feed(commands, now)

    def _read(self, edge: Edge, now: int) -> bool:
        """Up to BATCH of ``edge``'s waiting messages, SEND_EVERY at a time, each chunk's
        commands fed to the core and every edge's queued sends sent after it. True if
        any chunk had commands."""
        for i in range(BATCH // SEND_EVERY):
            edge.drained = False
            commands = edge.receive(now, SEND_EVERY)
            if not commands:
                # Nothing left, or a chunk that asked nothing of the core: anything still
                # waiting makes the next poll return at once.
                return i > 0
            self.feed(commands, now)
            self._run(self._senders, now)
            if edge.drained:
                # The socket said so already: another receive would only meet EAGAIN
                # (an exception in pyzmq, 2.6 us) and the edge's loop around it.
                return True
        return True

    def feed(self, commands: Sequence[Command], now: int) -> None:
        """Give ``commands`` to the core and every output to its edge, until quiet."""
        pending: deque[Command] = deque(commands)
        while pending:
            command = pending.popleft()
            try:
                outputs = self.router.handle(command, now)
            except Exception:
                self._bug(None, f"the core's handling of {type(command).__name__}")
                continue
            for output in outputs:
                edge = self._edge_for(output)
                if edge is not None:
                    # One output's bug costs that output, not the others of the same
                    # chunk (other peers' requests and replies) still in this deque.
                    try:
                        if isinstance(output, Deliver) and output.reason in LIMIT_REASONS:
                            edge.limit_hit(output)
                        pending.extend(edge.emit(output, now))
                    except Exception:
                        self._bug(edge, f"emit of {type(output).__name__}")

    def _bug(self, edge: Edge | None, what: str) -> None:
        """Log a bug met in ``what`` with its traceback (call it from an ``except``
        block) and count it, on the edge too, so the metrics' ``internal_errors`` shows
        it; tests assert the count stays 0."""
        self.internal_errors += 1
        if edge is not None:
            edge.counters["internal_errors"] += 1
        log.exception("internal error in %s%s", what, f" on edge {edge.name}" if edge is not None else "")

    def _edge_for(self, output: Output) -> Edge | None:
        match output:
            case Dispatch() | Evict() | Abort():
                name = output.worker.edge
            case Deliver():
                name = output.client.edge
            case Accepted():
                name = output.request.reply_to.edge
            case Catalog():
                name = output.peer.edge
        edge = self.edges.get(name)
        if edge is None:  # a peer of an edge that is gone: cannot happen while edges are fixed, a bug
            self.internal_errors += 1
            log.error("internal error: output for unknown edge %r dropped: %s", name, type(output).__name__)
        return edge

    def _tick(self, now: int) -> None:
        # Guarded as feed() and _read() are: a bug in one timer costs that timer's work,
        # not the loop (the loop stopping would take every peer down with it), and that
        # timer is held off for TICK_RETRY_MS.
        due = self.router.next_deadline()
        if self._held_off:  # tested here, not in _due: this runs every iteration
            due = self._due("core", due)
        if due is not None and due <= now:
            try:
                outputs = self.router.tick(now)
            except Exception:
                self._bug(None, "the core's tick")
                self._held_off["core"] = now + TICK_RETRY_MS
                outputs = []
            else:
                if self._held_off:
                    self._held_off.pop("core", None)
            for output in outputs:
                edge = self._edge_for(output)
                if edge is not None:
                    try:
                        if isinstance(output, Deliver) and output.reason in LIMIT_REASONS:
                            edge.limit_hit(output)
                        commands = edge.emit(output, now)
                    except Exception:
                        self._bug(edge, f"emit of {type(output).__name__} at a tick")
                        continue
                    self.feed(commands, now)
        for name, edge in self.edges.items():
            due = edge.next_deadline()
            if self._held_off:
                due = self._due(name, due)
            if due is not None and due <= now:
                try:
                    commands = edge.tick(now)
                except Exception:
                    self._bug(edge, "tick")
                    self._held_off[name] = now + TICK_RETRY_MS
                    continue
                if self._held_off:
                    self._held_off.pop(name, None)
                self.feed(commands, now)

    def _due(self, timer: str, due: int | None) -> int | None:
        """``due``, or later while ``timer`` is held off after its tick raised."""
        if not self._held_off or due is None:
            return due
        held = self._held_off.get(timer)
        if held is None:
            return due
        if due >= held:
            del self._held_off[timer]  # past the hold: an ordinary deadline again
            return due
        return held

    def _flush(self, now: int) -> None:
        # Two phases: every edge's queued sends, then commits. An NFP job dispatched to a
        # DCP worker then starts while the NFP edge fsyncs its record, not after.
        self._run(self._flushers, now)

    def _run(self, flushers: list[tuple[Edge, Callable[[int], None]]], now: int) -> None:
        for edge, flush in flushers:
            try:
                flush(now)
            except Exception:  # as in step(): one edge's bug must not stop the others
                self._bug(edge, flush.__name__)

    def _wait(self, now: int, cap: int) -> int:
        if any(edge.pending() for edge in self._eager):
            return 0
        if self._held_off:  # a timer whose tick raised: not before its hold ends
            edges = (self._due(n, e.next_deadline()) for n, e in self.edges.items())
            core = self._due("core", self.router.next_deadline())
        else:
            edges = (e.next_deadline() for e in self.edges.values())
            core = self.router.next_deadline()
        deadlines = [d for d in edges if d is not None]
        for due in (core, self._drain_until):
            if due is not None:
                deadlines.append(due)
        if not deadlines:
            return cap
        return max(0, min(cap, min(deadlines) - now))

    def _drain_wake_fd(self) -> None:
        if self._wake_fd is not None:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                os.read(self._wake_fd, 4096)

    def close(self) -> None:
        """Close every edge, then run the closers (:meth:`on_close`: the job store, the
        capture, the metrics). One that raises does not keep the rest from running: the
        job store's last commit failing on a full disk left the capture unflushed (its
        queued records lost, its segment .partial) and the ZAP thread running. The first
        error is raised once all have run; the others are logged."""
        first: Exception | None = None
        for step in [*(edge.close for edge in self.edges.values()), *self._closers]:
            try:
                step()
            except Exception as exc:
                if first is None:
                    first = exc
                else:
                    log.exception("closing: %s failed too", getattr(step, "__qualname__", step))
        if first is not None:
            raise first

    def stats(self) -> dict[str, dict[str, int]]:
        # The loop's own bug count and iterations join the core's counters:
        # nfgate_core_internal_errors_total, nfgate_core_iterations_total.
        draining = int(self._drain_until is not None)
        out = {
            "core": {
                **self.router.stats(),
                "internal_errors": self.internal_errors,
                "iterations": self.iterations,
                "draining": draining,
                # The loop's stalls (a paused process) and the time taken out of its clock
                # for them: nfgate_core_stalls_total, nfgate_core_stalled_ms_total.
                "stalls": self.loop_clock.stalls if self.loop_clock is not None else 0,
                "stalled_ms": self.loop_clock.stalled_ms if self.loop_clock is not None else 0,
            }
        }
        for name, edge in self.edges.items():
            out[f"edge:{name}"] = edge.stats()
            out[f"traffic:{name}"] = attrs.asdict(edge.traffic())
        for name, section in self.extra_stats.items():
            out[name] = section()
        return out

    def traffic(self) -> Traffic:
        """What every edge moved on the wire, summed (NorFab's ``get_stats`` "messaging")."""
        total = Traffic()
        for edge in self.edges.values():
            total += edge.traffic()
        return total
