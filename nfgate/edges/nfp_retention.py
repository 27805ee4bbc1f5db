"""Retention of the NFP edge's finished job records: the purge of jobs older than the
store's ``retention_ms``, a batch at a time, on the gateway's loop.

Why batches: the purge runs on the loop (a batch of 200 took about 2 ms with 200k jobs
stored); a full batch means a backlog (a restart after a long time, or more POSTs a
second than one batch a second), so the next batch comes after EXPIRE_BACKLOG_MS.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter
from collections.abc import Callable

from nfgate.edges.nfp_job import wall_ms
from nfgate.store import JobStore

__all__ = ["EXPIRE_BACKLOG_MS", "EXPIRE_BATCH", "EXPIRE_EVERY_MS", "JobRetention"]

log = logging.getLogger("nfgate.edge.nfp")

# Jobs purged per batch, and the pause after a batch that was not full (nothing left to
# purge) or full (a backlog).
EXPIRE_BATCH = 200
EXPIRE_EVERY_MS = 1000
EXPIRE_BACKLOG_MS = 50


class JobRetention:
    """Purges ``store``'s finished jobs past its retention for the edge ``edge_name``,
    counting them in ``counters`` (``jobs_expired``, ``expire_errors``)."""

    def __init__(
        self, edge_name: str, store: JobStore, counters: Counter[str], clock: Callable[[], int] = wall_ms
    ) -> None:
        self._edge_name = edge_name
        self._store = store
        self.counters = counters  # the edge's
        self._clock = clock  # wall clock: what the records carry
        self._next: int | None = None  # monotonic ms of the next purge (None: at once)

    def next_expiry(self) -> int | None:
        """When :meth:`expire` has work to do (monotonic ms); None without a retention."""
        if self._store.retention_ms <= 0:
            return None
        return self._next if self._next is not None else 0

    def expire(self, now_ms: int) -> None:
        """Forget one batch of finished jobs past the retention, when due.

        The purge joins the iteration's store transaction (committed by the edge's
        flush). A purge that fails (SQLite error) is logged, counted
        (``expire_errors``) and tried again later: it must not stop the loop; nothing
        is raised.
        """
        due = self.next_expiry()
        if due is None or now_ms < due:
            return
        self._next = now_ms + EXPIRE_EVERY_MS
        try:
            self._store.begin(durable=False)  # committed with the iteration's batch (flush)
            purged = self._store.expire(self._clock(), EXPIRE_BATCH)
        except sqlite3.Error as exc:
            self.counters["expire_errors"] += 1
            log.warning("%s: purging expired jobs failed: %s", self._edge_name, exc)
            return
        self.counters["jobs_expired"] += purged
        if purged >= EXPIRE_BATCH:
            self._next = now_ms + EXPIRE_BACKLOG_MS
