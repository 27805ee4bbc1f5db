"""Data dirs across versions (docs/broker.md "Durability", "Data dirs across versions"):
what an nfgate finds in a data dir an older or a newer nfgate wrote. The old formats
are built here by hand, as the older versions wrote them, not by running them."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from nfgate.errors import ConfigError
from nfgate.store import SCHEMA_VERSION, STORE_FILE, JobState, JobStore

pytestmark = pytest.mark.timeout(60)

# The jobs table of the nfgates before 24 Nov 2026 (no result, no workers column), with
# the state index the first ones had; written with the umask's modes (0755 dir, 0644 file).
_FIRST_SCHEMA = """
CREATE TABLE jobs (
    uuid TEXT PRIMARY KEY, service TEXT NOT NULL, target TEXT NOT NULL, edge TEXT NOT NULL,
    protocol TEXT NOT NULL, client BLOB NOT NULL, body BLOB NOT NULL,
    created_ms INTEGER NOT NULL, state TEXT NOT NULL
);
CREATE INDEX jobs_state ON jobs (state);
CREATE TABLE results (
    uuid TEXT NOT NULL REFERENCES jobs (uuid) ON DELETE CASCADE, worker TEXT NOT NULL,
    status INTEGER NOT NULL, body BLOB NOT NULL, stored_ms INTEGER NOT NULL,
    PRIMARY KEY (uuid, worker)
);
"""


def _old_data_dir(root: Path) -> Path:
    """A data dir as the first nfgates left it: one finished job, one queued, 0644 files."""
    data = root / "data"
    umask = os.umask(0o022)
    try:
        data.mkdir()
        db = sqlite3.connect(data / STORE_FILE, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(_FIRST_SCHEMA)
        row = "INSERT INTO jobs VALUES (?, ?, 'any', 'nfp', 'nfp/spec', X'6331', ?, ?, ?)"
        db.execute(row, ("done", "echo", msgpack.packb([b"ping"]), 1, "done"))
        db.execute(row, ("waits", "nowork", msgpack.packb([b"q"]), 2, "queued"))
        db.execute("INSERT INTO results VALUES ('done', 'w1', 200, ?, 3)", (msgpack.packb([b"pong"]),))
        db.close()
    finally:
        os.umask(umask)
    return data


def test_an_old_data_dir_is_served_and_stamped_with_this_schema(tmp_path: Path) -> None:
    data = _old_data_dir(tmp_path)
    store = JobStore(data / STORE_FILE, fsync=False)
    assert [r.body for r in store.results("done")] == [(b"pong",)]
    assert [(j.uuid, j.state) for j in store.unfinished()] == [("waits", JobState.QUEUED)]
    store.close()
    db = sqlite3.connect(data / STORE_FILE)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_a_store_of_a_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    # An nfgate that finds a store a later one wrote cannot know what it means (a column
    # it does not read, results kept elsewhere): it must not serve or change it.
    data = _old_data_dir(tmp_path)
    db = sqlite3.connect(data / STORE_FILE, isolation_level=None)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(ConfigError, match=rf"newer nfgate \(job store schema {SCHEMA_VERSION + 1}"):
        JobStore(data / STORE_FILE, fsync=False)
    db = sqlite3.connect(data / STORE_FILE)
    columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    db.close()
    assert "result" not in columns and "workers" not in columns  # not migrated
    db = sqlite3.connect(data / STORE_FILE, isolation_level=None)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    db.close()
    JobStore(data / STORE_FILE, fsync=False).close()  # the refusal let go of the lock
    db = sqlite3.connect(data / STORE_FILE, isolation_level=None)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    # serve: one line and exit status 2, before anything binds
    flags = ["--no-metrics", "--no-dcp", "--no-memodb", "--no-dbp", "--no-sada", "--no-sada-server"]
    bind = ["--bind", "nfp=tcp://127.0.0.1:0"]
    done = subprocess.run(
        [sys.executable, "-m", "nfgate", "serve", "--data-dir", str(data), *flags, *bind],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "newer nfgate" in done.stderr, done.stderr


def test_a_store_others_can_read_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # nfgates up to 27 Nov 2026 made the store with the umask's mode (0644): jobs hold
    # what clients sent and workers answered. An existing store keeps its mode, so say so.
    data = _old_data_dir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="nfgate.store"):
        JobStore(data / STORE_FILE, fsync=False).close()
    warned = [r.getMessage() for r in caplog.records if "open to other users" in r.getMessage()]
    assert len(warned) == 1 and "chmod" in warned[0] and "0644" in warned[0], caplog.text
    caplog.clear()
    (data / STORE_FILE).chmod(0o640)  # a group of its own (backups) is the owner's choice
    with caplog.at_level(logging.WARNING, logger="nfgate.store"):
        JobStore(data / STORE_FILE, fsync=False).close()
    assert "open to other users" not in caplog.text


def _open_fds_to(path: Path) -> list[str]:
    fds = Path("/proc/self/fd")
    found = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("newer", [False, True])
def test_a_store_refused_at_open_is_let_go_of(tmp_path: Path, newer: bool) -> None:
    # A damaged store (or one a newer nfgate stamped) is refused in one line; the
    # refusal closes what it opened, the database and its lock, not the garbage collector.
    data = _old_data_dir(tmp_path)
    if newer:
        db = sqlite3.connect(data / STORE_FILE, isolation_level=None)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        db.close()
    else:
        for leftover in data.iterdir():
            leftover.unlink()
        (data / STORE_FILE).write_bytes(b"not a database, " * 256)
    with pytest.raises(ConfigError) as refused:
        JobStore(data / STORE_FILE, fsync=False)
    assert not _open_fds_to(data), refused.value  # while the error is still held
