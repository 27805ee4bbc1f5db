"""The NFP edge's refusals and failures: a full queue, a DELETE from a client that did
not POST the job, a worker's error status for a NorFab client (docs/translation.md)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from nfgate.codecs.nfp.messages import BROKER, CLIENT, WORKER, Delete, Get, Open, Post, Response

from .conftest import Running, running_on
from .nfp_helpers import get, post, send, spec_worker, store_of

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("dialect", ["spec", "norfab"])
def test_post_beyond_the_service_queue_limit_is_500_and_its_uuid_stays_free(
    tmp_path: Path, dialect: str
) -> None:
    """A POST the core turns away (the service's queue is full) gets 500 ("SHOULD
    retry"), never silence; no record is kept, so a retry of the same uuid is judged
    afresh and served once a worker takes the queue."""
    with running_on(tmp_path, "[routing]\nmax_queue_per_service = 2\n") as gw:
        client = gw.dealer("nfp")
        if dialect == "spec":
            send(client, Open(header=CLIENT))
            assert get(client) == Open(header=BROKER)
        queued = [post(client, "busy", b"q%d" % i, dialect=dialect) for i in range(2)]
        assert [get(client, dialect).status for _ in queued] == [202, 202]  # type: ignore[attr-defined]
        extra = post(client, "busy", b"extra", dialect=dialect)
        refused = get(client, dialect)
        assert isinstance(refused, Response) and (refused.uuid, refused.status) == (extra, 500)
        assert "queue full" in refused.body[0].decode()
        send(client, Get(header=CLIENT, service="busy", target="any", uuid=extra, body=(b"",)), dialect)
        assert get(client, dialect).status == 400  # type: ignore[attr-defined]  # unknown: nothing kept
        assert gw.gateway.edges["nfp"].counters["jobs_turned_away"] == 1
        reader = sqlite3.connect(store_of(gw).path)  # the loop's connection is its own
        try:  # no record: nothing to dispatch again after a restart
            assert reader.execute("SELECT count(*) FROM jobs WHERE uuid = ?", (extra,)).fetchone() == (0,)
        finally:
            reader.close()
        w = spec_worker(gw, "busy", b"wb")

        def serve_one(expect: str) -> None:
            request = get(w)
            assert isinstance(request, Post) and request.uuid == expect
            send(w, Response(header=WORKER, service="busy", uuid=expect, status=200, body=(b"ok",)))
            answer = get(client, dialect)
            if dialect == "norfab" and expect != extra:  # queued at POST: a 202 naming the worker first
                assert isinstance(answer, Response) and json.loads(answer.body[0])["workers"] == ["wb"]
                answer = get(client, dialect)
            assert isinstance(answer, Response) and (answer.uuid, answer.status) == (expect, 200)

        for job in queued:
            serve_one(job)
        post_again = Post(header=CLIENT, service="busy", target="any", uuid=extra, body=(b"again",))
        send(client, post_again, dialect)
        assert get(client, dialect).status == 202  # type: ignore[attr-defined]
        serve_one(extra)


def test_a_spec_workers_error_status_reaches_a_norfab_client_as_failed(gw: Running) -> None:
    # NorFab's client reads "failed" in a 200 and drops the body of a 4xx/5xx: another
    # protocol's failure is put in NorFab's form, the worker's body kept as the result.
    w = spec_worker(gw, "lookup", b"sw1")
    client = gw.dealer("nfp")
    job = post(client, "lookup", b"{}", dialect="norfab")
    assert get(client, "norfab").status == 202  # type: ignore[attr-defined]
    request = get(w)
    send(
        w,
        Response(header=WORKER, service="lookup", uuid=request.uuid, status=404, body=(b'{"missing":"x"}',)),
    )  # type: ignore[attr-defined]
    answer = get(client, "norfab")
    assert isinstance(answer, Response) and (answer.uuid, answer.status) == (job, 200)
    result = json.loads(answer.body[0])["sw1"]
    assert result["failed"] is True and result["status"] == "failed"
    assert result["result"] == {"missing": "x"} and "404" in result["errors"][0]


def test_delete_from_another_client_is_400_and_the_job_runs_on(gw: Running) -> None:
    owner, other = gw.dealer("nfp"), gw.dealer("nfp")
    job = post(owner, "later", b"x")
    assert get(owner).status == 202  # type: ignore[attr-defined]
    send(other, Delete(header=CLIENT, service="later", target="any", uuid=job, body=(b"",)))
    refused = get(other)
    assert isinstance(refused, Response) and refused.status == 400
    assert "another client" in refused.body[0].decode()
    w = spec_worker(gw, "later", b"lw")
    assert get(w).uuid == job  # type: ignore[attr-defined]  # still queued, now dispatched
