"""What the DCP roles share: clauses quoted from specs/dcp.md, the suite's worker, the
run-wide observer, and the invalid inputs."""

from __future__ import annotations

import struct
from collections.abc import Callable

from nfgate.codecs.dcp.codec import PROTOCOL
from nfgate.codecs.dcp.messages import Ping, Registration
from nfgate.conformance.context import CaseContext, Dealer, Received
from nfgate.conformance.model import Clause

__all__ = ["SECTIONS", "SuiteWorker", "clause", "invalid_inputs", "observe", "type_part"]

# specs/dcp.md headings, numbered in document order (docs/conformance.md); 11 is the
# suite's own section for invalid input.
SECTIONS = {
    "4": "Architecture",
    "5": "Message Format",
    "6": "Connection",
    "7": "Requests & Replies",
    "8": "Heartbeats",
    "11": "Invalid input (robustness)",
}


def clause(section: str, text: str, keyword: str, note: str = "") -> Clause:
    return Clause(section=f"DCP {section} {SECTIONS[section]}", text=text, keyword=keyword, note=note)


def type_part(dialect: str, kind: int) -> bytes:
    """The message-type part: one byte (spec) or DagBox's 4-byte little-endian int."""
    return struct.pack("<I", kind) if dialect == "dagbox" else bytes((kind,))


class SuiteWorker:
    """A worker played by the suite: REGISTRATION, then PING every heartbeat while the
    case waits (PONGs are skipped by the helpers)."""

    def __init__(self, ctx: CaseContext, service: bytes, label: str = "worker") -> None:
        self.ctx = ctx
        self.service = service
        self.dealer: Dealer = ctx.dealer(label, identity=ctx.unique("nfgate-dw").encode())
        self.beat = ctx.beat(self.dealer, Ping())
        self.beat.active = False
        self.confirmation: Received | None = None

    def register(self, beating: bool = True, wait: bool = True, required: bool = False) -> SuiteWorker:
        """REGISTRATION, then (``wait``) its confirmation. A broker that confirms none is
        reported once, by DCP-BROKER-6.1 (``required``: raises NoAnswer); every other case
        goes on without it, so that each grades its own clause, not the missing echo.
        Once one went unconfirmed, the others wait for a PONG instead: one connection's
        messages keep their order, so the broker has read the REGISTRATION by then."""
        self.dealer.send(Registration(service=self.service))
        if wait:
            self._await_registration(required)
        self.beat.active = beating
        return self

    def _await_registration(self, required: bool) -> None:
        state = self.ctx.state
        if required:
            self.confirmation = self.dealer.recv("REGISTRATION confirmation", skip=("PONG",))
        elif state.get("confirms") is not False:
            # A broker echoes at once, before anything else it sends this worker: another
            # message first (a queued REQUEST) means it confirms nothing.
            self.confirmation = self._first(lambda got: got.type != "PONG", self.ctx.wait_s())
            if self.confirmation is not None and not isinstance(self.confirmation.message, Registration):
                self.dealer.unread(self.confirmation)
                self.confirmation = None
            state["confirms"] = self.confirmation is not None
        else:
            self.dealer.send(Ping())
            self._first(lambda got: got.type == "PONG", min(0.3, self.ctx.wait_s()))

    def _first(self, wanted: Callable[[Received], bool], window_s: float) -> Received | None:
        """The first message ``wanted`` within the window, or None; what comes before it
        is given back for the case to read."""
        found: list[Received] = []
        early: list[Received] = []

        def take(_: object, got: Received) -> bool:
            (found if wanted(got) else early).append(got)
            return bool(found)

        self.ctx.watch([self.dealer], take, window_s)
        for got in early:
            self.dealer.unread(got)
        return found[0] if found else None

    def next(self, what: str = "REQUEST") -> Received:
        """The next message that is not a PONG; raises NoAnswer."""
        return self.dealer.recv(what, skip=("PONG",))


def observe(ctx: CaseContext, got: Received) -> None:
    """Session observer: malformed messages, and messages not in the spec's form (whatever
    dialect the run speaks, decoded or not: DagBox's 4-byte type part is a departure from
    DCP 5, the run-wide DCP-*-5.2, which a run in its dialect must name too)."""
    if ctx.wire.detect(list(got.frames)) != "spec":
        ctx.state.setdefault("other_dialect", []).append(f"{got.text}  {[f.hex() for f in got.frames[:3]]}")
    if got.message is None:
        ctx.state.setdefault("malformed", []).append(
            f"{ctx.clause.section}: {got.text}  {[f.hex() for f in got.frames]}"
        )


def invalid_inputs(dialect: str) -> list[tuple[str, str, list[bytes]]]:
    """Invalid messages as (number, what, frames)."""
    ping, request = type_part(dialect, 0x02), type_part(dialect, 0x04)
    return [
        ("1", "a single frame of garbage", [b"\xde\xad\xbe\xef nfgate garbage"]),
        ("2", "an empty message (one empty frame)", [b""]),
        ("3", "another protocol version (DGBX 2)", [b"", b"DGBX\x02", ping]),
        ("4", "an unknown message type (0x09)", [b"", PROTOCOL, type_part(dialect, 0x09)]),
        ("5", "a PING with an extra part", [b"", PROTOCOL, ping, b"extra"]),
        ("6", "a REQUEST with no metadata delimiter", [b"", PROTOCOL, request, b"svc", b"", b"meta"]),
        ("7", "a message-type part of 2 bytes", [b"", PROTOCOL, b"\x02\x00"]),
        ("8", "a message of 200 frames", [b"", PROTOCOL, request, b"svc", *([b"x"] * 196)]),
    ]
