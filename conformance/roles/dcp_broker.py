"""DCP broker role: the suite plays clients and workers against a DCP broker
(specs/dcp.md), in the spec dialect or DagBox's (4-byte message types).

Case numbers are the spec's headings in document order (``_dcp.SECTIONS``).
"""

from __future__ import annotations

from nfgate.codecs.dcp.messages import Ping, Pong, Reconnect, Registration, Reply, Request
from nfgate.conformance.context import CaseContext, Dealer, NoAnswer, Received, Source, describe
from nfgate.conformance.model import Clause
from nfgate.conformance.registry import Role, Session, register_role
from nfgate.conformance.roles import _dcp
from nfgate.conformance.roles._dcp import SuiteWorker, clause

SKIP_PONG = ("PONG",)
DETECT_CLAUSE = Clause(
    section="(suite) dialect detection", text="Which dialect the broker speaks.", keyword="MAY"
)


def probe(ctx: CaseContext) -> None:
    """The broker is alive when a fresh peer's PING gets any answer (RECONNECT is due)."""
    peer = ctx.dealer("probe", identity=ctx.unique("nfgate-probe").encode())
    peer.send(Ping())
    peer.recv("answer to a PING")


def detect(session: Session) -> str:
    ctx = CaseContext(session=session, clause=DETECT_CLAUSE, budget_s=2 * session.options.timeout_s)
    try:
        for dialect in ("spec", "dagbox"):
            peer = ctx.dealer("probe", identity=ctx.unique("nfgate-detect").encode())
            peer.send(session.wire.codec.encode(Ping(), dialect))
            try:
                return ctx.wire.detect(list(peer.recv("answer to a PING").frames))
            except NoAnswer:
                continue
        return "spec"
    finally:
        ctx.close()


def setup(session: Session) -> None:
    session.observers.append(_dcp.observe)


ROLE = register_role(
    Role(
        protocol="dcp",
        role="broker",
        codec="dcp",
        summary="a DCP broker; the suite connects to --endpoint as clients and workers",
        dialects=("spec", "dagbox"),
        binds=False,
        probe=probe,
        detect=detect,
        setup=setup,
    )
)
case = ROLE.case


def service(ctx: CaseContext) -> bytes:
    return ctx.unique("svc").encode()


def served(
    ctx: CaseContext,
    metadata: tuple[bytes, ...] = (b"m1", b"\x00\xff"),
    data: tuple[bytes, ...] = (b"hello",),
    client: bytes | None = None,
) -> tuple[SuiteWorker, Received, Dealer, Request]:
    """A worker for a fresh service, a client's REQUEST, and the REQUEST as the worker got it."""
    worker = SuiteWorker(ctx, service(ctx)).register()
    client_sock = ctx.dealer("client", identity=ctx.unique("nfgate-dc").encode())
    sent = Request(service=worker.service, client=client, metadata=metadata, data=data)
    client_sock.send(sent)
    got = worker.next("REQUEST at the worker")
    return worker, got, client_sock, sent


# ----------------------------------------------------------------------------- 4 Architecture


@case(
    "DCP-BROKER-4.1",
    "A request for a service with no worker is queued until a worker registers",
    clause(
        "4",
        '"The broker is tasked with maintaining a queue for each service. Requests SHOULD be queued, and served to workers as they become available to accept work."',
        "SHOULD",
    ),
)
def queued(ctx: CaseContext) -> None:
    name = service(ctx)
    client = ctx.dealer("client", identity=ctx.unique("nfgate-dc").encode())
    client.send(Request(service=name, metadata=(b"q1",), data=(b"later",)))
    ctx.sleep(min(0.3, ctx.options.timeout_s / 4))
    worker = SuiteWorker(ctx, name).register()
    ctx.expect("the queued REQUEST reaches the worker that registers")
    got = worker.next("queued REQUEST")
    ctx.saw(got.text)
    ctx.check(
        isinstance(got.message, Request) and got.message.data == (b"later",), f"the worker got {got.type}"
    )


# ----------------------------------------------------------------------------- 6 Connection


@case(
    "DCP-BROKER-6.1",
    "A REGISTRATION is confirmed with the same message",
    clause(
        "6",
        '"Workers MUST send a registration message to register the service they provide. ... If the registration is successful, the broker will confirm it by responding with the same message."',
        "MUST",
        "'will confirm' graded as MUST",
    ),
)
def registration_echo(ctx: CaseContext) -> None:
    name = service(ctx)
    worker = SuiteWorker(ctx, name)
    ctx.expect(f"REGISTRATION for {name!r} back")
    worker.register(beating=False, required=True)
    got = worker.confirmation
    assert got is not None
    ctx.saw(got.text)
    ctx.check(got.message == Registration(service=name), "the confirmation is not the same REGISTRATION")


# ----------------------------------------------------------------------------- 7 Requests & Replies


@case(
    "DCP-BROKER-7.1",
    "A REQUEST is routed to a worker of its service",
    clause(
        "7", '"Service name ... The request SHALL be routed to a worker that provides this service."', "SHALL"
    ),
)
def routed(ctx: CaseContext) -> None:
    worker, got, _, sent = served(ctx)
    ctx.expect(f"REQUEST for {worker.service!r} at the worker")
    ctx.saw(got.text)
    ctx.check(
        isinstance(got.message, Request) and got.message.service == sent.service, f"the worker got {got.type}"
    )


@case(
    "DCP-BROKER-7.2",
    "The broker inserts the client address when the client left it out",
    clause(
        "7",
        '"Client address. This part is optional for clients. The broker MUST insert the address of the client that sent the request here, if and only if this part was missing."',
        "MUST",
    ),
)
def address_inserted(ctx: CaseContext) -> None:
    _, got, _, _ = served(ctx)
    ctx.expect("a non-empty client address in the REQUEST at the worker")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Request) and bool(got.message.client), "no client address was inserted")


@case(
    "DCP-BROKER-7.3",
    "The broker keeps a client address the sender put in",
    clause(
        "7",
        '"The broker MUST insert the address of the client that sent the request here, if and only if this part was missing."',
        "MUST",
    ),
)
def address_kept(ctx: CaseContext) -> None:
    _, got, _, _ = served(ctx, client=b"original-client")
    ctx.expect("client address b'original-client' at the worker")
    ctx.saw(got.text)
    ctx.check(
        isinstance(got.message, Request) and got.message.client == b"original-client",
        "the client address was replaced",
    )


@case(
    "DCP-BROKER-7.4",
    "Metadata parts reach the worker unmodified",
    clause(
        "7",
        '"Metadata parts. Any number of non-empty parts MAY be inserted here by the client. The broker MUST NOT modify these parts when routing the message"',
        "MUST NOT",
    ),
)
def metadata_to_worker(ctx: CaseContext) -> None:
    metadata = (b"m1", b"\x00\xff\x01", b"x" * 300)
    _, got, _, _ = served(ctx, metadata=metadata, data=(b"d1", b"d2"))
    ctx.expect(f"metadata {metadata!r} and data (b'd1', b'd2')")
    ctx.saw(got.text)
    m = got.message
    ctx.check(isinstance(m, Request) and m.metadata == metadata, "the metadata parts were modified")
    ctx.check(isinstance(m, Request) and m.data == (b"d1", b"d2"), "the data parts were modified")


@case(
    "DCP-BROKER-7.5",
    "The worker's REPLY reaches the client with metadata and data unchanged",
    clause(
        "7",
        '"The broker MUST NOT modify these parts when routing the message" (replies: "Reply messages have a very similar format")',
        "MUST NOT",
    ),
)
def reply_to_client(ctx: CaseContext) -> None:
    worker, got, client, sent = served(ctx)
    held = got.message
    ctx.check(isinstance(held, Request), f"the worker got {got.type}")
    assert isinstance(held, Request)
    worker.dealer.send(Reply(client=held.client, metadata=held.metadata, data=(b"result", b"2")))
    ctx.expect(f"REPLY with metadata {sent.metadata!r} and data (b'result', b'2')")
    answer = client.recv("REPLY")
    ctx.saw(answer.text)
    m = answer.message
    ctx.check(isinstance(m, Reply), f"the client got {answer.type}")
    assert isinstance(m, Reply)
    ctx.check(m.metadata == sent.metadata, "the metadata parts were modified")
    ctx.check(m.data == (b"result", b"2"), "the data parts were modified")
    if m.client is not None:
        raise ctx.info(
            f"the reply carries a client address ({m.client!r}); the spec does not say whether it should (DagBox does)"
        )


@case(
    "DCP-BROKER-7.6",
    "Several requests sent without waiting each get their reply",
    clause(
        "7",
        '"Clients MAY send multiple requests without waiting for a reply. The replies will not necessarily arrive in the same order as requests"',
        "MUST",
        "the broker's side of the client's MAY, graded as MUST",
    ),
)
def pipelined(ctx: CaseContext) -> None:
    worker = SuiteWorker(ctx, service(ctx)).register()
    client = ctx.dealer("client", identity=ctx.unique("nfgate-dc").encode())
    tags = [b"r%d" % i for i in range(3)]
    for tag in tags:
        client.send(Request(service=worker.service, metadata=(tag,), data=(b"x",)))
    replies: list[bytes] = []

    def handle(source: Source, got: Received) -> bool:
        m = got.message
        if source is worker.dealer and isinstance(m, Request):
            worker.dealer.send(Reply(client=m.client, metadata=m.metadata, data=(b"done",)))
        elif source is client and isinstance(m, Reply):
            replies.append(m.metadata[0] if m.metadata else b"")
        return len(replies) == len(tags)

    ctx.watch([worker.dealer, client], handle, ctx.wait_s(3 * ctx.options.timeout_s))
    ctx.expect(f"replies with metadata {sorted(tags)}")
    ctx.saw(f"replies with metadata {sorted(replies)}")
    ctx.check(sorted(replies) == sorted(tags), "not every request got its reply")


@case(
    "DCP-BROKER-7.7",
    "A worker gets no second request until it has replied",
    clause(
        "7",
        '"Once a worker has been given a request, the broker SHOULD NOT give more requests to that worker until the it has responded to the broker."',
        "SHOULD NOT",
    ),
)
def one_at_a_time(ctx: CaseContext) -> None:
    worker = SuiteWorker(ctx, service(ctx)).register(beating=False)
    client = ctx.dealer("client", identity=ctx.unique("nfgate-dc").encode())
    for tag in (b"first", b"second"):
        client.send(Request(service=worker.service, metadata=(tag,), data=(b"x",)))
    first = worker.next("first REQUEST")
    more = worker.dealer.collect(min(0.5, ctx.wait_s()), skip=SKIP_PONG)
    ctx.expect("one REQUEST, then nothing until the worker replies")
    ctx.saw(f"{first.text}; then {describe(more)}")
    ctx.check(
        not any(g.type == "REQUEST" for g in more), "a second request was given before the first was answered"
    )
    m = first.message
    assert isinstance(m, Request)
    worker.dealer.send(Reply(client=m.client, metadata=m.metadata, data=(b"ok",)))
    second = worker.next("second REQUEST after the reply")
    ctx.saw(f"{first.text}; then {describe(more)}; after the reply: {second.text}")


@case(
    "DCP-BROKER-7.8",
    "A busy worker's PING asks for more work",
    clause(
        "7",
        '"Once given a request, a worker can do one of the following: ... Respond with a heartbeat to ask for more work"',
        "MAY",
        "recorded: whether the broker then hands out a second request",
    ),
)
def ping_for_more(ctx: CaseContext) -> None:
    worker = SuiteWorker(ctx, service(ctx)).register(beating=False)
    client = ctx.dealer("client", identity=ctx.unique("nfgate-dc").encode())
    for tag in (b"first", b"second"):
        client.send(Request(service=worker.service, metadata=(tag,), data=(b"x",)))
    first = worker.next("first REQUEST")
    worker.dealer.drain()
    worker.dealer.send(Ping())
    got = worker.dealer.collect(min(1.0, ctx.wait_s()))
    types = [g.type for g in got]
    ctx.saw(f"{first.text}; after PING: {describe(got)}")
    ctx.check("PONG" in types, "the PING got no PONG")
    if "REQUEST" in types:
        raise ctx.info("the broker gave a second request after the busy worker's PING")
    raise ctx.info("the broker gave no second request after the busy worker's PING")


@case(
    "DCP-BROKER-7.9",
    "A worker can hand a request on to another service; the reply reaches the original client",
    clause(
        "7",
        '"Once given a request, a worker can ... Complete the work only partially, then respond with a request for another service to complete the rest"',
        "MUST",
        "a description, graded as MUST",
    ),
)
def hand_on(ctx: CaseContext) -> None:
    first, got, client, sent = served(ctx)
    second = SuiteWorker(ctx, service(ctx), label="worker 2").register()
    held = got.message
    ctx.check(isinstance(held, Request), f"the first worker got {got.type}")
    assert isinstance(held, Request)
    first.dealer.send(
        Request(service=second.service, client=held.client, metadata=held.metadata, data=(b"half",))
    )
    onward = second.next("handed-on REQUEST")
    m = onward.message
    ctx.check(isinstance(m, Request) and m.client == held.client, f"the second worker got {onward.text}")
    assert isinstance(m, Request)
    second.dealer.send(Reply(client=m.client, metadata=m.metadata, data=(b"whole",)))
    ctx.expect(f"the original client gets REPLY (metadata {sent.metadata!r}, data b'whole')")
    answer = client.recv("REPLY")
    ctx.saw(answer.text)
    r = answer.message
    ctx.check(
        isinstance(r, Reply) and r.data == (b"whole",) and r.metadata == sent.metadata,
        "the final reply did not reach the client intact",
    )


@case(
    "DCP-BROKER-7.10",
    "A worker can send a request of its own and gets the reply",
    clause(
        "7",
        '"Both clients and workers MAY send requests." "Workers are able to both send requests, and also accept requests and return replies."',
        "MUST",
        "the broker's side, graded as MUST",
    ),
)
def worker_as_client(ctx: CaseContext) -> None:
    asker = SuiteWorker(ctx, service(ctx), label="worker 1").register()
    helper = SuiteWorker(ctx, service(ctx), label="worker 2").register()
    asker.dealer.send(Request(service=helper.service, metadata=(b"own",), data=(b"q",)))
    got = helper.next("REQUEST from the other worker")
    m = got.message
    ctx.check(isinstance(m, Request), f"worker 2 got {got.text}")
    assert isinstance(m, Request)
    helper.dealer.send(Reply(client=m.client, metadata=m.metadata, data=(b"a",)))
    ctx.expect("worker 1 gets REPLY (metadata b'own', data b'a')")
    answer = asker.next("REPLY")
    ctx.saw(answer.text)
    r = answer.message
    ctx.check(
        isinstance(r, Reply) and r.data == (b"a",) and r.metadata == (b"own",),
        "worker 1 did not get its reply",
    )


# ----------------------------------------------------------------------------- 8 Heartbeats


@case(
    "DCP-BROKER-8.1",
    "Every PING gets a PONG",
    clause(
        "8",
        '"Clients as workers MUST sent ping messages. The broker MUST respond to every ping message with a pong message."',
        "MUST",
    ),
)
def ping_pong(ctx: CaseContext) -> None:
    worker = SuiteWorker(ctx, service(ctx)).register(beating=False)
    for _ in range(3):
        worker.dealer.send(Ping())
    got = worker.dealer.collect(min(1.0, ctx.wait_s()))
    pongs = [g for g in got if isinstance(g.message, Pong)]
    ctx.expect("3 PONGs")
    ctx.saw(describe(got))
    ctx.check(len(pongs) == 3, f"{len(pongs)} PONG(s) for 3 PINGs")


@case(
    "DCP-BROKER-8.2",
    "PONG is header-only",
    clause(
        "8",
        '"The heartbeat messages are header-only, they MUST NOT contain any parts other than the header. The ping messages have the type 0x02 and pong messages have the type 0x03."',
        "MUST NOT",
    ),
)
def pong_header_only(ctx: CaseContext) -> None:
    worker = SuiteWorker(ctx, service(ctx)).register(beating=False)
    worker.dealer.send(Ping())
    got = worker.dealer.recv("PONG")
    ctx.expect("3 frames: '', DGBX\\x01, type 0x03")
    ctx.saw(f"{len(got.frames)} frames: {[f.hex() for f in got.frames]}")
    ctx.check(isinstance(got.message, Pong) and len(got.frames) == 3, "not a header-only PONG")


@case(
    "DCP-BROKER-8.3",
    "A PING from a peer that never registered gets RECONNECT",
    clause(
        "8",
        '"If the broker receives a heartbeat message from a worker that is not registered for any service, the broker MUST respond with a reconnect message. A reconnect message is a header-only message with the type 0x06."',
        "MUST",
    ),
)
def reconnect(ctx: CaseContext) -> None:
    peer = ctx.dealer("worker", identity=ctx.unique("nfgate-dw").encode())
    peer.send(Ping())
    got = peer.recv("RECONNECT")
    ctx.expect("RECONNECT (header-only, type 0x06)")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Reconnect), f"the broker answered {got.type}")


@case(
    "DCP-BROKER-8.4",
    "After RECONNECT the worker registers again and gets requests",
    clause(
        "8",
        '"A worker that receives a reconnect message MUST send a registration message to the broker."',
        "MUST",
        "the broker's half: the new registration is accepted",
    ),
)
def register_after_reconnect(ctx: CaseContext) -> None:
    name = service(ctx)
    worker = SuiteWorker(ctx, name)
    worker.dealer.send(Ping())
    first = worker.dealer.recv("RECONNECT")
    worker.register()
    client = ctx.dealer("client", identity=ctx.unique("nfgate-dc").encode())
    client.send(Request(service=name, metadata=(b"k",), data=(b"x",)))
    got = worker.next("REQUEST")
    ctx.expect("RECONNECT, REGISTRATION confirmed, then the REQUEST")
    ctx.saw(f"{first.text}; {worker.confirmation.text if worker.confirmation else ''}; {got.text}")
    ctx.check(isinstance(got.message, Request), f"the worker got {got.type}")


@case(
    "DCP-BROKER-8.5",
    "What the broker does with a worker that stops sending PING",
    clause(
        "8",
        '"Workers MUST periodically send heartbeat messages to the broker at an implementation-defined interval, agreed upon with the broker."',
        "MAY",
        "the spec does not say what the broker does with a silent worker; recorded",
    ),
    heartbeats=10,
)
def silent_worker(ctx: CaseContext) -> None:
    worker = SuiteWorker(ctx, service(ctx)).register(beating=False)
    worker.dealer.collect((ctx.options.liveness + 1) * ctx.heartbeat_s)
    worker.dealer.send(Ping())
    got = worker.dealer.recv("answer to a late PING")
    ctx.saw(got.text)
    if isinstance(got.message, Reconnect):
        raise ctx.info(
            f"after {ctx.options.liveness + 1} silent intervals the worker was dropped (RECONNECT)"
        )
    raise ctx.info(
        f"after {ctx.options.liveness + 1} silent intervals the worker was still registered ({got.type})"
    )
