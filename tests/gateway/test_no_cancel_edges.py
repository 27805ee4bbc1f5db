"""DCP, SADA and DBP have no cancel message: the core keeps a request cancelled at one of
their workers in that worker's slot (``RouterConfig.cancel_keeps_slot``) and never sends
their edges an ``Abort``. Should one come anyway, the edge counts it as an output it
never gets (``unexpected_output``), tells the worker nothing, and keeps the request, so
the worker's late answer still reaches the core, which frees the slot with it. Driven by
hand, no gateway thread (docs/routing.md "Cancel")."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from nfgate.codecs import dbp, dcp, sada
from nfgate.edges import Edge, EdgeSettings
from nfgate.model import Command, Peer, Register, Reply, Request, ServiceRef
from nfgate.routing_types import Abort, Dispatch
from nfgate.store import JobStore

from .conftest import RECV_MS, nothing, recv

pytestmark = pytest.mark.timeout(60)

Sock = zmq.Socket[bytes]
CLIENT = Peer(edge="nfp", protocol="nfp", address=b"client-1")


@pytest.fixture
def context() -> Iterator[zmq.Context[Sock]]:
    ctx: zmq.Context[Sock] = zmq.Context()
    yield ctx
    ctx.term()


def settings(context: zmq.Context[Sock], protocol: str, **options: Any) -> EdgeSettings:
    return EdgeSettings(
        name=protocol, protocol=protocol, url="tcp://127.0.0.1:*", context=context, options=options
    )


def commands_from(unit: Edge, socket: Sock) -> list[Command]:
    """The commands the edge makes of the first messages it reads (bounded wait)."""
    for _ in range(100):
        commands = unit.receive(0, 10)
        if commands:
            return commands
        socket.poll(50)
    raise AssertionError("the edge read nothing")


def worker_socket(context: zmq.Context[Sock], endpoint: str) -> Sock:
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, RECV_MS)
    sock.connect(endpoint)
    return sock


def check_abort_is_unexpected(
    unit: Edge,
    worker: Sock,
    register: Callable[[], None],
    take: Callable[[], Callable[[], None]],
    welcome: bool = True,
) -> None:
    """``register`` makes ``worker`` a worker of ``svc`` (``welcome``: the protocol
    answers that); ``take`` reads the request the edge sent it and returns how to
    answer it."""
    socket = unit.sockets()[0]
    assert isinstance(socket, zmq.Socket)
    register()
    [registered] = commands_from(unit, socket)
    assert isinstance(registered, Register)
    if welcome:
        recv(worker)  # DCP's echo of the REGISTRATION, DBP's APPROVED
    request = Request(id=7, service=ServiceRef(name="svc"), body=(b"x",), reply_to=CLIENT)
    assert unit.emit(Dispatch(worker=registered.peer, request=request), 0) == []
    unit.flush_sends(0)
    answer = take()

    assert unit.emit(Abort(worker=registered.peer, request=request), 0) == []
    unit.flush_sends(0)
    assert unit.stats()["unexpected_output"] == 1
    assert nothing(worker)  # no protocol message says "cancelled": none is made up

    answer()
    [reply] = commands_from(unit, socket)
    assert isinstance(reply, Reply) and reply.id == 7 and reply.worker == registered.peer


def test_dcp_edge(context: zmq.Context[Sock]) -> None:
    from nfgate.edges.dcp import DcpEdge

    unit = DcpEdge(settings(context, "dcp"))
    worker = worker_socket(context, unit.endpoint)
    held: list[dcp.Request] = []

    def take() -> Callable[[], None]:
        message = dcp.decode(recv(worker))
        assert isinstance(message, dcp.Request) and message.data == (b"x",)
        held.append(message)
        return lambda: worker.send_multipart(
            dcp.encode(dcp.Reply(client=held[0].client, metadata=held[0].metadata, data=(b"late",)))
        )

    try:
        check_abort_is_unexpected(
            unit, worker, lambda: worker.send_multipart(dcp.encode(dcp.Registration(service=b"svc"))), take
        )
    finally:
        worker.close(0)
        unit.close()


def test_sada_channel_edge(context: zmq.Context[Sock]) -> None:
    from nfgate.edges.sada import SadaChannelEdge

    unit = SadaChannelEdge(settings(context, "sada", heartbeat=(60_000, 3)))
    worker = worker_socket(context, unit.endpoint)

    def register() -> None:
        worker.send_multipart(sada.encode(sada.Intr(services=(("svc", ""),)), "spec"))

    def take() -> Callable[[], None]:
        message = sada.decode(recv(worker), "spec")
        assert isinstance(message, sada.Req) and message.payload == b"x"
        rep = sada.Rep(request_id=message.request_id, status=200, payload=b"late")
        return lambda: worker.send_multipart(sada.encode(rep, "spec"))

    try:
        check_abort_is_unexpected(unit, worker, register, take, welcome=False)
    finally:
        worker.close(0)
        unit.close()


def test_dbp_edge(context: zmq.Context[Sock], tmp_path: Path) -> None:
    from nfgate.edges.dbp import make

    store = JobStore(tmp_path / "jobs.sqlite3")
    unit = make(settings(context, "dbp", udp=None, beacon=None), store=store)
    worker = worker_socket(context, unit.endpoint)
    info = dbp.make_info(name="svc-1", ip="127.0.0.1", port=9, function="svc", heartbeat=30)

    def take() -> Callable[[], None]:
        message = dbp.decode(recv(worker))
        assert isinstance(message, dbp.Request) and json.loads(message.query)["id"] == "7"
        answer = json.dumps({"id": "7", "status": 200, "body": ["late"]}).encode()
        return lambda: worker.send_multipart(dbp.encode(dbp.Reply(time=time.time(), info=answer)))

    try:
        check_abort_is_unexpected(
            unit,
            worker,
            lambda: worker.send_multipart(dbp.encode(dbp.Registration(time=time.time(), info=(info,)))),
            take,
        )
    finally:
        worker.close(0)
        unit.close()
        store.close()
