"""MemoDB worker role, continued: invalid replies from the broker (the worker must
survive them and talk again) and the run-wide check over every message it sent. The
cases register on :data:`nfgate.conformance.roles.memodb_worker.ROLE`."""

from __future__ import annotations

from collections.abc import Callable

from nfgate.codecs.memodb import Heartbeat, Ready
from nfgate.conformance.context import CaseContext, NoAnswer
from nfgate.conformance.roles import _memodb
from nfgate.conformance.roles._memodb import clause
from nfgate.conformance.roles.memodb_worker import ROLE, answer, peer, take, worker_id

SURVIVE = (
    '"If the broker detects that it is out of sync with the worker, it can send a DISCONNECT reply ... the '
    'worker should disconnect, reset its state, and connect again with a new READY request." A worker must '
    "also survive a reply it cannot read: the suite checks that it talks again."
)


def _invalid_case(number: str, what: str) -> Callable[[CaseContext], None]:
    def run(ctx: CaseContext) -> None:
        data = dict((n, b) for n, _, b in _memodb.invalid_inputs())[number]
        take(ctx)
        ctx.expect("the worker talks again (READY, HEARTBEAT...) and answers a HEARTBEAT")
        # The worker may wait out its own silence timeout before it starts again.
        window = ctx.options.timeout_s + ctx.options.liveness * ctx.heartbeat_s
        try:
            got = answer(ctx, data, "message after the invalid reply", note=f"invalid: {what}")
        except NoAnswer:
            got = peer(ctx).recv("message after the invalid reply", window)
            ctx.state["held"] = got
            take(ctx)
        after = answer(ctx, Heartbeat(id=worker_id(ctx)), "answer to HEARTBEAT")
        ctx.saw(f"after the invalid reply: {got.text}; then {after.text}")
        ctx.check(
            isinstance(after.message, (Heartbeat, Ready)), f"the HEARTBEAT was answered with {after.type}"
        )

    return run


for _number, _what, _ in _memodb.invalid_inputs():
    ROLE.case(
        f"MEMODB-WORKER-9.{_number}",
        f"Survives a reply of {_what}",
        clause("9", SURVIVE, "MUST", "the suite's robustness check"),
        heartbeats=7.0,  # the liveness wait (6 intervals by default) and one more
    )(_invalid_case(_number, _what))


@ROLE.case(
    "MEMODB-WORKER-5.2",
    "Every message from the worker decodes: memo01, CBOR header in deterministic encoding",
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
    ctx.expect("every message the worker sent decodes in the spec codec (canonical CBOR)")
    ctx.saw(f"{ctx.state.get('decoded', 0)} decoded, {len(bad)} not: {bad[:3]}")
    ctx.check(not bad, f"{len(bad)} message(s) from the worker did not decode")
