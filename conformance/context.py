"""What a case function works with: outcomes it raises, and :class:`CaseContext`, which
owns the case's deadline, its sockets and the log of every frame exchanged.

A case returns normally for PASS. Otherwise it raises :class:`Violation` (graded FAIL or
NON-STRICT from its clause's keyword), :class:`Info`, :class:`Skipped`, or lets
:class:`NoAnswer` escape from a wait that ran out (graded as a violation too, after the
runner has checked whether the peer is still alive).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import zmq

from nfgate.codecs._base import Codec, Message
from nfgate.conformance.curve import connect_secured
from nfgate.conformance.model import Clause, FrameRecord, RunOptions
from nfgate.errors import DecodeError, NfgateError

if TYPE_CHECKING:
    from nfgate.conformance.registry import Session

__all__ = [
    "CaseContext",
    "Dealer",
    "Info",
    "NoAnswer",
    "Outcome",
    "Received",
    "Skipped",
    "Violation",
    "Wire",
]

SLICE_S = 0.05  # poll granularity: short enough for heartbeats, long enough not to spin
# What the report keeps of each message (CaseContext.record).
KEEP_BYTES = 4096  # per frame
KEEP_FRAMES = 64  # per message
KEEP_TEXT = 4096  # of its decoding


class Outcome(Exception):
    """A case ended with something other than PASS."""

    def __init__(self, reason: str, *, expected: str = "", actual: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.expected = expected
        self.actual = actual


class Violation(Outcome):
    """The peer broke the case's clause: FAIL for MUST, NON-STRICT for SHOULD."""


class Info(Outcome):
    """Nothing broken; the behaviour is recorded (the spec allows a choice)."""


class Skipped(Outcome):
    """The case could not run; the reason says why."""


class NoAnswer(Exception):
    """A wait for the peer ran out (the deadline or the wait's own limit)."""

    def __init__(self, what: str, waited_s: float) -> None:
        super().__init__(f"no {what} within {waited_s * 1000:.0f} ms")
        self.what = what
        self.waited_s = waited_s


@attrs.frozen(kw_only=True)
class Wire:
    """A codec bound to the dialect the suite speaks in this run."""

    codec: Codec
    dialect: str

    def encode(self, message: Message) -> list[bytes]:
        """Frames for ``message``; raises :class:`nfgate.errors.EncodeError` (a suite bug)."""
        return self.codec.encode(message, self.dialect)

    def decode(self, frames: list[bytes]) -> tuple[Message | None, str]:
        """The message (or None) and a one-line description; never raises.

        The peer's own dialect is detected per message, so a peer answering in another
        dialect is still read (and the case can say so)."""
        try:
            dialect = self.codec.detect(frames)
            message = self.codec.decode(frames, dialect)
        except DecodeError as exc:
            return None, f"undecodable: {exc.reason}"
        except NfgateError as exc:  # pragma: no cover - a codec bug, reported not raised
            return None, f"undecodable: {exc}"
        suffix = "" if dialect == self.dialect else f"  [{dialect} dialect]"
        return message, f"{message!r}{suffix}"

    def detect(self, frames: list[bytes]) -> str:
        return self.codec.detect(frames)


@attrs.frozen(kw_only=True)
class Received:
    """One message the suite received: its frames, the decoded message (None when it
    does not decode) and the decoder's description."""

    frames: tuple[bytes, ...]
    message: Message | None
    text: str
    identity: bytes = b""

    @property
    def type(self) -> str:
        return self.message.TYPE if self.message is not None else "UNDECODABLE"


class CaseContext:
    """One case's world. Every wait goes through :meth:`wait_s`, which clamps it to the
    case deadline, so no case can hang the run."""

    def __init__(self, *, session: Session, clause: Clause, budget_s: float) -> None:
        self.session = session
        self.options: RunOptions = session.options
        self.dialect: str = session.dialect
        self.wire: Wire = session.wire
        self.clause = clause
        self.state: dict[str, Any] = session.state
        self.started = time.monotonic()
        self.deadline = self.started + budget_s
        self.frames: list[FrameRecord] = []
        self.expected = ""
        self.actual = ""
        self.received = 0  # messages from the peer, counted by record()
        # A window ended with nothing from the peer: the case may pass on its silence,
        # which proves nothing if the peer is dead, so the runner probes it afterwards.
        self.heard_silence = False
        self._sockets: list[zmq.Socket[bytes]] = []
        self._beats: list[Beat] = []

    # ---------------------------------------------------------------- time

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def wait_s(self, seconds: float | None = None) -> float:
        """``seconds`` (default: the run's ``--timeout``) clamped to the deadline."""
        wanted = self.options.timeout_s if seconds is None else seconds
        return max(0.0, min(wanted, self.remaining_s()))

    @property
    def heartbeat_s(self) -> float:
        return self.options.heartbeat_ms / 1000.0

    def sleep(self, seconds: float) -> None:
        time.sleep(self.wait_s(seconds))

    # ---------------------------------------------------------------- outcomes

    def expect(self, text: str) -> None:
        self.expected = text

    def saw(self, text: str) -> None:
        self.actual = text

    def violated(self, reason: str, actual: str | None = None) -> Violation:
        """The exception to raise for a broken clause (``raise ctx.violated(...)``)."""
        return Violation(reason, expected=self.expected, actual=self.actual if actual is None else actual)

    def info(self, reason: str, actual: str | None = None) -> Info:
        return Info(reason, expected=self.expected, actual=self.actual if actual is None else actual)

    def skipped(self, reason: str) -> Skipped:
        return Skipped(reason, expected=self.expected, actual=self.actual)

    def check(self, condition: bool, reason: str, actual: str | None = None) -> None:
        """Raise a :class:`Violation` with ``reason`` unless ``condition``."""
        if not condition:
            raise self.violated(reason, actual)

    def check_beats(self, stamps: Sequence[float], what: str, interval_s: float | None = None) -> None:
        """Judge heartbeats seen at ``stamps`` (ms) against the agreed interval (default
        ``--heartbeat-ms``): raise a :class:`Violation` when fewer than two came, when two
        came more than two intervals apart (plus 200 ms of scheduling slack), or less
        than a quarter of one apart. Too often breaks the agreement too: a flood costs
        the other side a message per beat (DCP: a PONG each), and a peer beating from
        its message loop instead of a timer hides a stall. The quarter leaves room for a
        timer that other traffic restarts."""
        agreed_ms = 1000 * (self.heartbeat_s if interval_s is None else interval_s)
        self.check(len(stamps) >= 2, f"fewer than two {what}s")
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        self.check(
            max(gaps) <= 2 * agreed_ms + 200, f"{what} interval {max(gaps):.0f} ms, agreed {agreed_ms:.0f} ms"
        )
        self.check(
            min(gaps) >= agreed_ms / 4, f"{what}s {min(gaps):.0f} ms apart, agreed every {agreed_ms:.0f} ms"
        )

    # ---------------------------------------------------------------- wire

    def record(self, direction: str, peer: str, frames: Iterable[bytes], decoded: str) -> None:
        """Keep one message for the report, cut to :data:`KEEP_BYTES` per frame,
        :data:`KEEP_FRAMES` frames and :data:`KEEP_TEXT` characters of its decoding: a
        peer sending tens of megabytes must not make the report (written three times,
        as hex) tens of gigabytes."""
        frames = tuple(frames)
        self.received += direction == "received"
        kept = tuple(f[:KEEP_BYTES] for f in frames[:KEEP_FRAMES])
        if kept != frames:
            sizes = ", ".join(str(len(f)) for f in frames[:KEEP_FRAMES])
            more = f" and {len(frames) - KEEP_FRAMES} more" if len(frames) > KEEP_FRAMES else ""
            decoded = f"[cut for the report: frames of {sizes} bytes{more}] {decoded}"
        self.frames.append(
            FrameRecord(
                direction=direction,
                peer=peer,
                at_ms=(time.monotonic() - self.started) * 1000.0,
                frames=kept,
                decoded=decoded[:KEEP_TEXT],
            )
        )

    def observe(self, got: Received) -> None:
        """Show a received message to the session's observers (run-wide checks)."""
        for observer in self.session.observers:
            observer(self, got)

    def unique(self, prefix: str) -> str:
        """A name no other case or run uses (service names, identities)."""
        return f"{prefix}-{self.session.run_tag}-{self.session.serial()}"

    def dealer(self, label: str, identity: bytes | None = None) -> Dealer:
        """A fresh DEALER connected to the peer under test (closed when the case ends)."""
        sock = self.session.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if identity is not None:
            sock.setsockopt(zmq.IDENTITY, identity)
        connect_secured(sock, self.options.endpoint, self.options.curve)
        self._sockets.append(sock)
        return Dealer(self, sock, label)

    def beat(self, dealer: Dealer, message: Message, interval_s: float | None = None) -> Beat:
        """Send ``message`` on ``dealer`` every interval (default: the heartbeat) while
        the case waits, so the suite's workers stay alive in long cases."""
        beat = Beat(dealer, message, interval_s or self.heartbeat_s)
        self._beats.append(beat)
        return beat

    def pause_beats(self) -> None:
        """Stop the suite's own heartbeats (e.g. its worker got DISCONNECT)."""
        for beat in self._beats:
            beat.active = False

    def pump(self) -> None:
        """Send whatever heartbeats are due (the suite's and the session's)."""
        now = time.monotonic()
        for beat in self._beats:
            if beat.active and now >= beat.due:
                beat.due = now + beat.interval_s
                beat.dealer.send(beat.message)
        for pump in self.session.pumps:
            pump(self)

    def watch(
        self, sources: Sequence[Source], handle: Callable[[Source, Received], bool], window_s: float
    ) -> bool:
        """Poll ``sources`` until ``handle`` returns True (then True) or the window,
        clamped to the deadline, ends (then False). Heartbeats go out meanwhile."""
        end = time.monotonic() + self.wait_s(window_s)
        poller = zmq.Poller()
        for source in sources:
            poller.register(source.sock, zmq.POLLIN)
        for _ in range(1_000_000):  # bounded: every pass waits up to SLICE_S or reads
            # A message given back (Dealer.unread) has arrived already: read it first,
            # whatever the window has left.
            for source in sources:
                held = getattr(source, "held", None)
                while held:
                    if handle(source, held.popleft()):
                        return True
            self.pump()
            left = end - time.monotonic()
            if left <= 0:
                return False
            ready = dict(poller.poll(max(1, int(min(left, SLICE_S) * 1000))))
            for source in sources:
                if source.sock in ready:
                    got = source.read(self)
                    if got is not None and handle(source, got):
                        return True
        return False  # pragma: no cover - the loop bound is never reached in practice

    def close(self) -> None:
        self._beats.clear()
        for sock in self._sockets:
            sock.close(0)
        self._sockets.clear()


class Source(Protocol):
    """A socket :meth:`CaseContext.watch` can poll."""

    sock: zmq.Socket[bytes]

    def read(self, ctx: CaseContext) -> Received | None: ...


class Beat:
    """A heartbeat the context sends while a case waits; ``active`` pauses it."""

    def __init__(self, dealer: Dealer, message: Message, interval_s: float) -> None:
        self.dealer = dealer
        self.message = message
        self.interval_s = interval_s
        self.due = time.monotonic() + interval_s
        self.active = True


class Dealer:
    """A suite socket connected to the peer under test, logging what it sends and gets."""

    def __init__(self, ctx: CaseContext, sock: zmq.Socket[bytes], label: str) -> None:
        self.ctx = ctx
        self.sock = sock
        self.label = label
        self.held: deque[Received] = deque()

    def unread(self, got: Received) -> None:
        """Give back ``got`` (read while a helper waited for something else): the next
        read returns it, without recording or observing it again."""
        self.held.append(got)

    def send(self, message: Message | list[bytes], note: str = "") -> None:
        """Send a message (encoded in the run's dialect) or raw frames (malformed input).
        Raises :class:`NoAnswer` when no connection to the peer takes it within the run's
        ``--timeout``."""
        if isinstance(message, Message):
            frames = self.ctx.wire.encode(message)
            text = repr(message)
        else:
            frames = list(message)
            text = note or self.ctx.wire.decode(frames)[1]
        # Never a blocking send: a DEALER with no connection to send on (a peer that
        # accepts TCP but never completes the ZeroMQ handshake, such as a CURVE server
        # the suite reaches without --curve-server-key) would block the run for ever.
        limit = self.ctx.wait_s(None)
        end = time.monotonic() + limit
        for _ in range(1_000_000):  # bounded: every pass waits up to SLICE_S
            try:
                self.sock.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self.sock.poll(int(min(left, SLICE_S) * 1000) + 1, zmq.POLLOUT)
                continue
            self.ctx.record("sent", self.label, frames, text)
            return
        raise NoAnswer(f"connection to the peer to send on ({self.label} socket)", limit)

    def read(self, ctx: CaseContext) -> Received | None:
        if self.held:
            return self.held.popleft()
        try:
            frames = self.sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None
        message, text = ctx.wire.decode(frames)
        ctx.record("received", self.label, frames, text)
        got = Received(frames=tuple(frames), message=message, text=text)
        ctx.observe(got)
        return got

    def recv(
        self, what: str = "message", timeout_s: float | None = None, skip: Iterable[str] = ()
    ) -> Received:
        """The next message whose type is not in ``skip``; raises :class:`NoAnswer`."""
        limit = self.ctx.wait_s(timeout_s)
        skipping = set(skip)
        found: list[Received] = []

        def take(_: Source, got: Received) -> bool:
            if got.type in skipping:
                return False
            found.append(got)
            return True

        if self.ctx.watch([self], take, limit):
            return found[0]
        raise NoAnswer(f"{what} on the {self.label} socket", limit)

    def drain(self) -> list[Received]:
        """What is already waiting on the socket, read without waiting."""
        out: list[Received] = []
        for _ in range(10_000):
            got = self.read(self.ctx)
            if got is None:
                break
            out.append(got)
        return out

    def collect(self, window_s: float, skip: Iterable[str] = ()) -> list[Received]:
        """Everything that arrives within ``window_s`` (clamped), minus ``skip`` types."""
        skipping = set(skip)
        out: list[Received] = []

        def keep(_: Source, got: Received) -> bool:
            if got.type not in skipping:
                out.append(got)
            return False

        heard = self.ctx.received
        self.ctx.watch([self], keep, window_s)
        self.ctx.heard_silence |= self.ctx.received == heard
        return out


def describe(items: Iterable[Received]) -> str:
    """A short list of what arrived, for ``actual``."""
    texts = [r.text for r in items]
    return "; ".join(texts) if texts else "nothing"
