"""An in-process gateway on random loopback ports, run in a thread, plus DEALER peers."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.config import load
from nfgate.gateway import Gateway
from nfgate.serve import build
from nfgate.transports.zmq import connect_dealer
from tests.ports import random_binds

RECV_MS = 3000  # longest any test waits for one message


class Running:
    """A started gateway: its endpoints, a context for peers, and a clean stop."""

    def __init__(
        self, gateway: Gateway, context: zmq.Context[zmq.Socket[bytes]], waker: socket.socket
    ) -> None:
        self.gateway = gateway
        self.context = context
        self._waker = waker
        self._sockets: list[zmq.Socket[bytes]] = []
        self.thread = threading.Thread(target=gateway.run, name="gateway", daemon=True)

    def endpoint(self, edge: str) -> str:
        return self.gateway.edges[edge].endpoint

    def dealer(self, edge: str, identity: bytes | None = None) -> zmq.Socket[bytes]:
        sock = connect_dealer(self.context, self.endpoint(edge), identity)
        sock.setsockopt(zmq.RCVTIMEO, RECV_MS)
        self._sockets.append(sock)
        return sock

    def stop(self) -> None:
        # Twice, as a second signal: a test's teardown does not wait for the requests its
        # workers still hold (the drain is tests/gateway/test_drain.py's).
        self.gateway.stop()
        self.gateway.stop()
        self._waker.send(b"x")
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "gateway thread did not stop"
        for sock in self._sockets:
            sock.close(0)


def start_gateway(
    tmp_path: Path, toml: str = "", *, binds: list[tuple[str, str]] | None = None, **kwargs: object
) -> Running:
    """A gateway on ``binds`` (default: every edge on a random port of 127.0.0.1)."""
    config = None
    if toml:
        config = tmp_path / "nfgate.toml"
        config.write_text(toml)
    cfg = load(
        config,
        data_dir=tmp_path / "data",
        binds=random_binds() if binds is None else binds,
        **kwargs,  # type: ignore[arg-type]
    )
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    gateway = build(cfg, context, wake_fd=reader.fileno())
    gateway.recover()
    running = Running(gateway, context, writer)
    running.thread.start()
    running._closers = (reader, writer)  # type: ignore[attr-defined]
    return running


def finish(running: Running) -> None:
    running.stop()
    assert running.gateway.internal_errors == 0, "the gateway logged an internal error"
    running.gateway.close()
    for s in running._closers:  # type: ignore[attr-defined]
        s.close()
    running.context.term()


@contextlib.contextmanager
def running_on(tmp_path: Path, toml: str = "") -> Iterator[Running]:
    """A gateway started on ``toml``, stopped and checked (:func:`finish`) on the way out."""
    running = start_gateway(tmp_path, toml)
    try:
        yield running
    finally:
        finish(running)


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Running]:
    with running_on(tmp_path) as running:
        yield running


def recv(sock: zmq.Socket[bytes]) -> list[bytes]:
    """One message, or fail the test after RECV_MS."""
    try:
        return sock.recv_multipart()
    except zmq.Again:
        pytest.fail(f"no message within {RECV_MS} ms")


def nothing(sock: zmq.Socket[bytes], wait_ms: int = 300) -> bool:
    """True when no message arrives within ``wait_ms``."""
    return sock.poll(wait_ms) == 0


def beats(running: Running, edge: str) -> tuple[int, int] | None:
    """(sent, heard) heartbeats of the one worker registered on ``edge``, as the edge
    counts them for show_workers; None while the core has not registered it. The edge
    answers (a DCP echo, a PONG) as it reads, the core hears of the worker when the
    read ends: a worker can be confirmed and beating before the core lists it."""
    peers = [w.peer for w in running.gateway.router.workers() if w.peer.edge == edge]
    assert len(peers) <= 1, peers
    return running.gateway.edges[edge].heartbeats(peers[0]) if peers else None


def until(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.01)
    pytest.fail("condition not met in time")


def echo_worker(running: Running, identity: bytes, service: str = "echo") -> zmq.Socket[bytes]:
    """An NFP spec worker of ``service``, registered (OPEN, READY, the first KEEPALIVE read)."""
    from nfgate.codecs import nfp
    from nfgate.codecs.nfp.messages import BROKER, WORKER, Keepalive, Open, Ready

    worker = running.dealer("nfp", identity)
    worker.send_multipart(nfp.encode(Open(header=WORKER)))
    assert nfp.decode(recv(worker), "spec") == Open(header=BROKER)
    worker.send_multipart(nfp.encode(Ready(service=service)))
    until(lambda: any(w.peer.address == identity for w in running.gateway.router.workers()))
    assert isinstance(nfp.decode(recv(worker), "spec"), Keepalive)
    return worker


def echo_one(worker: zmq.Socket[bytes]) -> None:
    """Answer the next POST ``worker`` is given with 200 and the POST's own body."""
    from nfgate.codecs import nfp
    from nfgate.codecs.nfp.messages import WORKER, Post, Response

    job = nfp.decode(recv(worker), "spec")
    assert isinstance(job, Post)
    reply = Response(header=WORKER, service=job.service, uuid=job.uuid, status=200, body=job.body)
    worker.send_multipart(nfp.encode(reply))
