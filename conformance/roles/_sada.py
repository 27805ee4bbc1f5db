"""What the SADA roles share: clauses quoted from specs/safir-darbaan.md, the suite's
ROUTER sockets (as a channel: bound, with its public endpoint as identity; as a server:
connected, no identity), the run-wide observer and the invalid inputs.

Both ends of SADA are ROUTERs, so whoever speaks first must name the other: the suite's
server learns the channel's identity by trying the spec form (``tcp://ip:port``) and
PIRAN's (``ip:port``) with ROUTER_MANDATORY until one is routable.
"""

from __future__ import annotations

import time

import zmq

from nfgate.codecs._base import Message
from nfgate.codecs.sada import channel_identity
from nfgate.codecs.sada.messages import PROTO_ASCII, PROTO_BYTE, Ping, Pong
from nfgate.conformance.context import CaseContext, NoAnswer, Received, Source
from nfgate.conformance.link import Watched, send_routed
from nfgate.conformance.model import Clause
from nfgate.edges import peer_label

__all__ = [
    "SECTIONS",
    "RouterPeer",
    "clause",
    "identities",
    "invalid_inputs",
    "observe",
    "proto",
]

# specs/safir-darbaan.md headings (the upstream SAFIR-DARBAAN-Spec.md), numbered in
# document order; 11 is the suite's own section for invalid input.
SECTIONS = {
    "2": "Overall Behavior",
    "3": "Request and Response Routing",
    "4": "Command Header",
    "5": "INTR Command",
    "6": "RINTR Command",
    "7": "REQ Command",
    "8": "REP Command",
    "9": "PING and PONG Command",
    "10": "Server Reliability",
    "11": "Invalid input (robustness)",
}
TRY_S = 0.02  # between attempts to reach a peer whose connection is not up yet


def clause(section: str, text: str, keyword: str, note: str = "") -> Clause:
    return Clause(section=f"SADA {section} {SECTIONS[section]}", text=text, keyword=keyword, note=note)


def proto(ctx: CaseContext) -> bytes:
    """The version frame the suite writes: ``SADA1`` (the examples', PIRAN's) unless the
    run asked for the other form with ``state["proto"]``."""
    found: bytes = ctx.state.get("proto", PROTO_ASCII)
    return found


def other_proto(ctx: CaseContext) -> bytes:
    return PROTO_BYTE if proto(ctx) == PROTO_ASCII else PROTO_ASCII


class RouterPeer(Watched):
    """A suite ROUTER: ``bind`` with an identity (the suite as channel) or connect
    without one (the suite as server). PINGs are answered PONG when ``pong``; a
    :class:`Source` for :meth:`CaseContext.watch`."""

    def __init__(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        label: str,
        *,
        identity: bytes | None = None,
        pong: bool = True,
    ) -> None:
        sock = context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if identity is not None:
            sock.setsockopt(zmq.ROUTING_ID, identity)
        self.sock = sock
        self.label = label
        self.waiting_for = f"on the {label} socket"
        self.pong = pong
        self.peer: bytes | None = None  # whom the suite talks to
        self.pings = 0

    def source(self) -> Source:
        return self

    def read(self, ctx: CaseContext) -> Received | None:
        try:
            parts = self.sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None
        identity, frames = parts[0], parts[1:]
        message, text = ctx.wire.decode(frames)
        ctx.record("received", f"{self.label} from {peer_label(identity)}", frames, text)
        got = Received(frames=tuple(frames), message=message, text=text, identity=identity)
        ctx.observe(got)
        if self.peer is None:
            self.peer = identity
        if isinstance(message, Ping):
            self.pings += 1
            if self.pong:
                self.try_send(ctx, Pong(proto=message.proto), identity)
        return got

    def try_send(
        self, ctx: CaseContext, message: Message | list[bytes], to: bytes | None = None, note: str = ""
    ) -> bool:
        target = to if to is not None else self.peer
        return target is not None and send_routed(ctx, self.sock, target, message, f"{self.label} to", note)

    def send(
        self, ctx: CaseContext, message: Message | list[bytes], to: bytes | None = None, note: str = ""
    ) -> None:
        """Send; raises :class:`NoAnswer` when the peer is not connected."""
        if not self.try_send(ctx, message, to, note):
            raise NoAnswer("connected peer to send to", 0.0)

    def reach(
        self,
        ctx: CaseContext,
        message: Message | list[bytes],
        candidates: list[bytes],
        window_s: float,
        note: str = "",
    ) -> bytes:
        """Send ``message`` (or raw frames) to the first routable identity of
        ``candidates``, retrying while the connection comes up; the identity that
        worked. Raises NoAnswer."""
        frames = ctx.wire.encode(message) if isinstance(message, Message) else list(message)
        text = repr(message) if isinstance(message, Message) else note
        end = time.monotonic() + ctx.wait_s(window_s)
        for _ in range(100_000):
            for identity in candidates:
                try:
                    self.sock.send_multipart([identity, *frames], zmq.NOBLOCK)
                except zmq.ZMQError:
                    continue
                ctx.record("sent", f"{self.label} to {peer_label(identity)}", frames, text)
                self.peer = identity
                return identity
            if time.monotonic() >= end:
                break
            time.sleep(TRY_S)
        raise NoAnswer(f"route to the peer (tried {', '.join(peer_label(c) for c in candidates)})", window_s)

    def close(self) -> None:
        self.sock.close(0)


def identities(endpoint: str) -> list[bytes]:
    """The channel identities a server may have to use: spec form first, then PIRAN's."""
    out = []
    for dialect in ("spec", "piran"):
        try:
            out.append(channel_identity(endpoint, dialect))
        except ValueError:
            continue
    return out


def observe(ctx: CaseContext, got: Received) -> None:
    """Session observer: malformed messages, and messages not in the spec's form (PIRAN's
    int32 status): a deployed dialect is reported as a departure whatever the run's
    dialect."""
    if got.message is None:
        ctx.state.setdefault("malformed", []).append(f"{ctx.clause.section}: {got.text}")
    elif ctx.wire.detect(list(got.frames)) != "spec":
        ctx.state.setdefault("other_dialect", []).append(f"{ctx.clause.section}: {got.text}")


def invalid_inputs(version: bytes) -> list[tuple[str, str, list[bytes]]]:
    """Invalid messages as (number, what, frames)."""
    return [
        ("1", "a single frame of garbage", [b"\xde\xad\xbe\xef nfgate garbage"]),
        ("2", "an empty message (one empty frame)", [b""]),
        ("3", "another protocol version (SADA2)", [b"", b"SADA2", b"PING"]),
        ("4", "an unknown command", [b"", version, b"HELLO"]),
        ("5", "a PING with an extra frame", [b"", version, b"PING", b"extra"]),
        ("6", "a REQ with no action frames", [b"", version, b"REQ", b"rq-1", b"svc", b"1"]),
        ("7", "an INTR with an odd number of service frames", [b"", version, b"INTR", b"svc"]),
        ("8", "a message of 200 frames", [b"", version, b"INTR", *([b"x"] * 197)]),
    ]
