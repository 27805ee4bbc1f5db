"""The suite as a broker: one ROUTER bound at ``--endpoint`` for the whole run, which the
worker under test connects to (worker roles).

The link keeps the identity of the worker that spoke last (a worker that reconnects on
a new socket may come back under a new one), answers what a broker must answer without
being asked (DCP's PONG), and sends the broker's heartbeats while any case waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import zmq

from nfgate.codecs._base import Message
from nfgate.conformance.context import CaseContext, NoAnswer, Received, Source
from nfgate.conformance.curve import HandshakeWatch, bind_secured
from nfgate.conformance.model import Clause
from nfgate.conformance.registry import Session
from nfgate.edges import peer_label
from nfgate.errors import TransportError

__all__ = [
    "RouterLink",
    "absent",
    "Watched",
    "alive_probe",
    "await_hello",
    "close_link",
    "detect_from_hello",
    "link",
    "open_link",
    "registered_link",
    "send_routed",
]

AutoReply = Callable[[Received], Message | None]
HeartbeatFactory = Callable[["RouterLink"], Message | None]


class Watched:
    """``recv``/``collect``/``drain`` for a socket the suite reads through
    :meth:`CaseContext.watch`; the class provides ``read(ctx)``, and ``waiting_for``
    names it in a NoAnswer ("from the worker")."""

    waiting_for = "from the peer"

    def read(self, ctx: CaseContext) -> Received | None:
        raise NotImplementedError

    def recv(
        self, ctx: CaseContext, what: str, timeout_s: float | None = None, skip: tuple[str, ...] = ()
    ) -> Received:
        """The next message whose type is not in ``skip``; raises :class:`NoAnswer`."""
        limit = ctx.wait_s(timeout_s)
        found: list[Received] = []

        def take(_: Source, got: Received) -> bool:
            if got.type in skip:
                return False
            found.append(got)
            return True

        if ctx.watch([self], take, limit):  # type: ignore[list-item]
            return found[0]
        raise NoAnswer(f"{what} {self.waiting_for}", limit)

    def collect(self, ctx: CaseContext, window_s: float, skip: tuple[str, ...] = ()) -> list[Received]:
        """Every message within ``window_s`` (clamped), minus ``skip``."""
        out: list[Received] = []

        def keep(_: Source, got: Received) -> bool:
            if got.type not in skip:
                out.append(got)
            return False

        heard = ctx.received
        ctx.watch([self], keep, window_s)  # type: ignore[list-item]
        ctx.heard_silence |= ctx.received == heard
        return out

    def drain(self, ctx: CaseContext) -> list[Received]:
        """What queued up between cases (heartbeats mostly), read without waiting."""
        out: list[Received] = []
        for _ in range(10_000):
            got = self.read(ctx)
            if got is None:
                break
            out.append(got)
        return out


class RouterLink(Watched):
    """A bound ROUTER; raises :class:`TransportError` when ``--endpoint`` cannot be bound."""

    waiting_for = "from the worker"

    def __init__(self, session: Session, heartbeat: HeartbeatFactory, auto: AutoReply | None = None) -> None:
        self.session = session
        sock = session.context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        # A reconnecting worker with a fixed identity (NorFab's) must be able to take over.
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        # Know when a send goes nowhere (the worker died) instead of dropping silently.
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        url = session.options.endpoint
        if url.endswith(":0"):  # libzmq spells "any free port" as ":*"
            url = url[:-2] + ":*"
        try:
            bind_secured(sock, url, session.options.curve)
        except zmq.ZMQError as exc:
            sock.close(0)
            raise TransportError(f"cannot bind {session.options.endpoint}: {exc.strerror}") from None
        self.sock = sock
        self.watch = HandshakeWatch(sock)  # a worker that cannot connect is told why
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        session.announce(f"listening on {self.endpoint}: start the worker under test there")
        self.worker: bytes | None = None  # identity of the worker under test
        self.service: str | bytes = ""  # what it registered for
        self.beating = True  # cases that test broker silence switch this off
        self._heartbeat = heartbeat
        self._auto = auto
        self._due = time.monotonic() + session.options.heartbeat_ms / 1000.0
        session.pumps.append(self.pump)

    @property
    def label(self) -> str:
        return "broker"

    def pump(self, ctx: CaseContext) -> None:
        """Send the broker heartbeat when due (and a worker is known)."""
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + self.session.options.heartbeat_ms / 1000.0
        if self.beating and self.worker is not None:
            message = self._heartbeat(self)
            if message is not None:
                self.try_send(ctx, message)

    def read(self, ctx: CaseContext) -> Received | None:
        try:
            parts = self.sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None
        identity, frames = parts[0], parts[1:]
        message, text = ctx.wire.decode(frames)
        ctx.record("received", f"from worker {peer_label(identity)}", frames, text)
        got = Received(frames=tuple(frames), message=message, text=text, identity=identity)
        ctx.observe(got)
        if self.worker is None:
            self.worker = identity
        if self._auto is not None:
            answer = self._auto(got)
            if answer is not None:
                # In the dialect the worker used, whatever the run's dialect.
                encoded = ctx.wire.codec.encode(answer, ctx.wire.detect(frames))
                self.try_send(ctx, encoded, identity, note=repr(answer))
        return got

    def send(
        self, ctx: CaseContext, message: Message | list[bytes], identity: bytes | None = None, note: str = ""
    ) -> None:
        """Send to the worker; raises :class:`NoAnswer` when no worker is connected."""
        if not self.try_send(ctx, message, identity, note):
            raise NoAnswer("connected worker to send to", 0.0)

    def try_send(
        self, ctx: CaseContext, message: Message | list[bytes], identity: bytes | None = None, note: str = ""
    ) -> bool:
        target = identity if identity is not None else self.worker
        return target is not None and send_routed(ctx, self.sock, target, message, "to worker", note)

    def close(self) -> None:
        self.watch.close()
        self.sock.close(0)


def send_routed(
    ctx: CaseContext,
    sock: zmq.Socket[bytes],
    target: bytes,
    message: Message | list[bytes],
    label: str,
    note: str = "",
) -> bool:
    """Send ``message`` (or raw frames: malformed input, described by ``note``) to
    ``target`` on a bound ROUTER without blocking, and record it in the case's log as
    ``"<label> <target>"``; False (recorded as not sent) when the peer is gone."""
    if isinstance(message, Message):
        frames = ctx.wire.encode(message)
        text = repr(message)
    else:
        frames = list(message)
        text = note or ctx.wire.decode(frames)[1]
    try:
        sock.send_multipart([target, *frames], zmq.NOBLOCK)
    except zmq.ZMQError as exc:
        ctx.record("sent", f"{label} {peer_label(target)}", frames, f"{text}  [not sent: {exc.strerror}]")
        return False
    ctx.record("sent", f"{label} {peer_label(target)}", frames, text)
    return True


# -------------------------------------------- the plumbing every worker role shares

CONNECT_WAIT_S = 20.0  # how long setup waits for the worker under test to connect

SETUP_CLAUSE = Clause(
    section="(suite) waiting for the worker",
    text="The worker under test connects and registers.",
    keyword="MAY",
)


def link(ctx: CaseContext) -> RouterLink:
    """The run's :class:`RouterLink` (kept in the session state by :func:`open_link`)."""
    found: RouterLink = ctx.state["link"]
    return found


def registered_link(ctx: CaseContext, hello: str) -> RouterLink:
    """The link once the worker under test has registered (its ``hello`` message, e.g.
    "READY", was seen), with what queued up since read; raises NoAnswer otherwise."""
    lk = link(ctx)
    if not lk.service:
        raise absent(ctx, f"{hello} from a worker")
    lk.drain(ctx)
    return lk


def open_link(
    session: Session, link_: RouterLink, hello: Callable[[CaseContext, float], list[Received]]
) -> None:
    """Keep ``link_`` for the run, then :func:`await_hello`."""
    session.state["link"] = link_
    await_hello(session, hello, watch=link_.watch)


def absent(ctx: CaseContext, what: str) -> NoAnswer:
    """The NoAnswer of a case whose peer never introduced itself, with why when its
    handshake was seen to fail (:class:`HandshakeWatch`)."""
    problem = ctx.state.get("hello_problem")
    return NoAnswer(f"{what} ({problem})" if problem else what, ctx.state.get("hello_wait", 0.0))


def await_hello(
    session: Session,
    hello: Callable[[CaseContext, float], list[Received]],
    clause: Clause = SETUP_CLAUSE,
    *,
    watch: HandshakeWatch | None = None,
) -> None:
    """Wait (bounded) for the peer's first messages with ``hello``; they are kept as
    ``hello`` (and their frames as ``hello_frames``) for the cases that grade the
    handshake. No answer leaves ``hello`` empty and ``hello_wait`` set: every case then
    reports the peer as absent instead of waiting again."""
    ctx = CaseContext(session=session, clause=clause, budget_s=session.options.timeout_s + CONNECT_WAIT_S)
    try:
        session.state["hello"] = hello(ctx, ctx.remaining_s())
    except NoAnswer as exc:
        session.state["hello"] = []
        session.state["hello_wait"] = exc.waited_s
        problem = watch.problem(session.options.curve) if watch is not None else None
        if problem is not None:
            session.state["hello_problem"] = problem
            session.announce(problem)
    finally:
        session.state["hello_frames"] = list(ctx.frames)
        ctx.close()


def close_link(session: Session) -> None:
    found = session.state.get("link")
    if found is not None:
        found.close()


def detect_from_hello(session: Session) -> str:
    """The dialect of the worker's first message ("spec" when it sent none)."""
    hello: list[Received] = session.state.get("hello", [])
    return session.wire.codec.detect(list(hello[0].frames)) if hello else "spec"


def alive_probe(what: str) -> Callable[[CaseContext], None]:
    """A probe for a worker that heartbeats on its own: alive when anything arrives."""

    def probe(ctx: CaseContext) -> None:
        lk = link(ctx)
        if lk.worker is None:  # no worker ever connected: nothing to wait for
            raise NoAnswer("worker connection", 0.0)
        lk.recv(ctx, what, ctx.remaining_s())

    return probe
