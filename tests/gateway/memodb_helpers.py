"""Shared by the MemoDB edge's tests: req0 peers, sending and reading MemoDB messages, a
worker's READY and next JOB, an echo worker on a shared socket's context."""

from __future__ import annotations

import threading

import pynng
import pytest

from nfgate.codecs import memodb
from nfgate.codecs.memodb.messages import Disconnect, Heartbeat, Job, Ready, Result
from nfgate.transports.nng import connect_req

from .conftest import Running, until

FAST = "[edges.memodb]\nheartbeat_ms = 300\n"  # long-poll answered with HEARTBEAT after 0.3 s


class Peers:
    """req0 sockets on the gateway's MemoDB edge, closed at the end of the test."""

    def __init__(self, gw: Running) -> None:
        self.gw = gw
        self.url = gw.endpoint("memodb")
        self.socks: list[pynng.Req0] = []

    def req(self, recv_ms: int = 3000) -> pynng.Req0:
        sock = connect_req(self.url, recv_timeout_ms=recv_ms)
        self.socks.append(sock)
        return sock

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


def send(sock: pynng.Req0 | pynng.Context, message: object, dialect: str = "spec") -> None:
    [data] = memodb.encode(message, dialect)  # type: ignore[arg-type]
    sock.send(data)


def get(sock: pynng.Req0 | pynng.Context, dialect: str = "spec") -> object:
    return memodb.decode([sock.recv()], dialect)


def ready(gw: Running, sock: pynng.Req0, *services: str) -> None:
    """READY, and wait until the core has the worker (the reply is held: a long-poll)."""

    def offering() -> int:
        return sum(1 for w in gw.gateway.router.workers() if services[0] in {s.name for s in w.services})

    before = offering()
    send(sock, Ready(services=services))
    until(lambda: offering() > before)


def next_job(sock: pynng.Req0, dialect: str = "spec") -> Job:
    """The next JOB for a worker, answering the HEARTBEATs that come first."""
    for _ in range(20):
        message = get(sock, dialect)
        if isinstance(message, Job):
            return message
        assert isinstance(message, Heartbeat), message
        send(sock, message, dialect)
    pytest.fail("no JOB")


def edge_stats(gw: Running) -> dict[str, int]:
    return gw.gateway.edges["memodb"].stats()


def _echo_worker(ctx: pynng.Context, stop: threading.Event, served: list[int]) -> None:
    """One MemoDB worker on a context of a shared req0 socket (the spec's multiplexing)."""
    send(ctx, Ready(services=("echo",)))
    for _ in range(10_000):
        try:
            message = get(ctx)
        except pynng.NNGException:
            return
        if stop.is_set() or isinstance(message, Disconnect):
            return
        if isinstance(message, Job):
            served.append(1)
            send(ctx, Result(id=message.id, payload=message.payload))
        elif isinstance(message, Heartbeat):
            send(ctx, Heartbeat(id=message.id))
