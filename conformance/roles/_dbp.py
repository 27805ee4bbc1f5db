"""What the DBP catalog role shares: clauses quoted from specs/dbp.md, the suite's
service (a DEALER that registers, plus a UDP socket for heartbeat datagrams), the suite's
client, the run-wide observer and the invalid inputs.

The catalog's UDP heartbeat socket is taken to be the ROUTER's host and port number
over UDP (design.md, DBP notes: nfgate's default, the spec names no port).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlsplit

from nfgate.codecs.dbp import (
    Approved,
    Heartbeat,
    Registration,
    Reply,
    Request,
    decode_heartbeat_datagram,
    make_info,
    service_info,
)
from nfgate.conformance.context import CaseContext, Dealer, Received, Source
from nfgate.conformance.model import Clause
from nfgate.errors import DecodeError

__all__ = [
    "SECTIONS",
    "SuiteService",
    "UdpPort",
    "ask",
    "catalog_udp",
    "clause",
    "close_udp",
    "closing",
    "is_inactive",
    "info_of",
    "invalid_inputs",
    "observe",
]

# specs/dbp.md headings, numbered in document order; 9 is the suite's own section for
# invalid input.
SECTIONS = {
    "1": "ROUTER Addressing",
    "2": "DBP/Info Request",
    "3": "DBP/Service Registration",
    "4": "DBP/Heartbeats",
    "5": "Opening and Closing a Connection",
    "6": "Heartbeating",
    "9": "Invalid input (robustness)",
}


def clause(section: str, text: str, keyword: str, note: str = "") -> Clause:
    return Clause(section=f"DBP {section} {SECTIONS[section]}", text=text, keyword=keyword, note=note)


def now() -> float:
    return round(time.time(), 3)


def catalog_udp(ctx: CaseContext) -> tuple[str, int]:
    """Where the catalog takes heartbeat datagrams: the endpoint's host and port."""
    parts = urlsplit(ctx.options.endpoint)
    return parts.hostname or "127.0.0.1", parts.port or 5246


class UdpPort:
    """The suite service's UDP socket on 127.0.0.1 (a random port); a
    :class:`Source` for :meth:`CaseContext.watch`: zmq.Poller polls any file
    descriptor, and reports it by number, so ``sock`` is the number."""

    def __init__(self, ctx: CaseContext, label: str) -> None:
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        self.sock: int = self.udp.fileno()
        self.port: int = self.udp.getsockname()[1]
        self.label = label
        ctx.state.setdefault("udp_open", []).append(self.udp)

    def read(self, ctx: CaseContext) -> Received | None:
        try:
            data = self.udp.recv(65536)
        except (BlockingIOError, OSError):
            return None
        try:
            message: Heartbeat | None = decode_heartbeat_datagram(data)
            text = f"datagram {message!r}"
        except DecodeError as exc:
            message, text = None, f"undecodable datagram: {exc.reason}"
        ctx.record("received", self.label, [data], text)
        return Received(frames=(data,), message=message, text=text)

    def drain(self, ctx: CaseContext) -> list[Received]:
        """The datagrams already waiting, read without waiting."""
        out: list[Received] = []
        for _ in range(10_000):
            got = self.read(ctx)
            if got is None:
                break
            out.append(got)
        return out

    def send(self, ctx: CaseContext, data: bytes, note: str) -> None:
        ctx.record("sent", self.label, [data], note)
        self.udp.sendto(data, catalog_udp(ctx))

    def source(self) -> Source:
        return cast(Source, self)


def close_udp(ctx: CaseContext) -> None:
    """Close the UDP sockets a case opened (the framework closes ZeroMQ ones only)."""
    for sock in ctx.state.pop("udp_open", []):
        sock.close()


class SuiteService:
    """A service played by the suite: a DEALER that registers and a UDP socket whose
    address it registers for heartbeats."""

    def __init__(self, ctx: CaseContext, name: str | None = None, heartbeat_s: float | None = None) -> None:
        self.ctx = ctx
        self.name = name or ctx.unique("dbp")
        self.heartbeat_s = heartbeat_s or ctx.heartbeat_s
        self.udp = UdpPort(ctx, f"udp {self.name}")
        self.dealer: Dealer = ctx.dealer(f"service {self.name}")

    def info(self, **extra: Any) -> bytes:
        if self.ctx.dialect == "hermes":
            body = {
                "name": self.name,
                "interfaces": {"router": {"ip": "127.0.0.1", "port": self.udp.port}},
                "reg_time": time.time(),
                "topics": [],
                **extra,
            }
            return json.dumps(body).encode()
        return make_info(
            name=self.name,
            ip="127.0.0.1",
            port=self.udp.port,
            function=f"{self.name}-function",
            heartbeat=self.heartbeat_s,
            worker=False,  # nfgate: not a worker of its routing core (no requests to answer)
            **extra,
        )

    def register(self, wait: bool = True) -> Received | None:
        """REGISTRATION; with ``wait`` the answer (raises NoAnswer)."""
        self.dealer.send(Registration(time=now(), info=(self.info(),)))
        return self.dealer.recv("APPROVED or DENIED", skip=("HEARTBEAT",)) if wait else None

    def approved(self) -> None:
        """Register and insist on APPROVED (a Violation otherwise, NoAnswer on silence)."""
        got = self.register()
        assert got is not None
        if not isinstance(got.message, Approved):
            raise self.ctx.violated(f"the suite's registration got {got.type}: {got.text}")


def ask(ctx: CaseContext, query: str, label: str = "client") -> Received:
    """An info REQUEST on a fresh client DEALER; its REPLY (raises NoAnswer)."""
    client = ctx.dealer(label)
    client.send(Request(time=now(), query=query))
    return client.recv("REPLY")


def info_of(got: Received) -> dict[str, Any] | None:
    """The REPLY's information as a JSON object, or None."""
    if not isinstance(got.message, Reply):
        return None
    try:
        return service_info(got.message.info)
    except DecodeError:
        return None


def is_inactive(info: dict[str, Any] | None) -> bool:
    """An "inactive warning": a status other than active, or an error/warning key."""
    if info is None:
        return False
    status = str(info.get("status", "")).lower()
    keys = {k.lower() for k in info}
    return (bool(status) and status != "active") or bool(keys & {"error", "warning"})


def observe(ctx: CaseContext, got: Received) -> None:
    """Session observer: malformed messages and messages not in the spec's form (Hermes's
    float32 time, ``OmO``): a deployed dialect is reported as a departure whatever the
    run's dialect."""
    if got.message is None:
        ctx.state.setdefault("malformed", []).append(f"{ctx.clause.section}: {got.text}")
    elif len(got.frames) > 2 and ctx.wire.detect(list(got.frames)) != "spec":
        ctx.state.setdefault("other_dialect", []).append(f"{ctx.clause.section}: {got.text}")


def closing(func: Callable[[CaseContext], None]) -> Callable[[CaseContext], None]:
    """Wrap a case so the UDP sockets it opened are closed however it ends."""

    def run(ctx: CaseContext) -> None:
        try:
            func(ctx)
        finally:
            close_udp(ctx)

    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def invalid_inputs() -> list[tuple[str, str, list[bytes]]]:
    """Invalid messages as (number, what, frames)."""
    return [
        ("1", "a single frame of garbage", [b"\xde\xad\xbe\xef nfgate garbage"]),
        ("2", "an empty message (one empty frame)", [b""]),
        ("3", "an unknown command tag", [b"", b"O_o", b"1732251000"]),
        ("4", "a REQUEST whose time is not a number", [b"", b"u_U", b"yesterday", b"*"]),
        ("5", "a REQUEST with no query frame", [b"", b"u_U", b"1732251000"]),
        ("6", "a REGISTRATION with no information frame", [b"", b"UwU", b"1732251000"]),
        ("7", "a HEARTBEAT whose name is not UTF-8", [b"", b"<3", b"1732251000", b"\xff\xfe"]),
        ("8", "a message of 200 frames", [b"", b"u_U", b"1732251000", *([b"x"] * 197)]),
    ]
