"""The NFP edge against raw DEALER peers, spec and NorFab dialects (specs/nfp.md,
docs/protocols/norfab-wire.md)."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid as uuidlib
from pathlib import Path

import psutil
import pytest
import zmq

from nfgate.codecs import nfp
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
    Open,
    Post,
    Ready,
    Response,
)
from nfgate.store import JobStore

from .conftest import Running, beats, finish, recv, running_on, start_gateway, until

pytestmark = pytest.mark.timeout(30)


def send(sock: zmq.Socket[bytes], message: object, dialect: str = "spec") -> None:
    sock.send_multipart(nfp.encode(message, dialect))  # type: ignore[arg-type]


def get(sock: zmq.Socket[bytes], dialect: str = "spec") -> object:
    """The next message that is not a broker KEEPALIVE."""
    for _ in range(20):
        message = nfp.decode(recv(sock), dialect)
        if not isinstance(message, Keepalive):
            return message
    pytest.fail("only keepalives")


def quiet(sock: zmq.Socket[bytes], wait_ms: int = 300) -> bool:
    """True when nothing but broker KEEPALIVEs arrives within ``wait_ms``."""
    while sock.poll(wait_ms):
        if not isinstance(nfp.decode(sock.recv_multipart()), Keepalive):
            return False
    return True


def new_uuid() -> str:
    return uuidlib.uuid4().hex


def spec_worker(gw: Running, service: str, identity: bytes) -> zmq.Socket[bytes]:
    sock = gw.dealer("nfp", identity)
    send(sock, Open(header=WORKER))
    assert get(sock) == Open(header=BROKER)
    send(sock, Ready(service=service))
    until(lambda: any(w.name == identity.decode() for w in gw.gateway.router.workers()))
    return sock


def norfab_worker(gw: Running, service: str, identity: bytes) -> zmq.Socket[bytes]:
    sock = gw.dealer("nfp", identity)
    send(sock, Ready(service=service), "norfab")  # NorFab: no OPEN
    until(lambda: any(w.name == identity.decode() for w in gw.gateway.router.workers()))
    return sock


def post(
    sock: zmq.Socket[bytes], service: str, body: bytes, target: str = "any", dialect: str = "spec"
) -> str:
    job = new_uuid()
    send(sock, Post(header=CLIENT, service=service, target=target, uuid=job, body=(body,)), dialect)
    return job


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


def test_mmi_show_workers_answered_twice_for_norfab(gw: Running) -> None:
    norfab_worker(gw, "svc", b"mw1")
    client = gw.dealer("nfp", b"mc")
    job = new_uuid()
    body = b'{"task":"show_workers","kwargs":{},"args":[]}'
    send(
        client,
        Mmi(header=CLIENT, service="mmi.service.broker", target="all", uuid=job, body=(body,)),
        "norfab",
    )
    first, second = get(client, "norfab"), get(client, "norfab")
    assert isinstance(first, Response) and isinstance(second, Mmi) and second.status == 200
    rows = json.loads(second.body[0])
    assert [row["name"] for row in rows] == ["mw1"]


@pytest.mark.parametrize("service", ["walk", "echo", "nosvc"])
def test_mmi_for_a_service_the_broker_does_not_have_is_404(tmp_path: Path, service: str) -> None:
    # Even with a files root configured: an MMI to another name must not be answered
    # as fss.service.broker (it listed the broker's files).
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "secret.txt").write_text("x")
    gw = start_gateway(tmp_path, f"[edges.nfp]\nfiles_root = '{tmp_path / 'files'}'\n")
    try:
        client = gw.dealer("nfp", b"mc")
        body = json.dumps({"task": "list_files", "kwargs": {"url": "nf://"}, "args": []}).encode()
        send(
            client, Mmi(header=CLIENT, service=service, target="any", uuid=new_uuid(), body=(body,)), "norfab"
        )
        first, second = get(client, "norfab"), get(client, "norfab")
        assert isinstance(first, Response) and first.status == 404
        assert isinstance(second, Mmi) and second.status == 404
        assert b"secret" not in second.body[0] and service.encode() in second.body[0]
        assert gw.gateway.edges["nfp"].counters["unknown_broker_service"] == 1
    finally:
        finish(gw)


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


def mmi_call(client: zmq.Socket[bytes], service: str, task: str, **kwargs: object) -> tuple[int, object]:
    """A spec POST to a broker service; its (status, decoded JSON value)."""
    body = json.dumps({"task": task, "kwargs": kwargs, "args": []}).encode()
    post(client, service, body)
    reply = get(client)
    assert isinstance(reply, Response)
    return reply.status, json.loads(reply.body[0])


def test_show_workers_counts_keepalives_both_ways(tmp_path: Path) -> None:
    # NorFab's show_workers column "keepalives tx/rx": KEEPALIVEs the broker sent to the
    # worker / KEEPALIVEs it heard from the worker.
    gw = start_gateway(tmp_path, "[edges.nfp]\nheartbeat_ms = 100\nliveness = 50\n")
    try:
        w = spec_worker(gw, "svc", b"kw1")
        for _ in range(3):
            send(w, Keepalive(header=WORKER, service="svc"))
        until(lambda: beats(gw, "nfp")[1] == 3)  # type: ignore[index]
        got = 0
        for _ in range(20):  # bounded: each recv gives up after RECV_MS
            got += isinstance(nfp.decode(recv(w)), Keepalive)
            if got == 2:
                break
        status, rows = mmi_call(gw.dealer("nfp"), "mmi.service.broker", "show_workers")
        assert status == 200 and isinstance(rows, list) and len(rows) == 1
        sent, heard = (int(n) for n in rows[0]["keepalives tx/rx"].split(" / "))
        assert heard == 3 and sent >= got == 2
    finally:
        finish(gw)


def test_get_stats_and_get_status_report_this_process(gw: Running, tmp_path: Path) -> None:
    # NorFab's nfcli and nfweb show these figures; nfgate reads them as NorFab's broker
    # does (psutil), for the process the gateway runs in (here: pytest's).
    me = psutil.Process()
    client = gw.dealer("nfp")
    status, stats = mmi_call(client, "mmi.service.broker", "get_stats")
    assert status == 200 and isinstance(stats, dict)
    process = stats["process"]
    rss_mb = me.memory_info().rss / 1024 / 1024
    assert 0.5 * rss_mb < process["memory_rss_mbyte"] < 2 * rss_mb
    assert process["threads"] >= 2  # at least the gateway's loop and libzmq's I/O thread
    assert process["open_file_descriptors"] >= 5  # the edges' sockets, the store, the wake-up pair
    # Every edge listens on TCP, and this client is connected to one of them.
    assert process["tcp_sockets"] >= len(
        [e for e in gw.gateway.edges.values() if e.endpoint.startswith("tcp://")]
    )
    assert process["cpu_percent"] >= 0.0
    status, info = mmi_call(client, "mmi.service.broker", "get_status")
    assert status == 200 and isinstance(info, dict)
    assert info["directories"]["base_dir"] == str(tmp_path / "data")
    assert info["security"] == {"zmq_auth": False}
    status, versions = mmi_call(client, "mmi.service.broker", "show_broker_version")
    assert status == 200 and isinstance(versions, dict)
    assert versions["pyzmq"] == zmq.__version__ and versions["libzmq"] == zmq.zmq_version()
    assert versions["psutil"] == psutil.__version__ and versions["nfgate"]


def test_get_status_says_zmq_auth_when_the_edge_runs_curve(tmp_path: Path) -> None:
    import zmq.auth

    _, secret_file = zmq.auth.create_certificates(tmp_path, "broker")
    server_public, _ = zmq.auth.load_certificate(secret_file)
    client_public, client_secret = zmq.auth.load_certificate(zmq.auth.create_certificates(tmp_path, "c")[1])
    gw = start_gateway(tmp_path, f'[edges.nfp]\ncurve_secret_key = "{secret_file}"\n')
    try:
        secured = gw.context.socket(zmq.DEALER)
        secured.setsockopt(zmq.LINGER, 0)
        secured.setsockopt(zmq.RCVTIMEO, 3000)
        secured.curve_serverkey = server_public
        secured.curve_publickey, secured.curve_secretkey = client_public, client_secret
        secured.connect(gw.endpoint("nfp"))
        try:
            status, info = mmi_call(secured, "mmi.service.broker", "get_status")
        finally:
            secured.close(0)
        assert status == 200 and info["security"] == {"zmq_auth": True}  # type: ignore[index]
    finally:
        finish(gw)


def test_mmi_show_clients_counts_open_jobs(gw: Running) -> None:
    client = gw.dealer("nfp", b"busy-client")
    post(client, "nobody", b"x")
    assert get(client).status == 202  # type: ignore[attr-defined]
    status, rows = mmi_call(client, "mmi.service.broker", "show_clients")
    assert status == 200
    mine = [row for row in rows if row["name"] == "busy-client"]  # type: ignore[union-attr]
    assert mine and mine[0]["jobs"] == 1, rows


def test_mmi_get_logs_returns_recent_gateway_records(gw: Running) -> None:
    client = gw.dealer("nfp")
    mmi_call(client, "mmi.service.broker", "restart")  # logged as a warning by the edge
    until(
        lambda: any("mmi.service.broker restart asked for by id-" in line for line in gw.gateway.logs.lines)
    )
    status, records = mmi_call(client, "mmi.service.broker", "get_logs", last=0, level="warning")
    assert status == 200
    assert any("restart asked for by" in r["message"] for r in records), records  # type: ignore[union-attr]
    assert all(r["level"] == "WARNING" for r in records)  # type: ignore[union-attr]
    # The fields of NorFab's own JSON log records (nfcli's "show logs" prints them).
    fields = {"ts", "pid", "processName", "threadName", "module", "function", "line", "filename"}
    assert all(fields <= set(r) for r in records)  # type: ignore[union-attr]
    assert records[-1]["pid"] == os.getpid()  # type: ignore[index]


def test_mmi_disconnect_without_name_disconnects_every_worker(gw: Running) -> None:
    workers = [spec_worker(gw, "svc", name) for name in (b"d1", b"d2")]
    client = gw.dealer("nfp")
    status, _ = mmi_call(client, "mmi.service.broker", "disconnect")
    assert status == 200
    for w in workers:
        assert isinstance(get(w), Disconnect)
    until(lambda: not gw.gateway.router.workers())


def test_sid_and_fss_answer_from_the_configured_inventory_and_root(tmp_path: object) -> None:
    from pathlib import Path

    root = Path(str(tmp_path))
    (root / "files").mkdir()
    (root / "files" / "hello.txt").write_text("hi there")
    (root / "inventory.yaml").write_text("workers:\n  lab-*:\n    site: lab\n")
    toml = f'[edges.nfp]\ninventory = "{root / "inventory.yaml"}"\nfiles_root = "{root / "files"}"\n'
    running = start_gateway(root, toml)
    try:
        client = running.dealer("nfp")
        status, inventory = mmi_call(client, "sid.service.broker", "get_inventory", name="lab-1")
        assert (status, inventory) == (200, {"site": "lab"})
        assert mmi_call(client, "sid.service.broker", "get_inventory", name="core-1") == (200, None)
        status, listing = mmi_call(client, "fss.service.broker", "list_files", url="nf://")
        assert status == 200 and "hello.txt" in listing, listing  # type: ignore[operator]
        status, _ = mmi_call(client, "fss.service.broker", "list_files", url="nf://../")
        assert status == 400
    finally:
        finish(running)


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


def store_of(running: Running) -> JobStore:
    return running.gateway.edges["nfp"].jobs._store  # type: ignore[attr-defined, no-any-return]


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
