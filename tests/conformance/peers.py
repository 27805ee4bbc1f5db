"""Small peers for the conformance tests, each in a thread with its own sockets:

* :class:`TinyNfpWorker` - a conforming NFP worker (spec or NorFab dialect);
* :class:`TinyDcpWorker` - a conforming DCP worker (spec or DagBox dialect);
* :class:`SilentRouter` - a bound ROUTER that reads and never answers;
* :class:`AnsweringDisconnectBroker` - an NFP spec broker (OPEN, READY, KEEPALIVE every
  interval) with one defect: it answers a worker's DISCONNECT with a KEEPALIVE.

Every loop is bounded in time (``lifetime_s``) and stops on :meth:`stop`.
"""

from __future__ import annotations

import socket
import threading
import time

import zmq

from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Ping, Reconnect, Registration, Reply, Request
from nfgate.codecs.nfp.messages import (
    BROKER,
    WORKER,
    Delete,
    Disconnect,
    Get,
    Keepalive,
    Open,
    Post,
    Ready,
    Response,
)
from nfgate.errors import DecodeError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Peer(threading.Thread):
    def __init__(self, lifetime_s: float) -> None:
        super().__init__(daemon=True)
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.stopping = threading.Event()
        self.deadline = time.monotonic() + lifetime_s
        self.errors: list[str] = []

    def running(self) -> bool:
        return not self.stopping.is_set() and time.monotonic() < self.deadline

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.context.destroy(linger=0)


class TinyNfpWorker(_Peer):
    """OPEN (spec) + READY; KEEPALIVE every interval; POST -> RESPONSE 200; GET -> 200 or
    400 (unknown uuid); DISCONNECT or a silent broker -> reconnect on a new socket.

    ``breaks`` makes it break one rule of specs/nfp.md section 7: ``"ready-again"`` sends
    READY again after its first RESPONSE, ``"same-socket"`` answers DISCONNECT with READY
    on the same socket, ``"old-socket-beats"`` reconnects on a new socket but keeps the old
    one open, sending KEEPALIVEs on it."""

    def __init__(
        self,
        endpoint: str,
        service: str,
        dialect: str = "spec",
        heartbeat_s: float = 0.2,
        lifetime_s: float = 120.0,
        breaks: str = "",
    ) -> None:
        super().__init__(lifetime_s)
        self.endpoint, self.service, self.dialect, self.heartbeat_s = endpoint, service, dialect, heartbeat_s
        self.breaks = breaks
        self.stale: zmq.Socket[bytes] | None = None  # "old-socket-beats": the old socket, still beating
        self.results: dict[str, bytes] = {}
        self.connections = 0

    def _send(self, sock: zmq.Socket[bytes], message: object) -> None:
        sock.send_multipart(nfp.encode(message, self.dialect))  # type: ignore[arg-type]

    def _connect(self) -> zmq.Socket[bytes]:
        self.connections += 1
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, b"tiny-%d" % self.connections)
        sock.connect(self.endpoint)
        if self.dialect == "spec":
            self._send(sock, Open(header=WORKER))
        self._send(sock, Ready(service=self.service))
        return sock

    def _answer(self, job: Post | Get, status: int, body: bytes) -> Response:
        if job.client is not None:
            return Response(header=WORKER, client=job.client, uuid=job.uuid, status=status, body=(body,))
        return Response(header=WORKER, service=self.service, uuid=job.uuid, status=status, body=(body,))

    def run(self) -> None:
        sock = self._connect()
        next_beat = time.monotonic() + self.heartbeat_s
        heard = time.monotonic()
        while self.running():
            now = time.monotonic()
            if now >= next_beat:
                self._send(sock, Keepalive(header=WORKER, service=self.service))
                if self.stale is not None:
                    self._send(self.stale, Keepalive(header=WORKER, service=self.service))
                next_beat = now + self.heartbeat_s
            if now - heard > 6 * self.heartbeat_s:  # the broker went silent: start again
                sock.close(0)
                sock, heard = self._connect(), time.monotonic()
                continue
            if not sock.poll(int(self.heartbeat_s * 250) + 1):
                continue
            frames = sock.recv_multipart()
            heard = time.monotonic()
            try:
                message = nfp.decode(frames, self.dialect)
            except DecodeError as exc:
                self.errors.append(exc.reason)  # invalid input: dropped
                continue
            if isinstance(message, Disconnect) and self.breaks == "same-socket":
                self._send(sock, Ready(service=self.service))
            elif isinstance(message, Disconnect) and self.breaks == "old-socket-beats" and self.stale is None:
                self.stale, sock = sock, self._connect()
            elif isinstance(message, Disconnect):
                sock.close(0)
                sock = self._connect()
            elif isinstance(message, Post):
                self.results[message.uuid] = b"done:" + message.body[0]
                self._send(sock, self._answer(message, 200, self.results[message.uuid]))
                if self.breaks == "ready-again" and len(self.results) == 1:
                    self._send(sock, Ready(service=self.service))
            elif isinstance(message, Get):
                known = self.results.get(message.uuid)
                self._send(sock, self._answer(message, 200 if known else 400, known or b"unknown uuid"))
            elif isinstance(message, Delete):
                self.results.pop(message.uuid, None)
        sock.close(0)
        if self.stale is not None:
            self.stale.close(0)


class TinyDcpWorker(_Peer):
    """REGISTRATION; PING every interval; REQUEST -> REPLY (address and metadata copied);
    RECONNECT -> REGISTRATION."""

    def __init__(
        self,
        endpoint: str,
        service: bytes,
        dialect: str = "spec",
        heartbeat_s: float = 0.2,
        lifetime_s: float = 120.0,
    ) -> None:
        super().__init__(lifetime_s)
        self.endpoint, self.service, self.dialect, self.heartbeat_s = endpoint, service, dialect, heartbeat_s

    def _send(self, sock: zmq.Socket[bytes], message: object) -> None:
        sock.send_multipart(dcp.encode(message, self.dialect))  # type: ignore[arg-type]

    def run(self) -> None:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        self._send(sock, Registration(service=self.service))
        next_beat = time.monotonic() + self.heartbeat_s
        while self.running():
            if time.monotonic() >= next_beat:
                self._send(sock, Ping())
                next_beat = time.monotonic() + self.heartbeat_s
            if not sock.poll(int(self.heartbeat_s * 250) + 1):
                continue
            frames = sock.recv_multipart()
            try:
                message = dcp.decode(frames, self.dialect)
            except DecodeError as exc:
                self.errors.append(exc.reason)
                continue
            if isinstance(message, Request):
                data = tuple(b"done:" + d for d in message.data) or (b"done",)
                self._send(sock, Reply(client=message.client, metadata=message.metadata, data=data))
            elif isinstance(message, Reconnect):
                self._send(sock, Registration(service=self.service))
        sock.close(0)


class SilentRouter(_Peer):
    """A bound ROUTER that reads everything and answers nothing."""

    def __init__(self, lifetime_s: float = 120.0) -> None:
        super().__init__(lifetime_s)
        self.sock = self.context.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.received = 0

    def run(self) -> None:
        while self.running():
            if self.sock.poll(50):
                self.sock.recv_multipart()
                self.received += 1
        self.sock.close(0)


class _NfpBroker(_Peer):
    """A fake NFP spec broker: a bound ROUTER, and what came in one message at a time."""

    def __init__(self, lifetime_s: float) -> None:
        super().__init__(lifetime_s)
        self.sock = self.context.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def _next(self) -> tuple[bytes, list[bytes], object] | None:
        """(identity, frames, message) of the next spec message within 10 ms; None when
        none came or it does not decode."""
        if not self.sock.poll(10):
            return None
        identity, *frames = self.sock.recv_multipart()
        try:
            return identity, frames, nfp.decode(frames, "spec")
        except DecodeError:
            return None

    def _send(self, identity: bytes, message: object) -> None:
        self.sock.send_multipart([identity, *nfp.encode(message, "spec")])  # type: ignore[arg-type]


class AnsweringDisconnectBroker(_NfpBroker):
    """An NFP spec broker that beats its workers every ``heartbeat_s`` and answers a
    worker's DISCONNECT with one more KEEPALIVE (NFP 7: it MUST send nothing more)."""

    def __init__(self, heartbeat_s: float, lifetime_s: float = 120.0) -> None:
        super().__init__(lifetime_s)
        self.heartbeat_s = heartbeat_s
        self.answered = 0

    def run(self) -> None:
        workers: dict[bytes, str] = {}
        next_beat = time.monotonic() + self.heartbeat_s
        while self.running():
            if time.monotonic() >= next_beat:
                for identity, service in workers.items():
                    self._send(identity, Keepalive(header=BROKER, service=service))
                next_beat = time.monotonic() + self.heartbeat_s
            got = self._next()
            if got is None:
                continue
            identity, _, message = got
            if isinstance(message, Open):
                self._send(identity, Open(header=message.header))
            elif isinstance(message, Ready):
                workers[identity] = message.service
            elif isinstance(message, Disconnect) and identity in workers:
                self._send(identity, Keepalive(header=BROKER, service=workers.pop(identity)))
                self.answered += 1
        self.sock.close(0)


class BigPostBroker(_NfpBroker):
    """An NFP spec broker that answers a GET with RESPONSE 400 (the suite's probe) and a
    POST of more than 64 frames as ``answer`` says: ``"none"`` drops it, ``"response"``
    answers RESPONSE 400 for its uuid, ``"garbage"`` sends one frame of junk."""

    def __init__(self, answer: str, lifetime_s: float = 60.0) -> None:
        super().__init__(lifetime_s)
        self.answer = answer
        self.big_posts = 0

    def run(self) -> None:
        while self.running():
            got = self._next()
            if got is None:
                continue
            identity, frames, message = got
            if isinstance(message, Get):
                self._respond(identity, message.service, message.uuid)
            elif isinstance(message, Post) and len(frames) > 64:
                self.big_posts += 1
                if self.answer == "response":
                    self._respond(identity, message.service, message.uuid)
                elif self.answer == "garbage":
                    self.sock.send_multipart([identity, b"junk"])
        self.sock.close(0)

    def _respond(self, identity: bytes, service: str, uuid: str) -> None:
        self._send(identity, Response(header=BROKER, service=service, uuid=uuid, status=400, body=(b"{}",)))


__all__ = [
    "BROKER",
    "AnsweringDisconnectBroker",
    "BigPostBroker",
    "SilentRouter",
    "TinyDcpWorker",
    "TinyNfpWorker",
    "free_port",
]
