"""The job store when the process runs out of file descriptors (EMFILE).

Each case runs in a child Python with a low ``RLIMIT_NOFILE`` (never the pytest
process's own limit), takes every free descriptor, tries the store's writes, gives the
descriptors back and writes again. A write may fail while the descriptors are gone (the
job is then refused, never acknowledged); once they are back, every write must work
again, and everything committed must be in the store. Before the fix the first durable
commit opened the WAL for its fsync, failed with EMFILE, and took that for a failed
fsync: the store refused every job until a restart.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

NOFILE = 64

PRELUDE = """
import json, os, sys
from pathlib import Path
from nfgate.store import JobRecord, JobState, JobStore

def rec(uuid, size=1):
    return JobRecord(uuid=uuid, service="s", target="any", edge="nfp", protocol="nfp/spec",
                     client=b"c", body=(b"x" * size,), created_ms=1)

def exhaust():
    held = []
    while len(held) < 100_000:  # bounded: the limit is low
        try:
            held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            return held
    raise SystemExit("the descriptor limit was not reached")

outcomes = {}

def attempt(tag, write):
    try:
        write()
        outcomes[tag] = "ok"
    except Exception as exc:  # what failed is reported, and the batch dropped
        outcomes[tag] = f"{type(exc).__name__}: {exc}"
        store.rollback()

def batch(uuid, size=10):
    store.begin()
    store.add(rec(uuid, size))
    store.add_result(uuid, "w", 200, [b"y" * size], 5)
    store.commit()

# Nothing written yet: the first durable commit comes while the descriptors are gone.
store = JobStore(Path(sys.argv[1]) / "jobs.sqlite3", fsync=True)
"""


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def _run(tmp_path: Path, body: str) -> dict[str, object]:
    script = textwrap.dedent(PRELUDE) + textwrap.dedent(body) + "\nprint(json.dumps(outcomes))\n"
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        preexec_fn=_limit,
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_a_store_out_of_descriptors_works_again_once_they_are_back(tmp_path: Path) -> None:
    got = _run(
        tmp_path,
        """
        held = exhaust()
        attempt("during", lambda: batch("during"))
        for fd in held:
            os.close(fd)
        attempt("after", lambda: batch("after"))
        attempt("after-2", lambda: batch("after-2"))
        outcomes["stored"] = [r.uuid for r in store.unfinished()]
        store.close()
        reopened = JobStore(Path(sys.argv[1]) / "jobs.sqlite3", fsync=True)
        outcomes["reopened"] = [r.uuid for r in reopened.unfinished()]
        """,
    )
    assert got["after"] == "ok", got
    assert got["after-2"] == "ok", got
    stored = got["stored"]
    assert isinstance(stored, list)
    assert {"after", "after-2"} <= set(stored)
    if got["during"] == "ok":  # acknowledged: it must be kept
        assert "during" in stored
    assert got["reopened"] == stored


def test_a_failed_open_of_the_wal_fails_one_batch_and_does_not_poison_the_store(tmp_path: Path) -> None:
    # The WAL's descriptor dropped as if its inode had changed: the next sync must open
    # it again, with no descriptor free. A large body also makes SQLite itself open a
    # temporary file (its statement journal spills), which fails the same way.
    got = _run(
        tmp_path,
        """
        store.add(rec("seed"))
        os.close(store._wal_fd)
        store._wal_fd = None
        held = exhaust()
        attempt("small", lambda: batch("small"))
        attempt("large", lambda: batch("large", 3_000_000))
        attempt("read", lambda: (store.get("seed"), store.results("seed"), store.unfinished()))
        for fd in held:
            os.close(fd)
        attempt("after-small", lambda: batch("after-small"))
        attempt("after-large", lambda: batch("after-large", 3_000_000))
        outcomes["stored"] = [r.uuid for r in store.unfinished()]
        store.close()
        """,
    )
    assert "Too many open files" in str(got["small"]), got  # the case this test is about
    assert got["read"] == "ok", got
    assert got["after-small"] == "ok", got
    assert got["after-large"] == "ok", got
    stored = got["stored"]
    assert isinstance(stored, list)
    assert {"seed", "after-small", "after-large"} <= set(stored)
