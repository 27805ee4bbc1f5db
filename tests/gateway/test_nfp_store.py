"""The NFP edge's jobs and bounds: worker capacity, job retention, job store and fsync
failures, bounded client records."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from nfgate.codecs.nfp.messages import BROKER, CLIENT, WORKER, Delete, Get, Post, Response
from nfgate.store import JobStore

from .conftest import finish, running_on, start_gateway, until
from .nfp_helpers import get, norfab_worker, post, quiet, send, spec_worker, store_of

pytestmark = pytest.mark.timeout(30)


def test_norfab_worker_is_given_several_jobs_at_once_spec_worker_one(tmp_path: Path) -> None:
    """NorFab workers run several jobs at once (max_concurrent_jobs); a spec worker
    "will handle at most one request a time"."""
    running = start_gateway(tmp_path, "[edges.nfp]\nnorfab_worker_capacity = 2\n")
    try:
        nf = norfab_worker(running, "many", b"nfw")
        spec = spec_worker(running, "one", b"spw")
        client = running.dealer("nfp", b"c1")
        jobs = [post(client, "many", b"{}") for _ in range(3)] + [post(client, "one", b"x") for _ in range(2)]
        given_nf = [get(nf, "norfab") for _ in range(2)]
        assert {m.uuid for m in given_nf} == set(jobs[:2])  # type: ignore[attr-defined]
        assert quiet(nf)  # the third waits for a free slot
        first = get(spec)
        assert isinstance(first, Post) and first.uuid == jobs[3]
        assert quiet(spec)
        send(spec, Response(header=WORKER, service="one", uuid=jobs[3], status=200, body=(b"r",)))
        second = get(spec)
        assert isinstance(second, Post) and second.uuid == jobs[4]
        assert {w.name: w.capacity for w in running.gateway.router.workers()} == {"nfw": 2, "spw": 1}
    finally:
        finish(running)


def test_finished_jobs_are_forgotten_after_the_retention(tmp_path: Path) -> None:
    running = start_gateway(tmp_path, "[gateway]\njob_retention_s = 1\n")
    try:
        w = spec_worker(running, "echo", b"w1")
        client = running.dealer("nfp")
        job = post(client, "echo", b"ping")
        assert get(client).status == 202  # type: ignore[attr-defined]
        get(w)
        send(w, Response(header=WORKER, service="echo", uuid=job, status=200, body=(b"pong",)))
        assert get(client).status == 200  # type: ignore[attr-defined]
        pending = post(client, "echo", b"never answered")  # unfinished jobs are kept
        assert get(client).status == 202  # type: ignore[attr-defined]

        def status_of(uuid: str) -> int:
            send(client, Get(header=CLIENT, service="echo", target="any", uuid=uuid, body=(b"",)))
            return int(get(client).status)  # type: ignore[attr-defined]

        assert status_of(job) == 200
        until(lambda: status_of(job) == 400, timeout=10)  # 1 s of retention, purged within ~1 s more
        assert status_of(pending) == 300
        assert running.gateway.edges["nfp"].stats()["jobs_expired"] == 1
    finally:
        finish(running)


def test_a_failing_purge_is_counted_and_the_broker_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: JobStore, now_ms: int, limit: int = 1000) -> int:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(JobStore, "expire", broken)
    running = start_gateway(tmp_path, "[gateway]\njob_retention_s = 1\n")
    try:
        until(lambda: running.gateway.edges["nfp"].stats().get("expire_errors", 0) >= 1)
        w = spec_worker(running, "echo", b"w1")
        client = running.dealer("nfp")
        job = post(client, "echo", b"ping")
        assert get(client).status == 202  # type: ignore[attr-defined]
        assert get(w).uuid == job  # type: ignore[attr-defined]
    finally:
        finish(running)  # asserts that no internal error was logged


def test_a_full_job_store_refuses_new_jobs_with_500_and_the_broker_goes_on(tmp_path: Path) -> None:
    running = start_gateway(tmp_path)
    try:
        w = spec_worker(running, "echo", b"w1")
        client = running.dealer("nfp")
        store = store_of(running)
        # SQLite's own "database or disk is full", from a page limit: the INSERT of the
        # job record fails (and SQLite rolls back the loop iteration's transaction).
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count={pages}")
        refused = post(client, "echo", b"x" * 65536)
        answer = get(client)
        assert isinstance(answer, Response) and answer.status == 500 and answer.uuid == refused
        assert "job store unavailable" in json.loads(answer.body[0])["errors"][0]
        # The worker may have had the job already (dispatch goes before the commit): it
        # is told to drop it, as for a DELETE.
        first = get(w)
        if isinstance(first, Post):
            assert first.uuid == refused
            cancel = get(w)
            assert isinstance(cancel, Delete) and cancel.uuid == refused
        else:
            assert isinstance(first, Delete) and first.uuid == refused
        stats = running.gateway.edges["nfp"].stats()
        assert stats["jobs_refused"] == 1 and stats["store_errors"] >= 1
        send(client, Get(header=CLIENT, service="echo", target="any", uuid=refused, body=(b"",)))
        assert get(client).status == 400  # type: ignore[attr-defined]  # never stored

        store._db.execute("PRAGMA max_page_count=1073741823")  # space again: jobs are accepted
        job = post(client, "echo", b"ping")
        assert get(client).status == 202  # type: ignore[attr-defined]
        dispatched = get(w)
        assert isinstance(dispatched, Post) and dispatched.uuid == job
        send(w, Response(header=WORKER, service="echo", uuid=job, status=200, body=(b"pong",)))
        assert get(client).body == (b"pong",)  # type: ignore[attr-defined]
    finally:
        finish(running)  # asserts that no internal error was logged


def test_a_failed_fsync_refuses_the_batch_and_every_later_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nfgate.store

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(nfgate.store, "_datasync", broken)
    running = start_gateway(tmp_path)
    try:
        client = running.dealer("nfp")
        jobs = []
        for _ in range(2):  # the second: a failed fsync poisons the store (store.py says why)
            jobs.append(post(client, "queued", b"x"))
            answer = get(client)
            assert isinstance(answer, Response) and answer.status == 500 and answer.uuid == jobs[-1]
        # The records did reach the database (only the sync failed), so they are marked
        # cancelled once the core has dropped them: a restart must not dispatch them.
        reader = sqlite3.connect(store_of(running).path)  # the loop's connection is its own
        try:

            def states() -> list[str]:
                rows = reader.execute("SELECT state FROM jobs WHERE uuid IN (?, ?)", jobs).fetchall()
                return [row[0] for row in rows]

            until(lambda: states() == ["cancelled", "cancelled"])
        finally:
            reader.close()
        assert running.gateway.edges["nfp"].stats()["jobs_refused"] == 2
        w = spec_worker(running, "queued", b"w1")
        assert quiet(w)  # the refused jobs were taken out of the queue
    finally:
        finish(running)


def test_client_records_stay_bounded_behind_a_long_lived_worker(tmp_path: Path) -> None:
    # The worker's record is the oldest: the bound must pass over it and forget clients,
    # or every client after the bound would be kept for as long as the broker runs.
    with running_on(tmp_path, "[limits]\nmax_peers = 4\n") as gw:
        w = spec_worker(gw, "echo", b"w1")

        def one_job(i: int) -> None:
            client = gw.dealer("nfp")
            job = post(client, "echo", b"%d" % i)
            assert get(client).status == 202  # type: ignore[attr-defined]
            dispatched = get(w)
            assert isinstance(dispatched, Post) and dispatched.uuid == job
            send(w, Response(header=WORKER, service="echo", uuid=job, status=200, body=(b"%d" % i,)))
            assert get(client) == Response(
                header=BROKER, service="echo", uuid=job, status=200, body=(b"%d" % i,)
            )
            client.close(0)

        for i in range(12):
            one_job(i)
        stats = gw.gateway.edges["nfp"].stats()
        assert stats["workers"] == 1 and stats["peers"] <= 4
        one_job(12)  # the worker's record was kept: it is still a worker, not a stranger


@pytest.mark.parametrize("dialect", ["spec", "norfab"])
def test_a_get_of_a_job_that_failed_gives_its_failure_not_a_200(tmp_path: Path, dialect: str) -> None:
    # A job no worker took ends 408 at the queue expiry; a client that asks for it
    # afterwards (it was away, or polls as NorFab's client does) is told the same, not
    # 200 with the broker's error object as if it were the job's result.
    with running_on(tmp_path, "[routing]\nqueue_expiry_ms = 200\n") as gw:
        client = gw.dealer("nfp", b"c1")
        job = post(client, "nobody", b'{"task":"t"}', dialect=dialect)
        statuses = []
        for _ in range(2):
            reply = get(client, dialect)
            assert isinstance(reply, Response)
            statuses.append(reply.status)
        assert statuses == [202, 408]
        send(client, Get(header=CLIENT, service="nobody", target="any", uuid=job, body=(b"",)), dialect)
        again = get(client, dialect)
        assert isinstance(again, Response) and again.status == 408, again
        assert json.loads(again.body[0])["status"] == "FAILED"
