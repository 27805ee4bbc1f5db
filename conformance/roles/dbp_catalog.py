"""DBP catalog role: the suite is services (a DEALER each, plus a UDP socket for
heartbeats) and clients (DEALERs with the explicit empty frame) of the catalog at
``--endpoint`` (specs/dbp.md; Hermes's dialect with ``--dialect hermes``). This module
holds registration, info requests and the connection rules; heartbeats, invalid input
and the run-wide checks are in :mod:`.dbp_catalog_beats`."""

from __future__ import annotations

import json

from nfgate.codecs.dbp import (
    Ack,
    Approved,
    Denied,
    Disconnect,
    Heartbeat,
    Registration,
    Reply,
    Update,
)
from nfgate.conformance.context import CaseContext, NoAnswer, describe
from nfgate.conformance.model import Clause
from nfgate.conformance.registry import Role, Session, register_role
from nfgate.conformance.roles import _dbp
from nfgate.conformance.roles._dbp import SuiteService, ask, clause, closing, info_of, is_inactive, now

DETECT_CLAUSE = Clause(
    section="(suite) dialect detection", text="An info request for the whole catalog.", keyword="MAY"
)


def setup(session: Session) -> None:
    session.observers.append(_dbp.observe)


def detect(session: Session) -> str:
    """The dialect of the catalog's REPLY to a spec-form info request."""
    ctx = CaseContext(session=session, clause=DETECT_CLAUSE, budget_s=session.options.timeout_s)
    try:
        got = ask(ctx, "*")
        return session.wire.detect(list(got.frames))
    except NoAnswer:
        return "spec"
    finally:
        ctx.close()


def probe(ctx: CaseContext) -> None:
    """Alive when an info request is answered (raises NoAnswer)."""
    ask(ctx, "*", "probe client")


ROLE = register_role(
    Role(
        protocol="dbp",
        role="catalog",
        codec="dbp",
        summary="a DBP catalog (Core Catalog Service); the suite connects to --endpoint as services and "
        "clients, and takes UDP heartbeats on its own port (the catalog's: the endpoint's port over UDP)",
        dialects=("spec", "hermes"),
        binds=False,
        probe=probe,
        detect=detect,
        setup=setup,
    )
)
case = ROLE.case
SPEC = ("spec",)


@case(
    "DBP-CATALOG-3.1",
    "A complete REGISTRATION is APPROVED",
    clause(
        "3",
        '"S: READY / Repeat: B: REQUEST ..."; "Service information shall consist of the services name, ip '
        'address, port, function, and heartbeat timing at a minimum."',
        "MUST",
        "graded MUST: a registration with every required key has to be approved",
    ),
)
@closing
def approved(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    got = service.register()
    assert got is not None
    ctx.expect("APPROVED ('OwO', time, optional changes)")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Approved), f"the registration got {got.type}")


@case(
    "DBP-CATALOG-3.2",
    "A REGISTRATION missing required keys is DENIED with reasons",
    clause(
        "3",
        '"A DENIED reply consists of ... 3 or more frames for unauthorized or unregistered services ... Frame '
        '3+: Reasons for denial"; "Service information shall consist of ... at a minimum."',
        "SHALL",
    ),
    dialects=SPEC,
)
@closing
def denied_missing(ctx: CaseContext) -> None:
    dealer = ctx.dealer("service")
    dealer.send(Registration(time=now(), info=(json.dumps({"name": ctx.unique("dbp-bad")}).encode(),)))
    got = dealer.recv("DENIED")
    ctx.expect("DENIED ('(O_O)', time, at least one reason frame)")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Denied), f"the incomplete registration got {got.type}")
    assert isinstance(got.message, Denied)
    ctx.check(any(got.message.reasons), "the DENIED carries no reason")


@case(
    "DBP-CATALOG-3.3",
    "A REGISTRATION that is not a JSON object is DENIED",
    clause(
        "3",
        '"Frame 3+: Service information (serialized json object)"; DENIED is the reply "for unauthorized or '
        'unregistered services"',
        "SHOULD",
    ),
)
@closing
def denied_not_json(ctx: CaseContext) -> None:
    dealer = ctx.dealer("service")
    dealer.send(Registration(time=now(), info=(b"{not json",)))
    got = dealer.recv("DENIED")
    ctx.expect("DENIED")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Denied), f"the registration got {got.type}")


@case(
    "DBP-CATALOG-3.4",
    "An UPDATE from a registered service is accepted and shows in the catalog",
    clause(
        "3",
        '"An UPDATE request consists of ... Frame 3+: Updated values (serialized json object)"',
        "SHOULD",
        "the spec names no answer: APPROVED (nfgate) and ACK 'u.u' (Hermes) both pass",
    ),
)
@closing
def update(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    service.dealer.send(Update(time=now(), info=(json.dumps({"note": "updated-by-nfgate"}).encode(),)))
    got = service.dealer.recv("answer to UPDATE", skip=("HEARTBEAT",))
    ctx.check(isinstance(got.message, (Approved, Ack)), f"the UPDATE got {got.type}", got.text)
    reply = ask(ctx, service.name)
    info = info_of(reply)
    ctx.expect("APPROVED or ACK, then the info request shows note=updated-by-nfgate")
    ctx.saw(f"{got.text}; {reply.text}")
    ctx.check(
        info is not None and info.get("note") == "updated-by-nfgate", "the update is not in the catalog"
    )


@case(
    "DBP-CATALOG-3.5",
    "An UPDATE from a peer that never registered is DENIED",
    clause(
        "3",
        '"An DENIED reply consists of a multipart message of 3 or more frames for unauthorized or unregistered '
        'services"',
        "SHOULD",
        "DISCONNECT (an unexpected command, Opening and Closing) passes too",
    ),
)
@closing
def update_unregistered(ctx: CaseContext) -> None:
    dealer = ctx.dealer("service (never registered)")
    dealer.send(Update(time=now(), info=(b'{"note": "x"}',)))
    got = dealer.recv("DENIED")
    ctx.expect("DENIED (or DISCONNECT)")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, (Denied, Disconnect)), f"the UPDATE got {got.type}")


@case(
    "DBP-CATALOG-2.1",
    "An info request for a registered service is answered with its information",
    clause(
        "2",
        '"DBP/Info Request is a strictly synchronous dialog initiated by the client: C: REQUEST B: REPLY"; '
        '"The information request is either a specified services name or a list of currently active services"',
        "MUST",
        "graded MUST: the dialog the sub-protocol consists of",
    ),
)
@closing
def info_one(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    got = ask(ctx, service.name)
    info = info_of(got)
    ctx.expect(f"REPLY ('o_O', time, JSON object) naming {service.name!r}")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Reply), f"the request got {got.type}")
    ctx.check(info is not None, "the REPLY's information is not a JSON object")
    assert info is not None
    ctx.check(service.name in json.dumps(info), "the REPLY does not name the service")


@case(
    "DBP-CATALOG-2.2",
    "An info request for the list of active services includes a registered one",
    clause(
        "2",
        '"The information request is either a specified services name or a list of currently active services '
        'available."',
        "SHOULD",
        "the spec does not say how to ask for the list: '*' (nfgate) and an empty query are tried",
    ),
)
@closing
def info_all(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    seen = []
    for query in ("*", ""):
        got = ask(ctx, query, f"client ({query or 'empty'} query)")
        seen.append(got)
        if isinstance(got.message, Reply) and service.name.encode() in got.message.info:
            ctx.saw(got.text)
            return
    ctx.saw(describe(seen))
    raise ctx.violated("neither '*' nor an empty query listed the registered service")


@case(
    "DBP-CATALOG-2.3",
    "An info request for an unknown name gets a REPLY with a warning",
    clause(
        "2", '"Information that is not available should be responded with by an inactive warning."', "SHOULD"
    ),
)
@closing
def info_unknown(ctx: CaseContext) -> None:
    got = ask(ctx, ctx.unique("dbp-nobody"))
    ctx.expect("REPLY whose JSON has a status other than active, or an error/warning key")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Reply), f"the request got {got.type}")
    ctx.check(is_inactive(info_of(got)), "the REPLY carries no warning")


@case(
    "DBP-CATALOG-2.4",
    "An info request for a service that disconnected reports it inactive",
    clause(
        "2", '"Information that is not available should be responded with by an inactive warning."', "SHOULD"
    ),
    dialects=SPEC,
)
@closing
def info_inactive(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    service.dealer.send(Disconnect(time=now()))
    ctx.sleep(0.2)
    got = ask(ctx, service.name)
    ctx.expect("REPLY with an inactive warning")
    ctx.saw(got.text)
    ctx.check(is_inactive(info_of(got)), "the gone service is not reported inactive")


@case(
    "DBP-CATALOG-5.1",
    "After a service's DISCONNECT the catalog sends it nothing more",
    clause(
        "5",
        '"When the broker receives DISCONNECT from a service node it MUST send no further commands to that '
        'service node."',
        "MUST",
    ),
    dialects=SPEC,
    heartbeats=3,
)
@closing
def disconnect_silences(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    service.dealer.send(Disconnect(time=now()))
    later = service.dealer.collect(2.5 * service.heartbeat_s)
    ctx.expect(f"nothing on the service's connection for {2.5 * service.heartbeat_s * 1000:.0f} ms")
    ctx.saw(describe(later))
    ctx.check(not later, "the catalog kept sending commands")


@case(
    "DBP-CATALOG-5.2",
    "A valid but unexpected command (APPROVED from a service) is answered with DISCONNECT",
    clause(
        "5",
        '"The broker MUST respond to any valid but unexpected command by sending DISCONNECT and then no further '
        'commands to that service node."',
        "MUST",
    ),
)
@closing
def unexpected(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    service.dealer.send(Approved(time=now()))
    got = service.dealer.recv("DISCONNECT", skip=("HEARTBEAT",))
    ctx.expect("DISCONNECT, then nothing")
    after = service.dealer.collect(min(0.5, ctx.wait_s()))
    ctx.saw(describe([got, *after]))
    ctx.check(isinstance(got.message, Disconnect), f"the unexpected command got {got.type}")
    ctx.check(not after, "the catalog sent more after its DISCONNECT")


@case(
    "DBP-CATALOG-5.3",
    "A ZeroMQ HEARTBEAT from a peer that never registered is answered with DISCONNECT",
    clause(
        "5",
        '"HEARTBEAT commands are valid at any time, after a READY command."; "The broker MUST respond to any '
        'valid but unexpected command by sending DISCONNECT"',
        "MUST",
    ),
    dialects=SPEC,
)
@closing
def stale_heartbeat(ctx: CaseContext) -> None:
    dealer = ctx.dealer("service (never registered)")
    dealer.send(Heartbeat(time=now(), service=ctx.unique("dbp-ghost")))
    got = dealer.recv("DISCONNECT")
    ctx.expect("DISCONNECT")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Disconnect), f"the HEARTBEAT got {got.type}")


@case(
    "DBP-CATALOG-5.4",
    "A service can register again on a new socket after DISCONNECT",
    clause(
        "5",
        '"it MUST close its socket, and reconnect to the broker on a new socket. This mechanism allows service '
        'nodes to re-register after a broker failure and recovery."',
        "MUST",
        "graded MUST: the catalog's side of the mechanism",
    ),
)
@closing
def register_again(ctx: CaseContext) -> None:
    first = SuiteService(ctx)
    first.approved()
    first.dealer.send(Disconnect(time=now()))
    second = SuiteService(ctx, name=first.name)  # a new DEALER, a new UDP port
    got = second.register()
    assert got is not None
    ctx.expect("APPROVED for the same name on the new socket")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Approved), f"the new registration got {got.type}")


@case(
    "DBP-CATALOG-5.5",
    "An ACK ('u.u') from a registered service does not end its registration",
    clause(
        "4",
        '"An AWK command consists of a multipart message of 3 frames ... Frame 1: \'u.u\'"; "Any received '
        'command except DISCONNECT acts as a heartbeat."',
        "MAY",
        "the spec gives ACK no rule of its own: a DISCONNECT for it is recorded (INFO)",
    ),
)
@closing
def ack(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    service.dealer.send(Ack(time=now()))
    seen = service.dealer.collect(min(0.3, ctx.wait_s()), skip=("HEARTBEAT",))
    got = ask(ctx, service.name)
    ctx.expect("no DISCONNECT; the service still active")
    ctx.saw(describe([*seen, got]))
    if any(isinstance(g.message, Disconnect) for g in seen) or is_inactive(info_of(got)):
        raise ctx.info("the catalog treated ACK as unexpected")


from nfgate.conformance.roles import dbp_catalog_beats as _beats  # noqa: E402,F401  (registers more cases)
