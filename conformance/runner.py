"""Runs a role's cases one after the other against one peer.

Never hangs: every case has a deadline (:meth:`Case.budget_s`), every wait inside it is
clamped to it, and when a case waited in vain, or passed on a window in which the peer
said nothing, the runner probes the peer. A peer that no longer answers the probe is
reported once, on that case, and every later case is SKIPped with that reason.
"""

from __future__ import annotations

import datetime
import time
import traceback
from collections.abc import Callable, Sequence

import pynng
import zmq

from nfgate import __version__
from nfgate.conformance.context import CaseContext, Info, NoAnswer, Skipped, Violation
from nfgate.conformance.curve import handshake_problem
from nfgate.conformance.model import (
    Case,
    CaseResult,
    Clause,
    RunOptions,
    RunReport,
    Verdict,
    violation_verdict,
)
from nfgate.conformance.registry import Role, Session
from nfgate.conformance.tls import secure_nng
from nfgate.errors import TransportError
from nfgate.transports import port_problem

__all__ = ["PROBE_CLAUSE", "run"]

PROBE_CLAUSE = Clause(
    section="(suite) liveness probe",
    text="After a case that got no answer, the suite checks that the peer still answers at all.",
    keyword="MUST",
)

Listener = Callable[[Case, CaseResult], None]


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def open_session(role: Role, options: RunOptions, announce: Callable[[str], None] | None = None) -> Session:
    """A session with its dialect chosen and the role's setup done.

    Raises :class:`nfgate.errors.NfgateError` (e.g. a TransportError when a worker
    role cannot bind the endpoint); the session is closed first.
    """
    chosen = options.dialect if options.dialect != "auto" else role.dialects[0]
    session = Session(role, options, chosen, announce)
    try:
        if not role.binds:
            _check_address(role, options, session.context)
        if role.setup is not None:
            role.setup(session)
        if options.dialect == "auto" and role.detect is not None:
            try:
                dialect = role.detect(session)
            except NoAnswer:  # nothing to tell the dialect by: the cases report the silence
                dialect = chosen
            session.dialect = dialect
            session.wire = type(session.wire)(codec=session.wire.codec, dialect=dialect)
    except BaseException:
        close_session(session)
        raise
    return session


def _check_address(role: Role, options: RunOptions, context: zmq.Context[zmq.Socket[bytes]]) -> None:
    """A role that connects to the peer: an address no socket can connect to (``notaurl``,
    ``tcp://host`` without a port), or a ZeroMQ peer whose handshake fails (CURVE on one
    side only, a wrong server key), is the user's mistake, found before any case runs.
    Raises :class:`TransportError`. A reachable-looking address that nobody answers is
    the peer's business: the cases report it."""
    endpoint = options.endpoint
    problem = port_problem(endpoint, connect=True)
    if problem is not None:
        raise TransportError(f"cannot connect to {endpoint}: {problem}")
    try:
        if role.codec == "memodb":  # NNG: pynng dials without waiting for the peer
            nng = pynng.Req0()
            try:
                secure_nng(nng, options.tls)
                nng.dial(endpoint, block=False)
            finally:
                nng.close()
        else:
            sock = context.socket(zmq.DEALER)
            try:
                sock.connect(endpoint)
            finally:
                sock.close(0)
    except (zmq.ZMQError, pynng.NNGException) as exc:
        reason = exc.strerror if isinstance(exc, zmq.ZMQError) else str(exc)
        raise TransportError(f"cannot connect to {endpoint}: {reason}") from None
    if role.codec != "memodb":
        problem = handshake_problem(context, endpoint, options.curve, options.timeout_s)
        if problem is not None:
            raise TransportError(problem)


def close_session(session: Session) -> None:
    try:
        if session.role.teardown is not None:
            session.role.teardown(session)
    finally:
        session.close()


def run(
    role: Role,
    options: RunOptions,
    cases: Sequence[Case],
    on_result: Listener | None = None,
    announce: Callable[[str], None] | None = None,
) -> RunReport:
    """Run ``cases`` and return the report; ``on_result`` sees each result as it comes.

    Raises what :func:`open_session` raises; nothing a peer sends can raise out of here.
    """
    started, t0 = _now_iso(), time.monotonic()
    session = open_session(role, options, announce)
    results: list[CaseResult] = []
    gone = ""  # why the remaining cases are skipped
    try:
        for case in cases:
            if gone:
                result = _skip(case, session.dialect, gone)
            elif case.dialects and session.dialect not in case.dialects:
                result = _skip(
                    case, session.dialect, f"applies to the {', '.join(case.dialects)} dialect(s) only"
                )
            else:
                result, gone = _execute(role, case, session)
            results.append(result)
            if on_result is not None:
                on_result(case, result)
    finally:
        close_session(session)
    return RunReport(
        options=options,
        dialect=session.dialect,
        results=tuple(results),
        started=started,
        duration_s=time.monotonic() - t0,
        version=__version__,
    )


def _skip(case: Case, dialect: str, reason: str) -> CaseResult:
    return CaseResult(
        id=case.id, title=case.title, clause=case.clause, verdict=Verdict.SKIP, reason=reason, dialect=dialect
    )


def _execute(role: Role, case: Case, session: Session) -> tuple[CaseResult, str]:
    """One case's result, and a non-empty reason when the peer has stopped answering."""
    ctx = CaseContext(session=session, clause=case.clause, budget_s=case.budget_s(session.options))
    verdict, reason, gone = Verdict.PASS, "", ""
    expected = actual = ""
    try:
        case.run(ctx)
        expected, actual = ctx.expected, ctx.actual
        if ctx.heard_silence:
            # The case passed on silence, which a dead peer keeps too: probe, so that a
            # peer that died is reported on this case, not on the next one.
            gone = _probe(role, session, ctx)
            if gone:
                verdict, reason = Verdict.FAIL, f"the peer was silent, as the case expects, but {gone}"
    except Violation as out:
        verdict, reason, expected, actual = (
            violation_verdict(case.clause.keyword),
            out.reason,
            out.expected,
            out.actual,
        )
    except Info as out:
        verdict, reason, expected, actual = Verdict.INFO, out.reason, out.expected, out.actual
    except Skipped as out:
        verdict, reason, expected, actual = Verdict.SKIP, out.reason, out.expected, out.actual
    except NoAnswer as exc:
        verdict, reason = violation_verdict(case.clause.keyword), str(exc)
        expected, actual = ctx.expected, ctx.actual or str(exc)
        gone = _probe(role, session, ctx)
        if gone:
            verdict = Verdict.FAIL
            reason = f"{reason}; {gone}"
    except Exception as exc:  # a suite bug must cost one case, not the run
        # Most often the peer's messages broke an assumption the case did not check.
        # The case could not judge the peer: a FAIL, so that a run never ends "OK" on
        # a case it did not finish (as SKIP would let it).
        verdict = Verdict.FAIL
        reason = f"suite error: {type(exc).__name__}: {exc}"
        actual = traceback.format_exc(limit=6)
    finally:
        ctx.close()
    result = CaseResult(
        id=case.id,
        title=case.title,
        clause=case.clause,
        verdict=verdict,
        reason=reason,
        expected=expected,
        actual=actual,
        frames=tuple(ctx.frames),
        duration_s=time.monotonic() - ctx.started,
        dialect=session.dialect,
    )
    return result, gone


def _probe(role: Role, session: Session, case_ctx: CaseContext) -> str:
    """ "" when the peer still answers, else why it is considered gone. The probe's
    frames are added to the case's log."""
    options = session.options
    budget = options.timeout_s + (options.liveness * options.heartbeat_ms / 1000.0 if role.binds else 0.0)
    ctx = CaseContext(session=session, clause=PROBE_CLAUSE, budget_s=budget)
    try:
        role.probe(ctx)
        return ""
    except NoAnswer as exc:
        return f"the peer stopped answering ({exc} to the liveness probe); the remaining cases are skipped"
    except (Violation, Info, Skipped):
        return ""  # it answered, even if oddly: alive
    finally:
        ctx.close()
        for record in ctx.frames:
            case_ctx.frames.append(
                type(record)(
                    direction=record.direction,
                    peer=f"probe {record.peer}",
                    at_ms=record.at_ms + (ctx.started - case_ctx.started) * 1000.0,
                    frames=record.frames,
                    decoded=record.decoded,
                )
            )
