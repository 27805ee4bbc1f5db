"""Shared by the NFP edge's tests: sending and reading NFP messages, registering spec
and NorFab workers, posting jobs, calling broker services, the edge's job store."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest
import zmq

from nfgate.codecs import nfp
from nfgate.codecs.nfp.messages import BROKER, CLIENT, WORKER, Keepalive, Open, Post, Ready, Response
from nfgate.store import JobStore

from .conftest import Running, recv, until


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


def mmi_call(client: zmq.Socket[bytes], service: str, task: str, **kwargs: object) -> tuple[int, object]:
    """A spec POST to a broker service; its (status, decoded JSON value)."""
    body = json.dumps({"task": task, "kwargs": kwargs, "args": []}).encode()
    post(client, service, body)
    reply = get(client)
    assert isinstance(reply, Response)
    return reply.status, json.loads(reply.body[0])


def store_of(running: Running) -> JobStore:
    return running.gateway.edges["nfp"].jobs._store  # type: ignore[attr-defined, no-any-return]
