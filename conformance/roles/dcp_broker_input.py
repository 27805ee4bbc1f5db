"""DCP broker role, continued: invalid input (the broker must survive it) and the
run-wide checks over everything the broker sent. The cases register on
:data:`nfgate.conformance.roles.dcp_broker.ROLE`."""

from __future__ import annotations

from collections.abc import Callable

from nfgate.conformance.context import CaseContext, describe
from nfgate.conformance.roles import _dcp
from nfgate.conformance.roles._dcp import clause
from nfgate.conformance.roles.dcp_broker import ROLE, probe

SURVIVE = '"The broker acts as a persistent, central point of communication."'


def _invalid_case(number: str, what: str) -> Callable[[CaseContext], None]:
    def run(ctx: CaseContext) -> None:
        frames = {n: f for n, _, f in _dcp.invalid_inputs(ctx.dialect)}[number]
        sender = ctx.dealer("peer", identity=ctx.unique("nfgate-bad").encode())
        ctx.expect("the broker still answers other peers (an answer to the invalid message is recorded)")
        sender.send(frames, note=f"invalid: {what}")
        answered = sender.collect(min(0.5, ctx.wait_s()))
        probe(ctx)  # raises NoAnswer when the broker stopped answering
        ctx.saw(f"answer to the invalid message: {describe(answered)}; the broker still answers")
        if answered:
            raise ctx.info(
                "the broker answered the invalid message (DCP has no error message; dropping is usual)"
            )

    return run


for _number, _what, _ in _dcp.invalid_inputs("spec"):
    ROLE.case(
        f"DCP-BROKER-11.{_number}",
        f"Invalid input: {_what}",
        clause(
            "11", SURVIVE, "MUST", "the suite's robustness check: invalid input must not take the broker down"
        ),
    )(_invalid_case(_number, _what))


@ROLE.case(
    "DCP-BROKER-5.1",
    "Every message the broker sent was a well-formed DCP message",
    clause(
        "5",
        '"All DCP messages start with the DCP header." Protocol: "DGBX" followed by the version; Message Type.',
        "MUST",
    ),
    final=True,
)
def well_formed(ctx: CaseContext) -> None:
    bad: list[str] = ctx.state.get("malformed", [])
    ctx.expect("every message from the broker decodes as DCP")
    ctx.saw("\n".join(bad) if bad else "all decoded")
    ctx.check(not bad, f"{len(bad)} malformed message(s) from the broker")


@ROLE.case(
    "DCP-BROKER-5.2",
    "The broker's message-type parts are one byte",
    clause(
        "5",
        '"Message Type: This part contains only 1 byte, an unsigned 8-bit number describing the type of the message."',
        "MUST",
        "'contains only 1 byte' graded as MUST",
    ),
    final=True,
)
def one_byte_types(ctx: CaseContext) -> None:
    other: list[str] = ctx.state.get("other_dialect", [])
    ctx.expect("one-byte message types (specs/dcp.md), whatever dialect the run speaks")
    ctx.saw("\n".join(other[:20]) if other else "all one byte")
    ctx.check(not other, f"{len(other)} message(s) with another type width (DagBox's 4 bytes)")
