"""NFP broker role: the suite plays clients and workers against an NFP broker
(specs/nfp.md), in the spec dialect or NorFab 0.25's (docs/protocols/norfab-wire.md).

Case numbers follow the sections listed in ``_nfp.SECTIONS``. Workers played by the
suite are named by their ZeroMQ identity (the spec names no mechanism; NorFab and nfgate
use the identity), and every service and name is unique to the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from nfgate.codecs.nfp.messages import (
    BROKER,
    CLIENT,
    Delete,
    Get,
    Mmi,
    Open,
    Post,
    Response,
)
from nfgate.conformance.context import CaseContext, Dealer, NoAnswer, Received, Source, describe
from nfgate.conformance.model import Clause
from nfgate.conformance.registry import Role, Session, register_role
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

KA = ("KEEPALIVE",)
PROBE_CLAUSE = Clause(
    section="(suite) dialect detection", text="Which dialect the broker speaks.", keyword="MAY"
)


def probe(ctx: CaseContext) -> None:
    """The broker is alive when a fresh client's GET for an unknown job gets any answer."""
    client = ctx.dealer("client", identity=ctx.unique("nfgate-probe").encode())
    client.send(job(ctx, Get, ctx.unique("probe"), "any", new_uuid(), b"{}"))
    client.recv("answer to a GET", skip=KA)


def detect(session: Session) -> str:
    """spec when the broker answers a one-byte OPEN in the spec form, else norfab when it
    answers a NorFab-form GET, else spec."""
    ctx = CaseContext(session=session, clause=PROBE_CLAUSE, budget_s=2 * session.options.timeout_s)
    try:
        client = ctx.dealer("client", identity=ctx.unique("nfgate-detect").encode())
        client.send(session.wire.codec.encode(Open(header=CLIENT), "spec"))
        try:
            got = client.recv("OPEN", skip=KA)
            return ctx.wire.detect(list(got.frames))
        except NoAnswer:
            pass
        client.send(
            session.wire.codec.encode(
                Get(header=CLIENT, service="x", target="any", uuid=new_uuid(), body=(b"{}",)), "norfab"
            )
        )
        try:
            client.recv("GET answer", skip=KA)
            return "norfab"
        except NoAnswer:
            return "spec"
    finally:
        ctx.close()


def setup(session: Session) -> None:
    session.observers.append(_nfp.observe)


ROLE = register_role(
    Role(
        protocol="nfp",
        role="broker",
        codec="nfp",
        summary="an NFP broker; the suite connects to --endpoint as clients and workers",
        dialects=("spec", "norfab"),
        binds=False,
        probe=probe,
        detect=detect,
        setup=setup,
    )
)
case = ROLE.case


# ----------------------------------------------------------------------------- helpers


def result_body(ctx: CaseContext, worker: SuiteWorker, token: str) -> bytes:
    """What the suite's worker returns: the token, wrapped as NorFab's {name: Result}
    in the NorFab dialect (its brokers and clients expect that shape)."""
    if norfab(ctx):
        result = {
            "result": token,
            "failed": False,
            "errors": [],
            "task": f"{worker.name}:list_tasks",
            "messages": [],
            "juuid": None,
            "resources": [],
            "status": "completed",
        }
        return json.dumps({worker.name: result}, separators=(",", ":")).encode()
    return token.encode()


def job_reaches(ctx: CaseContext, worker: SuiteWorker, what: str = "POST") -> Received:
    """The next job command the worker gets; raises NoAnswer."""
    return worker.dealer.recv(what, skip=KA)


def replies_for(
    ctx: CaseContext,
    client: Dealer,
    uuid: str,
    until: Callable[[Response], bool],
    workers: tuple[SuiteWorker, ...] = (),
    on_job: Callable[[SuiteWorker, Received], None] | None = None,
) -> list[Received]:
    """RESPONSEs the client gets for ``uuid`` until one satisfies ``until``; jobs reaching
    ``workers`` meanwhile go to ``on_job``. Raises NoAnswer when none satisfies it."""
    got: list[Received] = []
    by_sock = {id(w.dealer): w for w in workers}

    def handle(source: Source, message: Received) -> bool:
        if source is client:
            if message.type == "KEEPALIVE":
                return False
            got.append(message)
            m = message.message
            return isinstance(m, Response) and m.uuid == uuid and until(m)
        worker = by_sock.get(id(source))
        if worker is not None and on_job is not None and message.type in ("POST", "GET", "DELETE"):
            on_job(worker, message)
        return False

    sources: list[Source] = [client, *(w.dealer for w in workers)]
    if not ctx.watch(sources, handle, ctx.wait_s()):
        ctx.saw(describe(got))
        raise NoAnswer("expected RESPONSE on the client socket", ctx.options.timeout_s)
    return got


def dispatched(
    ctx: CaseContext, service: str, target: str = "any", workers: int = 1
) -> tuple[Dealer, list[SuiteWorker], str, str]:
    """Workers registered for a fresh service and a client's POST: (client, workers, uuid, token)."""
    pool = [SuiteWorker(ctx, service).register() for _ in range(workers)]
    settle(ctx)
    client = open_client(ctx)
    uuid, token = new_uuid(), ctx.unique("job")
    body = JOB_BODY if norfab(ctx) else token.encode()
    client.send(job(ctx, Post, service, target, uuid, body))
    return client, pool, uuid, token


def gather(ctx: CaseContext, workers: list[SuiteWorker], window_s: float, enough: int) -> dict[str, Received]:
    """The first job command each worker gets within the window; stops early once
    ``enough`` workers have one and a short grace period has passed."""
    got: dict[str, Received] = {}
    by_sock = {id(w.dealer): w for w in workers}

    def handle(source: Source, message: Received) -> bool:
        worker = by_sock.get(id(source))
        if worker is not None and message.type in ("POST", "GET", "DELETE") and worker.name not in got:
            got[worker.name] = message
        return len(got) >= enough and enough < len(workers)

    ctx.watch([w.dealer for w in workers], handle, window_s)
    if len(got) >= enough and enough < len(workers):
        # Anything else that was sent at the same time arrives within a moment.
        ctx.watch([w.dealer for w in workers], handle, min(0.3, ctx.remaining_s()))
    return got


# ----------------------------------------------------------------------------- 5 NFP/Client


@case(
    "NFP-BROKER-5.1",
    "A client's OPEN is answered with OPEN",
    clause(
        "5",
        'C: OPEN / B: OPEN. "Broker sends OPEN message back to client or worker to confirm the connection."',
        "MUST",
        "the dialog grammar, graded as MUST",
    ),
)
def client_open(ctx: CaseContext) -> None:
    open_is_answered(ctx, "client", CLIENT)


def open_is_answered(ctx: CaseContext, role: str, header: bytes) -> None:
    """A fresh ``role`` peer sends OPEN with ``header``; the broker must answer OPEN."""
    peer = ctx.dealer(role, identity=ctx.unique(f"nfgate-{role[0]}").encode())
    ctx.expect("OPEN with header NFPB01")
    peer.send(Open(header=header))
    got = peer.recv("OPEN", skip=KA)
    ctx.saw(got.text)
    ctx.check(
        isinstance(got.message, Open) and got.message.header == BROKER,
        "the broker did not answer OPEN with OPEN",
    )


@case(
    "NFP-BROKER-5.2",
    "A POST is answered with RESPONSE 202 (accepted)",
    clause(
        "5",
        'C: POST / B: RESPONSE. "202 - ACCEPTED. The NORFAB Broker accepted POST request to dispatch the job."',
        "MUST",
        "the dialog grammar, graded as MUST",
    ),
)
def post_accepted(ctx: CaseContext) -> None:
    client, _, uuid, _ = dispatched(ctx, ctx.unique("svc"))
    ctx.expect(f"RESPONSE for uuid {uuid} with status 202")
    got = client.recv("RESPONSE", skip=KA)
    ctx.saw(got.text)
    m = got.message
    ctx.check(isinstance(m, Response), "the answer is not a RESPONSE")
    assert isinstance(m, Response)
    ctx.check(m.uuid == uuid, f"the RESPONSE names uuid {m.uuid!r}, not the POST's")
    ctx.check(m.status == 202, f"status {m.status}, not 202")


@case(
    "NFP-BROKER-5.3",
    "A POST is relayed to a worker of the service with its body unchanged",
    clause(
        "5",
        '"Broker relays POST message to individual workers to publish job request."',
        "MUST",
        "a description of the dialog, graded as MUST",
    ),
)
def post_relayed(ctx: CaseContext) -> None:
    service = ctx.unique("svc")
    _, (worker,), _, token = dispatched(ctx, service)
    body = JOB_BODY if norfab(ctx) else token.encode()
    ctx.expect(f"POST at the worker with body {body!r}" + ("" if norfab(ctx) else f", service {service!r}"))
    got = job_reaches(ctx, worker)
    ctx.saw(got.text)
    m = got.message
    ctx.check(isinstance(m, Post), f"the worker got {got.type}, not POST")
    assert isinstance(m, Post)
    ctx.check(m.body == (body,), "the POST body was changed")
    if m.routed:
        raise ctx.info(
            "relayed in the routed layout (client address + empty frame instead of service and "
            "target): NorFab's form, and what 'POST and RESPONSE Processing' describes; the POST "
            "frame table lists service and target"
        )
    ctx.check(m.service == service, f"the relayed POST names service {m.service!r}")


@case(
    "NFP-BROKER-5.4",
    "A worker's RESPONSE is relayed to the client",
    clause(
        "5",
        '"Worker sends RESPONSE message to broker with requests status or job results. Broker relays RESPONSE message to client."',
        "MUST",
        "a description of the dialog, graded as MUST",
    ),
)
def response_relayed(ctx: CaseContext) -> None:
    client, (worker,), uuid, token = dispatched(ctx, ctx.unique("svc"))
    held = job_reaches(ctx, worker)
    ctx.check(held.message is not None and held.type == "POST", f"the worker got {held.text}")
    assert held.message is not None
    worker.answer(held.message, 200, result_body(ctx, worker, token))
    ctx.expect(f"RESPONSE 200 for uuid {uuid} carrying {token!r}")
    got = replies_for(ctx, client, uuid, lambda m: m.status >= 200 and m.status not in (201, 202))
    m = got[-1].message
    assert isinstance(m, Response)
    ctx.saw(got[-1].text)
    ctx.check(m.status == 200, f"status {m.status}, not the worker's 200")
    ctx.check(token.encode() in b"".join(m.body), "the result body does not carry the worker's result")


@case(
    "NFP-BROKER-5.5",
    "A GET for a finished job returns its result",
    clause(
        "5",
        'C: GET / B: RESPONSE. "Client sends GET message to broker to retrieve job results." "200 - OK."',
        "MUST",
        "the dialog grammar, graded as MUST",
    ),
)
def get_result(ctx: CaseContext) -> None:
    service = ctx.unique("svc")
    client, (worker,), uuid, token = dispatched(ctx, service)
    held = job_reaches(ctx, worker)
    ctx.check(held.message is not None, f"the worker got {held.type}, not the POST")
    worker.answer(held.message, 200, result_body(ctx, worker, token))  # type: ignore[arg-type]
    replies_for(ctx, client, uuid, lambda m: m.status == 200)

    def answer_get(w: SuiteWorker, got: Received) -> None:
        if got.message is not None and got.type == "GET":
            w.answer(got.message, 200, result_body(ctx, w, token))

    client.send(job(ctx, Get, service, worker.name if norfab(ctx) else "any", uuid, b"{}"))
    ctx.expect(f"RESPONSE 200 for uuid {uuid} carrying {token!r}")
    got = replies_for(ctx, client, uuid, lambda m: m.status not in (201, 202), (worker,), answer_get)
    m = got[-1].message
    assert isinstance(m, Response)
    ctx.saw(describe(got))
    ctx.check(m.status == 200, f"status {m.status}, not 200")
    ctx.check(token.encode() in b"".join(m.body), "the GET answer does not carry the result")
    if any(isinstance(g.message, Response) and g.message.status == 202 for g in got):
        raise ctx.info("a 202 came before the result: NorFab's form (the spec defines 202 for POST only)")


@case(
    "NFP-BROKER-5.6",
    "A GET for an unknown job uuid gets 400",
    clause(
        "5",
        'C: GET / B: RESPONSE, with "400 - UNKNOWN. The client is using an invalid or unknown UUID and SHOULD NOT retry." (Status Frames)',
        "MUST",
        "the status meaning as defined, graded as MUST",
    ),
)
def get_unknown(ctx: CaseContext) -> None:
    # For a service with a worker: a 400 for a service without one could mean "no worker"
    # (NorFab's 400), not "unknown uuid".
    service = ctx.unique("svc")
    SuiteWorker(ctx, service).register()
    settle(ctx)
    client = open_client(ctx)
    uuid = new_uuid()
    client.send(job(ctx, Get, service, "any", uuid, b"{}"))
    ctx.expect(f"RESPONSE 400 for uuid {uuid}, never posted, of a service with a registered worker")
    got = client.recv("RESPONSE", skip=KA)
    ctx.saw(got.text)
    m = got.message
    ctx.check(isinstance(m, Response), "the answer is not a well-formed RESPONSE")
    assert isinstance(m, Response)
    ctx.check(m.status == 400, f"status {m.status}, not 400")
    ctx.check(m.uuid == uuid, f"the 400 is for uuid {m.uuid[:40]!r}, not the one asked for")


@case(
    "NFP-BROKER-5.7",
    "A POST for a service with no worker is queued until a worker registers",
    clause(
        "5",
        '"The broker SHOULD queue client requests for which service no workers has been registered and SHOULD expire these requests after a reasonable and configurable time"',
        "SHOULD",
    ),
)
def queued(ctx: CaseContext) -> None:
    service = ctx.unique("later")
    client = open_client(ctx)
    uuid = new_uuid()
    client.send(job(ctx, Post, service, "any", uuid, JOB_BODY))
    first = client.recv("RESPONSE", skip=KA)
    ctx.saw(first.text)
    m = first.message
    if isinstance(m, Response) and m.status >= 400:
        ctx.expect("202 (queued), then the POST dispatched when a worker registers")
        raise ctx.violated(f"the POST was refused at once with status {m.status}")
    worker = SuiteWorker(ctx, service).register()
    ctx.expect("the queued POST reaches the worker that registers for the service")
    got = job_reaches(ctx, worker, "queued POST")
    ctx.saw(f"first answer: {first.text}; worker got: {got.text}")
    ctx.check(got.type == "POST", f"the worker got {got.type}")


def _targeted(
    ctx: CaseContext,
    count: int,
    target_of: Callable[[list[SuiteWorker]], str],
    want: Callable[[list[SuiteWorker]], set[str] | int],
) -> None:
    service = ctx.unique("svc")
    workers = [SuiteWorker(ctx, service).register() for _ in range(count)]
    settle(ctx)
    client = open_client(ctx)
    target = target_of(workers)
    client.send(job(ctx, Post, service, target, new_uuid(), JOB_BODY))
    wanted = want(workers)
    enough = wanted if isinstance(wanted, int) else len(wanted)
    got = gather(ctx, workers, ctx.wait_s(), enough)
    answers = client.collect(0.05, skip=KA)
    ctx.expect(
        f"target {target!r}: the POST reaches "
        + (f"exactly {wanted} worker(s)" if isinstance(wanted, int) else ", ".join(sorted(wanted)))
    )
    ctx.saw(f"reached: {', '.join(sorted(got)) or 'no worker'}; client got: {describe(answers)}")
    ok = len(got) == wanted if isinstance(wanted, int) else set(got) == wanted
    ctx.check(ok, "the POST did not reach the targeted workers")


TARGET_CLAUSE = '"The broker SHOULD serve clients on a fair basis and SHOULD deliver requests to workers on the basis of targeting specified by client - any worker, all workers or unicast worker identified by name." Frame 4: Target - `all` (default), `any` or comma separated `worker names`'


@case(
    "NFP-BROKER-5.8", "Target 'all' reaches every worker of the service", clause("5", TARGET_CLAUSE, "SHOULD")
)
def target_all(ctx: CaseContext) -> None:
    _targeted(ctx, 2, lambda ws: "all", lambda ws: {w.name for w in ws})


@case("NFP-BROKER-5.9", "Target 'any' reaches exactly one worker", clause("5", TARGET_CLAUSE, "SHOULD"))
def target_any(ctx: CaseContext) -> None:
    _targeted(ctx, 2, lambda ws: "any", lambda ws: 1)


@case(
    "NFP-BROKER-5.10",
    "A worker name as target reaches that worker only",
    clause(
        "5", TARGET_CLAUSE, "SHOULD", "workers are named by their ZeroMQ identity, as NorFab and nfgate do"
    ),
)
def target_named(ctx: CaseContext) -> None:
    _targeted(ctx, 2, lambda ws: ws[1].name, lambda ws: {ws[1].name})


@case(
    "NFP-BROKER-5.11",
    "A comma-separated list of names reaches those workers only",
    clause("5", TARGET_CLAUSE, "SHOULD"),
)
def target_list(ctx: CaseContext) -> None:
    _targeted(ctx, 3, lambda ws: f"{ws[0].name},{ws[2].name}", lambda ws: {ws[0].name, ws[2].name})


@case(
    "NFP-BROKER-5.12",
    "A DELETE for a running job is relayed to its worker",
    clause(
        "5",
        '"Client sends DELETE message to broker to distribute job delete requests to workers. Broker relays DELETE message to individual workers to cancel the job."',
        "MUST",
        "a description of the dialog, graded as MUST",
    ),
)
def delete_relayed(ctx: CaseContext) -> None:
    service = ctx.unique("svc")
    client, (worker,), uuid, _ = dispatched(ctx, service)
    held = job_reaches(ctx, worker)
    ctx.check(held.type == "POST", f"the worker got {held.text}")
    client.send(job(ctx, Delete, service, "any", uuid, b"{}"))
    ctx.expect("DELETE for the job at its worker")
    got = job_reaches(ctx, worker, "DELETE")
    ctx.saw(got.text)
    ctx.check(got.type == "DELETE", f"the worker got {got.type}")
    ctx.check(
        getattr(got.message, "uuid", None) == getattr(held.message, "uuid", ""),
        "the DELETE names another job",
    )


# ----------------------------------------------------------------------------- 10 BMMI


@case(
    "NFP-BROKER-10.1",
    "The broker answers show_workers on mmi.service.broker",
    clause(
        "10",
        '"Broker SHOULD implement Management interface as a service endpoint for clients to interact with. Broker should use `mmi.service.broker` service endpoint" - show_workers',
        "SHOULD",
    ),
)
def mmi_show_workers(ctx: CaseContext) -> None:
    client = open_client(ctx)
    uuid = new_uuid()
    body = b'{"task":"show_workers","kwargs":{},"args":[]}'
    if norfab(ctx):
        client.send(Mmi(header=CLIENT, service="mmi.service.broker", target="all", uuid=uuid, body=(body,)))
    else:
        client.send(job(ctx, Post, "mmi.service.broker", "any", uuid, body))
    ctx.expect("a 200 answer from mmi.service.broker")
    got: list[Received] = []

    def handle(_: Source, message: Received) -> bool:
        got.append(message)
        return getattr(message.message, "status", None) == 200

    ok = ctx.watch([client], handle, ctx.wait_s())
    ctx.saw(describe(got))
    ctx.check(ok, "no 200 answer from mmi.service.broker")
