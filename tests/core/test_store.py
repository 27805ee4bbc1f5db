"""The SQLite job store: what was acknowledged survives a kill -9."""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import msgpack
import pytest

from nfgate import store as store_module
from nfgate.errors import ConfigError
from nfgate.store import JobRecord, JobState, JobStore, StoredResult

pytestmark = pytest.mark.timeout(60)


def job(uuid: str, created: int = 1000, state: JobState = JobState.QUEUED) -> JobRecord:
    return JobRecord(
        uuid=uuid,
        service="echo",
        target="any",
        edge="nfp",
        protocol="nfp",
        client=b"c1",
        body=[b"{}", b""],
        created_ms=created,
        state=state,
    )


def test_jobs_and_results_roundtrip(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    assert store.add(job("u1"))
    assert not store.add(job("u1"))  # a resend of the same uuid is not a second job
    assert store.get("u1") == job("u1")
    assert store.get("nope") is None
    store.set_state("u1", JobState.DISPATCHED)
    store.add_result("u1", "w2", 200, [b"r2"], now_ms=1500)
    store.add_result("u1", "w1", 200, [b"r1"], now_ms=1600)
    store.add_result("u1", "w1", 500, [b"again"], now_ms=1700)  # replaces w1's
    got = store.results("u1")
    assert [(r.worker, r.status, r.body) for r in got] == [("w1", 500, (b"again",)), ("w2", 200, (b"r2",))]
    store.close()


def test_unfinished_and_purge(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    store.add(job("old-done", created=1, state=JobState.DONE))
    store.add(job("b", created=20))
    store.add(job("a", created=10, state=JobState.DISPATCHED))
    store.add(job("c", created=30, state=JobState.CANCELLED))
    assert [j.uuid for j in store.unfinished()] == ["a", "b"]
    assert store.purge(older_than_ms=25) == 1  # only finished jobs go
    assert store.get("old-done") is None and store.get("a") is not None
    store.close()


def test_a_new_store_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    # Jobs hold what clients sent and what workers answered (credentials, configs).
    old = os.umask(0o022)  # the usual umask, which would make them 0644
    try:
        store = JobStore(tmp_path / "data" / "jobs.sqlite", fsync=False)
        store.begin()
        store.add(job("u1"))
        store.commit()
    finally:
        os.umask(old)
    assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700
    files = [
        p
        for p in (tmp_path / "data").iterdir()
        if p.name.startswith("jobs.sqlite") and not p.name.endswith(".lock")
    ]
    assert {p.name for p in files} >= {"jobs.sqlite", "jobs.sqlite-wal"}
    assert {p.name: p.stat().st_mode & 0o777 for p in files} == {p.name: 0o600 for p in files}
    store.close()


def test_bad_data_dir_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match="cannot open the job store"):
        JobStore(blocker / "jobs.sqlite")


@pytest.mark.parametrize("fsync", [True, False])
def test_acknowledged_job_survives_kill_9(tmp_path: Path, fsync: bool) -> None:
    db = tmp_path / "jobs.sqlite"
    # The child stores a job, says "acked" (what the gateway does before sending 202),
    # then dies by SIGKILL with no chance to flush or close anything.
    child = textwrap.dedent(
        f"""
        import os, signal, sys
        from nfgate.store import JobRecord, JobStore
        store = JobStore({str(db)!r}, fsync={fsync!r})
        store.add(JobRecord(uuid="u-kill", service="echo", target="all", edge="nfp",
                            protocol="nfp", client=b"c1", body=[b"payload"], created_ms=5))
        store.add_result("u-kill", "w1", 200, [b"partial"], now_ms=6)
        sys.stdout.write("acked\\n"); sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=30)
    assert proc.stdout == "acked\n" and proc.returncode == -signal.SIGKILL, proc.stderr
    store = JobStore(db)
    (survivor,) = store.unfinished()
    assert survivor.uuid == "u-kill" and survivor.body == (b"payload",)
    assert [r.body for r in store.results("u-kill")] == [(b"partial",)]
    store.close()
    assert os.path.exists(db)


# The schema of nfgate releases before the jobs_state index was dropped: a data dir made
# by one of them must still open, keep its jobs and take new ones.
_OLD_SCHEMA = """
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


def test_data_dir_of_the_old_schema_still_opens(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite3"
    old = sqlite3.connect(db, isolation_level=None)
    old.execute("PRAGMA journal_mode=WAL")
    old.executescript(_OLD_SCHEMA)
    old.execute(
        "INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ("old", "echo", "any", "nfp", "nfp", b"c1", msgpack.packb([b"{}", b""]), 7, "dispatched"),
    )
    old.execute("INSERT INTO results VALUES (?, ?, ?, ?, ?)", ("old", "w1", 200, msgpack.packb([b"r"]), 8))
    old.close()

    store = JobStore(db)
    assert store.get("old") == job("old", created=7, state=JobState.DISPATCHED)
    assert [r.body for r in store.results("old")] == [(b"r",)]
    store.begin()
    assert store.add(job("new", created=9))
    assert not store.add(job("old"))  # its uuid is still taken
    store.begin(durable=False)
    store.add_result("new", "w1", 200, [b"n"], now_ms=10)
    store.add_result("old", "w2", 200, [b"inline"], now_ms=11, inline=True, state=JobState.DONE)
    store.commit()
    assert [r.body for r in store.results("old")] == [(b"r",), (b"inline",)]  # the job's row gained a column
    assert [j.uuid for j in store.unfinished()] == ["new"]
    assert store.purge(older_than_ms=8) == 1 and store.get("old") is None and store.results("old") == []
    store.close()
    again = sqlite3.connect(db)
    indexes = {name for (name,) in again.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    again.close()
    assert "jobs_state" not in indexes


def test_a_jobs_first_result_and_state_are_one_update_of_its_row(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite3", fsync=False)
    store.add(job("u1"))
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    store.begin(durable=False)
    store.add_result("u1", "w1", 200, [b"first"], now_ms=5, inline=True, state=JobState.DONE)
    store.commit()
    assert [s.split()[0] for s in statements] == ["BEGIN", "UPDATE", "COMMIT"]
    assert store.get("u1") == job("u1", state=JobState.DONE)
    assert store.results("u1") == [StoredResult(worker="w1", status=200, body=[b"first"], stored_ms=5)]
    # Results of other workers go to the results table; GET sees every one, by worker.
    store.add_result("u1", "w0", 500, [b"other"], now_ms=6)
    store.add_result("u1", "w2", 200, [b"", b"two"], now_ms=7, state=JobState.FAILED)
    assert [(r.worker, r.body) for r in store.results("u1")] == [
        ("w0", (b"other",)),
        ("w1", (b"first",)),
        ("w2", (b"", b"two")),
    ]
    assert store.get("u1").state is JobState.FAILED  # type: ignore[union-attr]
    # The same worker again: its later result replaces the earlier, in either place.
    store.add_result("u1", "w1", 201, [b"again"], now_ms=8, inline=True)
    store.add_result("u1", "w0", 200, [b"later"], now_ms=9)
    assert [(r.worker, r.status, r.body) for r in store.results("u1")] == [
        ("w0", 200, (b"later",)),
        ("w1", 201, (b"again",)),
        ("w2", 200, (b"", b"two")),
    ]
    # A job's row and the table can both hold one for a worker (a job recovered after
    # a restart stores in the table): the table's is the later.
    store.add_result("u1", "w1", 202, [b"after restart"], now_ms=10)
    assert [r.body for r in store.results("u1") if r.worker == "w1"] == [(b"after restart",)]
    assert store.purge(older_than_ms=2000) == 1 and store.results("u1") == []
    store.close()


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The inodes of the files JobStore fdatasyncs (it does sync them too)."""
    calls: list[int] = []
    real = store_module._datasync

    def recording(fd: int) -> None:
        calls.append(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(store_module, "_datasync", recording)
    return calls


def test_a_batch_is_one_commit_synced_only_when_it_holds_a_job(tmp_path: Path, syncs: list[int]) -> None:
    store = JobStore(tmp_path / "jobs.sqlite3")
    wal = os.stat(tmp_path / "jobs.sqlite3-wal").st_ino
    store.add(job("u0"))  # autocommitted: synced before add returns
    assert syncs == [wal]
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)

    # Results first, then a job (the order that used to cost two COMMITs and PRAGMAs).
    store.begin(durable=False)
    store.add_result("u0", "w1", 200, [b"r"], now_ms=1)
    store.set_state("u0", JobState.DONE)
    store.begin()
    store.add(job("u1"))
    store.begin(durable=False)
    store.add_result("u1", "w1", 200, [b"r"], now_ms=2)
    store.commit()
    assert [s.split()[0] for s in statements] == ["BEGIN", "INSERT", "UPDATE", "INSERT", "INSERT", "COMMIT"]
    assert syncs == [wal, wal]

    store.begin(durable=False)  # acknowledges nothing: no sync
    store.set_state("u1", JobState.DONE)
    store.commit()
    store.commit()  # nothing open: nothing to do
    assert syncs == [wal, wal]

    store.begin(durable=False)
    store.add(job("u2"))  # a job record makes the batch durable whatever begin said
    store.commit()
    assert syncs == [wal, wal, wal]
    store.close()


def test_commit_without_sync_leaves_the_fsync_to_sync(tmp_path: Path, syncs: list[int]) -> None:
    store = JobStore(tmp_path / "jobs.sqlite3")
    wal = os.stat(tmp_path / "jobs.sqlite3-wal").st_ino
    syncs.clear()
    store.begin()
    store.add(job("u1"))
    store.commit(sync=False)  # committed (another connection sees it), not yet synced
    assert syncs == [] and store.unsynced
    reader = sqlite3.connect(tmp_path / "jobs.sqlite3")
    assert reader.execute("SELECT uuid FROM jobs").fetchall() == [("u1",)]
    reader.close()
    store.sync()
    assert syncs == [wal] and not store.unsynced
    store.sync()  # nothing waits: no second fsync
    assert syncs == [wal]

    store.begin(durable=False)  # acknowledges nothing: nothing for sync() to do
    store.set_state("u1", JobState.DONE)
    store.commit(sync=False)
    assert not store.unsynced
    store.begin()
    store.add(job("u2"))
    store.commit(sync=False)
    store.close()  # close syncs what a commit left
    assert syncs == [wal, wal]


def test_fsync_false_never_syncs(tmp_path: Path, syncs: list[int]) -> None:
    store = JobStore(tmp_path / "jobs.sqlite3", fsync=False)
    store.add(job("u0"))
    store.begin()
    store.add(job("u1"))
    store.commit()
    assert syncs == []
    assert [j.uuid for j in store.unfinished()] == ["u0", "u1"]
    store.close()


def test_after_a_failed_fsync_no_job_is_durable_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = JobStore(tmp_path / "jobs.sqlite3")

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(store_module, "_datasync", failing)
    store.begin()
    store.add(job("u1"))
    with pytest.raises(OSError, match="Input/output"):
        store.commit()
    monkeypatch.undo()  # the disk "works" again: a later fsync still proves nothing
    store.begin()
    store.add(job("u2"))
    with pytest.raises(OSError, match="earlier fsync"):
        store.commit()
    store.begin(durable=False)  # what acknowledges nothing still goes on
    store.set_state("u1", JobState.DONE)
    store.commit()
    assert store.get("u1") is not None and store.get("u2") is not None
    store._db.close()


def test_acknowledged_batch_survives_kill_9(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite3"
    # The gateway's iteration: results of one job, then a new job, one commit, "202", die.
    child = textwrap.dedent(
        f"""
        import os, signal, sys
        from nfgate.store import JobRecord, JobState, JobStore
        store = JobStore({str(db)!r})
        store.add(JobRecord(uuid="u-old", service="echo", target="any", edge="nfp",
                            protocol="nfp", client=b"c1", body=[b"old"], created_ms=1))
        store.begin(durable=False)
        store.add_result("u-old", "w1", 200, [b"done"], now_ms=2)
        store.set_state("u-old", JobState.DONE)
        store.begin()
        store.add(JobRecord(uuid="u-new", service="echo", target="any", edge="nfp",
                            protocol="nfp", client=b"c1", body=[b"new"], created_ms=3))
        store.commit()
        sys.stdout.write("acked\\n"); sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=30)
    assert proc.stdout == "acked\n" and proc.returncode == -signal.SIGKILL, proc.stderr
    store = JobStore(db)
    assert [j.uuid for j in store.unfinished()] == ["u-new"]
    assert [r.body for r in store.results("u-old")] == [(b"done",)]
    store.close()


def test_purge_takes_the_oldest_finished_jobs_first_in_bounded_batches(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    store.begin()
    for i in range(100):
        state = JobState.DISPATCHED if i % 10 == 0 else JobState.DONE
        store.add(job(f"j{i}", created=1000 + i, state=state))
        store.add_result(f"j{i}", "w", 200, [b"r"], now_ms=1000 + i)
    store.commit()
    # created before 1050: 50 jobs, 5 of them unfinished; at most 20 per call, oldest first
    assert store.purge(older_than_ms=1050, limit=20) == 20
    assert store.get("j1") is None and store.get("j22") is None and store.get("j23") is not None
    assert store.get("j0") is not None and store.get("j20") is not None  # unfinished stay
    assert store.purge(older_than_ms=1050) == 25  # the rest of the 45
    assert store.purge(older_than_ms=1050) == 0
    assert store.get("j49") is None and store.get("j50") is not None
    assert store.results("j49") == [] and len(store.results("j50")) == 1  # results go with their job
    assert store.purge(older_than_ms=0) == 0 and store.purge(older_than_ms=10**15) == 45
    store.close()


def test_purge_never_takes_a_job_newer_than_the_cutoff_when_the_clock_stepped_back(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    for uuid, created in (("a", 100), ("b", 500), ("c", 200), ("d", 600)):
        store.add(job(uuid, created=created, state=JobState.DONE))
    store.purge(older_than_ms=300)  # "c" may wait for a later purge; "b" must stay
    assert store.get("a") is None and store.get("b") is not None and store.get("d") is not None
    store.purge(older_than_ms=300)
    assert store.get("c") is None and store.get("b") is not None
    store.close()


def test_expire_follows_the_retention(tmp_path: Path) -> None:
    forever = JobStore(tmp_path / "forever.sqlite")
    forever.add(job("old", created=1, state=JobState.DONE))
    assert forever.expire(now_ms=10**12) == 0 and forever.get("old") is not None
    forever.close()
    store = JobStore(tmp_path / "jobs.sqlite", retention_ms=1000)
    for i in range(5):
        store.add(job(f"done{i}", created=100 + i, state=JobState.DONE))
    store.add(job("young", created=5000, state=JobState.DONE))
    assert store.expire(now_ms=1102, limit=10) == 2  # created before 102
    assert store.expire(now_ms=6000, limit=2) == 2 and store.expire(now_ms=6000, limit=2) == 1
    assert store.get("young") is not None
    store.close()


def full(store: JobStore) -> None:
    """Make the database "full" (SQLITE_FULL) from its next new page on."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count={pages}")


def test_a_write_that_makes_sqlite_roll_the_batch_back_fails_its_commit(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    store.add(job("stored"))
    full(store)
    store.begin()
    store.add(job("first"))  # fits in a page the table already has
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.add(attrs.evolve(job("big"), body=[b"x" * 65536]))
    # SQLite rolled the whole transaction back on SQLITE_FULL: "first" is gone, and a
    # commit that "succeeded" would let its 202 go out for a record that is not stored.
    assert not store._db.in_transaction
    store.add(job("after"))  # still part of the lost batch, not autocommitted on its own
    with pytest.raises(sqlite3.OperationalError, match="rolled back"):
        store.commit()
    assert [store.get(u) is not None for u in ("stored", "first", "after")] == [True, False, False]
    store._db.execute("PRAGMA max_page_count=1073741823")
    store.begin()
    store.add(job("next"))
    store.commit()  # the next batch is clean
    assert store.get("next") == job("next")
    store.close()


def test_a_constraint_error_undoes_only_its_statement(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    store.begin()
    assert store.add(job("a"))
    with pytest.raises(sqlite3.IntegrityError):  # a result for no job: the foreign key
        store.add_result("nope", "w1", 200, [b"r"], now_ms=1)
    store.commit()  # the batch itself is intact
    assert store.get("a") == job("a")
    store.close()


def test_one_gateway_per_data_dir_until_the_holder_dies(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import time; from nfgate.store import JobStore; JobStore({str(db)!r});"
            "print('open', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        # Two gateways on one data dir would both dispatch its unfinished jobs again.
        with pytest.raises(ConfigError, match=rf"in use by another nfgate \(pid {holder.pid}\)"):
            JobStore(db)
    finally:
        holder.kill()  # SIGKILL: no chance to unlock
        holder.wait(timeout=10)
    store = JobStore(db)  # the lock died with its holder
    with pytest.raises(ConfigError, match=rf"pid {os.getpid()}"):
        JobStore(db)
    store.close()
    JobStore(db).close()  # close() releases it


def _checkpoint_threads() -> int:
    import threading

    return sum(t.name == "nfgate-checkpoint" for t in threading.enumerate())


def test_without_fsync_a_thread_copies_the_wal_into_the_database(tmp_path: Path) -> None:
    import time

    db = tmp_path / "jobs.sqlite"
    others = _checkpoint_threads()  # stores other tests left open
    store = JobStore(db, fsync=False, checkpoint_s=0.01)
    try:
        schema_only = db.stat().st_size
        store.begin()
        for i in range(200):  # some 60 WAL pages: far below SQLite's own checkpoint at 1000
            store.add(attrs.evolve(job(f"u{i}"), body=[b"x" * 1000]))
        store.commit()
        deadline = time.monotonic() + 10
        # Until all the pages are there, not the first: on a loaded machine the file was
        # seen at 20 KiB first (the checkpoints copy the pages over more than one round).
        while db.stat().st_size <= schema_only + 100_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert db.stat().st_size > schema_only + 100_000  # the pages reached the database file
        assert _checkpoint_threads() == others + 1
    finally:
        store.close()
    assert _checkpoint_threads() == others  # close() stops it


def test_with_fsync_the_loop_keeps_sqlites_own_checkpoints(tmp_path: Path) -> None:
    db = tmp_path / "jobs.sqlite"
    others = _checkpoint_threads()
    store = JobStore(db, checkpoint_s=0.01)
    try:
        assert _checkpoint_threads() == others
        schema_only = db.stat().st_size
        store.begin()
        for i in range(200):
            store.add(attrs.evolve(job(f"u{i}"), body=[b"x" * 1000]))
        store.commit()
        assert db.stat().st_size == schema_only  # in the WAL until 1000 pages
    finally:
        store.close()


def test_the_worker_names_a_job_was_announced_with_are_kept(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.sqlite")
    store.add(attrs.evolve(job("named"), workers=("a", "wörker 2")))
    store.add(job("plain"))
    store.close()
    store = JobStore(tmp_path / "jobs.sqlite")
    assert {r.uuid: r.workers for r in store.unfinished()} == {"named": ("a", "wörker 2"), "plain": ()}
    store.close()


def test_a_data_dir_of_an_older_nfgate_gains_the_new_columns(tmp_path: Path) -> None:
    # The jobs table as nfgate wrote it before jobs.result and jobs.workers.
    db = sqlite3.connect(tmp_path / "jobs.sqlite")
    db.executescript(
        "CREATE TABLE jobs (uuid TEXT PRIMARY KEY, service TEXT NOT NULL, target TEXT NOT NULL,"
        " edge TEXT NOT NULL, protocol TEXT NOT NULL, client BLOB NOT NULL, body BLOB NOT NULL,"
        " created_ms INTEGER NOT NULL, state TEXT NOT NULL);"
    )
    body = msgpack.packb([b"{}"])
    db.execute(
        "INSERT INTO jobs VALUES ('old', 'echo', 'all', 'nfp', 'nfp', x'6331', ?, 5, 'queued')", (body,)
    )
    db.commit()
    db.close()
    store = JobStore(tmp_path / "jobs.sqlite")
    (old,) = store.unfinished()
    assert (old.uuid, old.target, old.workers, old.body) == ("old", "all", (), (b"{}",))
    store.add_result("old", "a", 200, [b"ok"], 9, inline=True, state=JobState.DONE)
    assert [r.worker for r in store.results("old")] == ["a"]
    store.close()
