"""Stopping `nfgate serve` drains: SIGTERM refuses new requests, lets the requests at
workers come back to their clients, then exits 0; ``gateway.drain_ms`` bounds the wait
and a second signal cuts it short."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import dcp, nfp, sada
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Disconnect, Keepalive, Post, Ready, Response
from nfgate.codecs.sada.messages import Rep, Req
from nfgate.model import Status
from nfgate.store import JobState, JobStore
from tests.ports import random_bind_args
from tests.serving import Server, metrics_url, start

from .conftest import until

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

EXIT_S = 15  # a bound on every wait for the process to end; the drains below are shorter


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


def _serve(tmp_path: Path, drain_ms: int | None = None) -> Server:
    args = ["--data-dir", str(tmp_path / "data"), *random_bind_args()]
    if drain_ms is not None:
        config = tmp_path / "drain.toml"
        config.write_text(f"[gateway]\ndrain_ms = {drain_ms}\n")
        args += ["--config", str(config)]
    return start(*args)


def _dealer(ctx: zmq.Context[zmq.Socket[bytes]], url: str, identity: bytes) -> zmq.Socket[bytes]:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(url)
    return sock


def _next_nfp(sock: zmq.Socket[bytes]) -> object:
    """The next NFP message other than a KEEPALIVE (bounded: RCVTIMEO, 50 messages)."""
    for _ in range(50):
        message = nfp.decode(sock.recv_multipart())
        if not isinstance(message, Keepalive):
            return message
    pytest.fail("only keepalives")


def _hold_one(
    ctx: zmq.Context[zmq.Socket[bytes]], server: Server
) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes], Post]:
    """A DCP client's request for ``slow``, held by an NFP spec worker: (client, worker, the POST)."""
    worker = _dealer(ctx, server.endpoints["nfp"], b"slow-worker")
    worker.send_multipart(nfp.encode(Ready(service="slow")))
    client = _dealer(ctx, server.endpoints["dcp"], b"dcp-client")
    client.send_multipart(dcp.encode(DcpRequest(service=b"slow", metadata=(b"key-1",), data=(b"hello",))))
    held = _next_nfp(worker)
    assert isinstance(held, Post) and held.body == (b"hello",)
    return client, worker, held


def _line(server: Server, needle: str) -> str:
    until(lambda: any(needle in line for line in server.lines), timeout=10)
    return next(line for line in server.lines if needle in line)


def _probe(server: Server, path: str) -> tuple[int, str]:
    """GET a health probe of the metrics endpoint: (status, text)."""
    url = metrics_url(server)
    try:
        with urllib.request.urlopen(url.replace("/metrics", path), timeout=5) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def _wait(server: Server) -> int:
    try:
        return server.proc.wait(timeout=EXIT_S)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def test_a_stop_refuses_new_requests_and_waits_for_the_one_at_a_worker(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    server = _serve(tmp_path)  # the default drain: 5 s
    client, worker, held = _hold_one(ctx, server)
    assert _probe(server, "/readyz") == (200, "ready")
    server.proc.send_signal(signal.SIGTERM)
    assert "waiting up to 5000 ms for 1 request(s) at workers" in _line(server, "draining:")
    # A load balancer's readiness check takes it out of rotation; it is alive all the same.
    assert _probe(server, "/readyz") == (503, "draining")
    assert _probe(server, "/healthz") == (200, "draining")

    # A request that comes now is refused with the client protocol's error (NFP spec:
    # 500, its status list has no 503), not taken and then lost at the exit.
    late = _dealer(ctx, server.endpoints["nfp"], b"late-client")
    job = uuidlib.uuid4().hex
    late.send_multipart(nfp.encode(Post(header=CLIENT, service="slow", target="any", uuid=job, body=(b"x",))))
    refused = _next_nfp(late)
    assert isinstance(refused, Response) and (refused.uuid, refused.status) == (job, Status.ERROR)
    assert server.proc.poll() is None  # still draining: the held request is not back yet

    # The worker answers: the reply reaches its client, then the gateway exits 0 and
    # says goodbye to the worker. Both are sent just before the sockets close, and both
    # arrive: a large reply takes a while to leave, and the close waits for it.
    done = bytes(range(256)) * (64 * 1024)  # 16 MiB
    worker.send_multipart(
        nfp.encode(Response(header=WORKER, service="slow", uuid=held.uuid, status=200, body=(done,)))
    )
    reply = dcp.decode(client.recv_multipart())
    assert reply == DcpReply(client=None, metadata=(b"key-1",), data=(done,))
    assert _wait(server) == 0
    assert isinstance(_next_nfp(worker), Disconnect)
    assert _line(server, "drained in")
    for sock in (client, worker, late):
        sock.close()


def test_a_signal_after_an_mmi_shutdown_is_the_first_one_and_the_drain_goes_on(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    # An operator's mmi shutdown, then the supervisor's SIGTERM when it sees the stop:
    # that signal is the first, not the second that cuts the drain short.
    server = _serve(tmp_path)
    client, worker, held = _hold_one(ctx, server)
    admin = _dealer(ctx, server.endpoints["nfp"], b"admin")
    shutdown = json.dumps({"task": "shutdown"}).encode()
    admin.send_multipart(
        nfp.encode(
            Post(header=CLIENT, service="mmi.service.broker", target="any", uuid="stop-1", body=(shutdown,))
        )
    )
    answer = _next_nfp(admin)
    assert isinstance(answer, Response) and answer.status == 200
    _line(server, "draining:")
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # the gateway reads the signal before the worker answers
    worker.send_multipart(
        nfp.encode(Response(header=WORKER, service="slow", uuid=held.uuid, status=200, body=(b"done",)))
    )
    reply = dcp.decode(client.recv_multipart())
    assert reply == DcpReply(client=None, metadata=(b"key-1",), data=(b"done",))
    assert _wait(server) == 0
    assert _line(server, "drained in")
    for sock in (client, worker, admin):
        sock.close()


def test_the_drain_gives_up_after_drain_ms(tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    server = _serve(tmp_path, drain_ms=300)
    client, worker, _ = _hold_one(ctx, server)
    server.proc.send_signal(signal.SIGTERM)
    assert _wait(server) == 0  # the worker never answers
    assert "1 request(s) still at workers after" in _line(server, "drain:")
    assert not any("drained in" in line for line in server.read_to_the_end())
    client.close()
    worker.close()


def test_a_second_signal_stops_the_drain_at_once(tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    server = _serve(tmp_path, drain_ms=600_000)  # ten minutes: only the second signal ends it in time
    client, worker, _ = _hold_one(ctx, server)
    server.proc.send_signal(signal.SIGTERM)
    _line(server, "draining:")
    server.proc.send_signal(signal.SIGINT)
    assert _wait(server) == 0
    assert not any(word in line for line in server.read_to_the_end() for word in ("drained in", "drain:"))
    client.close()
    worker.close()


def test_drain_ms_0_stops_at_once_with_a_request_at_a_worker(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    server = _serve(tmp_path, drain_ms=0)
    client, worker, _ = _hold_one(ctx, server)
    server.proc.send_signal(signal.SIGTERM)
    assert _wait(server) == 0
    lines = server.read_to_the_end()
    assert not any(word in line for line in lines for word in ("draining:", "drained in", "drain:"))
    client.close()
    worker.close()


def test_at_exit_sada_clients_are_answered_503_and_nfp_jobs_stay_stored(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    """Requests still open when the gateway stops: a SADA client, whose protocol has an
    "unavailable" answer, gets REP 503 at once, whether its request waited in a queue or
    at a worker (it waited for its own timeout before); an NFP job is not failed: it is
    stored and dispatched again after a restart."""
    server = _serve(tmp_path, drain_ms=200)
    worker = _dealer(ctx, server.endpoints["nfp"], b"slow-worker")
    worker.send_multipart(nfp.encode(Ready(service="slow")))
    at_worker = _dealer(ctx, server.endpoints["sada"], b"sada-a")
    at_worker.send_multipart(
        sada.encode(Req(request_id="r-at", service="slow", category="c", action="a", payload=b"1"))
    )
    held = _next_nfp(worker)  # the worker holds the SADA request and never answers
    assert isinstance(held, Post) and held.body == (b"1",)
    queued = _dealer(ctx, server.endpoints["sada"], b"sada-q")
    queued.send_multipart(
        sada.encode(Req(request_id="r-q", service="nobody", category="c", action="a", payload=b"2"))
    )
    nfp_client = _dealer(ctx, server.endpoints["nfp"], b"nfp-c")
    job = uuidlib.uuid4().hex
    nfp_client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="nobody", target="any", uuid=job, body=(b"{}",)))
    )
    accepted = _next_nfp(nfp_client)
    assert isinstance(accepted, Response) and accepted.status == 202
    server.proc.send_signal(signal.SIGTERM)
    assert _wait(server) == 0
    for sock, rid in ((queued, "r-q"), (at_worker, "r-at")):
        rep = sada.decode(sock.recv_multipart())  # RCVTIMEO 5 s
        assert isinstance(rep, Rep) and rep.request_id == rid and rep.status == Status.UNAVAILABLE
    assert "answered unavailable" in _line(server, "stopping:")
    record = JobStore(tmp_path / "data" / "jobs.sqlite3").get(job)
    assert record is not None and record.state is JobState.QUEUED
    for sock in (at_worker, queued, nfp_client, worker):
        sock.close()
