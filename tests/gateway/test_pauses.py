"""A paused gateway (SIGSTOP, a VM pause, swapping) loses no worker that kept beating.

``nfgate serve`` runs as a subprocess and is stopped with SIGSTOP for PAUSE_S while its
workers (raw DEALERs speaking NFP spec or DCP) beat on every 500 ms, their beats queued
in the sockets. On SIGCONT the gateway's monotonic clock has jumped PAUSE_S; the loop
clock (nfgate.loopclock) takes the stall out, so the queued beats are read before any
worker is found silent. With ``[gateway] stall_ms = 0`` (no stall handling) the
first two tests fail: more workers than one loop iteration reads (BATCH) are removed,
and the request queued before the pause expires before its worker's READY is read.
A worker that really went silent is still removed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
import urllib.request
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Ping, Registration, Reply, Request
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Keepalive, Open, Post, Ready, Response
from nfgate.gateway import BATCH
from nfgate.loopclock import STALL_MS
from tests.serving import Server, metrics_url, start, stop

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

PAUSE_S = 4.0
HEARTBEAT_MS = 500
LIVENESS = 4  # a worker silent 2 s is gone: half the pause
QUEUE_EXPIRY_MS = 2500  # a request with no worker expires within the pause
# More workers on one edge than one loop iteration reads: the first tick after the
# resume comes before every worker's queued beat is read.
MANY = BATCH + 60
WAIT_S = 30.0  # the longest any condition is waited for


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


def serve(tmp_path: Path, stall_ms: int = STALL_MS) -> Server:
    config = tmp_path / "nfgate.toml"
    config.write_text(
        f"[gateway]\nstall_ms = {stall_ms}\ndrain_ms = 0\n"
        f"[routing]\nqueue_expiry_ms = {QUEUE_EXPIRY_MS}\n"
        f"[edges.nfp]\nheartbeat_ms = {HEARTBEAT_MS}\nliveness = {LIVENESS}\n"
        f"[edges.dcp]\nheartbeat_ms = {HEARTBEAT_MS}\nliveness = {LIVENESS}\n"
    )
    return start(
        "--config",
        str(config),
        "--data-dir",
        str(tmp_path / "data"),
        "--metrics",
        "http://127.0.0.1:0",
        "--bind",
        "nfp=tcp://127.0.0.1:0",
        "--bind",
        "dcp=tcp://127.0.0.1:0",
        *("--no-memodb", "--no-dbp", "--no-sada", "--no-sada-server"),
    )


def metric(server: Server, name: str) -> int:
    """One sample of the metrics page (the first whose name and labels start so)."""
    with urllib.request.urlopen(metrics_url(server), timeout=5) as page:
        text = page.read().decode()
    found = re.search(rf"^{re.escape(name)}\S* (\d+)$", text, re.MULTILINE)
    assert found is not None, f"no {name} in the metrics"
    return int(found.group(1))


def workers(server: Server, edge: str) -> int:
    return metric(server, f'nfgate_edge_workers{{edge="{edge}"')


def wait_for(what: str, predicate: object, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {timeout} s")


class Workers:
    """Raw DEALER workers of one protocol that beat on their own, from a thread of their
    own (a socket is used by one thread only), every HEARTBEAT_MS until :meth:`close`."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], protocol: str, endpoint: str, count: int) -> None:
        self.protocol = protocol
        self.socks: list[zmq.Socket[bytes]] = []
        self.silent: set[int] = set()  # indexes that stopped beating (set from the test's thread)
        for i in range(count):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            if protocol == "nfp":
                sock.setsockopt(zmq.IDENTITY, f"pause-w{i}".encode())
            sock.connect(endpoint)
            for frames in register(protocol, f"{protocol}-pause"):
                sock.send_multipart(frames)
            self.socks.append(sock)
        self._beat = beat(protocol, f"{protocol}-pause")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{protocol}-beats", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + 100  # bounded whatever the test does
        while not self._stop.is_set() and time.monotonic() < deadline:
            for i, sock in enumerate(self.socks):
                if i not in self.silent:
                    with contextlib.suppress(zmq.Again):
                        sock.send_multipart(self._beat, zmq.NOBLOCK)
                # What the broker sends them (its heartbeats) is left unread: a DEALER
                # drops it beyond its high-water mark, which a test does not reach.
            self._stop.wait(HEARTBEAT_MS / 1000)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert not self._thread.is_alive()
        for sock in self.socks:
            sock.close(0)


def register(protocol: str, service: str) -> list[list[bytes]]:
    if protocol == "nfp":
        return [nfp.encode(Open(header=WORKER)), nfp.encode(Ready(service=service))]
    return [dcp.encode(Registration(service=service.encode()))]


def beat(protocol: str, service: str) -> list[bytes]:
    if protocol == "nfp":
        return nfp.encode(Keepalive(header=WORKER, service=service))
    return dcp.encode(Ping())


def send_request(ctx: zmq.Context[zmq.Socket[bytes]], protocol: str, endpoint: str) -> zmq.Socket[bytes]:
    """A client's request for service ``late`` (no worker yet), read by the gateway."""
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.setsockopt(zmq.RCVTIMEO, int(WAIT_S * 1000))
    client.connect(endpoint)
    if protocol == "nfp":
        client.send_multipart(
            nfp.encode(
                Post(header=CLIENT, service="late", target="any", uuid=uuidlib.uuid4().hex, body=(b"q",))
            )
        )
        accepted = nfp.decode(client.recv_multipart())
        assert isinstance(accepted, Response) and accepted.status == 202, accepted  # queued
    else:
        client.send_multipart(dcp.encode(Request(service=b"late", metadata=(b"m",), data=(b"q",))))
    return client


def serve_late(sock: zmq.Socket[bytes], protocol: str) -> bool:
    """Answer the request the ``late`` worker is given; False if none comes."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if not sock.poll(int(WAIT_S * 1000)):
            return False
        frames = sock.recv_multipart()
        if protocol == "nfp":
            job = nfp.decode(frames)
            if isinstance(job, Post):
                sock.send_multipart(
                    nfp.encode(
                        Response(
                            header=WORKER, service=job.service, uuid=job.uuid, status=200, body=(b"served",)
                        )
                    )
                )
                return True
        else:
            request = dcp.decode(frames)
            if isinstance(request, Request):
                sock.send_multipart(
                    dcp.encode(Reply(client=request.client, metadata=request.metadata, data=(b"served",)))
                )
                return True
    return False


def answer(client: zmq.Socket[bytes], protocol: str) -> object:
    """The client's final answer: NFP's RESPONSE (200 served, 408 expired), DCP's reply
    (none when the request expired: DCP has no error reply)."""
    try:
        frames = client.recv_multipart()
    except zmq.Again:
        return None
    return nfp.decode(frames) if protocol == "nfp" else dcp.decode(frames)


def pause(server: Server, during: object = None) -> None:
    """SIGSTOP the gateway for PAUSE_S, calling ``during()`` while it is stopped."""
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(PAUSE_S / 2)
        if during is not None:
            during()  # type: ignore[operator]
        time.sleep(PAUSE_S / 2)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("protocol", ["nfp", "dcp"])
def test_a_pause_removes_no_beating_worker_and_the_queued_request_is_served(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]], protocol: str
) -> None:
    server = serve(tmp_path)
    endpoint = server.endpoints[protocol]
    crew: Workers | None = None
    late: list[zmq.Socket[bytes]] = []
    try:
        crew = Workers(ctx, protocol, endpoint, MANY)
        wait_for(f"{MANY} workers registered", lambda: workers(server, protocol) == MANY)
        client = send_request(ctx, protocol, endpoint)

        def late_worker() -> None:
            # Its READY waits in the socket with the other workers' beats.
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            for frames in register(protocol, "late"):
                sock.send_multipart(frames)
            late.append(sock)

        pause(server, late_worker)
        served = serve_late(late[0], protocol)
        reply = answer(client, protocol) if served else None
        # Past a liveness and a metrics publish, the late worker beating as the others do.
        for _ in range(int((HEARTBEAT_MS * LIVENESS + 1500) / HEARTBEAT_MS)):
            late[0].send_multipart(beat(protocol, "late"))
            time.sleep(HEARTBEAT_MS / 1000)
        lost = metric(server, "nfgate_core_workers_lost_total")
        left = workers(server, protocol)
        stalls = metric(server, "nfgate_core_stalls_total")
        client.close(0)
        assert (lost, left, served) == (0, MANY + 1, True), (
            f"{lost} worker(s) lost, {left} of {MANY + 1} left, queued request served: {served}"
        )
        if protocol == "nfp":
            assert isinstance(reply, Response) and (reply.status, reply.body) == (200, (b"served",)), reply
        else:
            assert isinstance(reply, Reply) and reply.data == (b"served",), reply
        assert stalls >= 1
        # The log says how long the loop was stalled and that timers were shifted.
        warned = [line for line in server.lines if "the event loop was stalled for" in line]
        assert len(warned) == 1 and "timers shifted by" in warned[0], warned
    finally:
        if crew is not None:
            crew.close()
        for sock in late:
            sock.close(0)
        stop(server)


@pytest.mark.parametrize("protocol", ["nfp", "dcp"])
def test_a_worker_silent_since_before_the_pause_is_still_removed(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]], protocol: str
) -> None:
    server = serve(tmp_path)
    crew: Workers | None = None
    try:
        crew = Workers(ctx, protocol, server.endpoints[protocol], 4)
        wait_for("4 workers registered", lambda: workers(server, protocol) == 4)
        crew.silent.add(0)  # its process hangs: connected, silent
        time.sleep(HEARTBEAT_MS / 1000)
        pause(server)
        # Gone within a liveness of the resume (the loop clock counted a second of the
        # pause), and the others kept.
        wait_for("the silent worker removed", lambda: workers(server, protocol) == 3, timeout=10)
        time.sleep(HEARTBEAT_MS * LIVENESS / 1000 + 1.5)
        assert metric(server, "nfgate_core_workers_lost_total") == 1
        assert workers(server, protocol) == 3
        assert sum("left: heartbeat expired" in line for line in server.lines) == 1
    finally:
        if crew is not None:
            crew.close()
        stop(server)
