"""What the DCP roles share: clauses quoted from specs/dcp.md, the suite's worker, the
run-wide observer, and the invalid inputs."""

from __future__ import annotations

import struct

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

    def register(self, beating: bool = True, wait: bool = True) -> SuiteWorker:
        self.dealer.send(Registration(service=self.service))
        if wait:
            self.confirmation = self.dealer.recv("REGISTRATION confirmation", skip=("PONG",))
        self.beat.active = beating
        return self

    def next(self, what: str = "REQUEST") -> Received:
        """The next message that is not a PONG; raises NoAnswer."""
        return self.dealer.recv(what, skip=("PONG",))


def observe(ctx: CaseContext, got: Received) -> None:
    """Session observer: malformed messages and messages in another dialect."""
    if got.message is None:
        ctx.state.setdefault("malformed", []).append(
            f"{ctx.clause.section}: {got.text}  {[f.hex() for f in got.frames]}"
        )
    elif ctx.wire.detect(list(got.frames)) != ctx.dialect:
        ctx.state.setdefault("other_dialect", []).append(got.text)


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
