"""Bookkeeping records of the routing core: jobs, parts, their state table, fair queues.

Split out of :mod:`nfgate.routing` to keep each file readable; nothing here is public API
and nothing here does I/O or reads a clock. The records are plain ``__slots__`` classes,
not attrs: they are mutated on every message and hashed by identity (a part is a key of
the core's expiry index), so value equality would be wrong as well as slower.

A **job** is one accepted :class:`~nfgate.model.Request`. It is split into **parts**,
one per reply the client should get:

- target ANY: one part, served by whichever worker is free;
- target ALL: one part per worker of the service registered at acceptance, each *bound*
  to its worker (while no worker is registered, a single placeholder part waits and is
  *split* into bound parts when the first worker arrives);
- target NAMED: one part per distinct name, each waiting for (and then bound to) the
  worker that registered under that name.

Every part ends in exactly one terminal state, and the core emits exactly one terminal
``Deliver`` for it; that is the invariant the property test checks.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable
from typing import Final, TypeVar

from nfgate.errors import StateError
from nfgate.model import Peer, Register, Request, ServiceRef
from nfgate.tables import StateEnum

__all__ = [
    "TERMINAL",
    "TRANSITIONS",
    "Event",
    "FairQueue",
    "Job",
    "Part",
    "PartState",
    "Waitlist",
    "advance",
    "any_service_for",
    "best_queue",
    "client_parts",
    "forget_in",
    "mark_free",
    "unindex",
    "with_field",
]

T = TypeVar("T")


def with_field(inst: T, name: str, value: object) -> T:
    """``attrs.evolve(inst, **{name: value})`` for a frozen, slotted attrs command the
    core already holds (so already validated), where the core itself vouches for
    ``value`` (a fresh request id, the worker's registered name).

    ``attrs.evolve`` re-runs every converter and validator of the class: two of them
    per relayed request were a tenth of the core's time (measured with cProfile). This
    copies the slots instead, which yields the same object.
    """
    cls = type(inst)
    new = object.__new__(cls)
    for field in cls.__attrs_attrs__:  # type: ignore[attr-defined]  # every field, inherited too
        object.__setattr__(new, field.name, getattr(inst, field.name))
    object.__setattr__(new, name, value)
    return new


class PartState(StateEnum):
    QUEUED = "queued"  # waiting for a worker (service queue, worker backlog or named wait)
    IN_FLIGHT = "in_flight"  # a worker holds it
    DONE = "done"  # the worker replied (terminal)
    FAILED = "failed"  # the core answered with an error status (terminal)
    CANCELLED = "cancelled"  # the client cancelled it (terminal)
    SPLIT = "split"  # an ALL placeholder replaced by bound parts (terminal, no Deliver)


class Event(StateEnum):
    DISPATCH = "dispatch"  # given to a worker
    PROGRESS = "progress"  # the worker sent a 1xx reply: relayed, the part stays in flight
    REPLY = "reply"  # the worker sent its final reply (in time, or late while the retry waited)
    REQUEUE = "requeue"  # lost, timed out or unsendable at its worker, and a retry is allowed
    FAIL = "fail"  # lost/timed out with no retry left, or the bound worker is gone
    EXPIRE = "expire"  # queued longer than the queue expiry
    CANCEL = "cancel"  # Cancel from a client
    SPLIT = "split"  # an ALL placeholder met its first worker


TRANSITIONS: Final[dict[tuple[PartState, Event], PartState]] = {
    (PartState.QUEUED, Event.DISPATCH): PartState.IN_FLIGHT,
    (PartState.QUEUED, Event.EXPIRE): PartState.FAILED,
    (PartState.QUEUED, Event.CANCEL): PartState.CANCELLED,
    (PartState.QUEUED, Event.SPLIT): PartState.SPLIT,
    # A part bound to a worker (ALL) that leaves before taking it has nowhere else to go.
    (PartState.QUEUED, Event.FAIL): PartState.FAILED,
    # The late answer of the worker it timed out at, while its retry still waited.
    (PartState.QUEUED, Event.REPLY): PartState.DONE,
    (PartState.IN_FLIGHT, Event.PROGRESS): PartState.IN_FLIGHT,
    (PartState.IN_FLIGHT, Event.REPLY): PartState.DONE,
    (PartState.IN_FLIGHT, Event.REQUEUE): PartState.QUEUED,
    (PartState.IN_FLIGHT, Event.FAIL): PartState.FAILED,
    (PartState.IN_FLIGHT, Event.CANCEL): PartState.CANCELLED,
}
"""The life of a part: ``{(state, event): next_state}``; anything else is a core bug."""

TERMINAL: Final = frozenset({PartState.DONE, PartState.FAILED, PartState.CANCELLED, PartState.SPLIT})


class Job:
    """One accepted request: its parts and how many of them are still open."""

    __slots__ = ("give_up_at", "open", "parts", "request")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.parts: list[Part] = []
        self.open = 0  # parts not yet terminal (SPLIT placeholders excluded once split)
        self.give_up_at: int | None = None  # now_ms + request.give_up_ms when taken

    def given_up(self, now: int) -> bool:
        """Whether the client has given up on this job by ``now`` (Request.give_up_ms)."""
        return self.give_up_at is not None and now >= self.give_up_at


class Part:
    """One expected reply of a job; see the module docstring for how jobs split."""

    __slots__ = (
        "attempts",
        "avoid",
        "bound",
        "dispatch_seq",
        "due",
        "job",
        "name",
        "placeholder",
        "seq",
        "state",
        "worker",
    )

    def __init__(
        self, job: Job, *, bound: Peer | None = None, name: str | None = None, placeholder: bool = False
    ) -> None:
        self.job = job
        self.state = PartState.QUEUED
        self.bound = bound  # ALL: the only worker this part may go to
        self.name = name  # NAMED: the worker name this part waits for
        self.placeholder = placeholder  # ALL with no worker yet: split on the first one
        self.worker: Peer | None = None  # who holds it while IN_FLIGHT
        self.attempts = 0  # dispatches so far
        # Bumped on every dispatch and every requeue, so a timer armed for an earlier
        # dispatch (or an earlier wait for a retry) is recognised as stale without
        # removing it from the heap.
        self.dispatch_seq = 0
        self.due = 0  # now_ms + timeout_ms of its last dispatch (0: no timeout)
        # Workers this part must not go to: one still working on it after it timed out
        # there (until it answers or leaves), one whose edge could not send it. None
        # while there is none, which is nearly always: the dispatch path tests only that.
        self.avoid: set[Peer] | None = None
        self.seq = 0  # order of (re)queueing, to pick the oldest head among several queues

    def avoids(self, peer: Peer | None) -> bool:
        """True if this part must not be given to ``peer`` (see ``avoid``)."""
        return self.avoid is not None and peer in self.avoid

    def shun(self, peer: Peer) -> None:
        """Keep this part away from ``peer`` until :meth:`unshun`."""
        if self.avoid is None:
            self.avoid = {peer}
        else:
            self.avoid.add(peer)

    def unshun(self, peer: Peer) -> None:
        if self.avoid is not None:
            self.avoid.discard(peer)
            if not self.avoid:
                self.avoid = None


def advance(part: Part, event: Event) -> PartState:
    """Move ``part`` through :data:`TRANSITIONS` and return its new state.

    Raises:
        StateError: the transition is not in the table (an internal inconsistency of
            the core, never caused by peer input, which is filtered before this point).
    """
    try:
        nxt = TRANSITIONS[part.state, event]
    except KeyError:
        raise StateError(
            "core", f"request {part.job.request.id}: no transition {part.state.value} --{event.value}-->"
        ) from None
    part.state = nxt
    return nxt


# Forgotten parts a queue may hold beyond its live ones before it is compacted.
COMPACT_SLACK: Final = 64


def _queued(parts: deque[Part]) -> deque[Part]:
    return deque(p for p in parts if p.state is PartState.QUEUED)


class FairQueue:
    """Queued ANY parts of one service (name and version), fair across clients.

    ``retry`` holds parts to try again (their worker was lost, timed out, or could not
    be sent them): they were already first in line once, so they go before everything
    else, but for a worker a retry avoids, which takes the next one. Other parts wait in one FIFO per client, and the
    clients take turns (round-robin): a client with 100 queued requests delays another
    client's single request by at most one dispatch.

    Removal is lazy: an expired or cancelled part stays in its deque, no longer QUEUED,
    and is skipped when reached; ``live`` counts the parts really waiting so emptiness
    is O(1) and the deques are dropped as soon as nothing live is left. A queue that
    is never empty (a service with no worker, its requests expiring while new ones
    come) is compacted instead, once more parts have left it than are live.
    """

    __slots__ = ("clients", "forgotten", "live", "retry")

    def __init__(self) -> None:
        self.retry: deque[Part] = deque()
        self.clients: OrderedDict[Peer, deque[Part]] = OrderedDict()
        self.live = 0
        self.forgotten = 0  # forget() calls since the last compaction

    def push(self, part: Part) -> None:
        client = part.job.request.reply_to
        fifo = self.clients.get(client)
        if fifo is None:
            fifo = self.clients[client] = deque()
        fifo.append(part)
        self.live += 1

    def push_retry(self, part: Part) -> None:
        self.retry.append(part)
        self.live += 1

    def forget(self) -> None:
        """One of the live parts left the queue by other means (expired, cancelled)."""
        self.live -= 1
        if self.live == 0:
            self.retry.clear()
            self.clients.clear()
            self.forgotten = 0
            return
        self.forgotten += 1
        if self.forgotten > self.live + COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        # Drops what peek() would skip: only parts no longer QUEUED (the one being
        # forgotten now is still QUEUED, its state changed by the caller after; it goes
        # at the next compaction). Every COMPACT_SLACK + live forgets: O(1) amortized.
        self.forgotten = 0
        self.retry = _queued(self.retry)
        for client, fifo in list(self.clients.items()):
            kept = _queued(fifo)
            if kept:
                self.clients[client] = kept  # an existing key keeps its turn
            else:
                del self.clients[client]

    def of_client(self, client: Peer) -> list[Part]:
        """The live parts of ``client``: its own FIFO, and any retries of its requests.
        They stay where they are: the caller ends them and tells :meth:`forget`."""
        fifo = self.clients.get(client, ())
        parts = [p for p in fifo if p.state is PartState.QUEUED]
        if self.retry:
            parts += [p for p in self.retry if p.state is PartState.QUEUED and _of(p, client)]
        return parts

    def peek(self, peer: Peer | None = None) -> Part | None:
        """The part :meth:`pop` would return, dropping dead entries on the way;
        ``peer``: the worker asking, which skips the retries that avoid it."""
        retry = self.retry
        while retry:
            head = retry[0]
            if head.state is not PartState.QUEUED:
                retry.popleft()
                continue
            if head.avoid is None or peer not in head.avoid:
                return head
            # Only a retry can avoid a worker (it timed out there, or could not be sent
            # there): look past it, or that worker would take nothing else of this queue.
            for part in retry:
                if part.state is PartState.QUEUED and not part.avoids(peer):
                    return part
            break
        while self.clients:
            client, fifo = next(iter(self.clients.items()))
            while fifo and fifo[0].state is not PartState.QUEUED:
                fifo.popleft()
            if fifo:
                return fifo[0]
            del self.clients[client]
        return None

    def pop(self, peer: Peer | None = None) -> Part | None:
        """Take the next part (a retry if any, else the head of the next client's FIFO)
        that may go to ``peer``."""
        part = self.peek(peer)
        if part is None:
            return None
        retry = self.retry
        if retry and retry[0] is part:
            retry.popleft()
        elif retry and part in retry:
            retry.remove(part)  # a retry behind one avoiding this worker: a short deque
        else:
            client = part.job.request.reply_to
            fifo = self.clients[client]
            fifo.popleft()
            if fifo:
                self.clients.move_to_end(client)  # its turn is over
            else:
                del self.clients[client]
        self.live -= 1
        if self.live == 0:
            self.retry.clear()
            self.clients.clear()
        return part


class Waitlist:
    """A FIFO of parts with lazy removal, like :class:`FairQueue` without the fairness.

    Used for a worker's backlog (parts bound to it), for parts waiting for a named
    worker, and for ALL placeholders waiting for a first worker.
    """

    __slots__ = ("forgotten", "items", "live")

    def __init__(self) -> None:
        self.items: deque[Part] = deque()
        self.live = 0
        self.forgotten = 0  # forget() calls since the last compaction

    def push(self, part: Part) -> None:
        self.items.append(part)
        self.live += 1

    def forget(self) -> None:
        """One of the live parts left by other means (expired, cancelled, failed)."""
        self.live -= 1
        if self.live == 0:
            self.items.clear()
            self.forgotten = 0
            return
        self.forgotten += 1
        if self.forgotten > self.live + COMPACT_SLACK:  # as FairQueue.forget
            self.forgotten = 0
            self.items = _queued(self.items)

    def pop(self) -> Part | None:
        """The oldest part still QUEUED, or None."""
        while self.live:
            part = self.items.popleft()
            if part.state is PartState.QUEUED:
                self.live -= 1
                if self.live == 0:
                    self.items.clear()
                return part
        return None

    def peek(self) -> Part | None:
        """The part :meth:`pop` would return, dropping dead entries on the way."""
        items = self.items
        while self.live:
            if items[0].state is PartState.QUEUED:
                return items[0]
            items.popleft()
        return None

    def take_all(self) -> list[Part]:
        """Every live part, oldest first; the list is left empty."""
        parts = [p for p in self.items if p.state is PartState.QUEUED]
        self.items.clear()
        self.live = 0
        return parts


class WorkerState:
    """The core's record of one registered worker: what it offers, its slots and what it holds."""

    __slots__ = (
        "backlog",
        "base",
        "capacity",
        "in_flight",
        "late",
        "name",
        "name_lasts",
        "names",
        "peer",
        "services",
        "since",
        "timeout",
    )

    def __init__(self, reg: Register, timeout: int, since: int = 0) -> None:
        self.since = since  # now_ms at registration
        self.peer = reg.peer
        self.name = reg.name
        self.name_lasts = reg.name_lasts
        self.services: tuple[ServiceRef, ...] = ()
        self.names: tuple[str, ...] = ()
        self.base = self.capacity = 0  # as registered; capacity adds slots granted by heartbeats
        self.reoffer(reg)
        self.in_flight: dict[int, Part] = {}  # one part per job at most: keyed by job id
        # Parts that timed out here, by job id. The worker is still working on them (a
        # NFP worker "handles at most one request a time", DBP is synchronous): each keeps
        # its slot taken until the worker answers (the answer is dropped) or leaves.
        self.late: dict[int, Part] = {}
        self.backlog = Waitlist()
        self.timeout = timeout

    def offers(self, ref: ServiceRef) -> bool:
        return any(ref.matches(s) for s in self.services)

    def takes_named(self, request: Request) -> bool:
        """True if a part of ``request`` naming this worker may be bound to it: it
        offers the service, or the target says any service (:func:`any_service_for`)."""
        return any_service_for(request, self.peer) or self.offers(request.service)

    def keeps_its_work(self, reg: Register) -> bool:
        """True if ``reg`` (a new READY or INTR of this worker) keeps its name and still
        offers every request it is working on, with none bound to it waiting."""
        return (
            reg.name == self.name
            and not self.backlog.live
            and all(
                any_service_for(part.job.request, self.peer)
                or any(part.job.request.service.matches(s) for s in reg.services)
                for part in self.in_flight.values()
            )
        )

    def reoffer(self, reg: Register) -> None:
        """Take the services and capacity of ``reg``; what it holds stays."""
        self.services = reg.services
        self.names = tuple(dict.fromkeys(s.name for s in reg.services))
        self.base = self.capacity = reg.capacity

    def offers_version(self, name: str, version: str | None) -> bool:
        # ServiceRef.matches without building a ServiceRef on the dispatch path.
        return any(
            s.name == name and (version is None or s.version is None or s.version == version)
            for s in self.services
        )

    @property
    def free(self) -> bool:
        return self.capacity > len(self.in_flight) + len(self.late)

    @property
    def stuck(self) -> bool:
        """True when every slot is taken by a request that timed out here: the worker
        may never answer, so nothing waits for it as for a busy worker."""
        return bool(self.late) and self.capacity <= len(self.late)


# --------------------------------------------------------------- the core's indexes
# Functions over the indexes nfgate.routing.Router keeps (its queues by service and
# version, its free and provider sets by service name), so that module reads as the
# requests' flow. Each takes the dicts it changes.

Queues = dict[str, dict[str | None, FairQueue]]
PeerSets = dict[str, OrderedDict[Peer, None]]


def any_service_for(request: Request, worker: Peer) -> bool:
    """True when ``request`` (a NAMED target with ``any_service``) may go to the named
    ``worker`` whatever services it offers: only a worker of the client's own protocol.
    NorFab's broker looks a name up among all its workers, where a task name means the
    same to every worker; a worker of another protocol would take the job as a request
    for its own service, so it must offer the job's service like any named worker."""
    return request.target.any_service and worker.protocol == request.reply_to.protocol


def best_queue(queues: Queues, w: WorkerState) -> tuple[int, str, str | None] | None:
    """(head seq, name, version) of the queue ``w`` serves whose head waited longest."""
    best: tuple[int, str, str | None] | None = None
    for name in w.names:
        by_version = queues.get(name)
        if not by_version:
            continue
        for version, queue in by_version.items():
            if not w.offers_version(name, version):
                continue
            head = queue.peek(w.peer)
            if head is not None and (best is None or head.seq < best[0]):
                best = (head.seq, name, version)
    return best


def mark_free(free_sets: PeerSets, w: WorkerState, *, used: bool) -> None:
    """Keep ``w`` in the free sets iff it has a free slot; ``used`` sends it to the back."""
    peer = w.peer
    if w.free:
        for name in w.names:
            free = free_sets.get(name)
            if free is None:
                free = free_sets[name] = OrderedDict()
            if used or peer not in free:
                free[peer] = None
                free.move_to_end(peer)
    else:
        for name in w.names:
            free = free_sets.get(name)
            if free is not None and free.pop(peer, 0) is None and not free:
                del free_sets[name]


def unindex(providers: dict[str, dict[Peer, None]], free_sets: PeerSets, w: WorkerState) -> None:
    """Take ``w`` out of the providers and free sets of the services it offers."""
    for name in w.names:
        offering = providers[name]
        del offering[w.peer]
        if not offering:
            del providers[name]
        free = free_sets.get(name)
        if free is not None and free.pop(w.peer, 0) is None and not free:
            del free_sets[name]


def _of(part: Part, client: Peer) -> bool:
    asker = part.job.request.reply_to
    return asker.address == client.address and asker == client  # bytes first: no attrs __eq__ call


def client_parts(
    client: Peer, queues: Queues, workers: Iterable[WorkerState], waits: Iterable[Waitlist]
) -> list[Part]:
    """Every open part of ``client``'s requests: queued (a service queue, a worker's
    backlog, one of ``waits``: a wait for a name or for a first worker) or in flight.
    Its parts in a service queue are found through its own FIFO there, so the cost is
    the number of queues, of parts in flight, of retries and of parts waiting outside
    the service queues: not the number of requests queued by other clients."""
    found: dict[Part, None] = {}  # a part is in one place; the dict only keeps the order
    for by_version in queues.values():
        for queue in by_version.values():
            found.update(dict.fromkeys(queue.of_client(client)))
    lists = list(waits)
    for w in workers:
        found.update(dict.fromkeys(p for p in w.in_flight.values() if _of(p, client)))
        if w.backlog.live:
            lists.append(w.backlog)
    for wl in lists:
        found.update(dict.fromkeys(p for p in wl.items if p.state is PartState.QUEUED and _of(p, client)))
    return list(found)


def forget_in(lists: dict[str, Waitlist], key: str) -> None:
    """Drop one dead entry of the waitlist at ``key``, and the waitlist once it is empty."""
    wl = lists[key]
    wl.forget()
    if not wl.live:
        del lists[key]
