"""DCP worker role: the suite is the broker. It binds ``--endpoint``; the worker under
test connects and registers, and is then sent requests, RECONNECT and invalid input
(specs/dcp.md; DagBox's 4-byte message types too). Every PING gets its PONG."""

from __future__ import annotations

from collections.abc import Callable

from nfgate.codecs._base import Message
from nfgate.codecs.dcp.codec import PROTOCOL
from nfgate.codecs.dcp.messages import Ping, Pong, Reconnect, Registration, Reply, Request
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
from nfgate.conformance.roles import _dcp
from nfgate.conformance.roles._dcp import clause

CLIENT = b"nfgate-conformance-client"
PING_TYPES = (_dcp.type_part("spec", 0x02), _dcp.type_part("dagbox", 0x02))


def _pong(got: Received) -> Message | None:
    # "The broker MUST respond to every ping message with a pong message."
    return Pong() if isinstance(got.message, Ping) else None


def await_registration(ctx: CaseContext, window_s: float) -> list[Received]:
    """Messages until a REGISTRATION, which is confirmed by echoing it; raises NoAnswer."""
    lk = link(ctx)
    seen: list[Received] = []

    def handle(_: object, got: Received) -> bool:
        seen.append(got)
        if isinstance(got.message, Registration):
            lk.worker, lk.service = got.identity, got.message.service
            lk.try_send(ctx, list(got.frames), got.identity, note=f"{got.text}  (echoed to confirm)")
            return True
        return False

    if not ctx.watch([lk], handle, window_s):
        raise NoAnswer("REGISTRATION from a worker", window_s)
    return seen


def setup(session: Session) -> None:
    session.observers.append(_dcp.observe)
    open_link(session, RouterLink(session, lambda _: None, _pong), await_registration)


ROLE = register_role(
    Role(
        protocol="dcp",
        role="worker",
        codec="dcp",
        summary="a DCP worker; the suite binds --endpoint as its broker and the worker connects",
        dialects=("spec", "dagbox"),
        binds=True,
        probe=alive_probe("message (a PING at least: it PINGs every interval)"),
        detect=detect_from_hello,
        setup=setup,
        teardown=close_link,
    )
)
case = ROLE.case


def registered(ctx: CaseContext) -> RouterLink:
    """The link, once a worker has registered; raises NoAnswer otherwise."""
    return registered_link(ctx, "REGISTRATION")


def request(
    ctx: CaseContext, metadata: tuple[bytes, ...], data: tuple[bytes, ...], client: bytes = CLIENT
) -> Received:
    """Send a REQUEST for the worker's service and return its REPLY; raises NoAnswer."""
    lk = registered(ctx)
    service = lk.service if isinstance(lk.service, bytes) else lk.service.encode()
    lk.send(ctx, Request(service=service, client=client, metadata=metadata, data=data))
    return lk.recv(ctx, "REPLY", skip=("PING",))


@case(
    "DCP-WORKER-6.1",
    "The worker registers with REGISTRATION first",
    clause("6", '"Workers MUST send a registration message to register the service they provide."', "MUST"),
)
def registers(ctx: CaseContext) -> None:
    registered(ctx)
    ctx.frames.extend(ctx.state.get("hello_frames", []))
    hello: list[Received] = ctx.state["hello"]
    ctx.expect("REGISTRATION (DCP header, type 0x01, service name) as the first message")
    # Empty when the REGISTRATION came only after the suite's wait for it.
    ctx.saw(describe(hello) if hello else "no REGISTRATION within the wait for the worker's first message")
    first = hello[0].type if hello else "none in time"
    ctx.check(bool(hello) and isinstance(hello[0].message, Registration), f"the first message was {first}")


@case(
    "DCP-WORKER-8.1",
    "The worker sends PING at the agreed interval",
    clause(
        "8",
        '"Workers MUST periodically send heartbeat messages to the broker at an implementation-defined interval, agreed upon with the broker."',
        "MUST",
        "the agreed interval is --heartbeat-ms",
    ),
    heartbeats=3.5,
)
def pings(ctx: CaseContext) -> None:
    lk = registered(ctx)
    hb = ctx.heartbeat_s
    stamps: list[float] = []
    frames: list[int] = []

    def handle(_: object, got: Received) -> bool:
        # Counted from the raw parts, so a PING with extra parts (undecodable) counts too.
        if len(got.frames) >= 3 and got.frames[1] == PROTOCOL and got.frames[2] in PING_TYPES:
            stamps.append(ctx.frames[-1].at_ms)
            frames.append(len(got.frames))
        return len(stamps) >= 3

    ctx.watch([lk], handle, 3.2 * hb)
    ctx.state["ping_frames"] = frames
    ctx.expect(f"PING at least every {hb * 1000:.0f} ms")
    ctx.saw(f"{len(stamps)} PING(s) at {[round(s) for s in stamps]} ms")
    ctx.check_beats(stamps, "PING")


@case(
    "DCP-WORKER-8.2",
    "PING is header-only",
    clause(
        "8",
        '"The heartbeat messages are header-only, they MUST NOT contain any parts other than the header."',
        "MUST NOT",
    ),
    final=True,
)
def ping_header_only(ctx: CaseContext) -> None:
    counts: list[int] = ctx.state.get("ping_frames", [])
    if not counts:
        raise ctx.skipped("no PING was seen (DCP-WORKER-8.1)")
    ctx.expect("3 frames per PING: '', DGBX\\x01, type")
    ctx.saw(f"frames per PING: {counts}")
    ctx.check(all(n == 3 for n in counts), "a PING carried extra parts")


@case(
    "DCP-WORKER-7.1",
    "A REQUEST is answered with a REPLY carrying its metadata unchanged",
    clause("7", '"workers MUST copy these parts into the reply without any modifications."', "MUST"),
)
def reply_metadata(ctx: CaseContext) -> None:
    metadata = (b"m1", b"\x00\xff\x01")
    got = request(ctx, metadata, (b"hello",))
    ctx.expect(f"REPLY with metadata {metadata!r}")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Reply), f"the worker answered {got.type}")
    assert isinstance(got.message, Reply)
    ctx.check(got.message.metadata == metadata, "the metadata parts were modified")


@case(
    "DCP-WORKER-7.2",
    "The REPLY carries the request's client address",
    clause(
        "7",
        '"Reply messages have a very similar format. There are only two differences for the reply messages: The message type is 0x05. The service name is not included."',
        "MUST",
        "the reply format, graded as MUST",
    ),
)
def reply_client(ctx: CaseContext) -> None:
    got = request(ctx, (b"k",), (b"x",), client=b"someone-else")
    ctx.expect("REPLY with client address b'someone-else'")
    ctx.saw(got.text)
    ctx.check(
        isinstance(got.message, Reply) and got.message.client == b"someone-else",
        "the client address was not kept",
    )


@case(
    "DCP-WORKER-7.3",
    "Many and binary metadata parts are copied exactly",
    clause(
        "7",
        '"Metadata parts. Any number of non-empty parts MAY be inserted here by the client. ... workers MUST copy these parts into the reply without any modifications."',
        "MUST",
    ),
)
def many_metadata(ctx: CaseContext) -> None:
    metadata = (*(bytes([i]) * (i + 1) for i in range(1, 9)), b"\xff" * 1000)
    got = request(ctx, metadata, (b"a", b"b", b"c"))
    ctx.expect(f"REPLY with the {len(metadata)} metadata parts")
    ctx.saw(got.text)
    ctx.check(
        isinstance(got.message, Reply) and got.message.metadata == metadata,
        "the metadata parts were modified",
    )


@case(
    "DCP-WORKER-8.3",
    "After RECONNECT the worker registers again",
    clause(
        "8",
        '"A worker that receives a reconnect message MUST send a registration message to the broker."',
        "MUST",
    ),
)
def reconnect(ctx: CaseContext) -> None:
    lk = registered(ctx)
    lk.send(ctx, Reconnect())
    ctx.expect("REGISTRATION")
    seen = await_registration(ctx, ctx.wait_s())
    ctx.saw(describe(seen))


def _invalid_case(number: str, what: str) -> Callable[[CaseContext], None]:
    def run(ctx: CaseContext) -> None:
        lk = registered(ctx)
        frames = {n: f for n, _, f in _dcp.invalid_inputs(ctx.dialect)}[number]
        lk.send(ctx, frames, note=f"invalid: {what}")
        replies = lk.collect(ctx, min(0.5, ctx.wait_s()), skip=("PING",))
        ctx.expect("the worker still answers a REQUEST")
        got = request(ctx, (b"after",), (b"x",))
        ctx.saw(f"answer to the invalid message: {describe(replies)}; then {got.text}")
        ctx.check(isinstance(got.message, Reply), f"the worker answered {got.type}")
        if replies:
            raise ctx.info("the worker answered the invalid message")

    return run


for _number, _what, _ in _dcp.invalid_inputs("spec"):
    case(
        f"DCP-WORKER-11.{_number}",
        f"Invalid input: {_what}",
        clause(
            "11",
            '"All DCP messages start with the DCP header."',
            "MUST",
            "the suite's robustness check: the worker must survive invalid input",
        ),
    )(_invalid_case(_number, _what))


@case(
    "DCP-WORKER-5.1",
    "Every message the worker sent was a well-formed DCP message",
    clause("5", '"All DCP messages start with the DCP header."', "MUST"),
    final=True,
)
def well_formed(ctx: CaseContext) -> None:
    bad: list[str] = ctx.state.get("malformed", [])
    ctx.saw("\n".join(bad) if bad else "all decoded")
    ctx.check(not bad, f"{len(bad)} malformed message(s) from the worker")


@case(
    "DCP-WORKER-5.2",
    "The worker's message-type parts are one byte",
    clause(
        "5", '"Message Type: This part contains only 1 byte"', "MUST", "'contains only 1 byte' graded as MUST"
    ),
    final=True,
)
def one_byte(ctx: CaseContext) -> None:
    other: list[str] = ctx.state.get("other_dialect", [])
    ctx.saw("\n".join(other[:20]) if other else "all one byte")
    ctx.check(not other, f"{len(other)} message(s) with another type width (DagBox's 4 bytes)")
