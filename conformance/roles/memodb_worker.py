"""MemoDB worker role: the suite is the broker. It binds a rep0 socket at ``--endpoint``;
the worker under test dials it and sends READY, and is then given JOBs, HEARTBEATs,
DISCONNECT and invalid replies (specs/memodb.md, "Worker").

A worker only ever speaks when answered (it long-polls), so the suite keeps the one
request it has not answered yet (``state["held"]``) and each case answers it.
"""

from __future__ import annotations

import itertools

import attrs
import pynng

from nfgate.codecs._base import Message
from nfgate.codecs.memodb import Disconnect, Heartbeat, Job, Ready, Result
from nfgate.codecs.memodb.codec import canonical_order_key
from nfgate.conformance.context import CaseContext, NoAnswer, Received
from nfgate.conformance.link import await_hello
from nfgate.conformance.model import Clause
from nfgate.conformance.registry import Role, Session, register_role
from nfgate.conformance.roles import _memodb
from nfgate.conformance.roles._memodb import NngPeer, clause
from nfgate.conformance.tls import secure_nng
from nfgate.errors import TransportError

SETUP_CLAUSE = Clause(
    section="(suite) waiting for the worker",
    text="The worker under test connects and sends READY.",
    keyword="MAY",
)
_IDS = itertools.count(0x6E660001)  # the suite's worker IDs: 4 bytes, as bcdb's


def peer(ctx: CaseContext) -> NngPeer:
    return NngPeer(ctx, ctx.state["rep"], "broker")


def take(ctx: CaseContext) -> Received:
    """The worker's request to answer now: the newest that arrived, else the one held,
    else the next; a READY gets a fresh worker ID. Raises NoAnswer."""
    rep = peer(ctx)
    fresh: list[Received] = []
    for _ in range(1000):
        got = rep.read()
        if got is None:
            break
        fresh.append(got)
    found: Received | None = fresh[-1] if fresh else ctx.state.get("held")
    held = found or rep.recv("request from the worker", ctx.options.timeout_s + 3 * ctx.heartbeat_s)
    ctx.state["held"] = held
    if isinstance(held.message, Ready):
        ctx.state["services"] = held.message.services
        if ctx.state.get("ready_of") is not held:
            ctx.state["ready_of"] = held
            ctx.state["id"] = next(_IDS).to_bytes(4, "big")
    return held


def answer(ctx: CaseContext, reply: Message | bytes, what: str, note: str = "") -> Received:
    """Answer the held request with ``reply`` and return the worker's next request
    (held in turn); raises NoAnswer.

    A worker that heard nothing for a few intervals starts again with READY, and a
    req0 socket then drops the answer to its abandoned request. When that READY is
    what comes back (and ``reply`` was not a DISCONNECT, which asks for one), the
    suite was the slow side: the reply is sent once more, addressed to the new ID,
    so the case grades the worker and not the suite's load."""
    got = _exchange(ctx, reply, what, note)
    if isinstance(got.message, Ready) and not isinstance(reply, Disconnect):
        if isinstance(reply, (Job, Heartbeat)):
            reply = attrs.evolve(reply, id=current_id(ctx))
        got = _exchange(ctx, reply, what, note)
    return got


def _exchange(ctx: CaseContext, reply: Message | bytes, what: str, note: str) -> Received:
    take(ctx)
    rep = peer(ctx)
    ctx.state["held"] = None
    rep.send(reply, note)
    got = rep.recv(what)
    ctx.state["held"] = got
    if isinstance(got.message, Ready):
        take(ctx)
    return got


def worker_id(ctx: CaseContext) -> bytes:
    take(ctx)
    found: bytes = ctx.state["id"]
    return found


def current_id(ctx: CaseContext) -> bytes:
    """The ID the suite gave the worker at its latest READY (what an answer carried)."""
    found: bytes = ctx.state["id"]
    return found


def service(ctx: CaseContext) -> str:
    take(ctx)
    names: tuple[str, ...] = ctx.state.get("services", ())
    if not names:
        raise ctx.skipped("the worker's READY listed no service")
    return names[0]


def setup(session: Session) -> None:
    session.observers.append(_memodb.observe)
    sock = pynng.Rep0()
    url = session.options.endpoint
    try:
        secure_nng(sock, session.options.tls)
        sock.listen(url)
    except pynng.NNGException as exc:
        sock.close()
        raise TransportError(f"cannot bind {url}: {exc}") from None
    session.state["rep"] = sock
    scheme = url.partition("://")[0]
    if scheme in ("tcp", "tls+tcp") and url.endswith(":0") and sock.listeners:
        url = f"{scheme}://{sock.listeners[0].local_address}"  # port 0: say which port was picked
    session.announce(f"listening on {url}: start the worker under test there")
    await_hello(session, _hello, SETUP_CLAUSE)


def _hello(ctx: CaseContext, window_s: float) -> list[Received]:
    ready = peer(ctx).recv("READY from a worker", window_s)
    ctx.state["held"] = ready
    take(ctx)
    return [ready]


def teardown(session: Session) -> None:
    sock = session.state.get("rep")
    if sock is not None:
        sock.close()


def probe(ctx: CaseContext) -> None:
    """Alive when a HEARTBEAT to its request is answered (or it sends anything new)."""
    if not ctx.state.get("hello"):
        raise NoAnswer("worker connection", 0.0)
    answer(ctx, Heartbeat(id=worker_id(ctx)), "answer to HEARTBEAT")


ROLE = register_role(
    Role(
        protocol="memodb",
        role="worker",
        codec="memodb",
        summary="a MemoDB worker (NNG req0); the suite binds --endpoint as its broker and the worker dials it",
        dialects=("spec", "bcdb"),
        binds=True,
        probe=probe,
        setup=setup,
        teardown=teardown,
    )
)
case = ROLE.case


def hello(ctx: CaseContext) -> Received:
    found: list[Received] = ctx.state.get("hello", [])
    if not found:
        raise NoAnswer("READY from a worker", ctx.state.get("hello_wait", 0.0))
    ctx.frames.extend(ctx.state.get("hello_frames", []))
    return found[0]


@case(
    "MEMODB-WORKER-4.1",
    "The worker starts with READY listing its services",
    clause(
        "4",
        '"A worker starts by sending a READY request to the broker, including the list of services the worker '
        'supports."',
        "MUST",
        "graded MUST: the broker cannot route to a worker without it",
    ),
)
def starts_ready(ctx: CaseContext) -> None:
    got = hello(ctx)
    ctx.expect("READY with at least one service name")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Ready), f"the first message was {got.type}")
    assert isinstance(got.message, Ready)
    ctx.check(bool(got.message.services), "the READY lists no service")


@case(
    "MEMODB-WORKER-5.1",
    "READY carries an empty ID",
    clause(
        "5",
        '"An ID bytestring. This should be an empty bytestring for all messages to and from clients, and for '
        'READY messages."',
        "SHOULD",
    ),
)
def ready_empty_id(ctx: CaseContext) -> None:
    got = hello(ctx)
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Ready) and got.message.id == b"", "the READY's ID is not empty")


@case(
    "MEMODB-WORKER-4.2",
    "The RESULT for a JOB carries the worker's ID",
    clause(
        "4",
        '"Aside from the READY message, which is sent before the worker has been assigned an ID, every message '
        'to or from the worker should include the ID."',
        "SHOULD",
    ),
)
def result_has_id(ctx: CaseContext) -> None:
    got = answer(
        ctx, Job(id=worker_id(ctx), service=service(ctx), timeout_ms=30_000, payload=b"nfgate"), "RESULT"
    )
    ident = current_id(ctx)
    ctx.expect(f"RESULT with ID {ident.hex()}")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Result), f"the answer was {got.type}")
    assert isinstance(got.message, Result)
    ctx.check(got.message.id == ident, f"the RESULT's ID is {got.message.id.hex() or 'empty'}")


@case(
    "MEMODB-WORKER-4.3",
    "A JOB is answered with a RESULT, and so is the next one",
    clause(
        "4",
        '"A worker that receives a JOB should process it and then send a RESULT request to the broker."',
        "SHOULD",
    ),
)
def jobs_answered(ctx: CaseContext) -> None:
    seen = []
    for payload in (b"one", b"two"):
        got = answer(
            ctx, Job(id=worker_id(ctx), service=service(ctx), timeout_ms=30_000, payload=payload), "RESULT"
        )
        seen.append(got)
    ctx.expect("RESULT, RESULT")
    ctx.saw(_memodb.describe(seen))
    ctx.check(all(isinstance(g.message, Result) for g in seen), "a JOB was not answered with RESULT")


@case(
    "MEMODB-WORKER-4.4",
    "DISCONNECT makes the worker start again with READY",
    clause(
        "4",
        '"When this happens, the worker should disconnect, reset its state, and connect again with a new READY '
        'request."',
        "SHOULD",
    ),
)
def disconnect_ready(ctx: CaseContext) -> None:
    got = answer(ctx, Disconnect(id=worker_id(ctx)), "READY after DISCONNECT")
    ctx.expect("READY")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Ready), f"the worker sent {got.type}")


@case(
    "MEMODB-WORKER-4.5",
    "HEARTBEAT is answered at once with HEARTBEAT carrying the ID",
    clause(
        "4",
        '"A worker that receives a HEARTBEAT should reply immediately with another HEARTBEAT to indicate that '
        "it's still connected.\"",
        "SHOULD",
    ),
)
def heartbeat_answered(ctx: CaseContext) -> None:
    got = answer(ctx, Heartbeat(id=worker_id(ctx)), "HEARTBEAT")
    ident = current_id(ctx)
    ctx.expect(f"HEARTBEAT with ID {ident.hex()} within --timeout")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Heartbeat), f"the answer was {got.type}")
    assert isinstance(got.message, Heartbeat)
    ctx.check(got.message.id == ident, f"the HEARTBEAT's ID is {got.message.id.hex() or 'empty'}")


@case(
    "MEMODB-WORKER-4.6",
    "An idle worker keeps answering HEARTBEATs, interval after interval",
    clause(
        "4",
        '"The HEARTBEAT allows both the broker and the worker to verify that they are still connected to each '
        'other."',
        "SHOULD",
        "the interval is --heartbeat-ms",
    ),
    heartbeats=3.5,
)
def heartbeats_over_time(ctx: CaseContext) -> None:
    seen = []
    for _ in range(3):
        ctx.sleep(ctx.heartbeat_s)
        seen.append(answer(ctx, Heartbeat(id=worker_id(ctx)), "HEARTBEAT"))
    ctx.saw(_memodb.describe(seen))
    ctx.check(
        all(isinstance(g.message, Heartbeat) for g in seen), "a HEARTBEAT was not answered with HEARTBEAT"
    )


@case(
    "MEMODB-WORKER-10.1",
    "READY lists its services in CBOR canonical order",
    clause(
        "10",
        "bcdb's memodb-broker drops a READY whose service names are not in CBOR canonical order "
        "(shorter first, then bytewise, no repeats)",
        "SHOULD",
        "bcdb dialect only: the spec sets no order",
    ),
    dialects=("bcdb",),
)
def canonical_ready(ctx: CaseContext) -> None:
    got = hello(ctx)
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Ready), f"the first message was {got.type}")
    assert isinstance(got.message, Ready)
    keys = [canonical_order_key(name) for name in got.message.services]
    ctx.check(keys == sorted(set(keys)), "the service list is not in canonical order (bcdb drops this READY)")


from nfgate.conformance.roles import memodb_worker_input as _input  # noqa: E402,F401  (registers more cases)
