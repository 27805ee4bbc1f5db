"""A job cancelled at a MemoDB worker (an NFP client's DELETE): MemoDB cannot tell the
worker, so it finishes; its RESULT is dropped, and the next job, which the core gives the
worker at once, waits at the edge until that RESULT comes (docs/routing.md "Cancel")."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from nfgate.codecs.memodb.messages import Result
from nfgate.codecs.nfp.messages import CLIENT, Delete, Response

from . import memodb_helpers as mdb
from .conftest import Running
from .nfp_helpers import get, post, quiet, send

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def peers(gw: Running) -> Iterator[mdb.Peers]:
    made = mdb.Peers(gw)
    yield made
    made.close()


def test_a_cancelled_jobs_result_is_dropped_and_the_next_job_waits_for_it(
    gw: Running, peers: mdb.Peers
) -> None:
    worker = peers.req()
    mdb.ready(gw, worker, "calc")
    first = gw.dealer("nfp")
    job = post(first, "calc", b"slow")
    assert get(first).status == 202  # type: ignore[attr-defined]
    running = mdb.next_job(worker)
    assert running.payload == b"slow"

    send(first, Delete(header=CLIENT, service="calc", target="any", uuid=job, body=(b"",)))
    cancelled = get(first)
    assert isinstance(cancelled, Response) and json.loads(cancelled.body[0])["status"] == "CANCELLED"
    second = gw.dealer("nfp")
    other = post(second, "calc", b"next")
    assert get(second).status == 202  # type: ignore[attr-defined]

    # The worker finishes the cancelled job; only then is it given the next one.
    mdb.send(worker, Result(id=running.id, payload=b"slow done"))
    following = mdb.next_job(worker)
    assert following.payload == b"next"
    mdb.send(worker, Result(id=following.id, payload=b"next done"))
    answer = get(second)
    assert isinstance(answer, Response) and (answer.uuid, answer.status) == (other, 200)
    assert answer.body == (b"next done",)
    assert quiet(first)  # the cancelled job's result went nowhere
