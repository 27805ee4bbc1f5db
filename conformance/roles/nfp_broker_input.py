"""NFP broker role, continued: invalid input (the broker must survive it) and the
run-wide checks over everything the broker sent during the run. The cases register on
:data:`nfgate.conformance.roles.nfp_broker.ROLE`."""

from __future__ import annotations

from collections.abc import Callable

from nfgate.codecs.nfp.messages import CLIENT, Response
from nfgate.conformance.context import CaseContext, Received, describe
from nfgate.conformance.roles import _nfp
from nfgate.conformance.roles._nfp import SPEC_STATUSES, clause
from nfgate.conformance.roles.nfp_broker import KA, ROLE, probe

INVALID = (
    '"The broker SHOULD respond to invalid messages by dropping them and treating that peer as '
    'invalid." The broker must also survive them: the suite checks that it still answers.'
)


def _send_and_probe(ctx: CaseContext, frames: list[bytes], note: str) -> list[Received]:
    """Send ``frames`` from a fresh client and return what came back to it; raises
    NoAnswer when the broker then stopped answering others."""
    sender = ctx.dealer("client", identity=ctx.unique("nfgate-bad").encode())
    sender.send(frames, note=note)
    answered = sender.collect(min(0.5, ctx.wait_s()), skip=KA)
    probe(ctx)
    return answered


def _malformed(ctx: CaseContext, number: str) -> list[bytes]:
    """:func:`_nfp.malformed`'s message ``number`` in the run's dialect."""
    return dict((n, f) for n, _, f in _nfp.malformed(ctx.dialect, CLIENT))[number]


def _invalid_case(number: str, what: str) -> Callable[[CaseContext], None]:
    def run(ctx: CaseContext) -> None:
        ctx.expect("no answer (dropped), and the broker still answers other peers")
        answered = _send_and_probe(ctx, _malformed(ctx, number), f"invalid: {what}")
        ctx.saw(f"answer to the invalid message: {describe(answered)}; the broker still answers")
        ctx.check(not answered, "the broker answered an invalid message instead of dropping it")

    return run


# 11.7 is not invalid: "A POST command consists of 7 or more frames", so one of 200 is
# well formed, and a broker may take it, refuse it for a limit of its own (nfgate's
# max_frames: RESPONSE 400) or drop it. It gets its own case below.
MANY_FRAMES = "7"

for _number, _what, _ in _nfp.malformed("spec", CLIENT):
    if _number != MANY_FRAMES:
        ROLE.case(f"NFP-BROKER-11.{_number}", f"Invalid input: {_what}", clause("11", INVALID, "SHOULD"))(
            _invalid_case(_number, _what)
        )


@ROLE.case(
    f"NFP-BROKER-11.{MANY_FRAMES}",
    "A POST of 200 frames: survived, and dropped or answered with a RESPONSE",
    clause(
        "11",
        'Not invalid: "A POST command consists of 7 or more frames" (section 3), so taking it, '
        "refusing it for a limit of the broker's, or dropping it are all right; the broker must "
        "survive it, and what it sends back must be a RESPONSE for its uuid.",
        "MUST",
    ),
)
def many_frames(ctx: CaseContext) -> None:
    frames = _malformed(ctx, MANY_FRAMES)
    uuid = frames[5].decode()
    ctx.expect(f"no answer, or RESPONSEs for uuid {uuid!r}; the broker still answers other peers")
    answered = _send_and_probe(ctx, frames, "a POST of 200 frames")
    ctx.saw(f"{describe(answered) if answered else 'no answer (dropped)'}; the broker still answers")
    wrong = [r.text for r in answered if not (isinstance(r.message, Response) and r.message.uuid == uuid)]
    ctx.check(not wrong, f"answered with something else than a RESPONSE for its uuid: {'; '.join(wrong)}")


@ROLE.case(
    "NFP-BROKER-3.1",
    "Every message the broker sent was a well-formed NFP message",
    clause(
        "3", "The frame layouts of OPEN, READY, KEEPALIVE, DISCONNECT, POST, RESPONSE, GET, DELETE.", "MUST"
    ),
    final=True,
)
def well_formed(ctx: CaseContext) -> None:
    bad: list[str] = ctx.state.get("malformed", [])
    ctx.expect("every message from the broker decodes as NFP")
    ctx.saw("\n".join(bad) if bad else "all decoded")
    ctx.check(not bad, f"{len(bad)} malformed message(s) from the broker")


@ROLE.case(
    "NFP-BROKER-3.2",
    "The broker's command frames are one byte",
    clause("3", '"Frame 2: 0x04 (one byte, representing POST)" (and likewise for every command)', "MUST"),
    final=True,
)
def one_byte_commands(ctx: CaseContext) -> None:
    other: list[str] = ctx.state.get("other_dialect", [])
    ctx.expect("every command frame from the broker is one byte")
    ctx.saw("\n".join(other[:20]) if other else "all one byte")
    ctx.check(
        not other, f"{len(other)} message(s) with a command frame in another form (NorFab's ASCII '0x..')"
    )


@ROLE.case(
    "NFP-BROKER-4.1",
    "The broker used only the status codes NFP defines",
    clause(
        "4",
        '"Implementations MAY NOT use status codes that are not defined here" (200, 202, 300, 400, 408, 417, 500)',
        "MAY NOT",
    ),
    final=True,
)
def defined_statuses(ctx: CaseContext) -> None:
    seen: dict[int, str] = ctx.state.get("statuses", {})
    if not seen:
        raise ctx.skipped("no status frame was received during the run")
    odd = {s: t for s, t in seen.items() if s not in SPEC_STATUSES}
    ctx.expect("statuses within 200, 202, 300, 400, 408, 417, 500")
    ctx.saw(f"statuses seen: {sorted(seen)}" + "".join(f"\n{s}: {t}" for s, t in odd.items()))
    ctx.check(not odd, f"undefined status code(s) {sorted(odd)}")
