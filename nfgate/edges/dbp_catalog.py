"""The DBP catalog's answers: the routing core's service registry merged with the
last-value cache of DBP registrations.

The core knows every service any worker offers, whatever its protocol (a DCP or MemoDB
worker's ``echo`` too); the cache knows what DBP services registered, including those
that have gone (spec: "Information that is not available should be responded with by an
inactive warning"). Decisions (docs/protocols/dbp.md, "The catalog"):

- one name -> one JSON object: the cached registration (its keys as registered and
  updated) and/or ``name``, plus ``workers``/``protocols`` (``versions`` when a
  Safir-Darbaan server gave any) from the core, and ``status``: the DBP registration's
  state (``active``/``inactive``) when there is one, else ``active``; a name neither
  knows is ``{"name": X, "status": "unknown"}`` (Hermes: ``{"Error": "No Registered
  Service With the Name X"}``);
- ``""`` or ``"*"`` -> one JSON object keyed by name, every entry as above.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import attrs

from nfgate.model import CatalogEntry

__all__ = ["CACHE_LIMIT", "CachedService", "ServiceCache", "answer"]

CACHE_LIMIT = 10_000  # names kept; beyond it the oldest inactive ones are forgotten


@attrs.define
class CachedService:
    info: dict[str, Any]
    active: bool = True


class ServiceCache:
    """The last-value cache: the latest information each DBP service registered, by name."""

    def __init__(self, limit: int = CACHE_LIMIT) -> None:
        self._entries: OrderedDict[str, CachedService] = OrderedDict()
        self._limit = limit

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: str) -> CachedService | None:
        return self._entries.get(name)

    def names(self) -> Iterable[str]:
        return self._entries.keys()

    def put(self, name: str, info: dict[str, Any]) -> None:
        """Store ``info`` as the active registration of ``name``."""
        self._entries[name] = CachedService(info=info)
        self._entries.move_to_end(name)
        if len(self._entries) > self._limit:
            for old, entry in self._entries.items():
                if not entry.active:
                    del self._entries[old]
                    break

    def deactivate(self, name: str) -> None:
        entry = self._entries.get(name)
        if entry is not None:
            entry.active = False


@attrs.frozen
class _Core:
    workers: int
    protocols: tuple[str, ...]
    versions: tuple[str, ...]


def _core_by_name(entries: Iterable[CatalogEntry]) -> dict[str, _Core]:
    grouped: dict[str, tuple[int, set[str], set[str]]] = {}
    for entry in entries:
        workers, protocols, versions = grouped.get(entry.service.name, (0, set(), set()))
        protocols.update(entry.protocols)
        if entry.service.version is not None:
            versions.add(entry.service.version)
        grouped[entry.service.name] = (workers + entry.workers, protocols, versions)
    return {
        name: _Core(workers=w, protocols=tuple(sorted(p)), versions=tuple(sorted(v)))
        for name, (w, p, v) in grouped.items()
    }


def _entry(name: str, core: _Core | None, cached: CachedService | None) -> dict[str, Any]:
    out: dict[str, Any] = dict(cached.info) if cached is not None else {"name": name}
    if core is not None:
        out["workers"] = core.workers
        out["protocols"] = list(core.protocols)
        if core.versions:
            out["versions"] = list(core.versions)
    out["status"] = "active" if cached is None or cached.active else "inactive"
    return out


def answer(query: str, entries: Iterable[CatalogEntry], cache: ServiceCache, dialect: str) -> bytes:
    """The REPLY body (UTF-8 JSON) for an info request ``query``."""
    core = _core_by_name(entries)
    if query in ("", "*"):
        names = sorted(set(core) | set(cache.names()))
        body: dict[str, Any] = {name: _entry(name, core.get(name), cache.get(name)) for name in names}
    else:
        found, cached = core.get(query), cache.get(query)
        if found is None and cached is None:
            if dialect == "hermes":
                body = {"Error": f"No Registered Service With the Name {query}"}
            else:
                body = {"name": query, "status": "unknown"}
        else:
            body = _entry(query, found, cached)
    # "replace": a DCP service name may be any bytes (carried surrogate-escaped); the
    # bytes that are not UTF-8 become "?" rather than the whole answer failing.
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace")
