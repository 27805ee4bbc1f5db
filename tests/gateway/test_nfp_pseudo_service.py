"""NorFab's pseudo-service ``all``: a job for the workers of every service, as NorFab's
nfcli (``show norfab workers``) and nfweb (monitoring) send ``get_stats``."""

from __future__ import annotations

import json

import pytest

from nfgate.codecs.nfp.messages import WORKER, Post, Response

from .conftest import Running
from .nfp_helpers import get, norfab_worker, post, send, spec_worker

pytestmark = pytest.mark.timeout(30)

BODY = b'{"task":"get_stats","kwargs":{},"args":[],"timeout":5}'


def answer(w: object, job: Post, name: str) -> None:
    result = b'{"%s":{"result":"%s","failed":false}}' % (name.encode(), name.encode())
    send(w, Response(header=WORKER, client=job.client, uuid=job.uuid, status=200, body=(result,)), "norfab")  # type: ignore[arg-type]


def test_all_workers_of_every_service_get_the_job_and_answer_it(gw: Running) -> None:
    n1 = norfab_worker(gw, "nornir", b"n1")
    f1 = norfab_worker(gw, "filesharing", b"f1")
    client = gw.dealer("nfp", b"c1")
    job = post(client, "all", BODY, target="all", dialect="norfab")
    accepted = get(client, "norfab")
    assert isinstance(accepted, Response) and accepted.status == 202
    assert json.loads(accepted.body[0])["workers"] == ["n1", "f1"]
    for w, name in ((n1, "n1"), (f1, "f1")):
        dispatched = get(w, "norfab")
        assert isinstance(dispatched, Post) and dispatched.body == (BODY,)
        answer(w, dispatched, name)
    # One 200 per worker, as NorFab's broker relays them; the client gathers them.
    finals = [get(client, "norfab") for _ in range(2)]
    assert all(isinstance(f, Response) and f.status == 200 and f.uuid == job for f in finals)
    assert [json.loads(f.body[0]) for f in finals] == [  # type: ignore[attr-defined]
        {"n1": {"result": "n1", "failed": False}},
        {"f1": {"result": "f1", "failed": False}},
    ]


def test_any_is_one_worker_of_each_service_and_names_pick_across_services(gw: Running) -> None:
    norfab_worker(gw, "nornir", b"n1")
    norfab_worker(gw, "nornir", b"n2")
    norfab_worker(gw, "filesharing", b"f1")
    client = gw.dealer("nfp", b"c1")
    post(client, "all", BODY, target="any", dialect="norfab")
    assert json.loads(get(client, "norfab").body[0])["workers"] == ["n1", "f1"]  # type: ignore[attr-defined]
    # Names as NorFab sends them: unknown ones dropped, each worker whatever its service.
    post(client, "all", BODY, target='["f1","gone","n2"]', dialect="norfab")
    assert json.loads(get(client, "norfab").body[0])["workers"] == ["f1", "n2"]  # type: ignore[attr-defined]


def test_spec_workers_are_sent_their_own_service_and_no_match_is_400(gw: Running) -> None:
    w = spec_worker(gw, "echo", b"s1")
    client = gw.dealer("nfp")
    post(client, "all", b"x", target="s1")
    assert get(client).status == 202  # type: ignore[attr-defined]
    dispatched = get(w)
    assert isinstance(dispatched, Post) and dispatched.service == "echo"
    post(client, "all", b"x", target="nobody")
    refused = get(client)
    assert isinstance(refused, Response) and refused.status == 400
    assert "no worker of any service" in json.loads(refused.body[0])["errors"][0]
