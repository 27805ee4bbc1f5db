"""What the MemoDB roles share: clauses quoted from specs/memodb.md, NNG sockets that log
into the case like :class:`nfgate.conformance.context.Dealer` does, and invalid inputs.

MemoDB runs over NNG (req0/rep0), not ZeroMQ, so the framework's DEALER helpers do not
apply: :class:`NngPeer` is their req0/rep0 counterpart. Every wait is clamped to the
case deadline by :meth:`CaseContext.wait_s` and polls in short slices, so a silent peer
costs at most the case's budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import cbor2
import pynng

from nfgate.codecs._base import Message
from nfgate.conformance.context import CaseContext, NoAnswer, Received
from nfgate.conformance.model import Clause
from nfgate.conformance.tls import secure_nng

__all__ = [
    "SECTIONS",
    "NngPeer",
    "Sockets",
    "clause",
    "header",
    "invalid_inputs",
    "observe",
    "with_sockets",
]

# specs/memodb.md headings, numbered in document order; 9 is the suite's own section
# for invalid input, 10 for what the deployed bcdb broker does differently.
SECTIONS = {
    "2": "Base layer",
    "3": "Simple client",
    "4": "Worker",
    "5": "Message format",
    "9": "Invalid input (robustness)",
    "10": "Deployed dialect (bcdb)",
}
SLICE_S = 0.01  # NNG has no poller shared with ZeroMQ here: poll non-blocking in slices
RESEND_MS = 600_000  # req0 must not resend within a case: a resend would look like a new request


def clause(section: str, text: str, keyword: str, note: str = "") -> Clause:
    return Clause(section=f"MemoDB {section} {SECTIONS[section]}", text=text, keyword=keyword, note=note)


def header(*items: object) -> bytes:
    """A CBOR header (canonical), for hand-made messages the codec would refuse to encode."""
    return bytes(cbor2.dumps(list(items), canonical=True))


class NngPeer:
    """One NNG socket of the suite (req0 toward a broker, or rep0 as the broker),
    logging every message into the case."""

    def __init__(self, ctx: CaseContext, sock: pynng.Socket, label: str) -> None:
        self.ctx = ctx
        self.sock = sock
        self.label = label

    def send(self, message: Message | bytes, note: str = "") -> None:
        """Send a message (encoded in the run's dialect) or raw bytes (malformed input);
        raises :class:`NoAnswer` when the message cannot go out within the deadline."""
        if isinstance(message, Message):
            data = self.ctx.wire.encode(message)[0]
            text = repr(message)
        else:
            data = message
            text = note or self.ctx.wire.decode([data])[1]
        self.ctx.record("sent", self.label, [data], text)
        self.sock.send_timeout = max(1, int(self.ctx.wait_s() * 1000))
        try:
            self.sock.send(data)
        except pynng.Timeout:
            raise NoAnswer(f"way to send on the {self.label} socket", self.ctx.wait_s()) from None
        except pynng.NNGException as exc:
            raise NoAnswer(f"way to send on the {self.label} socket ({exc})", 0.0) from None

    def read(self) -> Received | None:
        """What is waiting on the socket, without waiting (None when nothing is)."""
        try:
            data = self.sock.recv(block=False)
        except pynng.TryAgain:
            return None
        except pynng.NNGException:  # no request outstanding (req0) or socket closed
            return None
        except RuntimeError:
            # pynng 0.9 cannot hand out an empty message (it unpacks a NULL pointer);
            # the message was consumed, and empty is what it was.
            data = b""
        message, text = self.ctx.wire.decode([data])
        self.ctx.record("received", self.label, [data], text)
        got = Received(frames=(data,), message=message, text=text)
        self.ctx.observe(got)
        return got

    def recv(self, what: str = "message", timeout_s: float | None = None) -> Received:
        """The next message; raises :class:`NoAnswer` after ``timeout_s`` (clamped)."""
        limit = self.ctx.wait_s(timeout_s)
        end = time.monotonic() + limit
        for _ in range(10_000_000):  # bounded: each pass sleeps a slice or returns
            got = self.read()
            if got is not None:
                return got
            self.ctx.pump()
            left = end - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(SLICE_S, left))
        raise NoAnswer(f"{what} on the {self.label} socket", limit)

    def quiet(self, window_s: float) -> Received | None:
        """The first message within ``window_s`` (clamped), or None: for cases where
        silence is the right answer."""
        try:
            return self.recv("message", window_s)
        except NoAnswer:
            self.ctx.heard_silence = True
            return None


class Sockets:
    """The NNG sockets one case opened; :meth:`close` closes them all."""

    def __init__(self, ctx: CaseContext) -> None:
        self.ctx = ctx
        self.open: list[pynng.Socket] = []

    def req(self, label: str, endpoint: str | None = None) -> NngPeer:
        """A req0 socket dialled to the broker under test (or ``endpoint``); raises
        :class:`NoAnswer` when no NNG session is up within the case's wait.

        The dial does not block: NNG's own blocking dial waits 10 s for a peer that takes
        the TCP connection but never completes the SP handshake, past any case deadline.
        Here NNG dials (and redials) in the background and the case polls for the pipe."""
        sock = pynng.Req0(resend_time=RESEND_MS)
        self.open.append(sock)
        url = endpoint or self.ctx.options.endpoint
        try:
            secure_nng(sock, self.ctx.options.tls)
            sock.dial(url, block=False)
        except pynng.NNGException as exc:
            raise NoAnswer(f"connection to {url} ({exc})", 0.0) from None
        limit = self.ctx.wait_s()
        end = time.monotonic() + limit
        for _ in range(10_000_000):  # bounded: each pass sleeps a slice or returns
            if sock.pipes:
                return NngPeer(self.ctx, sock, label)
            left = end - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(SLICE_S, left))
        raise NoAnswer(f"an NNG session with {url}", limit)

    def close(self) -> None:
        for sock in self.open:
            sock.close()
        self.open.clear()


def with_sockets(func: Callable[[CaseContext, Sockets], None]) -> Callable[[CaseContext], None]:
    """Adapt a case taking (ctx, sockets) to the framework's (ctx) form, closing the
    case's NNG sockets however it ends (the framework closes only ZeroMQ ones)."""

    def run(ctx: CaseContext) -> None:
        sockets = Sockets(ctx)
        try:
            func(ctx, sockets)
        finally:
            sockets.close()

    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def observe(ctx: CaseContext, got: Received) -> None:
    """Session observer: what did not decode (bad CBOR, non-canonical headers)."""
    if got.message is None:
        ctx.state.setdefault("malformed", []).append(
            f"{ctx.clause.section}: {got.text}  {[f.hex() for f in got.frames]}"
        )
    else:
        ctx.state["decoded"] = ctx.state.get("decoded", 0) + 1


def invalid_inputs() -> list[tuple[str, str, bytes]]:
    """Invalid messages as (number, what, bytes)."""
    return [
        ("1", "bytes that are not CBOR", b"\xff\xfe nfgate garbage"),
        ("2", "an empty message", b""),
        ("3", "another protocol version (memo02)", header("memo02", 0x04, b"\x00\x00\x00\x01")),
        ("4", "an unknown message type (0x09)", header("memo01", 0x09, b"")),
        ("5", "a truncated CBOR header", header("memo01", 0x02, b"", "echo", 1000)[:-3]),
        ("6", "a header that is a CBOR map", bytes(cbor2.dumps({"memo01": 1}))),
        ("7", "a non-canonical header (integer in 2 bytes)", b"\x83\x66memo01\x18\x04\x40"),
        ("8", "a READY whose service list is a string", header("memo01", 0x01, b"", "echo")),
    ]


def describe(items: Iterable[Received]) -> str:
    texts = [r.text for r in items]
    return "; ".join(texts) if texts else "nothing"
