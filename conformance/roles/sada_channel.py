"""SADA channel role: the suite is servers. Its main server (a ROUTER without identity;
PIRAN's ``ip:port`` identity with ``--dialect piran``) connects to ``--endpoint``,
introduces service ``nfgate-conformance`` version ``1`` and, for the whole run, answers
PING with PONG, RINTR with INTR and every REQ with REP 200 echoing the payload.

A channel sends REQ only when its own clients ask, so the REQ cases need traffic: have a
client of the channel request ``nfgate-conformance`` while the suite runs (they SKIP
otherwise). Liveness, identity, RINTR and invalid input need nothing else."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable

from nfgate.codecs.sada.messages import Intr, Ping, Pong, Rep, Req, Rintr
from nfgate.conformance.context import CaseContext, NoAnswer, Received, describe
from nfgate.conformance.curve import connect_secured
from nfgate.conformance.model import Clause
from nfgate.conformance.registry import Role, Session, register_role
from nfgate.conformance.roles import _sada
from nfgate.conformance.roles._sada import RouterPeer, clause, identities, proto

SERVICE = ("nfgate-conformance", "1")  # what the suite's main server offers
SETUP_CLAUSE = Clause(
    section="(suite) connecting to the channel",
    text="The suite's server connects and sends INTR.",
    keyword="MAY",
)
SLICE_S = 0.01


class MainServer:
    """The suite's long-lived server, served by a session pump on every wait of every
    case, so the channel never finds it silent; what it receives lands in ``seen``."""

    def __init__(self, session: Session) -> None:
        identity = f"127.0.0.1:{_free_port()}".encode() if session.options.dialect == "piran" else None
        self.peer = RouterPeer(session.context, "server", identity=identity)
        self.seen: list[Received] = []
        self.reqs: list[Req] = []
        self.busy = False

    def pump(self, ctx: CaseContext) -> None:
        if self.busy:
            return
        self.busy = True  # the answers below must not re-enter through ctx.pump()
        try:
            for got in self.peer.drain(ctx):
                self.seen.append(got)
                self.answer(ctx, got)
        finally:
            self.busy = False

    def answer(self, ctx: CaseContext, got: Received) -> None:
        message = got.message
        if isinstance(message, Req):
            self.reqs.append(message)
            rep = Rep(proto=message.proto, request_id=message.request_id, status=200, payload=message.payload)
            self.peer.try_send(ctx, rep, got.identity)
        elif isinstance(message, Rintr):
            self.peer.try_send(ctx, Intr(proto=message.proto, services=(SERVICE,)), got.identity)


def server(ctx: CaseContext) -> MainServer:
    found: MainServer = ctx.state["server"]
    return found


def until(ctx: CaseContext, done: Callable[[], bool], window_s: float) -> bool:
    """Wait (pumping) until ``done()`` is true or the window (clamped) ends."""
    end = time.monotonic() + ctx.wait_s(window_s)
    for _ in range(10_000_000):  # bounded: each pass sleeps a slice or returns
        ctx.pump()
        if done():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(SLICE_S)
    return False  # pragma: no cover


def setup(session: Session) -> None:
    session.observers.append(_sada.observe)
    main = MainServer(session)
    session.state["server"] = main
    connect_secured(main.peer.sock, session.options.endpoint, session.options.curve)
    ctx = CaseContext(session=session, clause=SETUP_CLAUSE, budget_s=session.options.timeout_s + 5.0)
    try:
        session.state["channel_id"] = main.peer.reach(
            ctx,
            Intr(proto=proto(ctx), services=(SERVICE,)),
            identities(session.options.endpoint),
            ctx.remaining_s(),
        )
    except NoAnswer as exc:
        session.state["channel_id"] = None
        session.state["reach_error"] = str(exc)
    finally:
        session.state["hello_frames"] = list(ctx.frames)
        ctx.close()
    session.pumps.append(main.pump)


def teardown(session: Session) -> None:
    found = session.state.get("server")
    if found is not None:
        found.peer.close()


def fresh(
    ctx: CaseContext, label: str, services: tuple[tuple[str, str], ...], *, pong: bool = True
) -> RouterPeer:
    """Another suite server, connected and introduced (raises NoAnswer); closed by the
    case's end through ``state['extra']``."""
    peer = RouterPeer(ctx.session.context, label, pong=pong)
    ctx.state.setdefault("extra", []).append(peer)
    connect_secured(peer.sock, ctx.options.endpoint, ctx.options.curve)
    peer.reach(ctx, Intr(proto=proto(ctx), services=services), identities(ctx.options.endpoint), ctx.wait_s())
    return peer


def close_extra(ctx: CaseContext) -> None:
    for peer in ctx.state.pop("extra", []):
        peer.close()


def probe(ctx: CaseContext) -> None:
    """Alive when a new server can reach the channel and the channel then says anything
    (a PING at least) within the wait; a channel that is reachable but says nothing in
    time is still counted alive (its PING interval may exceed --timeout)."""
    try:
        peer = fresh(ctx, "probe server", ((ctx.unique("nfgate-probe"), "1"),))
        with contextlib.suppress(NoAnswer):
            peer.recv(ctx, "anything")
    finally:
        close_extra(ctx)


ROLE = register_role(
    Role(
        protocol="sada",
        role="channel",
        codec="sada",
        summary="a SADA channel; the suite connects to --endpoint as servers offering nfgate-conformance/1 "
        "(have a client of the channel request it to exercise REQ)",
        dialects=("spec", "piran"),
        binds=False,
        probe=probe,
        setup=setup,
        teardown=teardown,
    )
)
case = ROLE.case


def channel_id(ctx: CaseContext) -> bytes:
    found: bytes | None = ctx.state.get("channel_id")
    if found is None:
        raise NoAnswer(f"route to the channel ({ctx.state.get('reach_error', '')})", 0.0)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@case(
    "SADA-CHANNEL-3.1",
    "The channel sets an identity a server can address",
    clause("3", '"Channels use durable sockets and MUST set an identity."', "MUST"),
)
def has_identity(ctx: CaseContext) -> None:
    ctx.frames.extend(ctx.state.get("hello_frames", []))
    ident = channel_id(ctx)
    ctx.expect(f"one of {identities(ctx.options.endpoint)} routable")
    ctx.saw(f"routable as {ident!r}")


@case(
    "SADA-CHANNEL-3.2",
    "The channel's identity is its public endpoint, tcp://ip:port",
    clause(
        "3",
        '"Channel identities are their public endpoints. This is the address string that servers will use to '
        'connect to the server, e.g. "tcp://192.168.55.162:5055"."',
        "SHOULD",
        "graded SHOULD: PIRAN's ip:port (no scheme) is a departure",
    ),
)
def identity_form(ctx: CaseContext) -> None:
    ident = channel_id(ctx)
    spec = identities(ctx.options.endpoint)[0]
    ctx.expect(f"identity {spec!r}")
    ctx.saw(f"identity {ident!r}")
    ctx.check(ident == spec, "the identity is not the endpoint in its tcp:// form")


@case(
    "SADA-CHANNEL-9.1",
    "The channel PINGs a silent server",
    clause(
        "9",
        '"Channels SHOULD check the availability of servers in the time of silence by sending PING command."',
        "SHOULD",
        "waits three --heartbeat-ms intervals (PIRAN: 5000)",
    ),
    heartbeats=3.5,
)
def pings(ctx: CaseContext) -> None:
    channel_id(ctx)
    try:
        peer = fresh(ctx, "silent server", ((ctx.unique("nfgate-quiet"), "1"),))
        got = peer.recv(ctx, "PING", 3 * ctx.heartbeat_s + ctx.options.timeout_s)
        ctx.expect("PING (header only)")
        ctx.saw(got.text)
        ctx.check(isinstance(got.message, Ping), f"the channel sent {got.type}")
        ctx.check(len(got.frames) == 3, "the PING is not header-only")
    finally:
        close_extra(ctx)


@case(
    "SADA-CHANNEL-9.2",
    "A server that stops answering PING is forgotten (RINTR on its next message)",
    clause(
        "9",
        '"A channel SHOULD consider a server "disconnected" if no PONG arrives within some multiple of that '
        'interval (usually 2-3)."',
        "MAY",
        "only observable through RINTR; recorded as INFO when the channel does not ask",
    ),
    heartbeats=6,
)
def forgets_silent(ctx: CaseContext) -> None:
    channel_id(ctx)
    try:
        peer = fresh(ctx, "server that stops answering", ((ctx.unique("nfgate-mute"), "1"),), pong=False)
        peer.collect(ctx, 5 * ctx.heartbeat_s)
        peer.send(ctx, Pong(proto=proto(ctx)))
        got = peer.collect(ctx, ctx.options.timeout_s, skip=("PING",))
        ctx.saw(describe(got))
        if not any(isinstance(g.message, Rintr) for g in got):
            raise ctx.info(
                "no RINTR after 5 silent intervals: whether the server was dropped is not observable"
            )
    finally:
        close_extra(ctx)


@case(
    "SADA-CHANNEL-6.1",
    "A PONG from a server that never introduced itself gets RINTR",
    clause(
        "6",
        '"Request for INTR command SHOULD send by channels after it lose its state probably by restarting."',
        "MAY",
        "recorded: a channel that does not know a server may ask it to introduce itself",
    ),
)
def rintr_unknown(ctx: CaseContext) -> None:
    ident = channel_id(ctx)
    peer = RouterPeer(ctx.session.context, "unknown server")
    ctx.state.setdefault("extra", []).append(peer)
    try:
        connect_secured(peer.sock, ctx.options.endpoint, ctx.options.curve)
        peer.reach(ctx, Pong(proto=proto(ctx)), [ident], ctx.wait_s())
        got = peer.collect(ctx, ctx.options.timeout_s, skip=("PING",))
        ctx.saw(describe(got))
        if not any(isinstance(g.message, Rintr) for g in got):
            raise ctx.info("the channel did not ask the unknown server for INTR")
    finally:
        close_extra(ctx)


@case(
    "SADA-CHANNEL-4.1",
    "A server writing the other version-frame form is served too",
    clause(
        "4",
        '"Second frame SHOULD be "SADA" followed by one byte which specify the version ..." (the examples: '
        '"SADA1")',
        "SHOULD",
        "both forms are the spec's; the channel must keep talking to such a server",
    ),
    dialects=("spec",),
    heartbeats=3.5,
)
def other_form(ctx: CaseContext) -> None:
    channel_id(ctx)
    ctx.state["proto"] = _sada.other_proto(ctx)
    try:
        peer = fresh(ctx, "server (other version form)", ((ctx.unique("nfgate-form"), "1"),))
        got = peer.recv(ctx, "PING", 3 * ctx.heartbeat_s + ctx.options.timeout_s)
        ctx.saw(got.text)
        ctx.check(isinstance(got.message, Ping), f"the channel sent {got.type}")
    finally:
        ctx.state.pop("proto", None)
        close_extra(ctx)


from nfgate.conformance.roles import sada_channel_more as _more  # noqa: E402,F401  (registers more cases)
