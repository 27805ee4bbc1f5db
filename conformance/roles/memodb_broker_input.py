"""MemoDB broker role, continued: invalid input (the broker must survive it) and the
run-wide check over every message the broker sent. The cases register on
:data:`nfgate.conformance.roles.memodb_broker.ROLE`."""

from __future__ import annotations

from collections.abc import Callable

from nfgate.conformance.context import CaseContext
from nfgate.conformance.roles import _memodb
from nfgate.conformance.roles._memodb import Sockets, clause, with_sockets
from nfgate.conformance.roles.memodb_broker import ROLE, round_trip

SURVIVE = (
    '"Allow disconnections of clients and workers to be handled gracefully" (goals); '
    '"Allow a single broker process to serve hundreds of clients and workers simultaneously"'
)


def _invalid_case(number: str, what: str) -> Callable[[CaseContext], None]:
    @with_sockets
    def run(ctx: CaseContext, sockets: Sockets) -> None:
        data = dict((n, b) for n, _, b in _memodb.invalid_inputs())[number]
        bad = sockets.req("sender of invalid input")
        ctx.expect("no crash: the broker still serves a job afterwards (an answer is recorded)")
        bad.send(data, note=f"invalid: {what}")
        answer = bad.quiet(min(0.3, ctx.wait_s()))
        found = round_trip(ctx, sockets)
        ctx.saw(
            f"answer to the invalid message: {answer.text if answer else 'nothing'}; the broker still serves"
        )
        ctx.check("result" in found, "the broker no longer forwards jobs")

    return run


for _number, _what, _ in _memodb.invalid_inputs():
    ROLE.case(
        f"MEMODB-BROKER-9.{_number}",
        f"Survives {_what}",
        clause("9", SURVIVE, "MUST", "the suite's robustness check: the broker keeps serving"),
    )(_invalid_case(_number, _what))


@ROLE.case(
    "MEMODB-BROKER-5.1",
    "Every message from the broker decodes: memo01, CBOR header in deterministic encoding",
    clause(
        "5",
        '"Each message consists of a CBOR-encoded header ... The header should be encoded with '
        'deterministically encoded CBOR."',
        "SHOULD",
    ),
    final=True,
)
def all_decoded(ctx: CaseContext) -> None:
    bad: list[str] = ctx.state.get("malformed", [])
    ctx.expect("every message the broker sent decodes in the spec codec (canonical CBOR)")
    ctx.saw(f"{ctx.state.get('decoded', 0)} decoded, {len(bad)} not: {bad[:3]}")
    ctx.check(not bad, f"{len(bad)} message(s) from the broker did not decode")
