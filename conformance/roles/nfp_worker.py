"""NFP worker role: the suite is the broker. It binds ``--endpoint``; the worker under
test connects, says OPEN (spec) and READY, and is then sent jobs, KEEPALIVEs,
DISCONNECT, silence and invalid input (specs/nfp.md; NorFab 0.25's dialect too).
"""

from __future__ import annotations

from collections.abc import Callable

from nfgate.codecs.nfp.messages import BROKER, WORKER, Delete, Get, Keepalive, Open, Post, Ready, Response
from nfgate.conformance.context import CaseContext, NoAnswer, Received, describe
from nfgate.conformance.link import (
    RouterLink,
    alive_probe,
    close_link,
    detect_from_hello,
    link,
    open_link,
    registered_link,
)
from nfgate.conformance.registry import Role, Session, register_role
from nfgate.conformance.roles import _nfp
from nfgate.conformance.roles._nfp import JOB_BODY, SPEC_STATUSES, clause, new_uuid, norfab

CLIENT_TOKEN = b"nfgate-conformance"  # the client address the suite's jobs carry (NorFab form)


def _heartbeat(link: RouterLink) -> Keepalive | None:
    return Keepalive(header=BROKER, service=str(link.service)) if link.service else None


def await_ready(ctx: CaseContext, window_s: float) -> list[Received]:
    """Messages until the worker's READY (answering OPEN with OPEN on the way); raises
    NoAnswer when no READY comes within the window."""
    lk = link(ctx)
    seen: list[Received] = []

    def handle(_: object, got: Received) -> bool:
        seen.append(got)
        if isinstance(got.message, Open):
            dialect = ctx.wire.detect(list(got.frames))
            lk.try_send(
                ctx,
                ctx.wire.codec.encode(Open(header=BROKER), dialect),
                got.identity,
                note="Open(header=b'NFPB01')",
            )
        if isinstance(got.message, Ready):
            lk.worker, lk.service = got.identity, got.message.service
            return True
        return False

    if not ctx.watch([lk], handle, window_s):
        raise NoAnswer("READY from a worker", window_s)
    return seen


def setup(session: Session) -> None:
    session.observers.append(_nfp.observe)
    session.observers.append(_readies)
    open_link(session, RouterLink(session, _heartbeat), await_ready)


def _readies(ctx: CaseContext, got: Received) -> None:
    """Session observer for NFP-WORKER-7.2: a READY after the worker's first, in the same
    conversation. A new one begins with OPEN (spec dialect), or, in NorFab's dialect
    (no OPEN), after the suite's DISCONNECT or its silence, which the cases that cause
    them announce (``state["restart"]``)."""
    state = ctx.state
    if isinstance(got.message, Open):
        state["restart"] = True
    elif isinstance(got.message, Ready):
        if state.get("ready_seen") and not state.get("restart"):
            state.setdefault("further_ready", []).append(f"{ctx.clause.section}: {got.text}")
        state["ready_seen"] = True
        state["restart"] = False


ROLE = register_role(
    Role(
        protocol="nfp",
        role="worker",
        codec="nfp",
        summary="an NFP worker; the suite binds --endpoint as its broker and the worker connects",
        dialects=("spec", "norfab"),
        binds=True,
        probe=alive_probe("message (a KEEPALIVE at least: they come every interval)"),
        detect=detect_from_hello,
        setup=setup,
        teardown=close_link,
    )
)
case = ROLE.case


def registered(ctx: CaseContext) -> RouterLink:
    """The link, once a worker has registered; raises NoAnswer otherwise."""
    return registered_link(ctx, "READY")


def send_job(
    ctx: CaseContext, kind: type[Post] | type[Get] | type[Delete], uuid: str, body: bytes = JOB_BODY
) -> None:
    lk = registered(ctx)
    if norfab(ctx):
        message = kind(header=BROKER, client=CLIENT_TOKEN, uuid=uuid, body=(body,))
    else:
        message = kind(header=BROKER, service=str(lk.service), target="any", uuid=uuid, body=(body,))
    ctx.state.setdefault("uuids", set()).add(uuid)
    lk.send(ctx, message)


def answer(ctx: CaseContext, uuid: str, done: Callable[[Response], bool]) -> Received:
    """The worker's next RESPONSE for ``uuid`` that satisfies ``done``."""
    lk = link(ctx)
    found: list[Received] = []

    def handle(_: object, got: Received) -> bool:
        m = got.message
        if isinstance(m, Response) and m.uuid == uuid:
            found.append(got)
            return done(m)
        return False

    if not ctx.watch([lk], handle, ctx.wait_s()):
        ctx.saw(describe(found))
        raise NoAnswer(f"RESPONSE for job {uuid}", ctx.options.timeout_s)
    return found[-1]


DIALOG = "W: OPEN / B: OPEN / W: READY / Repeat: B: POST / W: RESPONSE ... B: GET / W: RESPONSE"


@case(
    "NFP-WORKER-6.1",
    "The worker opens with OPEN before READY",
    clause("6", DIALOG, "MUST", "the dialog grammar, graded as MUST"),
)
def opens(ctx: CaseContext) -> None:
    registered(ctx)
    ctx.frames.extend(ctx.state.get("hello_frames", []))
    hello: list[Received] = ctx.state["hello"]
    ctx.expect("OPEN (NFPW01), then READY")
    # Empty when the READY came only after the suite's wait for it.
    ctx.saw(describe(hello) if hello else "no READY within the wait for the worker's first messages")
    first = hello[0].type if hello else "nothing in time"
    # A departure of NorFab's dialect (norfab-wire.md section 7, item 2) is still one: graded
    # as the broker's side of the same grammar is (NFP-BROKER-5.1, 6.1).
    dialect = " (NorFab's dialect has no OPEN)" if norfab(ctx) else ""
    ctx.check(
        bool(hello) and isinstance(hello[0].message, Open),
        f"the worker began with {first}, not OPEN{dialect}",
    )


@case(
    "NFP-WORKER-6.2",
    "READY is 4 frames naming one service",
    clause(
        "6",
        '"A READY command consists of a multipart message of 4 frames ... Frame 1: NFPW01 ... Frame 3: Service name (printable string)"',
        "MUST",
    ),
)
def ready_form(ctx: CaseContext) -> None:
    lk = registered(ctx)
    hello: list[Received] = ctx.state["hello"]
    if not hello:  # the READY came after the suite's wait for it: no frames kept to grade
        raise ctx.skipped("the READY came only after the wait for the worker's first messages")
    ready = hello[-1]
    ctx.expect("'', NFPW01, READY, a printable service name")
    ctx.saw(f"{len(ready.frames)} frames: {ready.text}")
    ctx.check(len(ready.frames) == 4 and isinstance(ready.message, Ready), "READY is not 4 frames")
    ctx.check(bool(lk.service), "the service name is empty")


@case(
    "NFP-WORKER-9.1",
    "The worker sends KEEPALIVE at the agreed interval",
    clause(
        "9",
        '"Both broker and worker MUST send heartbeats at regular and agreed-upon intervals."',
        "MUST",
        "the agreed interval is --heartbeat-ms",
    ),
    heartbeats=3.5,
)
def keepalives(ctx: CaseContext) -> None:
    lk = registered(ctx)
    hb = ctx.heartbeat_s
    stamps: list[float] = []

    def handle(_: object, got: Received) -> bool:
        # The registered connection's only: an old one still beating is NFP-WORKER-7.1's.
        if isinstance(got.message, Keepalive) and got.message.header == WORKER and got.identity == lk.worker:
            stamps.append(ctx.frames[-1].at_ms)
        return len(stamps) >= 3

    ctx.watch([lk], handle, 3.2 * hb)
    ctx.expect(f"KEEPALIVE (NFPW01, service {lk.service!r}) at least every {hb * 1000:.0f} ms")
    ctx.saw(f"{len(stamps)} KEEPALIVE(s) at {[round(s) for s in stamps]} ms")
    ctx.check_beats(stamps, "KEEPALIVE")


@case(
    "NFP-WORKER-6.3",
    "A POST is answered with RESPONSE for its uuid",
    clause(
        "6",
        DIALOG + ' "Worker sends RESPONSE message to broker with requests status or job results."',
        "MUST",
        "the dialog grammar, graded as MUST",
    ),
)
def post_answered(ctx: CaseContext) -> None:
    uuid = new_uuid()
    send_job(ctx, Post, uuid)
    ctx.expect(f"RESPONSE for uuid {uuid}")
    got = answer(ctx, uuid, lambda m: True)
    ctx.saw(got.text)


@case(
    "NFP-WORKER-6.4",
    "A GET for a job returns its result (200)",
    clause(
        "6",
        DIALOG + ' "200 - OK. The NORFAB worker executed the request successfully."',
        "MUST",
        "the dialog grammar, graded as MUST",
    ),
)
def get_answered(ctx: CaseContext) -> None:
    uuid = new_uuid()
    send_job(ctx, Post, uuid)
    first = answer(ctx, uuid, lambda m: True)
    ctx.expect(f"RESPONSE 200 for uuid {uuid} to a GET")
    last: Received = first
    for _ in range(50):  # 300 (pending) means: ask again later
        if isinstance(last.message, Response) and last.message.status == 200 and last is not first:
            break
        ctx.sleep(min(0.2, ctx.heartbeat_s))
        send_job(ctx, Get, uuid, b'{"task":"list_tasks","kwargs":{},"args":[]}')
        last = answer(ctx, uuid, lambda m: m.status not in (201, 202))
        if isinstance(last.message, Response) and last.message.status not in (300, 102):
            break
    ctx.saw(last.text)
    ctx.check(isinstance(last.message, Response) and last.message.status == 200, f"the GET got {last.text}")


@case(
    "NFP-WORKER-4.1",
    "A GET for an unknown uuid gets 400",
    clause(
        "4",
        '"400 - UNKNOWN. The client is using an invalid or unknown UUID" / "Implementations MAY NOT use status codes that are not defined here"',
        "MAY NOT",
    ),
)
def get_unknown(ctx: CaseContext) -> None:
    uuid = new_uuid()
    send_job(ctx, Get, uuid, b'{"task":"list_tasks","kwargs":{},"args":[]}')
    ctx.expect(f"RESPONSE 400 for uuid {uuid}")
    got = answer(ctx, uuid, lambda m: True)
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Response) and got.message.status == 400, "another status than 400")


@case(
    "NFP-WORKER-5.1",
    "What the worker does with DELETE for a job",
    clause(
        "5",
        '"Broker relays DELETE message to individual workers to cancel the job."',
        "MAY",
        "no answer is specified; recorded",
    ),
)
def delete(ctx: CaseContext) -> None:
    uuid = new_uuid()
    send_job(ctx, Post, uuid)
    answer(ctx, uuid, lambda m: True)
    link(ctx).collect(ctx, min(0.3, ctx.wait_s()))  # the job's own progress, not the DELETE's
    send_job(ctx, Delete, uuid, b"{}")
    got = [
        g
        for g in link(ctx).collect(ctx, min(1.0, ctx.wait_s()), skip=("KEEPALIVE",))
        if getattr(g.message, "uuid", None) == uuid
    ]
    ctx.saw(describe(got))
    raise ctx.info("answers to DELETE: " + (describe(got) if got else "none"))


@case(
    "NFP-WORKER-7.1",
    "After the broker's DISCONNECT the worker reconnects and sends READY",
    clause(
        "7",
        '"When the worker receives DISCONNECT it must send no further commands to the broker; it MUST close its socket, and reconnect to the broker on a new socket."',
        "MUST",
    ),
    heartbeats=3,
)
def disconnect(ctx: CaseContext) -> None:
    lk = registered(ctx)
    old = lk.worker
    lk.send(ctx, _nfp.disconnect(ctx, BROKER, str(lk.service)))
    lk.worker = None  # no KEEPALIVE to the old connection
    if norfab(ctx):  # no OPEN in that dialect: the READY after this starts the new conversation
        ctx.state["restart"] = True
    ctx.expect("READY again (after OPEN in the spec dialect)")
    seen = await_ready(ctx, ctx.wait_s())
    ctx.saw(describe(seen) + ("" if lk.worker != old else "  (same identity)"))
    # A new socket begins a new conversation, and in the spec dialect that begins with OPEN.
    ctx.check(
        norfab(ctx) or any(isinstance(g.message, Open) for g in seen),
        "READY without OPEN first: the same conversation, not one on a new socket",
    )
    # "no further commands": nothing more on the old connection (its own identity, or the
    # one libzmq gave it when the new connection took its identity over), after an
    # interval for what was on its way when the DISCONNECT arrived.
    lk.collect(ctx, min(ctx.heartbeat_s, ctx.wait_s()))
    later = lk.collect(ctx, min(2 * ctx.heartbeat_s, ctx.wait_s()))
    stale = [g for g in later if g.identity != lk.worker]
    ctx.saw(describe(seen) + ("" if lk.worker != old else "  (same identity)") + f"; then {describe(later)}")
    ctx.check(not stale, f"{len(stale)} command(s) on the old connection after DISCONNECT")


@case(
    "NFP-WORKER-9.2",
    "A worker whose broker falls silent reconnects",
    clause(
        "9",
        '"A peer MUST consider the other peer \u201cdisconnected\u201d if no keepalive arrives within some multiple of that interval" "If the worker detects that the broker has disconnected, it SHOULD restart a new conversation."',
        "SHOULD",
        "silence up to --heartbeat-ms x 8",
    ),
    heartbeats=10,
)
def broker_silence(ctx: CaseContext) -> None:
    lk = registered(ctx)
    lk.beating = False
    if norfab(ctx):  # as in NFP-WORKER-7.1: its READY after the silence begins anew
        ctx.state["restart"] = True
    try:
        ctx.expect(f"READY on a new conversation within {ctx.options.liveness + 2} intervals of silence")
        seen = await_ready(ctx, (ctx.options.liveness + 2) * ctx.heartbeat_s)
        ctx.saw(describe(seen))
    finally:
        lk.beating = True


def _invalid_case(number: str, what: str) -> Callable[[CaseContext], None]:
    def run(ctx: CaseContext) -> None:
        lk = registered(ctx)
        # First, that it answers a POST at all: one that stopped before this input (a
        # thread an earlier case's input killed, RESPONSEs under another uuid) must not
        # be blamed on it. The case that broke it failed already.
        probe = new_uuid()
        send_job(ctx, Post, probe)
        try:
            answer(ctx, probe, lambda m: True)
        except NoAnswer:
            raise ctx.skipped("the worker did not answer a POST even before this input") from None
        frames = {n: f for n, _, f in _nfp.malformed(ctx.dialect, BROKER)}[number]
        lk.send(ctx, frames, note=f"invalid: {what}")
        # Late progress of earlier jobs (NorFab's EVENTs) is not an answer to this input.
        earlier = ctx.state.get("uuids", set())
        replies = [
            r
            for r in lk.collect(ctx, min(0.5, ctx.wait_s()), skip=("KEEPALIVE",))
            if getattr(r.message, "uuid", None) not in earlier
        ]
        uuid = new_uuid()
        send_job(ctx, Post, uuid)
        ctx.expect("the worker still answers a POST")
        got = answer(ctx, uuid, lambda m: True)
        ctx.saw(f"answer to the invalid message: {describe(replies)}; then {got.text}")
        if replies:
            raise ctx.info("the worker answered the invalid message")

    return run


SURVIVE = '"every NFP command includes the protocol header to allow proper validation of all messages that a peer receives."'
for _number, _what, _ in _nfp.malformed("spec", BROKER):
    case(
        f"NFP-WORKER-11.{_number}",
        f"Invalid input: {_what}",
        clause("11", SURVIVE, "MUST", "the suite's robustness check: the worker must survive invalid input"),
    )(_invalid_case(_number, _what))


@case(
    "NFP-WORKER-7.2",
    "The worker sends no further READY in a conversation",
    clause("7", '"The worker MUST NOT send a further READY."', "MUST"),
    final=True,
)
def one_ready(ctx: CaseContext) -> None:
    further: list[str] = ctx.state.get("further_ready", [])
    ctx.expect("one READY per conversation (a new one begins with OPEN, or after DISCONNECT or silence)")
    ctx.saw("\n".join(further[:20]) if further else "one READY per conversation")
    ctx.check(not further, f"{len(further)} further READY(s) in a conversation")


@case(
    "NFP-WORKER-4.2",
    "The worker used only the status codes NFP defines",
    clause(
        "4",
        '"Implementations MAY NOT use status codes that are not defined here" (200, 202, 300, 400, 408, 417, 500)',
        "MAY NOT",
    ),
    final=True,
)
def statuses(ctx: CaseContext) -> None:
    seen: dict[int, str] = ctx.state.get("statuses", {})
    if not seen:
        raise ctx.skipped("no status frame was received during the run")
    odd = {s: t for s, t in seen.items() if s not in SPEC_STATUSES}
    ctx.expect("statuses within 200, 202, 300, 400, 408, 417, 500")
    ctx.saw(f"statuses seen: {sorted(seen)}" + "".join(f"\n{s}: {t}" for s, t in odd.items()))
    ctx.check(not odd, f"undefined status code(s) {sorted(odd)}")


@case(
    "NFP-WORKER-3.1",
    "Every message the worker sent was a well-formed NFP message",
    clause("3", "The frame layouts of the NFP messages.", "MUST"),
    final=True,
)
def well_formed(ctx: CaseContext) -> None:
    bad: list[str] = ctx.state.get("malformed", [])
    ctx.saw("\n".join(bad) if bad else "all decoded")
    ctx.check(not bad, f"{len(bad)} malformed message(s) from the worker")


@case(
    "NFP-WORKER-3.2",
    "The worker's command frames are one byte",
    clause("3", '"Frame 2: 0x01 (one byte, representing READY)" (and likewise for every command)', "MUST"),
    final=True,
)
def one_byte(ctx: CaseContext) -> None:
    other: list[str] = ctx.state.get("other_dialect", [])
    ctx.saw("\n".join(other[:20]) if other else "all one byte")
    ctx.check(
        not other, f"{len(other)} message(s) with a command frame in another form (NorFab's ASCII '0x..')"
    )
