"""NFP broker role, continued: the cases where the suite plays workers (NFP/Worker,
Opening and Closing a Connection, POST and RESPONSE Processing, Keepaliving). They
register on :data:`nfgate.conformance.roles.nfp_broker.ROLE`."""

from __future__ import annotations

from nfgate.codecs.nfp.messages import WORKER, Disconnect, Keepalive, Post, Ready, Response
from nfgate.conformance.context import CaseContext, Dealer, Received, Source, describe
from nfgate.conformance.roles import _nfp
from nfgate.conformance.roles._nfp import (
    JOB_BODY,
    SuiteWorker,
    clause,
    job,
    new_uuid,
    norfab,
    open_client,
    settle,
)
from nfgate.conformance.roles.nfp_broker import KA, ROLE, dispatched, job_reaches, open_is_answered

case = ROLE.case

# ----------------------------------------------------------------------------- 6/7 workers


@case(
    "NFP-BROKER-6.1",
    "A worker's OPEN is answered with OPEN",
    clause(
        "6",
        'W: OPEN / B: OPEN / W: READY. "Broker sends OPEN message back to client or worker to confirm the connection."',
        "MUST",
        "the dialog grammar, graded as MUST",
    ),
)
def worker_open(ctx: CaseContext) -> None:
    open_is_answered(ctx, "worker", WORKER)


@case(
    "NFP-BROKER-7.1",
    "There is no response to READY",
    clause("7", '"There is no response to a READY."', "MUST", "a description, graded as MUST"),
)
def ready_silent(ctx: CaseContext) -> None:
    worker = SuiteWorker(ctx, ctx.unique("svc")).register()
    ctx.expect("nothing but KEEPALIVE after READY")
    got = worker.dealer.collect(min(1.0, ctx.wait_s()), skip=KA)
    ctx.saw(describe(got))
    ctx.check(not got, "the broker answered READY")


UNEXPECTED = '"The broker MUST respond to any valid but unexpected command by sending DISCONNECT and then no further commands to that worker."'


def _expect_disconnect(ctx: CaseContext, dealer: Dealer) -> None:
    ctx.expect("DISCONNECT, then no further commands")
    got = dealer.recv("DISCONNECT", skip=KA)
    ctx.pause_beats()  # "When the worker receives DISCONNECT it must send no further commands"
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Disconnect), f"the broker answered {got.type}, not DISCONNECT")
    after = dealer.collect(min(1.5 * ctx.heartbeat_s, ctx.wait_s()))
    ctx.saw(f"{got.text}; then {describe(after)}")
    ctx.check(not after, "the broker sent more commands after DISCONNECT")


@case(
    "NFP-BROKER-7.2",
    "A second READY gets DISCONNECT",
    clause("7", '"The worker MUST NOT send a further READY." ' + UNEXPECTED, "MUST"),
)
def second_ready(ctx: CaseContext) -> None:
    worker = SuiteWorker(ctx, ctx.unique("svc")).register()
    settle(ctx)
    # No KEEPALIVE may cross the DISCONNECT: the broker would rightly answer it again.
    worker.beat.active = False
    worker.dealer.send(Ready(service=worker.service))
    _expect_disconnect(ctx, worker.dealer)


@case(
    "NFP-BROKER-7.3",
    "KEEPALIVE before READY gets DISCONNECT",
    clause("7", '"KEEPALIVE commands are valid at any time, after a READY command." ' + UNEXPECTED, "MUST"),
)
def keepalive_first(ctx: CaseContext) -> None:
    worker = ctx.dealer("worker", identity=ctx.unique("nfgate-w").encode())
    worker.send(Keepalive(header=WORKER, service=ctx.unique("svc")))
    _expect_disconnect(ctx, worker)


@case(
    "NFP-BROKER-7.4",
    "A RESPONSE from a worker that never sent READY gets DISCONNECT",
    clause("7", UNEXPECTED, "MUST"),
)
def response_first(ctx: CaseContext) -> None:
    worker = ctx.dealer("worker", identity=ctx.unique("nfgate-w").encode())
    if norfab(ctx):
        worker.send(Response(header=WORKER, client=b"nobody", uuid=new_uuid(), status=200, body=(b"{}",)))
    else:
        worker.send(
            Response(header=WORKER, service=ctx.unique("svc"), uuid=new_uuid(), status=200, body=(b"x",))
        )
    _expect_disconnect(ctx, worker)


@case(
    "NFP-BROKER-7.5",
    "After a worker's DISCONNECT the broker sends it nothing",
    clause(
        "7",
        '"When the broker receives DISCONNECT from a worker it MUST send no further commands to that worker."',
        "MUST",
    ),
    heartbeats=4.5,
)
def no_commands_after_disconnect(ctx: CaseContext) -> None:
    service = ctx.unique("svc")
    worker = SuiteWorker(ctx, service).register()
    settle(ctx)
    # The DISCONNECT goes just after one of the broker's KEEPALIVEs: its next one is an
    # interval away, so whatever reaches the worker afterwards was sent after the broker
    # read the DISCONNECT, not already on its way (draining it instead would pass a
    # broker that answers DISCONNECT with a KEEPALIVE). A broker that does not beat an
    # idle worker gives nothing to wait for; the DISCONNECT then goes at once.
    worker.dealer.drain()
    ctx.watch([worker.dealer], lambda _, got: isinstance(got.message, Keepalive), 1.5 * ctx.heartbeat_s)
    worker.beat.active = False
    worker.dealer.send(_nfp.disconnect(ctx, WORKER, service))
    settle(ctx)
    client = open_client(ctx)
    client.send(job(ctx, Post, service, worker.name, new_uuid(), JOB_BODY))
    ctx.expect("nothing at the worker (no KEEPALIVE, no POST)")
    got = worker.dealer.collect(max(2.5 * ctx.heartbeat_s, ctx.options.timeout_s))
    ctx.saw(describe(got))
    ctx.check(not got, "the broker kept sending to a worker that sent DISCONNECT")


@case(
    "NFP-BROKER-7.6",
    "A worker may send DISCONNECT before READY, then register",
    clause("7", '"The worker MAY send DISCONNECT at any time, including before READY."', "MAY"),
)
def disconnect_before_ready(ctx: CaseContext) -> None:
    service = ctx.unique("svc")
    worker = SuiteWorker(ctx, service)
    worker.open()
    worker.dealer.send(_nfp.disconnect(ctx, WORKER, service))
    worker.register()
    settle(ctx)
    client = open_client(ctx)
    client.send(job(ctx, Post, service, "any", new_uuid(), JOB_BODY))
    ctx.expect("the worker is registered: a POST reaches it")
    got = job_reaches(ctx, worker)
    ctx.saw(got.text)
    ctx.check(got.type == "POST", f"the worker got {got.type}")


@case(
    "NFP-BROKER-7.7",
    "A worker that reconnects on a new socket after DISCONNECT registers again",
    clause(
        "7",
        '"When the worker receives DISCONNECT ... it MUST close its socket, and reconnect to the broker on a new socket. This mechanism allows workers to re-register after a broker failure and recovery."',
        "MUST",
        "the broker's half of the mechanism, graded as MUST",
    ),
)
def reregister(ctx: CaseContext) -> None:
    service = ctx.unique("svc")
    first = SuiteWorker(ctx, service).register()
    settle(ctx)
    first.beat.active = False
    first.dealer.send(_nfp.disconnect(ctx, WORKER, service))
    # Let the DISCONNECT arrive before the new socket's READY: both carry the same
    # identity and ZeroMQ orders messages per connection only, so a broker that read the
    # READY first would take the old connection's DISCONNECT for the new worker's. The
    # clause is about re-registering after DISCONNECT, not about that race.
    settle(ctx)
    first.dealer.sock.close(0)
    again = SuiteWorker(ctx, service, name=first.name).register()
    settle(ctx)
    client = open_client(ctx)
    client.send(job(ctx, Post, service, first.name, new_uuid(), JOB_BODY))
    ctx.expect("a POST targeted at the worker reaches its new socket")
    got = job_reaches(ctx, again)
    ctx.saw(got.text)
    ctx.check(got.type == "POST", f"the worker got {got.type}")


# ----------------------------------------------------------------------------- 8


@case(
    "NFP-BROKER-8.1",
    "Layout of the POST a worker receives (client address frame or service/target)",
    clause(
        "8",
        '"The POST and the RESPONSE commands MUST contain precisely one client address frame. This frame MUST be followed by an empty (zero sized) frame."',
        "MUST",
        "contradicts the POST frame table; recorded, not graded",
    ),
)
def post_layout(ctx: CaseContext) -> None:
    _, (worker,), _, _ = dispatched(ctx, ctx.unique("svc"))
    got = job_reaches(ctx, worker)
    ctx.saw(got.text)
    m = got.message
    ctx.check(isinstance(m, Post), f"the worker got {got.type}")
    layout = (
        "client address + empty frame (routed)"
        if getattr(m, "routed", False)
        else "service + target (the frame table)"
    )
    raise ctx.info(
        f"the broker sends POST to workers as: {layout}; the spec's frame table and this clause disagree"
    )


# ----------------------------------------------------------------------------- 9 Keepaliving

HEARTBEAT = '"Both broker and worker MUST send heartbeats at regular and agreed-upon intervals. A peer MUST consider the other peer \u201cdisconnected\u201d if no keepalive arrives within some multiple of that interval (usually 3-5)."'


@case(
    "NFP-BROKER-9.1",
    "The broker sends KEEPALIVE to a worker at the agreed interval",
    clause("9", HEARTBEAT, "MUST", "the agreed interval is --heartbeat-ms"),
    heartbeats=3.5,
)
def broker_keepalives(ctx: CaseContext) -> None:
    worker = SuiteWorker(ctx, ctx.unique("svc")).register()
    hb = ctx.heartbeat_s
    ctx.expect(f"KEEPALIVE (NFPB01, service {worker.service!r}) at least every {hb * 1000:.0f} ms")
    stamps: list[float] = []
    texts: list[str] = []

    def handle(_: Source, got: Received) -> bool:
        if isinstance(got.message, Keepalive):
            stamps.append(ctx.frames[-1].at_ms)
            texts.append(got.text)
        return len(stamps) >= 3

    ctx.watch([worker.dealer], handle, 3.2 * hb)
    ctx.saw(f"{len(stamps)} KEEPALIVE(s) at {[round(s) for s in stamps]} ms")
    ctx.check_beats(stamps, "KEEPALIVE")
    ctx.check(all(worker.service in t for t in texts), "a KEEPALIVE names another service")


@case(
    "NFP-BROKER-9.2",
    "The broker stops sending to a worker that went silent",
    clause(
        "9",
        HEARTBEAT
        + ' "If the broker detects that the worked has disconnected, it SHOULD stop sending messages of any type to that worker."',
        "SHOULD",
        "silence is --heartbeat-ms x 6 (NorFab's multiplier)",
    ),
    heartbeats=11,
)
def silent_worker_dropped(ctx: CaseContext) -> None:
    service = ctx.unique("svc")
    worker = SuiteWorker(ctx, service).register(beating=False)
    hb, liveness = ctx.heartbeat_s, ctx.options.liveness
    worker.dealer.collect((liveness + 1) * hb)
    client = open_client(ctx)
    client.send(job(ctx, Post, service, worker.name, new_uuid(), JOB_BODY))
    ctx.expect(f"after {liveness + 1} silent intervals: nothing more at the worker (DISCONNECT allowed)")
    got = [g for g in worker.dealer.collect(2.5 * hb) if g.type != "DISCONNECT"]
    ctx.saw(describe(got))
    ctx.check(not got, "the broker still sends to a worker silent for longer than the liveness")


@case(
    "NFP-BROKER-9.3",
    "A worker that sends KEEPALIVEs stays registered",
    clause("9", HEARTBEAT, "MUST"),
    heartbeats=9,
)
def live_worker_kept(ctx: CaseContext) -> None:
    service = ctx.unique("svc")
    worker = SuiteWorker(ctx, service).register()
    hb, liveness = ctx.heartbeat_s, ctx.options.liveness
    early = worker.dealer.collect((liveness + 1) * hb, skip=KA)
    client = open_client(ctx)
    client.send(job(ctx, Post, service, worker.name, new_uuid(), JOB_BODY))
    ctx.expect(f"after {liveness + 1} intervals of KEEPALIVEs, a POST still reaches the worker")
    got = job_reaches(ctx, worker)
    ctx.saw(f"meanwhile: {describe(early)}; then {got.text}")
    ctx.check(got.type == "POST", f"the worker got {got.type}")
