"""The NFP edge against raw DEALER peers, spec and NorFab dialects (specs/nfp.md,
docs/protocols/norfab-wire.md): jobs from POST to result, GETs, DELETE, redispatch and
garbage."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import zmq

from nfgate.codecs.nfp.messages import (
    BROKER,
    CLIENT,
    WORKER,
    Delete,
    Disconnect,
    Event,
    Get,
    Keepalive,
    Mmi,
    Post,
    Ready,
    Response,
)
from nfgate.config import load
from nfgate.serve import build
from nfgate.transports.zmq import connect_dealer
from tests.ports import random_binds

from .conftest import Running, finish, start_gateway
from .nfp_helpers import get, new_uuid, norfab_worker, post, quiet, send, spec_worker, store_of

pytestmark = pytest.mark.timeout(30)


def test_spec_post_202_then_relayed_response_then_get(gw: Running) -> None:
    w = spec_worker(gw, "echo", b"w1")
    client = gw.dealer("nfp")
    job = post(client, "echo", b"ping")
    accepted = get(client)
    assert isinstance(accepted, Response) and accepted.status == 202 and accepted.uuid == job
    assert json.loads(accepted.body[0])["workers"] == ["w1"]
    dispatched = get(w)
    assert isinstance(dispatched, Post) and dispatched.uuid == job and dispatched.body == (b"ping",)
    send(w, Response(header=WORKER, service="echo", uuid=job, status=200, body=(b"pong",)))
    relayed = get(client)
    assert relayed == Response(header=BROKER, service="echo", uuid=job, status=200, body=(b"pong",))
    send(client, Get(header=CLIENT, service="echo", target="any", uuid=job, body=(b"",)))
    assert get(client) == relayed  # kept: GET gives 200 with the result
    send(client, Get(header=CLIENT, service="echo", target="any", uuid=new_uuid(), body=(b"",)))
    unknown = get(client)
    assert isinstance(unknown, Response) and unknown.status == 400


def test_get_while_pending_is_300(gw: Running) -> None:
    w = spec_worker(gw, "slow", b"w1")
    client = gw.dealer("nfp")
    job = post(client, "slow", b"x")
    assert get(client).status == 202  # type: ignore[attr-defined]
    get(w)
    send(client, Get(header=CLIENT, service="slow", target="any", uuid=job, body=(b"",)))
    assert get(client).status == 300  # type: ignore[attr-defined]


def test_queued_without_worker_then_dispatched_when_one_registers(gw: Running) -> None:
    client = gw.dealer("nfp")
    job = post(client, "later", b"x")
    accepted = get(client)
    assert accepted.status == 202 and json.loads(accepted.body[0])["status"] == "QUEUED"  # type: ignore[attr-defined]
    w = spec_worker(gw, "later", b"w9")
    dispatched = get(w)
    assert isinstance(dispatched, Post) and dispatched.uuid == job


def test_target_all_gathers_one_result_per_worker(gw: Running) -> None:
    workers = [spec_worker(gw, "svc", name) for name in (b"a1", b"a2")]
    client = gw.dealer("nfp")
    job = post(client, "svc", b"q", target="all")
    accepted = get(client)
    assert sorted(json.loads(accepted.body[0])["workers"]) == ["a1", "a2"]  # type: ignore[attr-defined]
    for i, w in enumerate(workers):
        request = get(w)
        send(w, Response(header=WORKER, service="svc", uuid=request.uuid, status=200, body=(b"r%d" % i,)))  # type: ignore[attr-defined]
    bodies = {get(client).body for _ in workers}  # type: ignore[attr-defined]
    assert bodies == {(b"r0",), (b"r1",)}
    send(client, Get(header=CLIENT, service="svc", target="all", uuid=job, body=(b"",)))
    assert {get(client).body for _ in workers} == bodies  # type: ignore[attr-defined]


def test_named_target_comma_list_and_json_list(gw: Running) -> None:
    w1, w2, _w3 = (spec_worker(gw, "svc", n) for n in (b"n1", b"n2", b"n3"))
    client = gw.dealer("nfp")
    post(client, "svc", b"q", target="n2")
    assert json.loads(get(client).body[0])["workers"] == ["n2"]  # type: ignore[attr-defined]
    assert isinstance(get(w2), Post)
    assert quiet(w1, 100)
    post(client, "svc", b"q", target='["n1","n3"]')
    assert sorted(json.loads(get(client).body[0])["workers"]) == ["n1", "n3"]  # type: ignore[attr-defined]
    assert isinstance(get(w1), Post)


def test_a_norfab_named_worker_that_never_came_is_the_one_whose_part_fails(tmp_path: Path) -> None:
    # NorFab's client keys a job's results by worker: the 408 of the part waiting for
    # "n9" is keyed "n9", not under the first name of the 202 ("n1" answered already).
    gw = start_gateway(tmp_path, "[routing]\nqueue_expiry_ms = 300\n")
    try:
        w1 = norfab_worker(gw, "nf", b"n1")
        client = gw.dealer("nfp", b"c1")
        body = b'{"task":"t","kwargs":{},"args":[]}'
        job = post(client, "nf", body, target='["n1","n9"]', dialect="norfab")
        assert json.loads(get(client, "norfab").body[0])["workers"] == ["n1", "n9"]  # type: ignore[attr-defined]
        dispatched = get(w1, "norfab")
        assert isinstance(dispatched, Post)
        result = b'{"n1":{"result":1,"failed":false}}'
        send(w1, Response(header=WORKER, client=b"c1", uuid=job, status=200, body=(result,)), "norfab")
        answers = [json.loads(get(client, "norfab").body[0]) for _ in range(2)]  # type: ignore[attr-defined]
        assert answers[0] == {"n1": {"result": 1, "failed": False}}
        assert list(answers[1]) == ["n9"] and answers[1]["n9"]["failed"] is True
        assert "408" in " ".join(answers[1]["n9"]["errors"])
    finally:
        finish(gw)


def test_a_norfab_client_naming_a_worker_of_another_service_reaches_it(tmp_path: Path) -> None:
    # NorFab's broker looks a named worker up among all its workers, whatever the job's
    # service (broker.py filter_workers), and nfcli offers every worker's name: a job
    # for "echo" naming x1 (of "echo2") runs on x1 at once. A spec client's named worker
    # must offer the service (specs/nfp.md): its job waits for one that does, and expires.
    gw = start_gateway(tmp_path, "[routing]\nqueue_expiry_ms = 300\n")
    try:
        w1, x1 = norfab_worker(gw, "echo", b"w1"), norfab_worker(gw, "echo2", b"x1")
        client = gw.dealer("nfp", b"c1")
        body = b'{"task":"echo","kwargs":{},"args":[]}'
        job = post(client, "echo", body, target='["w1","x1"]', dialect="norfab")
        assert sorted(json.loads(get(client, "norfab").body[0])["workers"]) == ["w1", "x1"]  # type: ignore[attr-defined]
        for name, sock in (("w1", w1), ("x1", x1)):
            dispatched = get(sock, "norfab")
            assert isinstance(dispatched, Post) and dispatched.uuid == job
            result = json.dumps({name: {"result": name, "failed": False}}).encode()
            send(sock, Response(header=WORKER, client=b"c1", uuid=job, status=200, body=(result,)), "norfab")
        answers = {k: v for _ in range(2) for k, v in json.loads(get(client, "norfab").body[0]).items()}  # type: ignore[attr-defined]
        assert answers == {"w1": {"result": "w1", "failed": False}, "x1": {"result": "x1", "failed": False}}
        spec_client = gw.dealer("nfp", b"c2")
        post(spec_client, "echo", b"q", target="x1")
        assert get(spec_client).status == 202  # type: ignore[attr-defined]
        assert quiet(x1, 200)
        assert get(spec_client).status == 408  # type: ignore[attr-defined]
    finally:
        finish(gw)


@pytest.mark.parametrize("name", ["wörker-1", "w 2"])
def test_a_norfab_worker_named_in_utf8_text_is_known_by_that_name(gw: Running, name: str) -> None:
    # NorFab's identity is the worker's name as UTF-8: the 202, a named target and the
    # worker's result (keyed by its own name) must all use that name.
    w = norfab_worker(gw, "nf", name.encode())
    client = gw.dealer("nfp", "clïent".encode())
    job = post(
        client, "nf", b'{"task":"t","kwargs":{},"args":[]}', target=json.dumps([name]), dialect="norfab"
    )
    accepted = get(client, "norfab")
    assert accepted.status == 202 and json.loads(accepted.body[0])["workers"] == [name]  # type: ignore[attr-defined]
    dispatched = get(w, "norfab")
    assert isinstance(dispatched, Post) and dispatched.uuid == job and dispatched.client == "clïent".encode()
    result = json.dumps({name: {"result": 1, "failed": False}}).encode()
    send(w, Response(header=WORKER, client=dispatched.client, uuid=job, status=200, body=(result,)), "norfab")
    final = get(client, "norfab")
    assert final.status == 200 and json.loads(final.body[0])[name]["result"] == 1  # type: ignore[attr-defined]
    for task, listed in (("show_workers", name), ("show_clients", "clïent")):
        body = json.dumps({"task": task, "kwargs": {}, "args": []}).encode()
        ask = Mmi(header=CLIENT, service="mmi.service.broker", target="all", uuid=new_uuid(), body=(body,))
        send(client, ask, "norfab")
        get(client, "norfab")  # NorFab's broker answers MMI twice: a 202-like RESPONSE, then the MMI
        rows = json.loads(get(client, "norfab").body[0])  # type: ignore[attr-defined]
        assert [row["name"] for row in rows] == [listed]


def test_norfab_worker_flow_201_event_get_200(gw: Running) -> None:
    w = norfab_worker(gw, "nf", b"nfw")
    client = gw.dealer("nfp", b"c1")
    job = post(client, "nf", b'{"task":"t","kwargs":{},"args":[],"timeout":5}', dialect="norfab")
    assert get(client, "norfab").status == 202  # type: ignore[attr-defined]
    dispatched = get(w, "norfab")
    assert isinstance(dispatched, Post) and dispatched.client == b"c1" and dispatched.uuid == job
    send(
        w, Response(header=WORKER, client=b"c1", uuid=job, status=201, body=(b'{"worker":"nfw"}',)), "norfab"
    )
    assert get(client, "norfab").status == 201  # type: ignore[attr-defined]
    event = b'{"worker":"nfw","uuid":"%s","event_type":"result_ready"}' % job.encode()
    send(w, Event(header=WORKER, client=b"c1", uuid=job, status=200, body=(event,)), "norfab")
    assert isinstance(get(client, "norfab"), Event)
    fetch = get(w, "norfab")  # the gateway GETs the result itself
    assert isinstance(fetch, Get) and fetch.uuid == job
    result = b'{"nfw":{"result":42,"failed":false}}'
    send(w, Response(header=WORKER, client=b"c1", uuid=job, status=200, body=(result,)), "norfab")
    final = get(client, "norfab")
    assert final.status == 200 and json.loads(final.body[0]) == {"nfw": {"result": 42, "failed": False}}  # type: ignore[attr-defined]


def test_a_norfab_0_24_workers_last_completed_event_is_fetched_like_result_ready(gw: Running) -> None:
    # NorFab 0.24 has no result_ready: its worker ends a job with a "progress" EVENT whose
    # message and status are "completed" (after saving the result). A client of another
    # protocol (here a spec one) gets the result only if the gateway GETs it then.
    w = norfab_worker(gw, "nf", b"nfw")
    client = gw.dealer("nfp")
    job = post(client, "nf", b'{"task":"t","kwargs":{},"args":[]}')
    assert get(client).status == 202  # type: ignore[attr-defined]
    dispatched = get(w, "norfab")
    assert isinstance(dispatched, Post)
    uuid, to = dispatched.uuid, dispatched.client
    event = b'{"worker":"nfw","service":"nf","uuid":"%s","event_type":"progress","message":"%s","task":"t","status":"%s"}'
    for message, status in ((b"starting", b"running"), (b"completed", b"running")):
        body = event % (uuid.encode(), message, status)
        send(w, Event(header=WORKER, client=to, uuid=uuid, status=200, body=(body,)), "norfab")
    assert quiet(w, 300)  # progress only: no GET
    body = event % (uuid.encode(), b"completed", b"completed")
    send(w, Event(header=WORKER, client=to, uuid=uuid, status=200, body=(body,)), "norfab")
    fetch = get(w, "norfab")
    assert isinstance(fetch, Get) and fetch.uuid == uuid
    result = b'{"nfw":{"result":7,"failed":false}}'
    send(w, Response(header=WORKER, client=to, uuid=uuid, status=200, body=(result,)), "norfab")
    final = get(client)
    assert isinstance(final, Response) and final.uuid == job and final.status == 200


def _running_norfab_job(gw: Running) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes], str]:
    """A NorFab client's job held by a NorFab worker: (client, worker, uuid)."""
    w = norfab_worker(gw, "nf", b"nfw")
    client = gw.dealer("nfp", b"c1")
    job = post(client, "nf", b'{"task":"t","kwargs":{},"args":[]}', dialect="norfab")
    assert get(client, "norfab").status == 202  # type: ignore[attr-defined]
    assert isinstance(get(w, "norfab"), Post)
    return client, w, job


def _poll(client: zmq.Socket[bytes], job: str) -> None:
    send(client, Get(header=CLIENT, service="nf", target='["nfw"]', uuid=job, body=(b"{}",)), "norfab")


def test_a_norfab_clients_get_of_a_running_job_is_answered_by_its_worker(gw: Running) -> None:
    # NorFab's broker passes a GET on to the worker, which answers from its records:
    # 300 while running, 102 with the question when it waits for input (how a client
    # that was away when the question went out learns it), then the result.
    client, w, job = _running_norfab_job(gw)
    _poll(client, job)
    asked = get(w, "norfab")
    assert isinstance(asked, Get) and asked.uuid == job and asked.client == b"c1"
    _poll(client, job)  # one GET at a time per job and worker: this one the gateway answers
    assert get(client, "norfab").status == 300  # type: ignore[attr-defined]
    question = b'{"worker":"nfw","status":"WAITING_CLIENT_INPUT","input_request":{"id":"q1"}}'
    send(w, Response(header=WORKER, client=b"c1", uuid=job, status=102, body=(question,)), "norfab")
    waiting = get(client, "norfab")
    assert isinstance(waiting, Response) and waiting.status == 102 and waiting.body == (question,)
    _poll(client, job)  # answered: the next GET goes to the worker again
    assert isinstance(get(w, "norfab"), Get)
    result = b'{"nfw":{"result":3,"failed":false}}'
    send(w, Response(header=WORKER, client=b"c1", uuid=job, status=200, body=(result,)), "norfab")
    final = get(client, "norfab")
    assert final.status == 200 and json.loads(final.body[0])["nfw"]["result"] == 3  # type: ignore[attr-defined]
    _poll(client, job)  # finished: from the store, the worker is not asked
    again = get(client, "norfab")
    assert again.status == 200 and json.loads(again.body[0])["nfw"]["result"] == 3  # type: ignore[attr-defined]
    assert quiet(w, 200)


def test_a_get_naming_finished_and_running_workers_reaches_the_running_ones(gw: Running) -> None:
    # NorFab 0.24 clients poll with a GET naming every worker of the job, finished or
    # not. The finished ones' results come from the store; the GET still goes on to the
    # workers running, as NorFab's broker sends it to each, so a question (102) from one
    # of them reaches the client.
    w1, w2 = norfab_worker(gw, "nf", b"nfw1"), norfab_worker(gw, "nf", b"nfw2")
    client = gw.dealer("nfp", b"c1")
    job = post(client, "nf", b'{"task":"t","kwargs":{},"args":[]}', target="all", dialect="norfab")
    assert get(client, "norfab").status == 202  # type: ignore[attr-defined]
    assert isinstance(get(w1, "norfab"), Post) and isinstance(get(w2, "norfab"), Post)
    result = b'{"nfw1":{"result":1,"failed":false}}'
    send(w1, Response(header=WORKER, client=b"c1", uuid=job, status=200, body=(result,)), "norfab")
    first = get(client, "norfab")
    assert first.status == 200 and "nfw1" in json.loads(first.body[0])  # type: ignore[attr-defined]
    send(
        client, Get(header=CLIENT, service="nf", target='["nfw1","nfw2"]', uuid=job, body=(b"{}",)), "norfab"
    )
    stored = get(client, "norfab")
    assert stored.status == 200 and set(json.loads(stored.body[0])) == {"nfw1"}  # type: ignore[attr-defined]
    asked = get(w2, "norfab")
    assert isinstance(asked, Get) and asked.uuid == job and asked.client == b"c1"
    assert quiet(w1, 200)  # the finished worker is not asked
    question = b'{"worker":"nfw2","status":"WAITING_CLIENT_INPUT","input_request":{"id":"q1"}}'
    send(w2, Response(header=WORKER, client=b"c1", uuid=job, status=102, body=(question,)), "norfab")
    waiting = get(client, "norfab")
    assert isinstance(waiting, Response) and waiting.status == 102 and waiting.body == (question,)


def test_a_get_from_another_socket_than_the_jobs_client_is_answered_by_the_gateway(gw: Running) -> None:
    # The worker answers a passed-on GET to the job's client: a NorFab client back under
    # a new identity (a restarted process) would get nothing, and the job's own client
    # an answer it never asked for. So that GET is answered from the store: 300 while
    # the job runs, the result once it is in.
    client, w, job = _running_norfab_job(gw)
    client.close(0)
    other = gw.dealer("nfp", b"c2")
    for _ in range(2):
        _poll(other, job)
        pending = get(other, "norfab")
        assert isinstance(pending, Response) and pending.status == 300
    assert quiet(w, 200)  # the worker was not asked
    assert gw.gateway.edges["nfp"].counters["unroutable"] == 0
    result = b'{"nfw":{"result":6,"failed":false}}'
    send(w, Response(header=WORKER, client=b"c1", uuid=job, status=200, body=(result,)), "norfab")
    for _ in range(50):  # until the gateway has read the result (bounded)
        _poll(other, job)
        final = get(other, "norfab")
        if final.status != 300:  # type: ignore[attr-defined]
            break
        time.sleep(0.02)
    assert final.status == 200 and json.loads(final.body[0])["nfw"]["result"] == 6  # type: ignore[attr-defined]


def test_a_job_not_found_answer_to_a_passed_on_get_is_dropped(gw: Running) -> None:
    # A NorFab worker files a POST and answers a GET in separate threads: "JOB NOT FOUND"
    # can come before it filed the job. Relayed, it would fail the job at the client.
    client, w, job = _running_norfab_job(gw)
    _poll(client, job)
    assert isinstance(get(w, "norfab"), Get)
    missing = b'{"worker":"nfw","status":"JOB NOT FOUND"}'
    send(w, Response(header=WORKER, client=b"c1", uuid=job, status=404, body=(missing,)), "norfab")
    assert quiet(client, 200)
    assert gw.gateway.edges["nfp"].counters["poll_not_found"] == 1
    result = b'{"nfw":{"result":4,"failed":false}}'
    send(w, Response(header=WORKER, client=b"c1", uuid=job, status=200, body=(result,)), "norfab")
    assert get(client, "norfab").status == 200  # type: ignore[attr-defined]


def test_a_result_ready_while_a_client_get_is_out_is_fetched_after_its_answer(gw: Running) -> None:
    client, w, job = _running_norfab_job(gw)
    _poll(client, job)
    assert isinstance(get(w, "norfab"), Get)
    event = b'{"worker":"nfw","uuid":"%s","event_type":"result_ready"}' % job.encode()
    send(w, Event(header=WORKER, client=b"c1", uuid=job, status=200, body=(event,)), "norfab")
    assert isinstance(get(client, "norfab"), Event)
    assert quiet(w, 200)  # no second GET while the first is unanswered
    pending = b'{"worker":"nfw","status":"STARTED"}'
    send(w, Response(header=WORKER, client=b"c1", uuid=job, status=300, body=(pending,)), "norfab")
    assert get(client, "norfab").status == 300  # type: ignore[attr-defined]
    fetch = get(w, "norfab")  # now the gateway's own GET for the result
    assert isinstance(fetch, Get) and fetch.uuid == job
    result = b'{"nfw":{"result":5,"failed":false}}'
    send(w, Response(header=WORKER, client=b"c1", uuid=job, status=200, body=(result,)), "norfab")
    assert get(client, "norfab").status == 200  # type: ignore[attr-defined]


def test_a_norfab_job_sent_again_has_a_uuid_of_its_own(gw: Running) -> None:
    # A NorFab worker drops, without a word, a POST for a uuid it already has (it keeps
    # its jobs across its own restarts): a job dispatched a second time goes out under a
    # new uuid, and its result still reaches the client under the client's uuid.
    w1 = norfab_worker(gw, "nf", b"nw1")
    client = gw.dealer("nfp", b"c1")
    job = post(client, "nf", b'{"task":"t","kwargs":{},"args":[]}', dialect="norfab")
    assert get(client, "norfab").status == 202  # type: ignore[attr-defined]
    first = get(w1, "norfab")
    assert isinstance(first, Post) and first.uuid == job  # the first dispatch: the client's uuid
    send(w1, Disconnect(header=WORKER, service="nf", body=None), "norfab")  # gone: the job goes again
    w2 = norfab_worker(gw, "nf", b"nw2")
    again = get(w2, "norfab")
    assert isinstance(again, Post) and again.uuid != job and again.body == first.body
    send(w2, Response(header=WORKER, client=b"c1", uuid=again.uuid, status=201, body=(b"{}",)), "norfab")
    assert get(client, "norfab").status == 201  # type: ignore[attr-defined]
    result = b'{"nw2":{"result":7,"failed":false}}'
    send(w2, Response(header=WORKER, client=b"c1", uuid=again.uuid, status=200, body=(result,)), "norfab")
    final = get(client, "norfab")
    assert final.uuid == job and final.status == 200  # type: ignore[attr-defined]
    # Re-keyed to the worker the 202 announced (docs/protocols/nfp.md).
    assert json.loads(final.body[0])["nw1"]["result"] == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize("worker_dialect", ["norfab", "spec"])
def test_a_norfab_workers_result_is_relayed_as_it_wrote_it_anything_else_is_wrapped(
    gw: Running, worker_dialect: str
) -> None:
    # Not one key: a NorFab worker's bytes still go through untouched (NorFab's own
    # broker relays results as bytes); a spec worker's body is wrapped in Result fields.
    result = b'{"w1": 1, "other": 2}'
    w = norfab_worker(gw, "nf", b"w1") if worker_dialect == "norfab" else spec_worker(gw, "nf", b"w1")
    client = gw.dealer("nfp", b"c1")
    job = post(client, "nf", b"{}", dialect="norfab")
    assert get(client, "norfab").status == 202  # type: ignore[attr-defined]
    assert get(w, worker_dialect).uuid == job  # type: ignore[attr-defined]
    if worker_dialect == "norfab":
        reply = Response(header=WORKER, client=b"c1", uuid=job, status=200, body=(result,))
    else:
        reply = Response(header=WORKER, service="nf", uuid=job, status=200, body=(result,))
    send(w, reply, worker_dialect)
    final = get(client, "norfab")
    assert final.status == 200  # type: ignore[attr-defined]
    if worker_dialect == "norfab":
        assert final.body == (result,)  # type: ignore[attr-defined]
    else:
        assert json.loads(final.body[0])["w1"]["result"] == {"w1": 1, "other": 2}  # type: ignore[attr-defined]


def test_worker_death_redispatches_to_another_worker(tmp_path: object) -> None:

    toml = "[edges.nfp]\nheartbeat_ms = 100\nliveness = 3\n"
    gw = start_gateway(tmp_path, toml)  # type: ignore[arg-type]
    try:
        dying = spec_worker(gw, "svc", b"d1")
        client = gw.dealer("nfp")
        job = post(client, "svc", b"q")
        assert get(client).status == 202  # type: ignore[attr-defined]
        assert get(dying).uuid == job  # type: ignore[attr-defined]
        dying.close(0)  # dies without a word; 300 ms later it is dead
        healthy = gw.dealer("nfp", b"h1")
        send(healthy, Ready(service="svc"))
        for _ in range(50):
            message = get(healthy)
            if isinstance(message, Post):
                break
            if isinstance(message, Disconnect):
                # This test thread was held up past the 300 ms too (a loaded machine):
                # start again, as a real worker does.
                send(healthy, Ready(service="svc"))
                continue
            send(healthy, Keepalive(header=WORKER, service="svc"))
        else:
            pytest.fail("never re-dispatched")
        assert message.uuid == job
        send(healthy, Response(header=WORKER, service="svc", uuid=job, status=200, body=(b"ok",)))
        assert get(client).body == (b"ok",)  # type: ignore[attr-defined]
    finally:
        finish(gw)


def test_delete_cancels_a_queued_job(gw: Running) -> None:
    client = gw.dealer("nfp")
    job = post(client, "nobody", b"x")
    assert get(client).status == 202  # type: ignore[attr-defined]
    send(client, Delete(header=CLIENT, service="nobody", target="any", uuid=job, body=(b"",)))
    cancelled = get(client)
    assert cancelled.status == 200 and json.loads(cancelled.body[0])["status"] == "CANCELLED"  # type: ignore[attr-defined]
    w = spec_worker(gw, "nobody", b"late")
    assert quiet(w, 300)
    # No result will ever come: 400 ("SHOULD NOT retry") with the state, not 300 ("retry").
    send(client, Get(header=CLIENT, service="nobody", target="any", uuid=job, body=(b"",)))
    after = get(client)
    assert isinstance(after, Response) and after.status == 400
    assert json.loads(after.body[0])["status"] == "CANCELLED"


def test_unknown_worker_gets_disconnect(gw: Running) -> None:
    stranger = gw.dealer("nfp", b"ghost")
    send(stranger, Keepalive(header=WORKER, service="svc"), "norfab")
    message = get(stranger, "norfab")
    assert isinstance(message, Disconnect) and not message.legacy_order


def test_garbage_is_counted_and_harmless(gw: Running) -> None:
    w = spec_worker(gw, "echo", b"gw1")
    bad = gw.dealer("nfp")
    for junk in ([b"x"], [b"", b"NFPC01"], [b"", b"NFPC01", b"\x04", b"s"], [b"", b"XXXX01", b"\x04"]):
        bad.send_multipart(junk)
    client = gw.dealer("nfp")
    post(client, "echo", b"still")
    assert get(client).status == 202  # type: ignore[attr-defined]
    assert get(w).body == (b"still",)  # type: ignore[attr-defined]
    assert gw.gateway.edges["nfp"].stats()["undecodable"] >= 3


def test_a_resend_from_a_new_socket_takes_the_job_over(gw: Running) -> None:
    """The spec's retry ("close the request socket and open a new socket, and resend the
    request on that new socket") got 400 "job uuid already in use", which says SHOULD
    NOT retry, while the job ran on. Now the new socket is answered 202 again and gets
    the result; the job is routed once. Another service under the same uuid is still
    refused."""
    worker = spec_worker(gw, "slow", b"sw-1")
    first = gw.dealer("nfp", b"c-old")
    job = post(first, "slow", b"work")
    assert get(first).status == 202  # type: ignore[attr-defined]
    dispatched = get(worker)
    assert isinstance(dispatched, Post)
    second = gw.dealer("nfp", b"c-new")
    send(second, Post(header=CLIENT, service="slow", target="any", uuid=job, body=(b"work",)))
    again = get(second)
    assert isinstance(again, Response) and again.status == 202 and again.uuid == job
    other = gw.dealer("nfp", b"c-other")
    send(other, Post(header=CLIENT, service="fast", target="any", uuid=job, body=(b"x",)))
    refused = get(other)
    assert isinstance(refused, Response) and refused.status == 400
    assert quiet(worker)  # routed once
    send(worker, Response(header=WORKER, service="slow", uuid=dispatched.uuid, status=200, body=(b"done",)))
    result = get(second)
    assert isinstance(result, Response) and result.status == 200 and result.body == (b"done",)
    assert quiet(first)
    assert store_of(gw).get(job).client == b"c-new"  # type: ignore[union-attr]


def test_a_resend_read_with_the_first_post_does_not_take_over_a_job_not_yet_taken(tmp_path: Path) -> None:
    """Two sockets POST the same uuid, read in one batch: the second found the job before
    the core had taken it and took it over, answered 202 before anything was stored; with
    the service's queue full the core refused the first, the refusal went to no one, and
    the job stayed "pending" for ever. Now only a job the core has taken is taken over."""
    config = tmp_path / "nfgate.toml"
    config.write_text("[routing]\nmax_queue_per_service = 1\n")
    cfg = load(config, data_dir=tmp_path / "data", binds=random_binds(), no_metrics=True)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    gateway = build(cfg, context)  # driven by hand: both POSTs are read in one step
    try:
        url = gateway.edges["nfp"].endpoint
        socks = [connect_dealer(context, url, name) for name in (b"filler", b"c-a", b"c-b")]
        for sock in socks:
            sock.setsockopt(zmq.RCVTIMEO, 3000)
        filler = new_uuid()
        send(socks[0], Post(header=CLIENT, service="full", target="any", uuid=filler, body=(b"1",)))
        for _ in range(50):  # the filler job takes the queue's one place
            gateway.step(20)
            if gateway.router.stats()["queued"] == 1:
                break
        job = new_uuid()
        for sock in socks[1:]:
            send(sock, Post(header=CLIENT, service="full", target="any", uuid=job, body=(b"2",)))
        time.sleep(0.2)  # both waiting on the socket: one step reads both
        for _ in range(10):
            gateway.step(20)
        # ROUTER fair-queues its peers: either POST may be read first. The first read is
        # refused 500 (the queue is full), the other 400 (the uuid is in use, not yet taken).
        answers = [get(sock) for sock in socks[1:]]
        assert all(isinstance(answer, Response) for answer in answers)
        assert sorted(answer.status for answer in answers) == [400, 500]  # type: ignore[union-attr]
        assert set(gateway.edges["nfp"].jobs._by_uuid) == {filler}  # type: ignore[attr-defined]
        # The same socket resending before the core took the job: one answer, the 500,
        # not a 202 first (before, it was answered 202 for a job then refused).
        again = new_uuid()
        for _ in range(2):
            send(socks[1], Post(header=CLIENT, service="full", target="any", uuid=again, body=(b"3",)))
        time.sleep(0.2)
        for _ in range(10):
            gateway.step(20)
        refused = get(socks[1])
        assert isinstance(refused, Response) and refused.status == 500 and refused.uuid == again
        assert quiet(socks[1])
        for sock in socks:
            sock.close(0)
    finally:
        gateway.close()
        context.destroy(linger=0)
