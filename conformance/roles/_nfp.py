"""What the NFP roles share: clauses quoted from specs/nfp.md, message builders for the
spec and NorFab dialects, and the run-wide observer (status codes, malformed replies).
"""

from __future__ import annotations

import uuid as uuidlib

from nfgate.codecs._base import Message
from nfgate.codecs.nfp.messages import (
    BROKER,
    CLIENT,
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
from nfgate.conformance.context import CaseContext, Dealer, NoAnswer, Received
from nfgate.conformance.model import Clause

__all__ = [
    "JOB_BODY",
    "SPEC_STATUSES",
    "SuiteWorker",
    "clause",
    "job",
    "new_uuid",
    "observe",
    "open_client",
    "response",
]

# Status Frames: the codes NFP defines ("Implementations MAY NOT use status codes that are
# not defined here").
SPEC_STATUSES = frozenset({200, 202, 300, 400, 408, 417, 500})

# A NorFab job body that every NFPWorker can run (list_tasks is built in); opaque to others.
JOB_BODY = b'{"task":"list_tasks","kwargs":{"brief":true},"args":[],"timeout":15}'

# Heading of each specs/nfp.md section the case numbers refer to (docs/conformance.md).
SECTIONS = {
    "3": "NFP messages",
    "4": "Status Frames",
    "5": "NFP/Client",
    "6": "NFP/Worker",
    "7": "Opening and Closing a Connection",
    "8": "POST and RESPONSE Processing",
    "9": "Keepaliving",
    "10": "Broker Management Interface (BMMI)",
    "11": "Opening and Closing a Connection (invalid input)",
}


def clause(section: str, text: str, keyword: str, note: str = "") -> Clause:
    """A clause of specs/nfp.md, by the suite's section number."""
    return Clause(section=f"NFP {section} {SECTIONS[section]}", text=text, keyword=keyword, note=note)


def new_uuid() -> str:
    return uuidlib.uuid4().hex


def norfab(ctx: CaseContext) -> bool:
    return ctx.dialect == "norfab"


def job(
    ctx: CaseContext,
    kind: type[Post] | type[Get] | type[Delete],
    service: str,
    target: str,
    uuid: str,
    body: bytes,
) -> Message:
    """A client's job command (addressed layout in both dialects)."""
    return kind(header=CLIENT, service=service, target=target, uuid=uuid, body=(body,))


def response(ctx: CaseContext, held: Message, service: str, status: int, body: bytes) -> Response:
    """A worker's RESPONSE to a job it holds, in the run's dialect (NorFab: routed)."""
    uuid: str = held.uuid  # type: ignore[attr-defined]
    client: bytes | None = getattr(held, "client", None)
    if norfab(ctx) and client is not None:
        return Response(header=WORKER, client=client, uuid=uuid, status=status, body=(body,))
    return Response(header=WORKER, service=service, uuid=uuid, status=status, body=(body,))


def disconnect(ctx: CaseContext, header: bytes, service: str) -> Disconnect:
    body = None if norfab(ctx) else b"nfgate conformance"
    return Disconnect(header=header, service=service, body=body)


def open_client(ctx: CaseContext, name: str = "client") -> Dealer:
    """A fresh client socket with a new identity. In the spec dialect it first says
    OPEN (NFP/Client "C: OPEN / B: OPEN") and waits for OPEN once per run; a broker
    that never answers it is not waited for again."""
    dealer = ctx.dealer(name, identity=ctx.unique("nfgate-c").encode())
    if not norfab(ctx) and ctx.state.get("client_open") is not False:
        dealer.send(Open(header=CLIENT))
        try:
            got = dealer.recv("OPEN", ctx.wait_s(), skip=("KEEPALIVE",))
            ctx.state["client_open"] = isinstance(got.message, Open)
        except NoAnswer:
            ctx.state["client_open"] = False
    return dealer


class SuiteWorker:
    """A worker played by the suite: a DEALER whose identity is its name (the name
    NorFab and nfgate target), OPEN (spec dialect) then READY, then KEEPALIVE every
    heartbeat while the case waits."""

    def __init__(self, ctx: CaseContext, service: str, name: str | None = None) -> None:
        self.ctx = ctx
        self.service = service
        self.name = name or ctx.unique("nfgate-w")
        self.dealer = ctx.dealer(f"worker {self.name}", identity=self.name.encode())
        self.beat = ctx.beat(self.dealer, Keepalive(header=WORKER, service=service))
        self.beat.active = False
        self.opened = False

    def open(self) -> None:
        """OPEN first in the spec dialect (NFP/Worker "W: OPEN / B: OPEN / W: READY")."""
        if self.opened or norfab(self.ctx) or self.ctx.state.get("worker_open") is False:
            return
        self.opened = True
        self.dealer.send(Open(header=WORKER))
        try:
            got = self.dealer.recv("OPEN", self.ctx.wait_s(), skip=("KEEPALIVE",))
            self.ctx.state["worker_open"] = isinstance(got.message, Open)
        except NoAnswer:
            self.ctx.state["worker_open"] = False

    def register(self, beating: bool = True) -> SuiteWorker:
        self.open()
        self.dealer.send(Ready(service=self.service))
        self.beat.active = beating
        return self

    def jobs(self, window_s: float) -> list[Received]:
        """POST/GET/DELETE that reach this worker within the window (keepalives skipped)."""
        return [
            g
            for g in self.dealer.collect(window_s, skip=("KEEPALIVE",))
            if g.type in ("POST", "GET", "DELETE")
        ]

    def answer(self, held: Message, status: int, body: bytes) -> None:
        self.dealer.send(response(self.ctx, held, self.service, status, body))


def settle(ctx: CaseContext) -> None:
    """Give READY sent on one connection time to be processed before a client's job on
    another (ZeroMQ orders messages per connection only)."""
    ctx.sleep(min(0.3, ctx.options.timeout_s / 4))


def observe(ctx: CaseContext, got: Received) -> None:
    """Session observer: statuses and malformed messages the peer sent, for the
    run-wide cases (NFP 3 and 4)."""
    state = ctx.state
    # Against the spec's form whatever dialect the run speaks, and whether or not the
    # message decoded: NorFab's ASCII command frames are a departure from NFP 3 (the
    # run-wide NFP-*-3.2), which a run in its dialect must name too.
    if ctx.wire.detect(list(got.frames)) != "spec":
        state.setdefault("other_dialect", []).append(f"{got.text}  {[f.hex() for f in got.frames[:3]]}")
    if got.message is None:
        state.setdefault("malformed", []).append(
            f"{ctx.clause.section}: {got.text}  {[f.hex() for f in got.frames]}"
        )
        return
    status = getattr(got.message, "status", None)
    if isinstance(status, int):
        state.setdefault("statuses", {}).setdefault(status, got.text)


__all__ += ["BROKER", "disconnect", "norfab", "settle"]


def command(dialect: str, number: int) -> bytes:
    """A command frame: one byte (spec) or NorFab's ASCII ``0x..``."""
    return f"0x{number:02x}".encode() if dialect == "norfab" else bytes((number,))


def malformed(dialect: str, header: bytes) -> list[tuple[str, str, list[bytes]]]:
    """Invalid messages as (number, what, frames), sent with ``header`` where one is
    needed (NFPC01 toward a broker, NFPB01 toward a worker)."""
    post = command(dialect, 0x04)
    uuid = new_uuid().encode()
    return [
        ("1", "a single frame of garbage", [b"\xde\xad\xbe\xef nfgate garbage"]),
        ("2", "an empty message (one empty frame)", [b""]),
        ("3", "an unknown protocol header", [b"", b"NFPX01", post, b"svc", b"any", uuid, b"{}"]),
        ("4", "an unknown command", [b"", header, command(dialect, 0x7F), b"svc", b"any", uuid, b"{}"]),
        ("5", "a truncated POST (no target, uuid or body)", [b"", header, post, b"svc"]),
        ("6", "a service name that is not UTF-8", [b"", header, post, b"\xff\xfe\xfd", b"any", uuid, b"{}"]),
        ("7", "a message of 200 frames", [b"", header, post, *([b"x"] * 197)]),
        ("8", "frame 0 not empty", [b"junk", header, post, b"svc", b"any", uuid, b"{}"]),
    ]
