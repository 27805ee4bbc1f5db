"""Read-only views of the routing core's state: the service catalog and worker snapshots.

Kept apart from :mod:`nfgate.routing` because they only read its tables: they answer
management and discovery questions (DBP info, ``mmi.service.broker``) and never change
what is routed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping

from nfgate.model import Catalog, CatalogEntry, Lookup, Peer, ServiceRef
from nfgate.queues import Part, WorkerState
from nfgate.routing_types import WorkerInfo

__all__ = ["catalog", "has_server", "stats", "worker_infos"]


def stats(
    counters: Mapping[str, int], workers: Collection[WorkerState], jobs: int, queued: int
) -> dict[str, int]:
    """The core's counters plus its gauges (workers, jobs, queued, in_flight, late):
    ``in_flight`` counts the requests workers hold that the core still waits for (what
    a drain waits for); ``late``, those that timed out and still take a worker's slot."""
    return {
        **counters,
        "workers": len(workers),
        "jobs": jobs,
        "queued": queued,
        "in_flight": sum(len(w.in_flight) for w in workers),
        "late": sum(len(w.late) for w in workers),
    }


def has_server(
    part: Part, workers: Mapping[Peer, WorkerState], providers: Mapping[str, Mapping[Peer, None]]
) -> bool:
    """True when a registered worker could take the queued ``part`` once it is free:
    the worker it is bound to, or one offering its service. A part waiting for a worker
    name or for a service's first worker (target ``all``) has none. A worker the part
    avoids does not count, nor one whose every slot holds a request that timed out there
    (:attr:`WorkerState.stuck`): it may never answer, and a request must not wait for
    it as for a worker busy with a long job."""
    if part.bound is not None:
        return not workers[part.bound].stuck
    if part.name is not None or part.placeholder:
        return False
    ref = part.job.request.service
    for peer in providers.get(ref.name, ()):
        w = workers[peer]
        if w.offers(ref) and not w.stuck and not part.avoids(peer):
            return True
    return False


def worker_infos(
    workers: Iterable[WorkerState], liveness: Mapping[int, OrderedDict[Peer, int]]
) -> list[WorkerInfo]:
    """One :class:`WorkerInfo` per registered worker; ``liveness`` maps a timeout to the
    workers watched with it and the time each was last heard from."""
    return [
        WorkerInfo(
            peer=w.peer,
            name=w.name,
            services=w.services,
            in_flight=len(w.in_flight) + len(w.late),
            late=len(w.late),
            capacity=w.capacity,
            since_ms=w.since,
            timeout_ms=w.timeout,
            last_seen_ms=liveness[w.timeout].get(w.peer, w.since) if w.timeout else w.since,
        )
        for w in workers
    ]


def catalog(
    cmd: Lookup, providers: Mapping[str, Mapping[Peer, None]], workers: Mapping[Peer, WorkerState]
) -> Catalog:
    """The catalog answer to ``cmd``: one entry per (service, version) with its worker count
    and the protocols those workers speak; query ``""`` or ``"*"`` lists every service."""
    query = cmd.query
    names: Iterable[str] = sorted(providers) if query in ("", "*") else (query,)
    entries: list[CatalogEntry] = []
    for name in names:
        groups: dict[str | None, tuple[int, set[str]]] = {}
        for peer in providers.get(name, ()):
            for ref in workers[peer].services:
                if ref.name == name:
                    count, protocols = groups.get(ref.version, (0, set()))
                    protocols.add(peer.protocol)
                    groups[ref.version] = (count + 1, protocols)
        for version in sorted(groups, key=lambda x: (x is not None, x or "")):
            count, protocols = groups[version]
            entries.append(
                CatalogEntry(
                    service=ServiceRef(name=name, version=version),
                    workers=count,
                    protocols=tuple(sorted(protocols)),
                )
            )
    return Catalog(peer=cmd.peer, entries=entries)
