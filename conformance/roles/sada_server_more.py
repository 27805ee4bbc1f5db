"""SADA server role, continued: a channel restart, invalid input (the server must survive
it) and the run-wide check of every message's form. The cases register on
:data:`nfgate.conformance.roles.sada_server.ROLE`."""

from __future__ import annotations

from collections.abc import Callable

from nfgate.codecs.sada.messages import Intr, Rep, Rintr
from nfgate.conformance.context import CaseContext, NoAnswer, Received, describe
from nfgate.conformance.roles import _sada
from nfgate.conformance.roles._sada import clause, proto
from nfgate.conformance.roles.sada_server import ROLE, bind, channel, connected, probe, request
from nfgate.transports.zmq import identity_lasts

case = ROLE.case


@case(
    "SADA-SERVER-10.1",
    "After the channel restarts, the server introduces itself again",
    clause(
        "10",
        '"If a channel restarted, it can send a RINTR(request for INTR) command to servers. and servers SHOULD '
        'response by INTR command." A restarted channel does not know a server that set no identity, so the '
        "server has to speak first.",
        "SHOULD",
        "the suite closes its ROUTER and binds it again with the same identity",
    ),
    heartbeats=4,
    timeouts=3,  # the wait for what the server owes, the INTR, and a RINTR's answer
    # A server that breaks this SHOULD and set no identity cannot be reached by the
    # restarted channel: the cases after this one would be blamed for it.
    disruptive=True,
)
def channel_restart(ctx: CaseContext) -> None:
    old = connected(ctx).peer
    settle(ctx)
    channel(ctx).close()
    ctx.state["channel"] = fresh = bind(ctx.session)
    ctx.expect("INTR on the new connection (by itself, or after a RINTR to a server that set an identity)")
    window = ctx.options.timeout_s + 3 * ctx.heartbeat_s
    try:
        got = fresh.recv(ctx, "INTR after the restart", window, skip=("PONG",))
    except NoAnswer:
        got = None
    if got is None and old is not None and identity_lasts(old):
        # A server with an identity of its own can be asked (RINTR) under its old name.
        fresh.reach(ctx, Rintr(proto=proto(ctx)), [old], window)
        try:
            got = fresh.recv(ctx, "INTR after RINTR", skip=("PONG",))
        except NoAnswer:
            got = None
    if got is None:
        fresh.peer = old  # later cases still try the old name
        raise ctx.violated("the server did not introduce itself to the restarted channel")
    ctx.saw(got.text)
    ctx.check(isinstance(got.message, Intr), f"the first message after the restart was {got.type}")


def settle(ctx: CaseContext) -> None:
    """Take every answer the server still owes the channel before it restarts.

    A server's connecting socket keeps what it queued for the channel across the
    reconnect, so a late INTR (a RINTR answered after a PONG satisfied an earlier
    probe) would reach the new channel and pass for a new introduction. A server
    answers in order: once the REP to a fresh request is in, nothing older is left.
    The wait lasts while the server is still talking (a slow server working through
    a backlog); one that falls silent without the REP is left to the case to judge."""
    link = channel(ctx)
    rid = ctx.unique("settle")
    if not link.try_send(ctx, request(ctx, "nfgate.settle", "1", rid)):
        return
    heard: list[Received] = []

    def handle(_: object, got: Received) -> bool:
        heard.append(got)
        return True

    for _ in range(10_000):  # bounded: every pass reads a message or ends the wait
        if not ctx.watch([link], handle, ctx.options.timeout_s):
            return
        last = heard[-1].message
        if isinstance(last, Rep) and last.request_id == rid:
            return


SURVIVE = (
    "The spec has no rule for invalid input; a server must survive it: the suite checks that it still "
    'answers ("servers MUST response to RINTR with an INTR message").'
)


def _invalid_case(number: str, what: str) -> Callable[[CaseContext], None]:
    def run(ctx: CaseContext) -> None:
        link = connected(ctx)
        frames = dict((n, f) for n, _, f in _sada.invalid_inputs(proto(ctx)))[number]
        ctx.expect("no crash: the server still answers RINTR or PING afterwards")
        link.send(ctx, frames, note=f"invalid: {what}")
        answered = link.collect(ctx, min(0.3, ctx.wait_s()))
        probe(ctx)
        ctx.saw(f"answer to the invalid message: {describe(answered)}; the server still answers")

    return run


for _number, _what, _ in _sada.invalid_inputs(b"SADA1"):
    case(
        f"SADA-SERVER-11.{_number}",
        f"Survives {_what}",
        clause("11", SURVIVE, "MUST", "the suite's robustness check"),
    )(_invalid_case(_number, _what))


@case(
    "SADA-SERVER-4.2",
    "Every message from the server decodes in the spec's form",
    clause(
        "4",
        '"Second frame SHOULD be "SADA" followed by one byte ..." "Third frame defines the Command name and SHOULD '
        'be one of ..."',
        "SHOULD",
        "PIRAN's int32 REP status is a departure, reported in every run (with --dialect piran too)",
    ),
    final=True,
)
def all_in_form(ctx: CaseContext) -> None:
    bad: list[str] = ctx.state.get("malformed", [])
    other: list[str] = ctx.state.get("other_dialect", [])
    ctx.expect("every message decodes in the spec dialect")
    ctx.saw(f"{len(bad)} undecodable {bad[:2]}; {len(other)} in another dialect {other[:2]}")
    ctx.check(not bad and not other, "the server sent messages outside the spec's form")
