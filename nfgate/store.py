"""The job store: NFP job records and queued requests in an embedded SQLite database.

design.md "Durability": a request acknowledged to a client (NFP 202, DBP APPROVED) is
on disk *before* the acknowledgement. Outside :meth:`JobStore.begin` every write commits
before it returns; inside, writes are grouped until :meth:`JobStore.commit`, which the
caller runs before it sends the acknowledgements (group commit). ``synchronous=FULL`` in
WAL mode makes a commit durable. After a crash, :meth:`JobStore.unfinished` lists what
must be dispatched again, and results already stored are still served to GET.

A batch that acknowledges nothing (results, state changes: ``begin(durable=False)``)
commits with ``synchronous=NORMAL``: no fsync, which is most of a commit's cost (0.3-1
ms of wall time and about 100 us of CPU per fsync on the reference machines, against
about 50 us for a NORMAL commit). Such a commit survives a crash of the gateway process
(the WAL is in the OS's cache); only a crash of the machine can lose it, and then the
job is still recorded as dispatched and is dispatched again after the restart, as an
in-flight job would be. The next durable commit makes it durable too (the WAL is one
sequential file).

``JobStore(path, fsync=False)`` (``[gateway] fsync = false``) makes every commit a
NORMAL one: an acknowledged job then survives a crash or ``kill -9`` of the gateway
(the WAL write reached the OS before the 202 left) but not a crash of the machine.

The store never reads a clock: callers pass ``now_ms``.
"""

from __future__ import annotations

import enum
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import msgpack

from nfgate.errors import ConfigError
from nfgate.frames import bytes_tuple

__all__ = ["JobRecord", "JobState", "JobStore", "StoredResult"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    uuid        TEXT PRIMARY KEY,
    service     TEXT NOT NULL,
    target      TEXT NOT NULL,
    edge        TEXT NOT NULL,
    protocol    TEXT NOT NULL,
    client      BLOB NOT NULL,
    body        BLOB NOT NULL,      -- msgpack list of frames
    created_ms  INTEGER NOT NULL,
    state       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS results (
    uuid        TEXT NOT NULL REFERENCES jobs (uuid) ON DELETE CASCADE,
    worker      TEXT NOT NULL,
    status      INTEGER NOT NULL,
    body        BLOB NOT NULL,      -- msgpack list of frames
    stored_ms   INTEGER NOT NULL,
    PRIMARY KEY (uuid, worker)
);
"""


class JobState(enum.Enum):
    QUEUED = "queued"  # accepted, no worker has it yet
    DISPATCHED = "dispatched"  # a worker has it
    DONE = "done"  # every expected result is in
    FAILED = "failed"  # expired or ran out of workers; an error result is stored
    CANCELLED = "cancelled"


UNFINISHED = (JobState.QUEUED, JobState.DISPATCHED)


@attrs.frozen(kw_only=True)
class JobRecord:
    uuid: str
    service: str
    target: str
    edge: str
    protocol: str
    client: bytes
    body: tuple[bytes, ...] = attrs.field(converter=bytes_tuple)
    created_ms: int
    state: JobState = JobState.QUEUED


@attrs.frozen(kw_only=True)
class StoredResult:
    worker: str
    status: int
    body: tuple[bytes, ...] = attrs.field(converter=bytes_tuple)
    stored_ms: int


def _pack(frames: Sequence[bytes]) -> bytes:
    return msgpack.packb(list(frames), use_bin_type=True)  # type: ignore[no-any-return]


def _unpack(blob: bytes) -> tuple[bytes, ...]:
    return tuple(msgpack.unpackb(blob, raw=False))


class JobStore:
    """SQLite-backed job records. One instance per process; not thread-safe by design
    (the gateway has one event-loop thread).

    Raises :class:`ConfigError` if the database cannot be opened (bad ``--data-dir``).
    """

    def __init__(self, path: Path | str, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # check_same_thread off: the store is used by one thread at a time, but that
            # thread (the gateway loop) need not be the one that opened it.
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: a commit is on disk before we acknowledge the job to the client.
            # NORMAL (fsync=False): written to the OS, which survives the process.
            self._db.execute("PRAGMA synchronous=FULL" if fsync else "PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the job store {self.path}: {exc}") from None
        self._durable = fsync  # True: the synchronous level set on the connection is FULL

    def close(self) -> None:
        self.commit()
        self._db.close()

    def begin(self, durable: bool = True) -> None:
        """Group the writes that follow into one transaction, until :meth:`commit`.

        The gateway opens one per loop iteration and commits before it sends the
        acknowledgements of that iteration: one fsync for a batch of jobs, not one each.
        ``durable=False`` is for writes that acknowledge nothing (see the module
        docstring); a durable ``begin`` inside such a transaction commits it first (no
        fsync) and opens a durable one, since SQLite fixes the level per transaction.
        """
        db = self._db
        durable = durable and self.fsync
        if db.in_transaction:
            if not durable or self._durable:
                return
            db.execute("COMMIT")
        if durable != self._durable:
            # Not allowed inside a transaction: set before BEGIN.
            db.execute("PRAGMA synchronous=FULL" if durable else "PRAGMA synchronous=NORMAL")
            self._durable = durable
        db.execute("BEGIN")

    def commit(self) -> None:
        """Commit the open transaction (no-op when none is open): durable unless it was
        begun with ``durable=False``. Writes outside a transaction are durable again after."""
        if self._db.in_transaction:
            self._db.execute("COMMIT")
        if self.fsync and not self._durable:
            self._db.execute("PRAGMA synchronous=FULL")
            self._durable = True

    def add(self, job: JobRecord) -> bool:
        """Store a new job; False if that uuid is already stored (a client's resend)."""
        try:
            self._db.execute(
                "INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.uuid,
                    job.service,
                    job.target,
                    job.edge,
                    job.protocol,
                    job.client,
                    _pack(job.body),
                    job.created_ms,
                    job.state.value,
                ),
            )
        except sqlite3.IntegrityError:
            return False
        return True

    def set_state(self, uuid: str, state: JobState) -> None:
        self._db.execute("UPDATE jobs SET state = ? WHERE uuid = ?", (state.value, uuid))

    def add_result(self, uuid: str, worker: str, status: int, body: Sequence[bytes], now_ms: int) -> None:
        """Keep ``worker``'s result for ``uuid`` (a later one from the same worker replaces it)."""
        self._db.execute(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
            (uuid, worker, status, _pack(body), now_ms),
        )

    def get(self, uuid: str) -> JobRecord | None:
        row = self._db.execute("SELECT * FROM jobs WHERE uuid = ?", (uuid,)).fetchone()
        return None if row is None else self._record(row)

    def results(self, uuid: str) -> list[StoredResult]:
        rows = self._db.execute(
            "SELECT worker, status, body, stored_ms FROM results WHERE uuid = ? ORDER BY worker", (uuid,)
        )
        return [StoredResult(worker=w, status=s, body=_unpack(b), stored_ms=t) for w, s, b, t in rows]

    def unfinished(self) -> list[JobRecord]:
        """Jobs to dispatch again after a restart, oldest first."""
        rows = self._db.execute(
            "SELECT * FROM jobs WHERE state IN (?, ?) ORDER BY created_ms, uuid",
            tuple(s.value for s in UNFINISHED),
        )
        return [self._record(row) for row in rows]

    def purge(self, older_than_ms: int) -> int:
        """Forget finished jobs created before ``older_than_ms``; returns how many."""
        cur = self._db.execute(
            "DELETE FROM jobs WHERE created_ms < ? AND state NOT IN (?, ?)",
            (older_than_ms, *(s.value for s in UNFINISHED)),
        )
        return cur.rowcount

    @staticmethod
    def _record(row: tuple[Any, ...]) -> JobRecord:
        uuid, service, target, edge, protocol, client, body, created, state = row
        return JobRecord(
            uuid=str(uuid),
            service=str(service),
            target=str(target),
            edge=str(edge),
            protocol=str(protocol),
            client=bytes(client),
            body=_unpack(bytes(body)),
            created_ms=int(created),
            state=JobState(state),
        )
