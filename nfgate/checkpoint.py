"""Copying the job store's WAL back into its database beside the gateway's loop.

In WAL mode SQLite checkpoints from the connection that commits, once the WAL holds 1000
pages: that COMMIT syncs the WAL, copies the pages into the database file and syncs it,
so the loop, and every edge with it, stalls. With ``[gateway] fsync = false`` the WAL is
synced by nobody else, and those commits took 5-17 ms every few hundred NFP jobs
(measured under the relay bench, sync mode, 5 s: 57-67 commits over 5 ms, 0.7-0.8 s in
all). With the default fsync the WAL is synced already and the checkpoints are short
(3-9 commits over 5 ms), so the store runs this thread only with ``fsync = false``
(``JobStore`` says why not with fsync).

:class:`Checkpointer` runs PASSIVE checkpoints from a thread with its own connection.
Python's sqlite3 releases the GIL while SQLite works, so the copy and its fsync run on the
other core while the loop goes on; a PASSIVE checkpoint never blocks a writer. The loop's
own auto-checkpoint stays on as the backstop that keeps the WAL bounded: when it comes,
the thread has copied most pages already, and once the WAL is wholly copied the next
commit starts it over from its beginning. Measured the same way with the thread: 34-36
commits over 5 ms, 0.23-0.24 s in all, the longest 9 ms instead of 15-17, and the sync
mode's p99 latency 8.2-8.9 ms instead of 14.3-14.8.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

__all__ = ["Checkpointer"]

log = logging.getLogger("nfgate.store")

INTERVAL_S = 0.1  # a busy gateway writes a few hundred WAL pages in this time


class Checkpointer:
    """A daemon thread checkpointing the WAL of the database at ``path`` every
    ``interval_s`` until :meth:`stop`.

    Raises :class:`sqlite3.Error` if its connection cannot be opened. A checkpoint that
    fails is counted in :attr:`errors` and logged once; the next one is tried as usual.
    """

    def __init__(self, path: Path, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.errors = 0
        # Its own connection: a checkpoint must not run inside the loop's transaction.
        # Opened here, so that a database that cannot be opened fails the caller.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nfgate-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.interval_s):
                self.checkpoint()
        finally:
            self._db.close()

    def checkpoint(self) -> None:
        """One PASSIVE checkpoint (copies what it can without waiting for anyone)."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as exc:
            self.errors += 1
            if self.errors == 1:
                log.warning("checkpointing the job store failed (the loop's own checkpoints go on): %s", exc)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and close its connection (waits for a checkpoint under way)."""
        self._stopping.set()
        self._thread.join(timeout)
