"""The job store: NFP job records and queued requests in an embedded SQLite database.

design.md "Durability": a request acknowledged to a client (NFP 202, DBP APPROVED) is
on disk *before* the acknowledgement. Outside :meth:`JobStore.begin` every write commits
before it returns; inside, writes are grouped until :meth:`JobStore.commit`, which the
caller runs before it sends the acknowledgements (group commit): the gateway has one
transaction per loop iteration. After a crash, :meth:`JobStore.unfinished` lists what
must be dispatched again, and results already stored are still served to GET.

Commits: the database is in WAL mode at ``synchronous=NORMAL``, always, so a COMMIT
write()s its frames to the WAL and syncs nothing. Durability is decided at commit time:
a transaction that holds a job record (:meth:`JobStore.add`, or ``begin()`` with
``durable=True``) is followed by an fdatasync of the WAL file, which is what
``synchronous=FULL`` adds in WAL mode (``JobStore._sync_wal`` says why). A transaction of
writes that acknowledge nothing (results, state changes: ``begin(durable=False)``) is not
synced. The fsync is most of a commit's cost (0.3-1 ms of wall time and about 100 us of
CPU on the reference machines, against about 50 us for the COMMIT). An unsynced commit
survives a crash of the gateway process (the WAL is in the OS's cache); only a crash of
the machine can lose it, and then the job is still recorded as dispatched and is
dispatched again after the restart, as an in-flight job would be. The next sync makes
it durable too (the WAL is one sequential file). An iteration with both kinds of write
is one COMMIT and at most one fsync; the synchronous level is never switched.

``JobStore(path, fsync=False)`` (``[gateway] fsync = false``) never syncs: an
acknowledged job then survives a crash or ``kill -9`` of the gateway (the WAL write
reached the OS before the 202 left) but not a crash of the machine.

The store never reads a clock: callers pass ``now_ms``.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import msgpack

from nfgate.checkpoint import INTERVAL_S as CHECKPOINT_S
from nfgate.checkpoint import Checkpointer
from nfgate.errors import ConfigError
from nfgate.frames import bytes_tuple
from nfgate.store_lock import lock_path, take_lock

__all__ = ["SCHEMA_VERSION", "STORE_FILE", "JobRecord", "JobState", "JobStore", "StoredResult"]

log = logging.getLogger("nfgate.store")

STORE_FILE = "jobs.sqlite3"  # the job store's file in the data dir
# The store's format, in SQLite's user_version: 0 for the data dirs of the nfgates before
# this stamp (migrated when opened), 1 for the schema below. A store stamped higher was
# written by a newer nfgate: it is refused, neither served nor changed (what a later
# schema means, a column this one does not read, cannot be known here).
SCHEMA_VERSION = 1

# What SQLite itself syncs the WAL with where it exists (Linux): data and size, not mtime.
_datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)

# No index on jobs.state: keeping it cost a b-tree page per commit (and two index
# writes per state change) on the request path, for unfinished() at startup and purge(),
# where a scan is fine. A data dir made by an older nfgate loses the index when opened.
# Not WITHOUT ROWID: measured slower, as uuids are random and bodies can be large (the
# rows of a WITHOUT ROWID table are the key b-tree; a rowid table appends them).
# jobs.result: a job's first result, in its own row (JobStore.add_result says why);
# the results table holds the rest. jobs.workers: the worker names the job's 202 gave
# (JSON list), so a restart sends an `all` job to those workers and no other. Both are
# added to the data dirs of older nfgates when opened.
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
    state       TEXT NOT NULL,
    result      BLOB,               -- msgpack [worker, status, frames, stored_ms], or NULL
    workers     TEXT                -- JSON list of the names the 202 gave, or NULL
);
DROP INDEX IF EXISTS jobs_state;
CREATE TABLE IF NOT EXISTS results (
    uuid        TEXT NOT NULL REFERENCES jobs (uuid) ON DELETE CASCADE,
    worker      TEXT NOT NULL,
    status      INTEGER NOT NULL,
    body        BLOB NOT NULL,      -- msgpack list of frames
    stored_ms   INTEGER NOT NULL,
    PRIMARY KEY (uuid, worker)
);
"""
_JOB_COLUMNS = "uuid, service, target, edge, protocol, client, body, created_ms, state, workers"


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
    # The worker names the client was told when the job was accepted (NFP's 202).
    workers: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class StoredResult:
    worker: str
    status: int
    body: tuple[bytes, ...] = attrs.field(converter=bytes_tuple)
    stored_ms: int


def _names(text: object) -> tuple[str, ...]:
    """The worker names of a ``jobs.workers`` cell; () for NULL or anything but a JSON
    list of strings (a row written by hand: its job is dispatched as its target says)."""
    if not isinstance(text, str):
        return ()
    try:
        names = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        return ()
    return tuple(names)


def _warn_if_open(path: Path) -> None:
    """Log a WARNING when other users may read the store: the nfgates up to 27 Nov 2026
    made it with the umask's mode (0644 at the usual 022), and an existing store keeps
    its mode. A group's bits are left to the owner (a backup group, say)."""
    mode = os.stat(path).st_mode & 0o777
    if mode & 0o007:
        log.warning(
            "the job store %s is open to other users (mode %04o, as older nfgates made it):"
            " it holds what clients sent and workers answered; chmod o= it and its -wal and"
            " -shm files",
            path,
            mode,
        )


def _pack(frames: Sequence[bytes]) -> bytes:
    return msgpack.packb(list(frames), use_bin_type=True)  # type: ignore[no-any-return]


def _unpack(blob: bytes) -> tuple[bytes, ...]:
    return tuple(msgpack.unpackb(blob, raw=False))


class JobStore:
    """SQLite-backed job records. One instance per process; not thread-safe by design
    (the gateway has one event-loop thread).

    Raises :class:`ConfigError` if the database cannot be opened (bad ``--data-dir``).
    """

    def __init__(
        self,
        path: Path | str,
        *,
        fsync: bool = True,
        retention_ms: int = 0,
        checkpoint_s: float | None = CHECKPOINT_S,
    ) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.retention_ms = retention_ms  # finished jobs older than this go (expire); 0: never
        self._wal_fd: int | None = None  # opened at start (with fsync), again if it changed
        self._wal_ino = 0
        self._durable = False  # the open transaction holds a write that needs the fsync
        self._unsynced = False  # a committed transaction still needs it (commit(sync=False))
        self._sync_error: OSError | None = None
        self._lost: sqlite3.Error | None = None  # a write failed and SQLite rolled the batch back
        self._lock_fd: int | None = None
        self._checkpointer: Checkpointer | None = None  # None: SQLite's own checkpoints only
        try:
            # Jobs hold what clients sent and what workers answered: readable by the
            # gateway's user only, as the data dir it makes. SQLite gives the -wal and
            # -shm files the database file's mode, so creating that one first is enough.
            # An existing dir or file keeps the mode its owner gave it.
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
            self._lock_fd = take_lock(lock_path(self.path))
            # check_same_thread off: the store is used by one thread at a time, but that
            # thread (the gateway loop) need not be the one that opened it.
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise ConfigError(
                    f"the job store {self.path} was written by a newer nfgate (job store schema"
                    f" {version}, this one reads up to {SCHEMA_VERSION}): run that version, or"
                    " start this one on a new --data-dir"
                )
            self._wal = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
            # NORMAL: a commit is written to the OS; _sync_wal makes the durable ones FULL.
            # Without WAL (a file system that cannot share memory) only FULL is safe.
            full = fsync and not self._wal
            self._db.execute("PRAGMA synchronous=FULL" if full else "PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
            for column, kind in (("result", "BLOB"), ("workers", "TEXT")):
                if column not in columns:  # a data dir of an older nfgate
                    self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
            if version < SCHEMA_VERSION:
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            _warn_if_open(self.path)  # a store this version serves
            # The WAL is named after the database file as SQLite resolved it (symlinks).
            self._wal_path = Path(self._db.execute("PRAGMA database_list").fetchone()[2] + "-wal")
            if fsync and self._wal:
                # Now, while descriptors are free: a commit then needs no new one (a
                # flood of peers can take them all; _sync_wal says what that costs).
                self._open_wal()
            # Read now, for the restart's recovery: a damaged page or row then stops the
            # gateway here, in one line, before any edge is bound.
            self._recovering: list[JobRecord] | None = self._unfinished()
            # Only without our fsync: then SQLite's checkpoint must first sync the WAL it
            # fills, a stall of 5-17 ms every few hundred jobs, which the thread takes off
            # the loop. With it the WAL is synced already, checkpoints on the loop are
            # short, and a thread's database fsync only delays the loop's WAL fsyncs
            # (measured: commit stalls up to 38-68 ms against 8-9 ms; nfgate.checkpoint).
            if self._wal and not fsync and checkpoint_s is not None:
                self._checkpointer = Checkpointer(self.path, checkpoint_s)
        except (OSError, sqlite3.Error, ConfigError) as exc:
            # What was opened is closed here, not when the error is collected: a store
            # refused (damaged, in use, written by a newer nfgate) lets go of its file
            # and its lock at once.
            db = getattr(self, "_db", None)
            if db is not None:
                db.close()
            if self._wal_fd is not None:
                os.close(self._wal_fd)
            self._unlock()
            if isinstance(exc, ConfigError):
                raise  # already says what is wrong
            raise ConfigError(f"cannot open the job store {self.path}: {exc}") from None

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def close(self) -> None:
        """Commit what is open and close. Raises what :meth:`commit` raises (and still closes)."""
        try:
            self.commit()
        finally:
            if self._checkpointer is not None:
                self._checkpointer.stop()
            self._db.close()
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None
            self._unlock()

    def begin(self, durable: bool = True) -> None:
        """Group the writes that follow into one transaction, until :meth:`commit`.

        The gateway opens one per loop iteration and commits before it sends the
        acknowledgements of that iteration: one commit, and at most one fsync, for the
        batch. ``durable=False`` adds writes that acknowledge nothing (see the module
        docstring); whether the commit fsyncs is decided by what the batch holds.
        Raises :class:`sqlite3.Error` if SQLite cannot open the transaction.
        """
        if not self._db.in_transaction:
            self._db.execute("BEGIN")
        if durable:
            self._durable = True

    def commit(self, *, sync: bool = True) -> None:
        """Commit the open transaction (no-op when none is open), then fsync the WAL if
        it held a job record or a durable :meth:`begin` (and ``fsync`` is on).

        ``sync=False`` leaves that fsync to :meth:`sync`, so the caller can send what
        waits only for the COMMIT (replies about jobs acknowledged earlier: their rows
        are in the OS's cache by then) while the batch's own acknowledgements wait for
        the disk.

        Raises :class:`sqlite3.Error` if the COMMIT fails or a write of the batch made
        SQLite roll the batch back (both leave no transaction open), :class:`OSError` if
        the fsync fails: then nothing of the batch may be acknowledged.
        """
        lost, self._lost = self._lost, None
        if lost is not None:  # the batch's earlier writes are gone: it must not be acknowledged
            self.rollback()
            raise sqlite3.OperationalError(f"the batch was rolled back: {lost}")
        if self._db.in_transaction:
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error:
                self.rollback()
                raise
        if self._durable:
            self._durable = False
            self._unsynced = self.fsync and self._wal
        if sync:
            self.sync()

    @property
    def unsynced(self) -> bool:
        """True when a committed durable batch still waits for :meth:`sync`."""
        return self._unsynced

    def sync(self) -> None:
        """The fsync that :meth:`commit` left out (no-op when nothing waits for one).

        Raises :class:`OSError` if the fsync fails: then nothing of the batch it was for
        may be acknowledged, and every later sync fails too (:meth:`_sync_wal`).
        """
        if self._unsynced:
            self._unsynced = False  # committed: a failed sync poisons the store (_sync_wal)
            self._sync_wal()

    def rollback(self) -> None:
        """Drop the open transaction, if any (after a failed write or commit, so the next
        batch starts clean). Never raises: a connection that cannot roll back fails its
        next write instead."""
        self._durable = False
        self._lost = None
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _write(self, sql: str, params: Sequence[object]) -> sqlite3.Cursor:
        """Execute one write. Raises :class:`sqlite3.Error`; when the error made SQLite
        roll back the whole open batch (it may, for SQLITE_FULL or an I/O error, where a
        constraint only undoes the statement), :meth:`commit` raises too, so that no
        write of the batch is acknowledged as stored."""
        self._recovering = None  # read before this write: unfinished() reads again
        if self._lost is not None and not self._db.in_transaction:
            self._db.execute("BEGIN")  # the rest of a lost batch stays together, to be rolled back
        batch = self._db.in_transaction
        try:
            return self._db.execute(sql, params)
        except sqlite3.Error as exc:
            if batch and not self._db.in_transaction:
                self._lost = exc
            raise

    def _sync_wal(self) -> None:
        """Make every commit so far durable: what ``synchronous=FULL`` does in WAL mode.

        With NORMAL a commit has write()n its frames to the WAL, and SQLite syncs the WAL
        itself only before a checkpoint (then the database after it): "A transaction
        committed in WAL mode with synchronous=NORMAL might roll back following a power
        loss or system crash". With FULL "the WAL file is synchronized after each
        transaction is committed", which is this fdatasync (SQLite's own call on Linux).
        FULL would also pad the last frame to a sector, but only without the powersafe
        overwrite property, which SQLite assumes by default on Unix. The sync also makes
        the unsynced commits before it durable: they are earlier frames of the same file.

        Raises :class:`OSError` (the WAL cannot be opened or synced). After a failed
        sync, every later one raises too: the kernel may have dropped the pages it
        failed to write and marked them clean, so a later success proves nothing. A
        failed open is not a failed sync: the next call opens again.
        """
        if self._sync_error is not None:
            raise OSError(f"an earlier fsync of {self._wal_path} failed") from self._sync_error
        fd = self._wal_fd
        # The WAL keeps its inode while this connection is open; reopen if it did not.
        # An open that fails (EMFILE: the process is out of descriptors) fails this
        # batch only: no write was dropped, so the next sync, once it can open, proves
        # the commits before it durable. Poisoning here made the store refuse every job
        # for good after one flood of connections.
        if fd is None or os.stat(self._wal_path).st_ino != self._wal_ino:
            fd = self._open_wal()
        try:
            _datasync(fd)
        except OSError as exc:
            self._sync_error = exc
            raise

    def _open_wal(self) -> int:
        """Open the WAL file for syncing; raises :class:`OSError`."""
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        fd = os.open(self._wal_path, os.O_RDONLY)
        try:
            ino = os.fstat(fd).st_ino
            # SQLite creates the WAL when the database is opened and deletes it at the
            # last close. With FULL it syncs the directory at the WAL's first sync, so
            # that the file itself survives a crash; do the same for each WAL we open.
            dir_fd = os.open(self._wal_path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            os.close(fd)
            raise
        self._wal_fd, self._wal_ino = fd, ino
        return fd

    def add(self, job: JobRecord) -> bool:
        """Store a new job; False if that uuid is already stored (a client's resend).

        Outside a transaction it is durable when this returns; inside, at :meth:`commit`.
        Raises :class:`sqlite3.Error` (SQLite) or :class:`OSError` (the fsync).
        """
        try:
            self._write(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    json.dumps(list(job.workers)) if job.workers else None,
                ),
            )
        except sqlite3.IntegrityError:
            return False
        if self._db.in_transaction:
            self._durable = True  # a job record: the batch's commit fsyncs
        elif self.fsync and self._wal:
            self._sync_wal()  # autocommitted: durable before we return, as documented
        return True

    def set_state(self, uuid: str, state: JobState) -> None:
        """Needs no fsync (it acknowledges nothing). Raises :class:`sqlite3.Error`."""
        self._write("UPDATE jobs SET state = ? WHERE uuid = ?", (state.value, uuid))

    def set_client(self, uuid: str, client: bytes) -> None:
        """The job's client is now ``client`` (its resend from a new socket). Needs no
        fsync: a restart with the old one loses only a push (GET still answers). Raises
        :class:`sqlite3.Error`."""
        self._write("UPDATE jobs SET client = ? WHERE uuid = ?", (client, uuid))

    def add_result(
        self,
        uuid: str,
        worker: str,
        status: int,
        body: Sequence[bytes],
        now_ms: int,
        *,
        inline: bool = False,
        state: JobState | None = None,
    ) -> None:
        """Keep ``worker``'s result for ``uuid`` (a later one from the same worker replaces
        it), and set the job's ``state`` too if given. Needs no fsync (it acknowledges
        nothing). Raises :class:`sqlite3.Error`.

        ``inline`` keeps the result in the job's own row, which holds one: the caller
        puts there a job's first result, and later ones only from the same worker. Why:
        a row of the results table costs an insert into its primary key, a b-tree of
        random uuids, where the job's row is found by the key it already has, and the
        state goes in the same statement (measured: 5 against 13 µs for a result and the
        state). :meth:`results` returns both kinds.
        """
        if inline:
            blob = msgpack.packb([worker, status, list(body), now_ms], use_bin_type=True)
            if state is None:
                self._write("UPDATE jobs SET result = ? WHERE uuid = ?", (blob, uuid))
            else:
                self._write("UPDATE jobs SET state = ?, result = ? WHERE uuid = ?", (state.value, blob, uuid))
            return
        self._write(
            "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
            (uuid, worker, status, _pack(body), now_ms),
        )
        if state is not None:
            self.set_state(uuid, state)

    def get(self, uuid: str) -> JobRecord | None:
        row = self._db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE uuid = ?", (uuid,)).fetchone()
        return None if row is None else self._record(row)

    def results(self, uuid: str) -> list[StoredResult]:
        """The results kept for ``uuid``, by worker name (one per worker: where the job's
        row and the results table both hold one, the table's is the later)."""
        found: dict[str, StoredResult] = {}
        row = self._db.execute("SELECT result FROM jobs WHERE uuid = ?", (uuid,)).fetchone()
        if row is not None and row[0] is not None:
            worker, status, frames, stored = msgpack.unpackb(row[0], raw=False)
            found[worker] = StoredResult(worker=worker, status=status, body=frames, stored_ms=stored)
        rows = self._db.execute("SELECT worker, status, body, stored_ms FROM results WHERE uuid = ?", (uuid,))
        for w, s, b, t in rows:
            found[w] = StoredResult(worker=w, status=s, body=_unpack(b), stored_ms=t)
        return [found[w] for w in sorted(found)]

    def unfinished(self) -> list[JobRecord]:
        """Jobs to dispatch again after a restart, oldest first: the first call gets
        those read when the store was opened (a damaged store is a :class:`ConfigError`
        there). Raises :class:`sqlite3.DatabaseError` when the database or a row is
        damaged."""
        read, self._recovering = self._recovering, None
        return read if read is not None else self._unfinished()

    def _unfinished(self) -> list[JobRecord]:
        rows = self._db.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state IN (?, ?) ORDER BY created_ms, uuid",
            tuple(s.value for s in UNFINISHED),
        )
        return [self._record(row) for row in rows]

    def purge(self, older_than_ms: int, limit: int = -1) -> int:
        """Forget finished jobs (and their results) created before ``older_than_ms``,
        oldest first, at most ``limit`` of them (-1: all); returns how many.

        Only the rows older than the cutoff are read: rows are appended as jobs are
        created, so rowids grow with ``created_ms`` and the cutoff is a rowid, found by a
        binary search (about 30 key lookups). A scan by ``created_ms`` would read the
        whole table on every call, and an index on it would cost every POST a write. A
        wall clock that stepped back only delays a purge: ``created_ms`` is checked too.
        Raises :class:`sqlite3.Error`.
        """
        boundary = self._first_rowid_at(older_than_ms)
        cur = self._write(
            "DELETE FROM jobs WHERE rowid IN (SELECT rowid FROM jobs WHERE rowid < ? AND created_ms < ?"
            " AND state NOT IN (?, ?) ORDER BY rowid LIMIT ?)",
            (boundary, older_than_ms, *(s.value for s in UNFINISHED), limit),
        )
        return cur.rowcount

    def expire(self, now_ms: int, limit: int = 1000) -> int:
        """Purge up to ``limit`` finished jobs older than :attr:`retention_ms` (none when
        it is 0); returns how many. The caller bounds each call's work with ``limit``:
        it runs on the gateway's loop. Raises :class:`sqlite3.Error`."""
        if self.retention_ms <= 0:
            return 0
        return self.purge(now_ms - self.retention_ms, limit)

    def _first_rowid_at(self, cutoff_ms: int) -> int:
        """The rowid of the first job created at or after ``cutoff_ms`` (one past the
        last rowid when there is none)."""
        db = self._db
        # Two queries: SQLite answers a lone min() or max() from the b-tree's ends, but
        # both in one SELECT with a scan.
        lo = db.execute("SELECT ifnull(min(rowid), 0) FROM jobs").fetchone()[0]
        hi = db.execute("SELECT ifnull(max(rowid), 0) FROM jobs").fetchone()[0] + 1
        while lo < hi:  # invariant: every row before lo is older than the cutoff, hi is not
            mid = (lo + hi) // 2
            row = db.execute(
                "SELECT rowid, created_ms FROM jobs WHERE rowid >= ? ORDER BY rowid LIMIT 1", (mid,)
            )
            found = row.fetchone()
            if found is None or found[1] >= cutoff_ms:
                hi = mid
            else:
                lo = found[0] + 1
        return int(lo)

    @staticmethod
    def _record(row: tuple[Any, ...]) -> JobRecord:
        """Raises :class:`sqlite3.DatabaseError` for a row that is not one this store
        writes (damaged on disk, or edited by hand), as SQLite does for a damaged page."""
        try:
            return JobStore._fields(row)
        except (TypeError, ValueError, msgpack.UnpackException) as exc:
            why = str(exc) or type(exc).__name__
            raise sqlite3.DatabaseError(f"job {str(row[0])[:64]!r}: a damaged row ({why})") from None

    @staticmethod
    def _fields(row: tuple[Any, ...]) -> JobRecord:
        uuid, service, target, edge, protocol, client, body, created, state, workers = row
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
            workers=_names(workers),
        )
