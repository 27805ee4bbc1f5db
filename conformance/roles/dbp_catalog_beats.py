"""DBP catalog role, continued: heartbeats over UDP and ZeroMQ, liveness, invalid input
and the run-wide checks. The cases register on
:data:`nfgate.conformance.roles.dbp_catalog.ROLE`.

The agreed interval is ``--heartbeat-ms``: the suite's services register it as their
``heartbeat`` (seconds), and expect the catalog's beats at that interval.
"""

from __future__ import annotations

from collections.abc import Callable

from nfgate.codecs.dbp import Disconnect, Heartbeat, encode_heartbeat_datagram
from nfgate.conformance.context import CaseContext, Received, describe
from nfgate.conformance.roles import _dbp
from nfgate.conformance.roles._dbp import SuiteService, ask, clause, closing, info_of, is_inactive, now
from nfgate.conformance.roles.dbp_catalog import ROLE, SPEC, probe

case = ROLE.case
BEATS = '"Both broker and worker MUST send heartbeats at regular and agreed-upon intervals."'


def datagrams(ctx: CaseContext, service: SuiteService, window_s: float, count: int) -> list[float]:
    """Arrival times (ms into the case) of UDP heartbeats naming ``service``."""
    stamps: list[float] = []

    def handle(_: object, got: Received) -> bool:
        if isinstance(got.message, Heartbeat) and got.message.service == service.name:
            stamps.append(ctx.frames[-1].at_ms)
        return len(stamps) >= count

    ctx.watch([service.udp.source()], handle, window_s)
    return stamps


def beat_udp(ctx: CaseContext, service: SuiteService) -> None:
    service.udp.send(
        ctx, encode_heartbeat_datagram(Heartbeat(time=now(), service=service.name)), f"<3 {service.name}"
    )


@case(
    "DBP-CATALOG-4.1",
    "The catalog sends UDP heartbeats to a registered service at the agreed interval",
    clause(
        "4",
        '"DBP/Heartbeats are a zmq independent messaging schema that uses raw UDP sockets to broadcast from the '
        'broker node"; ' + BEATS,
        "MUST",
        "the interval is the registration's heartbeat (--heartbeat-ms); datagram form '<3 <time> <name>'",
    ),
    dialects=SPEC,
    heartbeats=4,
)
@closing
def udp_beats(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    hb = service.heartbeat_s
    # The suite beats too, so the catalog has no reason to switch to ZeroMQ.
    stamps: list[float] = []
    for _ in range(4):
        beat_udp(ctx, service)
        stamps += datagrams(ctx, service, hb, 1000)
    ctx.expect(f"a '<3' datagram naming the service about every {hb * 1000:.0f} ms")
    ctx.saw(f"{len(stamps)} datagram(s) at {[round(s) for s in stamps]} ms")
    ctx.check_beats(stamps, "UDP heartbeat", hb)


@case(
    "DBP-CATALOG-4.2",
    "A service beating over UDP stays registered",
    clause(
        "6",
        '"A peer MUST consider the other peer "disconnected" if no heartbeat arrives within some multiple of '
        'that interval"; a peer that beats is therefore alive',
        "MUST",
    ),
    dialects=SPEC,
    heartbeats=6,
)
@closing
def udp_alive(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    for _ in range(5):
        beat_udp(ctx, service)
        ctx.sleep(service.heartbeat_s)
    stray = [g for g in service.dealer.drain() if isinstance(g.message, Disconnect)]
    got = ask(ctx, service.name)
    ctx.expect("no DISCONNECT, and the service still active after 5 intervals of UDP beats")
    ctx.saw(describe([*stray, got]))
    ctx.check(not stray, "the catalog disconnected a service that was beating")
    ctx.check(not is_inactive(info_of(got)), "the beating service is reported inactive")


@case(
    "DBP-CATALOG-4.3",
    "A missed UDP beat switches the catalog to ZeroMQ HEARTBEATs",
    clause(
        "4",
        '"In the event of a missing beat, heartbeats will switch over to reliable TCP connections via req/rep '
        'zmq sockets."',
        "SHOULD",
    ),
    dialects=SPEC,
    heartbeats=4,
)
@closing
def switch_to_zmq(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    got = service.dealer.recv("ZeroMQ HEARTBEAT", 3.5 * service.heartbeat_s + ctx.options.timeout_s)
    ctx.expect("HEARTBEAT '<3' naming the service on its ZeroMQ connection (the suite sent no UDP beat)")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Heartbeat), f"the catalog sent {got.type}")


@case(
    "DBP-CATALOG-4.4",
    "A service answering over ZeroMQ stays registered",
    clause("6", '"Any received command except DISCONNECT acts as a heartbeat."; ' + BEATS, "MUST"),
    dialects=SPEC,
    heartbeats=7,
)
@closing
def zmq_alive(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    beat = ctx.beat(service.dealer, Heartbeat(time=now(), service=service.name), service.heartbeat_s)
    seen = service.dealer.collect(5 * service.heartbeat_s)
    beat.active = False
    got = ask(ctx, service.name)
    ctx.expect("HEARTBEATs, no DISCONNECT; the service still active after 5 intervals")
    ctx.saw(describe([*seen, got]))
    ctx.check(
        not any(isinstance(g.message, Disconnect) for g in seen), "the catalog disconnected the service"
    )
    ctx.check(not is_inactive(info_of(got)), "the service is reported inactive")


@case(
    "DBP-CATALOG-6.1",
    "A silent service is considered disconnected within a few intervals",
    clause(
        "6",
        '"A peer MUST consider the other peer "disconnected" if no heartbeat arrives within some multiple of '
        'that interval (usually 3-5)."',
        "MUST",
        "checked by an info request after 6 silent intervals: inactive (or unknown) expected",
    ),
    dialects=SPEC,
    heartbeats=7,
)
@closing
def silent_gone(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    seen = service.dealer.collect(6 * service.heartbeat_s)
    got = ask(ctx, service.name)
    ctx.expect("an inactive warning for the service after 6 silent intervals")
    ctx.saw(describe([*seen, got]))
    ctx.check(is_inactive(info_of(got)), "the silent service is still reported active")
    ctx.state["gone_service"] = service.name


@case(
    "DBP-CATALOG-6.2",
    "A service considered gone gets nothing more",
    clause(
        "6",
        '"If the broker detects that the worked has disconnected, it SHOULD stop sending it messages of any type."',
        "SHOULD",
        "a DISCONNECT when it is declared gone is allowed; nothing after it",
    ),
    dialects=SPEC,
    heartbeats=10,
)
@closing
def gone_silent(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.approved()
    hb = service.heartbeat_s
    service.dealer.collect(6 * hb)
    service.udp.drain(ctx)  # what was sent while it still counted as alive
    seen: list[Received] = []

    def keep(_: object, got: Received) -> bool:
        seen.append(got)
        return False

    ctx.watch([service.dealer, service.udp.source()], keep, 3 * hb)
    late = [g for g in seen if g.frames and not isinstance(g.message, Disconnect) and len(g.frames) > 1]
    udp = [g for g in seen if len(g.frames) == 1]
    ctx.expect("nothing but DISCONNECT once gone (checked from 6 to 9 intervals of silence)")
    ctx.saw(f"{describe(late)}; {len(udp)} datagram(s)")
    ctx.check(not late and not udp, "the catalog kept sending to a service it considers gone")


INVALID = (
    '"The broker SHOULD respond to invalid messages by dropping them and treating that peer as invalid." '
    "The catalog must also survive them: the suite checks that it still answers."
)


def _invalid_case(number: str, what: str) -> Callable[[CaseContext], None]:
    def run(ctx: CaseContext) -> None:
        frames = dict((n, f) for n, _, f in _dbp.invalid_inputs())[number]
        sender = ctx.dealer("sender of invalid input")
        ctx.expect("no answer (dropped), and the catalog still answers other peers")
        sender.send(frames, note=f"invalid: {what}")
        answered = sender.collect(min(0.5, ctx.wait_s()))
        probe(ctx)
        ctx.saw(f"answer to the invalid message: {describe(answered)}; the catalog still answers")
        ctx.check(not answered, "the catalog answered an invalid message instead of dropping it")

    return run


for _number, _what, _ in _dbp.invalid_inputs():
    case(f"DBP-CATALOG-9.{_number}", f"Drops {_what}", clause("9", INVALID, "SHOULD"))(
        _invalid_case(_number, _what)
    )


@case(
    "DBP-CATALOG-9.9",
    "Drops a UDP datagram that is not a heartbeat",
    clause("9", INVALID, "SHOULD"),
    dialects=SPEC,
)
@closing
def udp_garbage(ctx: CaseContext) -> None:
    service = SuiteService(ctx)
    service.udp.send(ctx, b"\x00\xffnot a heartbeat", "invalid datagram")
    service.udp.send(ctx, b"<3 1732251000 " + ctx.unique("dbp-ghost").encode(), "heartbeat for nobody")
    probe(ctx)
    ctx.saw("the catalog still answers")


@case(
    "DBP-CATALOG-1.1",
    "Every message from the catalog decodes in the spec's form",
    clause(
        "1",
        '"every DBP command includes the protocol header to allow proper validation of all messages that a '
        'peer receives" (Opening and Closing); time frames are "current epoch time"',
        "MUST",
        "ASCII decimal time, '(O_O)' for DENIED; Hermes's float32 time and 'OmO' are departures, "
        "reported in every run (with --dialect hermes too)",
    ),
    final=True,
)
def all_in_dialect(ctx: CaseContext) -> None:
    bad: list[str] = ctx.state.get("malformed", [])
    other: list[str] = ctx.state.get("other_dialect", [])
    ctx.expect("every message decodes in the spec dialect")
    ctx.saw(f"{len(bad)} undecodable {bad[:2]}; {len(other)} in another dialect {other[:2]}")
    ctx.check(not bad and not other, "the catalog sent messages outside the spec's form")
