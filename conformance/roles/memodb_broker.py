"""MemoDB broker role: the suite is clients and workers, each on its own req0 socket
dialled to ``--endpoint`` (specs/memodb.md; the bcdb broker's behaviour in the bcdb
dialect). ``--heartbeat-ms`` is the broker's idle interval (bcdb: 10000)."""

from __future__ import annotations

from nfgate.codecs.memodb import Disconnect, Heartbeat, Job, Ready, Result
from nfgate.conformance.context import CaseContext, NoAnswer, Received
from nfgate.conformance.registry import Role, Session, register_role
from nfgate.conformance.roles import _memodb
from nfgate.conformance.roles._memodb import NngPeer, Sockets, clause, header, with_sockets

JOB_MS = 30_000  # the JOB timeout the suite's clients ask for: longer than any case


def setup(session: Session) -> None:
    session.observers.append(_memodb.observe)


def worker(sockets: Sockets, services: tuple[str, ...], label: str = "worker") -> NngPeer:
    """A suite worker that has sent READY (its answer is long-polled: not awaited)."""
    peer = sockets.req(label)
    peer.send(Ready(services=services))
    return peer


def next_job(ctx: CaseContext, peer: NngPeer, what: str = "JOB") -> Received:
    """The next JOB for ``peer``, answering the broker's HEARTBEATs meanwhile; raises
    NoAnswer."""
    for _ in range(1000):  # bounded: every pass waits for one message
        got = peer.recv(what)
        if isinstance(got.message, Heartbeat):
            peer.send(Heartbeat(id=got.message.id))
            continue
        return got
    raise NoAnswer(what, 0.0)  # pragma: no cover - the deadline ends the loop first


def job(ctx: CaseContext, sockets: Sockets, service: str, payload: bytes, label: str = "client") -> NngPeer:
    client = sockets.req(label)
    client.send(Job(service=service, timeout_ms=JOB_MS, payload=payload))
    return client


def round_trip(ctx: CaseContext, sockets: Sockets, payload: bytes = b"nfgate-payload") -> dict[str, Received]:
    """READY, JOB from a client, JOB to the worker, RESULT back; raises NoAnswer."""
    service = ctx.unique("memo")
    w = worker(sockets, (service,))
    c = job(ctx, sockets, service, payload)
    got = next_job(ctx, w)
    out = {"job": got}
    if isinstance(got.message, Job):
        w.send(Result(id=got.message.id, payload=got.message.payload[::-1]))
        out["result"] = c.recv("RESULT")
    return out


def probe(ctx: CaseContext) -> None:
    """The broker is alive when a job goes through it (raises NoAnswer)."""
    sockets = Sockets(ctx)
    try:
        found = round_trip(ctx, sockets)
        if "result" not in found:
            raise NoAnswer("JOB for the suite's worker", 0.0)
    finally:
        sockets.close()


ROLE = register_role(
    Role(
        protocol="memodb",
        role="broker",
        codec="memodb",
        summary="a MemoDB broker (NNG rep0); the suite connects to --endpoint as clients and workers",
        dialects=("spec", "bcdb"),
        binds=False,
        probe=probe,
        setup=setup,
    )
)
case = ROLE.case


@case(
    "MEMODB-BROKER-4.1",
    "A client's JOB reaches a READY worker of its service, payload unchanged",
    clause(
        "4",
        '"The broker will reply with either a JOB to be performed by the worker, or a HEARTBEAT"; '
        'the broker "accepts jobs from clients ... and forwards them to workers"',
        "MUST",
        "graded MUST: forwarding jobs is the broker's purpose",
    ),
)
@with_sockets
def job_forwarded(ctx: CaseContext, sockets: Sockets) -> None:
    found = round_trip(ctx, sockets, b"\x00payload\xff")
    got = found["job"]
    ctx.expect("JOB with the client's service and payload b'\\x00payload\\xff'")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Job), f"the worker got {got.type}, not JOB")
    assert isinstance(got.message, Job)
    ctx.check(got.message.payload == b"\x00payload\xff", "the payload was changed")


@case(
    "MEMODB-BROKER-4.2",
    "A JOB to a worker carries the worker ID assigned by the broker",
    clause(
        "4",
        '"Each worker is assigned a unique ID by the broker ... every message to or from the worker '
        'should include the ID."',
        "SHOULD",
    ),
)
@with_sockets
def job_has_id(ctx: CaseContext, sockets: Sockets) -> None:
    got = round_trip(ctx, sockets)["job"]
    ctx.expect("JOB with a non-empty ID")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Job) and bool(got.message.id), "the JOB's ID is empty")


@case(
    "MEMODB-BROKER-3.1",
    "The worker's RESULT reaches the client, with an empty ID and the payload unchanged",
    clause(
        "3",
        '"A simple client works by sending a JOB request to the broker, and waiting for a RESULT reply"; '
        'the ID "should be an empty bytestring for all messages to and from clients"',
        "MUST",
        "graded MUST for the relay; an ID that is not empty fails too (SHOULD in the text, but a "
        "client cannot tell it from a worker message)",
    ),
)
@with_sockets
def result_relayed(ctx: CaseContext, sockets: Sockets) -> None:
    found = round_trip(ctx, sockets, b"abc\x00")
    ctx.expect("RESULT with ID b'' and payload b'\\x00cba' (the suite's worker reversed it)")
    got = found.get("result")
    if got is None:
        raise ctx.violated("the worker got no JOB")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Result), f"the client got {got.type}")
    assert isinstance(got.message, Result)
    ctx.check(got.message.payload == b"\x00cba", "the payload was changed")
    ctx.check(got.message.id == b"", f"the ID is {got.message.id!r}, not empty")


@case(
    "MEMODB-BROKER-4.3",
    "Two workers get different IDs",
    clause(
        "4", '"Each worker is assigned a unique ID by the broker"', "MUST", "graded MUST: IDs route results"
    ),
)
@with_sockets
def unique_ids(ctx: CaseContext, sockets: Sockets) -> None:
    service = ctx.unique("memo")
    w1, w2 = worker(sockets, (service,), "worker w1"), worker(sockets, (service,), "worker w2")
    c1 = job(ctx, sockets, service, b"one", "client c1")
    c2 = job(ctx, sockets, service, b"two", "client c2")
    ids = []
    for w in (w1, w2):
        got = next_job(ctx, w)
        ctx.check(isinstance(got.message, Job), f"{w.label} got {got.type}")
        assert isinstance(got.message, Job)
        ids.append(got.message.id)
        w.send(Result(id=got.message.id, payload=got.message.payload))
    c1.recv("RESULT")
    c2.recv("RESULT")
    ctx.expect("two different worker IDs")
    ctx.saw(f"IDs {[i.hex() for i in ids]}")
    ctx.check(ids[0] != ids[1], "both workers got the same ID")


@case(
    "MEMODB-BROKER-4.4",
    "A job goes only to workers of its service",
    clause(
        "4",
        '"the job can only be sent to workers that support that particular service" (introduction)',
        "MUST",
        "graded MUST: a plain statement of the routing rule",
    ),
)
@with_sockets
def routed_by_service(ctx: CaseContext, sockets: Sockets) -> None:
    other, wanted = ctx.unique("memo-other"), ctx.unique("memo")
    w_other = worker(sockets, (other,), "worker (other service)")
    w = worker(sockets, (wanted,), "worker")
    c = job(ctx, sockets, wanted, b"x")
    got = next_job(ctx, w)
    ctx.check(isinstance(got.message, Job), f"the right worker got {got.type}")
    assert isinstance(got.message, Job)
    w.send(Result(id=got.message.id, payload=b"y"))
    c.recv("RESULT")
    stray = w_other.quiet(min(0.3, ctx.options.timeout_s))
    ctx.expect("no JOB for the worker of another service")
    ctx.saw(stray.text if stray else "nothing")
    ctx.check(stray is None or not isinstance(stray.message, Job), "a worker of another service got the JOB")


@case(
    "MEMODB-BROKER-4.5",
    "A worker of several services gets jobs for any of them",
    clause(
        "4", '"Each worker can support multiple services, not just one." (Comparison)', "MUST", "graded MUST"
    ),
)
@with_sockets
def several_services(ctx: CaseContext, sockets: Sockets) -> None:
    a, b = ctx.unique("memo-a"), ctx.unique("memo-b")
    # Canonical CBOR order (shorter first, then bytewise), so a bcdb broker accepts it too.
    services = tuple(sorted((a, b), key=lambda s: (len(s.encode()), s.encode())))
    w = worker(sockets, services)
    c = job(ctx, sockets, b, b"for-b")
    got = next_job(ctx, w)
    ctx.expect(f"JOB for {b!r}")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Job) and got.message.service == b, f"got {got.type}")
    assert isinstance(got.message, Job)
    w.send(Result(id=got.message.id, payload=b"ok"))
    c.recv("RESULT")


@case(
    "MEMODB-BROKER-4.6",
    "After a RESULT the broker answers with the next JOB",
    clause(
        "4",
        '"A worker that receives a JOB should process it and then send a RESULT request to the broker. '
        '... In either case, the broker will reply with another JOB or HEARTBEAT."',
        "MUST",
        "graded MUST",
    ),
)
@with_sockets
def next_job_after_result(ctx: CaseContext, sockets: Sockets) -> None:
    service = ctx.unique("memo")
    w = worker(sockets, (service,))
    c1 = job(ctx, sockets, service, b"first", "client c1")
    c2 = job(ctx, sockets, service, b"second", "client c2")
    first = next_job(ctx, w)
    ctx.check(isinstance(first.message, Job), f"got {first.type}")
    assert isinstance(first.message, Job)
    w.send(Result(id=first.message.id, payload=first.message.payload))
    second = next_job(ctx, w, "JOB (the answer to the RESULT)")
    ctx.expect("the second JOB as the answer to the first RESULT")
    ctx.saw(second.text)
    ctx.check(isinstance(second.message, Job), f"got {second.type}")
    assert isinstance(second.message, Job)
    w.send(Result(id=second.message.id, payload=second.message.payload))
    payloads = {c1.recv("RESULT").frames[0][-5:], c2.recv("RESULT").frames[0][-6:]}
    ctx.check(payloads == {b"first", b"second"}, "the RESULTs went to the wrong clients")


@case(
    "MEMODB-BROKER-4.7",
    "An idle worker gets HEARTBEAT, and its HEARTBEAT is answered",
    clause(
        "4",
        '"The broker will reply with either a JOB ..., or a HEARTBEAT if no jobs are found after a certain '
        "amount of time. ... A worker that receives a HEARTBEAT should reply immediately with another "
        'HEARTBEAT ... In either case, the broker will reply with another JOB or HEARTBEAT."',
        "MUST",
        "graded MUST; the interval is --heartbeat-ms (bcdb: 10000)",
    ),
    heartbeats=2.5,
)
@with_sockets
def idle_heartbeat(ctx: CaseContext, sockets: Sockets) -> None:
    w = worker(sockets, (ctx.unique("memo"),))
    hb = ctx.heartbeat_s
    ctx.expect(f"HEARTBEAT within {hb * 1000:.0f} ms (+ --timeout), then another after the suite's HEARTBEAT")
    first = w.recv("HEARTBEAT", hb + ctx.options.timeout_s)
    ctx.saw(first.text)
    ctx.check(isinstance(first.message, Heartbeat), f"the idle worker got {first.type}")
    assert isinstance(first.message, Heartbeat)
    w.send(Heartbeat(id=first.message.id))
    second = w.recv("HEARTBEAT (the answer to the suite's)", hb + ctx.options.timeout_s)
    ctx.saw(f"{first.text}; {second.text}")
    ctx.check(isinstance(second.message, (Heartbeat, Job)), f"the answer was {second.type}")


@case(
    "MEMODB-BROKER-4.8",
    "A RESULT with the disconnecting flag true is answered with DISCONNECT",
    clause(
        "5",
        '"If the optional bool is present and true, the worker cannot handle any more jobs and the server '
        'should reply with DISCONNECT."',
        "SHOULD",
    ),
    dialects=("spec",),
)
@with_sockets
def disconnecting_result(ctx: CaseContext, sockets: Sockets) -> None:
    service = ctx.unique("memo")
    w = worker(sockets, (service,))
    c = job(ctx, sockets, service, b"last")
    got = next_job(ctx, w)
    ctx.check(isinstance(got.message, Job), f"got {got.type}")
    assert isinstance(got.message, Job)
    w.send(Result(id=got.message.id, disconnecting=True, payload=b"done"))
    answer = w.recv("DISCONNECT")
    ctx.expect("DISCONNECT to the worker, the RESULT to the client")
    ctx.saw(answer.text)
    ctx.check(isinstance(answer.message, Disconnect), f"the answer was {answer.type}")
    c.recv("RESULT")


@case(
    "MEMODB-BROKER-4.9",
    "A HEARTBEAT with an ID the broker never gave is answered with DISCONNECT",
    clause(
        "4",
        '"If the broker detects that it is out of sync with the worker, it can send a DISCONNECT reply to '
        'any request made by the worker."',
        "MAY",
        "bcdb answers unknown IDs with DISCONNECT",
    ),
)
@with_sockets
def unknown_id(ctx: CaseContext, sockets: Sockets) -> None:
    w = sockets.req("worker (unknown ID)")
    w.send(Heartbeat(id=b"\xfe\xed\xfa\xce"))
    answer = w.quiet(ctx.options.timeout_s)
    ctx.expect("DISCONNECT")
    ctx.saw(answer.text if answer else "nothing")
    if answer is None or not isinstance(answer.message, Disconnect):
        raise ctx.info("the broker did not answer an unknown ID with DISCONNECT (allowed: MAY)")


@case(
    "MEMODB-BROKER-4.10",
    "A worker that ignored its JOB past the timeout is treated as disconnected",
    clause(
        "3",
        '"if a worker has been processing the job for longer than the timeout, the broker assumes that the '
        'worker has disconnected" (introduction)',
        "SHOULD",
        "observed through the late RESULT: DISCONNECT expected",
    ),
)
@with_sockets
def job_timeout(ctx: CaseContext, sockets: Sockets) -> None:
    service = ctx.unique("memo")
    w = worker(sockets, (service,))
    c = sockets.req("client")
    c.send(Job(service=service, timeout_ms=200, payload=b"slow"))
    got = next_job(ctx, w)
    ctx.check(isinstance(got.message, Job), f"got {got.type}")
    assert isinstance(got.message, Job)
    ctx.sleep(0.6)
    w.send(Result(id=got.message.id, payload=b"late"))
    answer = w.quiet(ctx.options.timeout_s)
    ctx.expect("DISCONNECT for the RESULT that came after the JOB's 200 ms timeout")
    ctx.saw(answer.text if answer else "nothing")
    ctx.check(
        answer is not None and isinstance(answer.message, Disconnect), "the late RESULT was not refused"
    )


@case(
    "MEMODB-BROKER-3.2",
    "A JOB for a service no worker offers gets no RESULT",
    clause(
        "3",
        '"If the broker is unable to find a worker for the job, or the worker times out, it will drop the '
        'connection; the client should eventually time out and retry the request."',
        "MAY",
        "recorded: silence is the spec's answer",
    ),
)
@with_sockets
def no_worker(ctx: CaseContext, sockets: Sockets) -> None:
    c = job(ctx, sockets, ctx.unique("memo-nobody"), b"x")
    answer = c.quiet(min(0.5, ctx.options.timeout_s))
    ctx.expect("no RESULT")
    ctx.saw(answer.text if answer else "nothing")
    ctx.check(answer is None or not isinstance(answer.message, Result), "a RESULT came from nowhere")


@case(
    "MEMODB-BROKER-3.3",
    "A job queued before any worker is served when a worker comes",
    clause(
        "3",
        '"If the broker is unable to find a worker for the job ... it will drop the connection"',
        "MAY",
        "recorded: whether the broker waits for a late worker (nfgate) or drops the job (bcdb, 10 s)",
    ),
)
@with_sockets
def late_worker(ctx: CaseContext, sockets: Sockets) -> None:
    service = ctx.unique("memo")
    c = job(ctx, sockets, service, b"early")
    ctx.sleep(0.2)
    w = worker(sockets, (service,))
    got = w.quiet(ctx.options.timeout_s)
    ctx.saw(got.text if got else "nothing")
    if got is None or not isinstance(got.message, Job):
        raise ctx.info("the queued job was not given to the worker that came later")
    w.send(Result(id=got.message.id, payload=b"served"))
    c.recv("RESULT")


@case(
    "MEMODB-BROKER-4.11",
    "A READY whose services are not in CBOR canonical order is accepted",
    clause(
        "4",
        '"A worker starts by sending a READY request to the broker, including the list of services the '
        'worker supports."',
        "SHOULD",
        "the spec sets no order; bcdb drops such a READY (a departure)",
    ),
)
@with_sockets
def any_order(ctx: CaseContext, sockets: Sockets) -> None:
    long_name, short = ctx.unique("memo-longer-name"), ctx.unique("m")
    w = sockets.req("worker")
    # Longer name first: not canonical, so sent raw (the bcdb encoder would refuse it).
    w.send(header("memo01", 0x01, b"", [long_name, short]), note=f"READY [{long_name!r}, {short!r}]")
    c = job(ctx, sockets, short, b"x")
    got = next_job(ctx, w)
    ctx.expect("the READY accepted: a JOB for the second service")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Job), f"got {got.type}")
    assert isinstance(got.message, Job)
    w.send(Result(id=got.message.id, payload=b"ok"))
    c.recv("RESULT")


@case(
    "MEMODB-BROKER-10.1",
    "Worker IDs are 4 bytes",
    clause("10", "bcdb: worker IDs are a uint32 copied as 4 raw bytes", "SHOULD", "bcdb dialect only"),
    dialects=("bcdb",),
)
@with_sockets
def bcdb_ids(ctx: CaseContext, sockets: Sockets) -> None:
    got = round_trip(ctx, sockets)["job"]
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Job) and len(got.message.id) == 4, "the JOB's ID is not 4 bytes")


from nfgate.conformance.roles import memodb_broker_input as _input  # noqa: E402,F401  (registers more cases)
