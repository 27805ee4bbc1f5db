"""SADA server role: the suite is the channel. It binds a ROUTER at ``--endpoint`` whose
identity is that public endpoint (``tcp://ip:port``; PIRAN's ``ip:port`` with
``--dialect piran``); the server under test connects and INTRs, and is then sent RINTR,
PING and REQs (specs/safir-darbaan.md). The endpoint needs a real host and port: it is
the identity servers address."""

from __future__ import annotations

import errno
import time

import zmq

from nfgate.codecs.sada import channel_identity
from nfgate.codecs.sada.messages import Intr, Ping, Pong, Rep, Req, Rintr
from nfgate.conformance.context import CaseContext, NoAnswer, Received, describe
from nfgate.conformance.curve import HandshakeWatch, bind_secured
from nfgate.conformance.link import absent, await_hello
from nfgate.conformance.model import Clause
from nfgate.conformance.registry import Role, Session, register_role
from nfgate.conformance.roles import _sada
from nfgate.conformance.roles._sada import RouterPeer, clause, other_proto, proto
from nfgate.errors import TransportError
from nfgate.transports.zmq import identity_lasts

BIND_TRIES = 100  # x 20 ms
SETUP_CLAUSE = Clause(
    section="(suite) waiting for the server",
    text="The server under test connects and sends INTR.",
    keyword="MAY",
)


def channel(ctx: CaseContext) -> RouterPeer:
    found: RouterPeer = ctx.state["channel"]
    return found


def bind(session: Session) -> RouterPeer:
    """The suite's channel socket; raises TransportError when the endpoint cannot be bound."""
    url = session.options.endpoint
    try:
        identity = channel_identity(url, "piran" if session.options.dialect == "piran" else "spec")
    except ValueError as exc:
        raise TransportError(
            f"{url} is not a public endpoint (it is the channel's identity): {exc}"
        ) from None
    peer = RouterPeer(session.context, "channel", identity=identity)
    # A socket closed a moment ago (a channel restart) frees its port asynchronously.
    for attempt in range(BIND_TRIES):
        try:
            bind_secured(peer.sock, url, session.options.curve)
            return peer
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE or attempt == BIND_TRIES - 1:
                peer.close()
                raise TransportError(f"cannot bind {url}: {exc.strerror}") from None
            time.sleep(0.02)
    raise TransportError(f"cannot bind {url}")  # pragma: no cover - the loop returns or raises


def await_intr(ctx: CaseContext, window_s: float) -> list[Received]:
    """Messages until an INTR (whose sender becomes the server); raises NoAnswer."""
    link = channel(ctx)
    seen: list[Received] = []

    def handle(_: object, got: Received) -> bool:
        seen.append(got)
        if isinstance(got.message, Intr):
            link.peer = got.identity
            return True
        return False

    if not ctx.watch([link], handle, window_s):
        raise NoAnswer("INTR from a server", window_s)
    return seen


def setup(session: Session) -> None:
    session.observers.append(_sada.observe)
    session.observers.append(_remember_intr)
    session.state["channel"] = bind(session)
    session.state["watch"] = watch = HandshakeWatch(session.state["channel"].sock)
    session.announce(f"listening on {session.options.endpoint}: start the server under test there")
    await_hello(session, await_intr, SETUP_CLAUSE, watch=watch)


def _remember_intr(ctx: CaseContext, got: Received) -> None:
    if isinstance(got.message, Intr):
        ctx.state["services"] = got.message.services
        ctx.state["server"] = got.identity


def teardown(session: Session) -> None:
    watch = session.state.get("watch")
    if watch is not None:
        watch.close()
    found = session.state.get("channel")
    if found is not None:
        found.close()


def probe(ctx: CaseContext) -> None:
    """Alive when a RINTR or a PING gets any answer."""
    link = channel(ctx)
    if link.peer is None:
        raise NoAnswer("server connection", 0.0)
    link.try_send(ctx, Rintr(proto=proto(ctx)))
    link.try_send(ctx, Ping(proto=proto(ctx)))
    link.recv(ctx, "INTR or PONG")


ROLE = register_role(
    Role(
        protocol="sada",
        role="server",
        codec="sada",
        summary="a SADA server; the suite binds --endpoint as a channel (identity: that endpoint) and the "
        "server connects and introduces itself",
        dialects=("spec", "piran"),
        binds=True,
        probe=probe,
        setup=setup,
        teardown=teardown,
    )
)
case = ROLE.case


def connected(ctx: CaseContext) -> RouterPeer:
    link = channel(ctx)
    if link.peer is None:
        raise absent(ctx, "INTR from a server")
    link.drain(ctx)
    return link


def offered(ctx: CaseContext) -> tuple[str, str]:
    """A (service, version) the server introduced; Skipped when it offers none."""
    link = connected(ctx)
    if not ctx.state.get("services"):
        link.try_send(ctx, Rintr(proto=proto(ctx)))
        link.collect(ctx, min(ctx.options.timeout_s, ctx.wait_s()))
    services: tuple[tuple[str, str], ...] = ctx.state.get("services", ())
    if not services:
        raise ctx.skipped("the server introduced no service, so there is nothing to request")
    return services[0]


def request(
    ctx: CaseContext, service: str, version: str, rid: str, version_frame: bytes | None = None
) -> Req:
    return Req(
        proto=version_frame or proto(ctx),
        request_id=rid,
        service=service,
        version=version,
        category="nfgate",
        action="conformance",
        payload=b"nfgate-payload",
    )


def reps_for(ctx: CaseContext, link: RouterPeer, rids: list[str]) -> list[Received]:
    """The REPs for requests ``rids``, in that order (other messages skipped); raises
    NoAnswer naming the first still missing."""
    found: dict[str, Received] = {}

    def handle(_: object, got: Received) -> bool:
        if isinstance(got.message, Rep) and got.message.request_id in rids:
            found[got.message.request_id] = got
        elif got.message is None and len(got.frames) > 3 and got.frames[3].decode("latin-1") in rids:
            found[got.frames[3].decode("latin-1")] = got  # a REP the codec cannot read: the case judges it
        return len(found) == len(rids)

    ctx.watch([link], handle, ctx.options.timeout_s)
    for rid in rids:
        if rid not in found:
            raise NoAnswer(f"REP for {rid}", ctx.options.timeout_s)
    return [found[rid] for rid in rids]


def rep_for(ctx: CaseContext, link: RouterPeer, rid: str) -> Received:
    return reps_for(ctx, link, [rid])[0]


@case(
    "SADA-SERVER-2.1",
    "The server starts the conversation with INTR",
    clause(
        "2",
        '"Router socket of servers SHOULD connect to channels socket. and SHOULD start the conversation by '
        'introducing server itself to the channel by an INTR command."',
        "SHOULD",
    ),
)
def starts_intr(ctx: CaseContext) -> None:
    connected(ctx)
    ctx.frames.extend(ctx.state.get("hello_frames", []))
    hello: list[Received] = ctx.state["hello"]
    ctx.expect("INTR as the first message")
    # Empty when no INTR decoded within the wait although the server sent something (a
    # version frame the suite cannot read, which SADA-SERVER-4.2 names): its frames are
    # in this case's record all the same.
    ctx.saw(describe(hello) if hello else "no message that decodes as INTR")
    first = hello[0].type if hello else "none that decodes"
    ctx.check(bool(hello) and isinstance(hello[0].message, Intr), f"the first message was {first}")


@case(
    "SADA-SERVER-3.1",
    "The server sets no identity",
    clause("3", '"Servers use transient sockets, and MUST not set an identity."', "MUST"),
)
def no_identity(ctx: CaseContext) -> None:
    link = connected(ctx)
    identity = link.peer or b""
    ctx.expect("a ZeroMQ-generated identity (5 bytes starting 0x00)")
    ctx.saw(f"identity {identity!r}")
    ctx.check(not identity_lasts(identity), f"the server set the identity {identity!r}")


@case(
    "SADA-SERVER-6.1",
    "RINTR is answered with INTR",
    clause("6", '"servers MUST response to RINTR with an INTR message."', "MUST"),
)
def rintr(ctx: CaseContext) -> None:
    link = connected(ctx)
    link.send(ctx, Rintr(proto=proto(ctx)))
    got = link.recv(ctx, "INTR", skip=("PONG",))
    ctx.expect("INTR")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Intr), f"RINTR got {got.type}")


@case(
    "SADA-SERVER-9.1",
    "PING is answered with PONG",
    clause("9", '"Servers SHOULD response any PING message with PONG message"', "SHOULD"),
)
def ping(ctx: CaseContext) -> None:
    link = connected(ctx)
    link.send(ctx, Ping(proto=proto(ctx)))
    got = link.recv(ctx, "PONG", skip=("INTR",))
    ctx.expect("PONG")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Pong), f"PING got {got.type}")


@case(
    "SADA-SERVER-4.1",
    "A PING with the other version-frame form is answered too",
    clause(
        "4",
        '"Second frame SHOULD be "SADA" followed by one byte which specify the version of the specification, '
        'for instance 0x01 for version 1." (the examples write "SADA1")',
        "SHOULD",
        "both forms are the spec's: SADA\\x01 (text) and SADA1 (examples)",
    ),
    dialects=("spec",),
)
def ping_other_form(ctx: CaseContext) -> None:
    link = connected(ctx)
    link.send(ctx, Ping(proto=other_proto(ctx)))
    got = link.recv(ctx, "PONG", skip=("INTR",))
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Pong), f"PING got {got.type}")


@case(
    "SADA-SERVER-7.1",
    "A REQ for an introduced service is answered with a REP carrying its request id",
    clause(
        "8",
        '"Every REQ command SHOULD be responded by a REP message from server to channel." "After Command header '
        'fifth frame is the request id which this reply is correlated to."',
        "SHOULD",
    ),
)
def req_rep(ctx: CaseContext) -> None:
    service, version = offered(ctx)
    link = connected(ctx)
    rid = ctx.unique("nfgate-rq")
    link.send(ctx, request(ctx, service, version, rid))
    got = rep_for(ctx, link, rid)
    ctx.expect(f"REP {rid}")
    ctx.saw(got.text)
    ctx.state.setdefault("reps", []).append(got)


@case(
    "SADA-SERVER-8.1",
    "The REP's status is an HTTP status code, written as the spec writes it",
    clause(
        "8",
        '"sixth frame is the status code and it\'s equal to HTTP status codes." (example: "frame 5: 200")',
        "SHOULD",
        "the spec form is ASCII decimal; PIRAN's 4-byte int32 is a departure",
    ),
)
def rep_status(ctx: CaseContext) -> None:
    service, version = offered(ctx)
    link = connected(ctx)
    rid = ctx.unique("nfgate-rq")
    link.send(ctx, request(ctx, service, version, rid))
    got = rep_for(ctx, link, rid)
    status = got.frames[4] if len(got.frames) > 4 else b""
    ctx.expect("a status frame of ASCII digits, 100..599 (b'200')")
    ctx.saw(f"status frame {status!r}; {got.text}")
    ctx.check(
        status.isdigit() and status.isascii() and 100 <= int(status) <= 599, "the status is not ASCII HTTP"
    )


@case(
    "SADA-SERVER-7.2",
    "A REQ with the other version-frame form is answered too",
    clause("4", '"Second frame SHOULD be "SADA" followed by one byte ..." (examples: "SADA1")', "SHOULD"),
    dialects=("spec",),
)
def req_other_form(ctx: CaseContext) -> None:
    service, version = offered(ctx)
    link = connected(ctx)
    rid = ctx.unique("nfgate-rq")
    link.send(ctx, request(ctx, service, version, rid, other_proto(ctx)))
    got = rep_for(ctx, link, rid)
    ctx.saw(got.text)


@case(
    "SADA-SERVER-7.3",
    "Two REQs in flight get one REP each, by request id",
    clause("8", '"Every REQ command SHOULD be responded by a REP message"', "SHOULD"),
)
def two_reqs(ctx: CaseContext) -> None:
    service, version = offered(ctx)
    link = connected(ctx)
    rids = [ctx.unique("nfgate-rq") for _ in range(2)]
    for rid in rids:
        link.send(ctx, request(ctx, service, version, rid))
    got = reps_for(ctx, link, rids)
    ctx.saw(describe(got))


@case(
    "SADA-SERVER-7.4",
    "A REQ for a service the server does not offer is answered with an error status",
    clause(
        "8",
        '"Every REQ command SHOULD be responded by a REP message from server to channel." "sixth frame is the '
        "status code and it's equal to HTTP status codes.\"",
        "SHOULD",
        "an HTTP error (4xx/5xx) is expected",
    ),
)
def unknown_service(ctx: CaseContext) -> None:
    link = connected(ctx)
    rid = ctx.unique("nfgate-rq")
    link.send(ctx, request(ctx, ctx.unique("nfgate-nobody"), "", rid))
    got = rep_for(ctx, link, rid)
    ctx.expect("REP with a 4xx or 5xx status")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Rep) and got.message.status >= 400, "the REP is not an error")


from nfgate.conformance.roles import sada_server_more as _more  # noqa: E402,F401  (registers more cases)
