"""The SQLite job store: what was acknowledged survives a kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nfgate.errors import ConfigError
from nfgate.store import JobRecord, JobState, JobStore

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
