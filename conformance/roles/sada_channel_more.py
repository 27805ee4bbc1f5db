"""SADA channel role, continued: the REQs the channel sends (they need a client of the
channel asking for ``nfgate-conformance``), invalid input from servers (the channel
must survive it) and the run-wide checks. The cases register on
:data:`nfgate.conformance.roles.sada_channel.ROLE`."""

from __future__ import annotations

from collections.abc import Callable

from nfgate.codecs.sada.messages import Req
from nfgate.conformance.context import CaseContext, describe
from nfgate.conformance.curve import connect_secured
from nfgate.conformance.roles import _sada
from nfgate.conformance.roles._sada import RouterPeer, clause, proto
from nfgate.conformance.roles.sada_channel import ROLE, SERVICE, channel_id, probe, server, until

case = ROLE.case
NEED_CLIENT = (
    f"no REQ arrived: have a client of the channel request service {SERVICE[0]!r} version {SERVICE[1]!r} "
    "while the suite runs"
)


def reqs(ctx: CaseContext, count: int) -> list[Req]:
    """At least ``count`` REQs the main server got (waiting up to --timeout for them);
    Skipped when none came."""
    channel_id(ctx)
    main = server(ctx)
    until(ctx, lambda: len(main.reqs) >= count, ctx.options.timeout_s)
    if not main.reqs:
        raise ctx.skipped(NEED_CLIENT)
    return list(main.reqs)


@case(
    "SADA-CHANNEL-7.1",
    "A REQ names a service and version the server introduced",
    clause(
        "7",
        '"after command header there SHOULD be a frame containing the request id and after that there SHOULD be '
        'two frames of service frames which request is related to."',
        "SHOULD",
        "a REQ for a service this server did not introduce is a misrouted request",
    ),
)
def req_service(ctx: CaseContext) -> None:
    got = reqs(ctx, 1)
    bad = [r for r in got if r.service != SERVICE[0] or r.version not in (SERVICE[1], "")]
    ctx.expect(f"service {SERVICE[0]!r}, version {SERVICE[1]!r} (or empty: any)")
    ctx.saw("; ".join(repr(r) for r in got[:3]))
    ctx.check(not bad, f"{len(bad)} REQ(s) for something not introduced: {bad[:2]}")


@case(
    "SADA-CHANNEL-7.2",
    "Request ids are unique",
    clause(
        "7",
        '"every REQ message after command header follows by one frame which is request id. which should be '
        'unique across the cluster."',
        "SHOULD",
    ),
)
def unique_ids(ctx: CaseContext) -> None:
    got = reqs(ctx, 3)
    ids = [r.request_id for r in got]
    ctx.saw(f"{len(ids)} REQ(s), {len(set(ids))} distinct id(s)")
    ctx.check(len(set(ids)) == len(ids), "a request id was used twice")


@case(
    "SADA-CHANNEL-7.3",
    "Request ids start with the channel's id",
    clause("7", '"Channels RECOMMENDED to prepends their id in the request id generated."', "RECOMMENDED"),
)
def ids_prefixed(ctx: CaseContext) -> None:
    got = reqs(ctx, 1)
    names = {i.decode("utf-8", "replace") for i in _sada.identities(ctx.options.endpoint)}
    ctx.expect(f"request ids starting with one of {sorted(names)}")
    ctx.saw(", ".join(r.request_id for r in got[:3]))
    ctx.check(
        all(any(r.request_id.startswith(n) for n in names) for r in got),
        "the request ids do not carry the channel id",
    )


SURVIVE = (
    "The spec has no rule for invalid input; a channel must survive it: the suite checks that a server can "
    "still reach it and is spoken to."
)


def _invalid_case(number: str, what: str) -> Callable[[CaseContext], None]:
    def run(ctx: CaseContext) -> None:
        ident = channel_id(ctx)
        frames = dict((n, f) for n, _, f in _sada.invalid_inputs(proto(ctx)))[number]
        bad = RouterPeer(ctx.session.context, "sender of invalid input")
        try:
            connect_secured(bad.sock, ctx.options.endpoint, ctx.options.curve)
            ctx.expect("no crash: the channel still takes a new server afterwards")
            bad.reach(ctx, frames, [ident], ctx.wait_s(), note=f"invalid: {what}")
            answered = bad.collect(ctx, min(0.3, ctx.wait_s()), skip=("PING",))
        finally:
            bad.close()
        probe(ctx)
        ctx.saw(f"answer to the invalid message: {describe(answered)}; the channel still takes servers")

    return run


for _number, _what, _ in _sada.invalid_inputs(b"SADA1"):
    case(
        f"SADA-CHANNEL-11.{_number}",
        f"Survives {_what}",
        clause("11", SURVIVE, "MUST", "the suite's robustness check"),
    )(_invalid_case(_number, _what))


@case(
    "SADA-CHANNEL-4.2",
    "Every message from the channel decodes in the spec's form",
    clause(
        "4",
        '"Second frame SHOULD be "SADA" followed by one byte ..." "Third frame defines the Command name and SHOULD '
        'be one of ..."',
        "SHOULD",
    ),
    final=True,
)
def all_in_form(ctx: CaseContext) -> None:
    bad: list[str] = ctx.state.get("malformed", [])
    other: list[str] = ctx.state.get("other_dialect", [])
    ctx.expect("every message decodes in the spec dialect")
    ctx.saw(f"{len(bad)} undecodable {bad[:2]}; {len(other)} in another form {other[:2]}")
    ctx.check(not bad and not other, "the channel sent messages outside the spec's form")
