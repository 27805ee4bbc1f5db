"""The framework without a peer: grading by keyword, case selection and order, the
strict rule, and every registered case's record."""

from __future__ import annotations

import pytest

from nfgate.conformance.model import (
    KEYWORDS,
    CaseResult,
    Clause,
    RunOptions,
    RunReport,
    Verdict,
    violation_verdict,
)
from nfgate.conformance.registry import find_role, roles, select
from nfgate.errors import ConfigError


@pytest.mark.parametrize(
    ("keyword", "verdict"),
    [
        ("MUST", Verdict.FAIL),
        ("MUST NOT", Verdict.FAIL),
        ("SHALL", Verdict.FAIL),
        ("SHOULD", Verdict.NON_STRICT),
        ("SHOULD NOT", Verdict.NON_STRICT),
        ("MAY NOT", Verdict.NON_STRICT),
        ("MAY", Verdict.INFO),
    ],
)
def test_a_broken_clause_is_graded_by_its_keyword(keyword: str, verdict: Verdict) -> None:
    assert violation_verdict(keyword) is verdict


def test_a_clause_needs_an_rfc_2119_keyword() -> None:
    with pytest.raises(ValueError):
        Clause(section="x", text="y", keyword="OUGHT TO")


def test_roles_are_discovered_and_unknown_ones_refused() -> None:
    assert {("nfp", "broker"), ("nfp", "worker"), ("dcp", "broker"), ("dcp", "worker")} <= set(roles())
    with pytest.raises(ConfigError, match="known: "):
        find_role("nfp", "client")


def test_selection_by_glob_and_section_order() -> None:
    role = find_role("nfp", "broker")
    ids = [c.id for c in select(role, ["nfp-broker-5.*"], ["*-5.1?"])]
    assert ids[:2] == ["NFP-BROKER-5.1", "NFP-BROKER-5.2"] and "NFP-BROKER-5.10" not in ids
    every = [c.id for c in select(role)]
    assert every.index("NFP-BROKER-5.10") == every.index("NFP-BROKER-5.9") + 1
    finals = [c.id for c in role.cases if c.final]
    assert finals and every[-len(finals) :] == sorted(finals, key=every.index)


@pytest.mark.parametrize(("protocol", "role_name"), sorted(roles()))
def test_every_case_is_numbered_and_cites_a_clause(protocol: str, role_name: str) -> None:
    role = find_role(protocol, role_name)
    prefix = f"{protocol}-{role_name}-".upper()
    assert role.cases
    for case in role.cases:
        assert case.id.startswith(prefix) and case.id[len(prefix) :].replace(".", "").isdigit(), case.id
        assert case.clause.keyword in KEYWORDS and case.clause.text and case.clause.section, case.id
        if protocol in ("nfp", "dcp"):  # these roles number cases by the clause's section
            section = case.id.split("-")[-1].split(".")[0]
            assert f" {section} " in case.clause.section, case.id


def _report(strict: bool, *verdicts: Verdict) -> RunReport:
    clause = Clause(section="s", text="t", keyword="SHOULD")
    results = tuple(
        CaseResult(id=f"X-Y-1.{i}", title="t", clause=clause, verdict=v) for i, v in enumerate(verdicts)
    )
    options = RunOptions(protocol="x", role="y", endpoint="tcp://127.0.0.1:1", strict=strict)
    return RunReport(
        options=options, dialect="spec", results=results, started="now", duration_s=0.0, version="0"
    )


def test_only_fail_fails_a_run_unless_strict() -> None:
    assert not _report(False, Verdict.PASS, Verdict.NON_STRICT, Verdict.INFO, Verdict.SKIP).failed()
    assert _report(True, Verdict.PASS, Verdict.NON_STRICT).failed()
    assert _report(False, Verdict.FAIL).failed()
    assert _report(False, Verdict.PASS, Verdict.FAIL).counts()["FAIL"] == 1


def test_the_report_keeps_a_bounded_part_of_each_message() -> None:
    # A peer sending tens of megabytes per message made reports of gigabytes (hex,
    # written three times) and the suite's memory grow past 16 GB.
    from types import SimpleNamespace

    from nfgate.conformance.context import KEEP_BYTES, KEEP_FRAMES, KEEP_TEXT, CaseContext

    session = SimpleNamespace(options=None, dialect="spec", wire=None, state={})
    ctx = CaseContext(session=session, clause=Clause(section="s", text="t", keyword="MUST"), budget_s=1.0)  # type: ignore[arg-type]
    ctx.record("received", "from broker", [b"x" * (KEEP_BYTES * 10)] * (KEEP_FRAMES + 5), "y" * KEEP_TEXT * 3)
    ctx.record("received", "from broker", [b"", b"small"], "Small()")
    big, small = ctx.frames
    assert len(big.frames) == KEEP_FRAMES and all(len(f) == KEEP_BYTES for f in big.frames)
    assert big.decoded.startswith("[cut for the report: frames of 40960, ") and "and 5 more" in big.decoded
    assert len(big.decoded) == KEEP_TEXT
    assert small.frames == (b"", b"small") and small.decoded == "Small()"  # small ones as they are


def test_a_case_the_suite_could_not_finish_fails_rather_than_skips() -> None:
    # A peer's answer that broke an assumption of the case (a message of another type,
    # say) raised inside the suite; as SKIP, a broken broker's run ended "OK", exit 0.
    from types import SimpleNamespace

    from nfgate.conformance.model import Case
    from nfgate.conformance.runner import _execute

    def broken(ctx: object) -> None:
        raise AttributeError("'Open' object has no attribute 'uuid'")

    clause = Clause(section="s", text="t", keyword="SHOULD")
    case = Case(id="X-Y-1.1", protocol="x", role="y", title="t", clause=clause, run=broken)
    options = RunOptions(protocol="x", role="y", endpoint="tcp://127.0.0.1:1")
    session = SimpleNamespace(options=options, dialect="spec", wire=None, state={})
    result, gone = _execute(None, case, session)  # type: ignore[arg-type]
    assert result.verdict is Verdict.FAIL and not gone
    assert result.reason == "suite error: AttributeError: 'Open' object has no attribute 'uuid'"
