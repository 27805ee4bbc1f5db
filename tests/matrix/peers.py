"""Raw protocol peers for the cross-protocol matrix: one echo worker and one client per
protocol, built from the codecs and plain sockets (no nfgate code on the wire path).

A worker runs in a thread: it registers, answers every request by echoing its payload,
heartbeats so the gateway keeps it, and can *hang* (take requests, never answer) and be
*killed* (its thread stops and its socket closes without a goodbye, as a crashed process
would). A client sends one request and returns the payload of the final reply.

Adding a protocol is one worker class and one client class registered in ``WORKERS`` and
``CLIENTS``.
"""

from __future__ import annotations

import abc
import json
import threading
import time
import uuid as uuidlib
from typing import ClassVar

import pynng
import zmq

from nfgate.codecs import dbp, dcp, memodb, nfp, sada
from nfgate.codecs.dcp.messages import Ping, Reconnect, Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.memodb.messages import Heartbeat as MemoHeartbeat
from nfgate.codecs.memodb.messages import Job as MemoJob
from nfgate.codecs.memodb.messages import Ready as MemoReady
from nfgate.codecs.memodb.messages import Result as MemoResult
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Disconnect, Keepalive, Open, Post, Ready, Response
from nfgate.codecs.sada.messages import Intr, Pong, Rep, Req, Rintr
from nfgate.transports.zmq import connect_dealer

HEARTBEAT_S = 0.1  # the workers' beat; the gateway under test runs with 100 ms x 3


class Unanswered(Exception):
    """The client got no final reply in time (what a DCP or MemoDB client sees on failure)."""


class EchoWorker(abc.ABC):
    """A worker thread. ``received`` counts the requests it took (hanging or not)."""

    edge: ClassVar[str]

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], endpoint: str, service: str) -> None:
        self.context = context
        self.endpoint = endpoint
        self.service = service
        self.hang = False
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{self.edge}-worker", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> EchoWorker:
        self._thread.start()
        return self

    def kill(self) -> None:
        """Stop without a goodbye: the gateway must notice by the missed heartbeats."""
        self._stop.set()
        self._thread.join(timeout=5)

    stop = kill

    def _run(self) -> None:
        try:
            self.serve(self._stop)
        except BaseException as exc:  # surfaced by the test through .error
            self.error = exc

    @abc.abstractmethod
    def serve(self, stop: threading.Event) -> None:
        """Register, then answer until ``stop`` is set (loops bounded by it)."""


class ZmqEchoWorker(EchoWorker):
    """Shared loop for the DEALER-based workers: poll, answer, beat."""

    def serve(self, stop: threading.Event) -> None:
        sock = connect_dealer(self.context, self.endpoint, f"{self.edge}-{uuidlib.uuid4().hex[:8]}".encode())
        try:
            self.register(sock)
            next_beat = time.monotonic() + HEARTBEAT_S
            while not stop.is_set():
                if sock.poll(20):
                    frames = sock.recv_multipart()
                    answer = self.on_message(frames)
                    if answer is None and self.told_to_register(frames):
                        # Expired by the gateway: this thread was held up past 3 beats
                        # (a loaded machine). Start again, as a real worker does.
                        self.register(sock)
                    if answer is not None:
                        self.received += 1
                        if not self.hang:
                            sock.send_multipart(answer)
                if time.monotonic() >= next_beat:
                    sock.send_multipart(self.beat())
                    next_beat = time.monotonic() + HEARTBEAT_S
        finally:
            sock.close(0)

    @abc.abstractmethod
    def register(self, sock: zmq.Socket[bytes]) -> None: ...

    @abc.abstractmethod
    def beat(self) -> list[bytes]: ...

    @abc.abstractmethod
    def on_message(self, frames: list[bytes]) -> list[bytes] | None:
        """The echo reply for a request, None for anything else."""

    @abc.abstractmethod
    def told_to_register(self, frames: list[bytes]) -> bool:
        """True for the protocol's word to an unknown worker (DISCONNECT, RECONNECT, RINTR)."""


class NfpWorker(ZmqEchoWorker):
    edge = "nfp"

    def register(self, sock: zmq.Socket[bytes]) -> None:
        sock.send_multipart(nfp.encode(Open(header=WORKER), "spec"))
        sock.send_multipart(nfp.encode(Ready(service=self.service), "spec"))

    def beat(self) -> list[bytes]:
        return nfp.encode(Keepalive(header=WORKER, service=self.service), "spec")

    def on_message(self, frames: list[bytes]) -> list[bytes] | None:
        message = nfp.decode(frames, "spec")
        if not isinstance(message, Post):
            return None
        reply = Response(
            header=WORKER, service=self.service, uuid=message.uuid, status=200, body=message.body
        )
        return nfp.encode(reply, "spec")

    def told_to_register(self, frames: list[bytes]) -> bool:
        return isinstance(nfp.decode(frames, "spec"), Disconnect)


class DcpWorker(ZmqEchoWorker):
    edge = "dcp"

    def register(self, sock: zmq.Socket[bytes]) -> None:
        sock.send_multipart(dcp.encode(Registration(service=self.service.encode())))

    def beat(self) -> list[bytes]:
        return dcp.encode(Ping())

    def on_message(self, frames: list[bytes]) -> list[bytes] | None:
        message = dcp.decode(frames)
        if not isinstance(message, DcpRequest):
            return None
        return dcp.encode(DcpReply(client=message.client, metadata=message.metadata, data=message.data))

    def told_to_register(self, frames: list[bytes]) -> bool:
        return isinstance(dcp.decode(frames), Reconnect)


class DbpWorker(ZmqEchoWorker):
    """A DBP service whose ``function`` names the service: requests come as DBP REQUEST
    with nfgate's JSON envelope (docs/translation.md), answered with an envelope."""

    edge = "dbp"

    def register(self, sock: zmq.Socket[bytes]) -> None:
        name = f"{self.service}-{uuidlib.uuid4().hex[:6]}"
        self.name = name
        info = dbp.make_info(
            name=name, ip="127.0.0.1", port=9, function=self.service, heartbeat=HEARTBEAT_S * 2
        )
        sock.send_multipart(dbp.encode(dbp.Registration(time=time.time(), info=(info,)), "spec"))

    def beat(self) -> list[bytes]:
        return dbp.encode(dbp.Heartbeat(time=time.time(), service=self.name), "spec")

    def on_message(self, frames: list[bytes]) -> list[bytes] | None:
        message = dbp.decode(frames, "spec")
        if not isinstance(message, dbp.Request):
            return None
        envelope = json.loads(message.query)
        answer = {
            "id": envelope["id"],
            "status": 200,
            "body": envelope["body"],
            "encoding": envelope["encoding"],
        }
        return dbp.encode(dbp.Reply(time=time.time(), info=json.dumps(answer).encode()), "spec")

    def told_to_register(self, frames: list[bytes]) -> bool:
        return isinstance(dbp.decode(frames, "spec"), dbp.Disconnect)


class SadaWorker(ZmqEchoWorker):
    """A SADA server: INTRs its service to the channel; its PONG every beat is the
    conversation that keeps the channel from declaring it dead."""

    edge = "sada"

    def register(self, sock: zmq.Socket[bytes]) -> None:
        sock.send_multipart(sada.encode(Intr(services=((self.service, ""),))))

    def beat(self) -> list[bytes]:
        return sada.encode(Pong())

    def on_message(self, frames: list[bytes]) -> list[bytes] | None:
        message = sada.decode(frames)
        if not isinstance(message, Req):
            return None  # PING: the beat answers it
        return sada.encode(Rep(request_id=message.request_id, status=200, payload=message.payload))

    def told_to_register(self, frames: list[bytes]) -> bool:
        return isinstance(sada.decode(frames), Rintr)


class MemodbWorker(EchoWorker):
    """A MemoDB worker on an NNG req0 socket: READY, then each answer is the next request
    (the broker holds it until a JOB, or HEARTBEAT after its interval)."""

    edge = "memodb"

    def serve(self, stop: threading.Event) -> None:
        with pynng.Req0(recv_timeout=5000, send_timeout=1000) as sock:
            sock.dial(self.endpoint, block=True)
            sock.send(memodb.encode(MemoReady(services=(self.service,)))[0])
            for _ in range(1_000_000):
                if stop.is_set():
                    return
                try:
                    message = memodb.decode([sock.recv()])
                except pynng.Timeout:
                    # The broker answers within its heartbeat interval; a req0 that gives
                    # up on a reply abandons its request, so start again.
                    sock.send(memodb.encode(MemoReady(services=(self.service,)))[0])
                    continue
                if isinstance(message, MemoJob):
                    self.received += 1
                    if self.hang:  # a req0 waiting for a reply it never sends: nothing more
                        stop.wait()
                        return
                    sock.send(memodb.encode(MemoResult(id=message.id, payload=message.payload))[0])
                elif isinstance(message, MemoHeartbeat):
                    sock.send(memodb.encode(MemoHeartbeat(id=message.id))[0])
                else:  # DISCONNECT: start again
                    sock.send(memodb.encode(MemoReady(services=(self.service,)))[0])


class Client(abc.ABC):
    edge: ClassVar[str]
    exact: ClassVar[bool] = True  # False: the reply is wrapped (NorFab), compare the value

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> None:
        self.context = context
        self.endpoint = endpoint

    @abc.abstractmethod
    def call(self, service: str, body: bytes, timeout: float) -> bytes:
        """Send one request; the final reply's payload. Raises Unanswered."""


def _recv_until(sock: zmq.Socket[bytes], deadline: float) -> list[bytes]:
    remaining = int((deadline - time.monotonic()) * 1000)
    if remaining <= 0 or not sock.poll(remaining):
        raise Unanswered("no reply in time")
    return sock.recv_multipart()


class NfpClient(Client):
    edge = "nfp"
    dialect = "spec"

    def call(self, service: str, body: bytes, timeout: float) -> bytes:
        sock = connect_dealer(self.context, self.endpoint)
        try:
            job = uuidlib.uuid4().hex
            post = Post(header=CLIENT, service=service, target="any", uuid=job, body=(body,))
            sock.send_multipart(nfp.encode(post, self.dialect))
            deadline = time.monotonic() + timeout
            for _ in range(100):
                reply = nfp.decode(_recv_until(sock, deadline), self.dialect)
                if (
                    isinstance(reply, Response)
                    and reply.uuid == job
                    and reply.status >= 200
                    and reply.status != 202
                ):
                    if reply.status != 200:
                        raise Unanswered(f"status {reply.status}: {reply.body!r}")
                    return self.payload(reply.body)
            raise Unanswered("too many interim replies")
        finally:
            sock.close(0)

    def payload(self, body: tuple[bytes, ...]) -> bytes:
        return b"".join(body)


class NorfabClient(NfpClient):
    """NorFab's client flow; the reply is ``{worker: Result}`` and the payload the
    Result's ``result`` (the worker's bytes, parsed as JSON where they are JSON)."""

    dialect = "norfab"
    exact = False

    def payload(self, body: tuple[bytes, ...]) -> bytes:
        [(_, result)] = json.loads(body[0]).items()
        if result.get("failed"):
            raise Unanswered(f"failed: {result}")
        return json.dumps(result["result"], sort_keys=True).encode()


class DcpClient(Client):
    edge = "dcp"

    def call(self, service: str, body: bytes, timeout: float) -> bytes:
        sock = connect_dealer(self.context, self.endpoint)
        try:
            tag = uuidlib.uuid4().hex.encode()
            sock.send_multipart(
                dcp.encode(DcpRequest(service=service.encode(), metadata=(tag,), data=(body,)))
            )
            reply = dcp.decode(_recv_until(sock, time.monotonic() + timeout))
            assert isinstance(reply, DcpReply) and reply.metadata == (tag,), reply
            return b"".join(reply.data)
        finally:
            sock.close(0)


class MemodbClient(Client):
    """A simple MemoDB client: one JOB on a req0 socket; a failure is no reply at all."""

    edge = "memodb"

    def call(self, service: str, body: bytes, timeout: float) -> bytes:
        ms = max(1, int(timeout * 1000))
        with pynng.Req0(recv_timeout=ms, send_timeout=ms) as sock:
            sock.dial(self.endpoint, block=True)
            sock.send(memodb.encode(MemoJob(service=service, timeout_ms=ms, payload=body))[0])
            try:
                reply = memodb.decode([sock.recv()])
            except pynng.Timeout:
                raise Unanswered("no reply in time") from None
            assert isinstance(reply, MemoResult), reply
            return reply.payload


class SadaClient(Client):
    """A peer sending REQ to the gateway's SADA channel."""

    edge = "sada"

    def call(self, service: str, body: bytes, timeout: float) -> bytes:
        sock = connect_dealer(self.context, self.endpoint)
        try:
            rid = uuidlib.uuid4().hex
            sock.send_multipart(
                sada.encode(Req(request_id=rid, service=service, category="c", action="a", payload=body))
            )
            reply = sada.decode(_recv_until(sock, time.monotonic() + timeout))
            assert isinstance(reply, Rep) and reply.request_id == rid, reply
            if reply.status != 200:
                raise Unanswered(f"status {reply.status}: {reply.payload!r}")
            return reply.payload
        finally:
            sock.close(0)


WORKERS: dict[str, type[EchoWorker]] = {
    "nfp": NfpWorker,
    "dcp": DcpWorker,
    "dbp": DbpWorker,
    "sada": SadaWorker,
    "memodb": MemodbWorker,
}
CLIENTS: dict[str, type[Client]] = {
    "nfp": NfpClient,
    "nfp-norfab": NorfabClient,
    "dcp": DcpClient,
    "sada": SadaClient,
    "memodb": MemodbClient,
}
