"""Shared by the DBP edge's tests: sending and reading DBP messages, registering a
service, asking the catalog."""

from __future__ import annotations

import json
import time
from typing import Any

import zmq

from nfgate.codecs import dbp
from nfgate.edges.dbp import DbpEdge

from .conftest import Running, recv

Sock = zmq.Socket[bytes]


def send(sock: Sock, message: Any, dialect: str = "spec") -> None:
    sock.send_multipart(dbp.encode(message, dialect))


def get(sock: Sock, dialect: str | None = None) -> Any:
    return dbp.decode(recv(sock), dialect)


def edge(gw: Running) -> DbpEdge:
    found = gw.gateway.edges["dbp"]
    assert isinstance(found, DbpEdge)
    return found


def now() -> float:
    return time.time()


def register(
    gw: Running,
    name: str,
    *,
    function: str = "",
    heartbeat: float = 30.0,
    port: int = 9,
    **extra: Any,
) -> Sock:
    sock = gw.dealer("dbp")
    info = dbp.make_info(
        name=name, ip="127.0.0.1", port=port, function=function, heartbeat=heartbeat, **extra
    )
    send(sock, dbp.Registration(time=now(), info=(info,)))
    approved = get(sock)
    assert isinstance(approved, dbp.Approved), approved
    return sock


def info(gw: Running, query: str, sock: Sock | None = None) -> Any:
    client = sock if sock is not None else gw.dealer("dbp")
    send(client, dbp.Request(time=now(), query=query))
    reply = get(client)
    assert isinstance(reply, dbp.Reply)
    return json.loads(reply.info)
