"""The console output: one line per case as it finishes (coloured on a terminal), then a
summary. No progress-bar redraws, so logs and CI output stay readable."""

from __future__ import annotations

import click

from nfgate.conformance.model import Case, CaseResult, RunReport, Verdict

__all__ = ["COLOURS", "case_line", "summary"]

COLOURS = {
    Verdict.PASS: "green",
    Verdict.FAIL: "red",
    Verdict.NON_STRICT: "yellow",
    Verdict.INFO: "blue",
    Verdict.SKIP: "bright_black",
}


def case_line(index: int, total: int, case: Case, result: CaseResult, colour: bool) -> str:
    verdict = (
        click.style(f"{result.verdict.value:10}", fg=COLOURS[result.verdict])
        if colour
        else f"{result.verdict.value:10}"
    )
    reason = f"  -- {result.reason}" if result.reason and result.verdict is not Verdict.PASS else ""
    return f"[{index:>3}/{total}] {result.id:18} {verdict} {result.title}{reason}"


def summary(report: RunReport, colour: bool) -> str:
    counts = report.counts()
    parts = []
    for verdict in Verdict:
        text = f"{verdict.value} {counts[verdict.value]}"
        parts.append(click.style(text, fg=COLOURS[verdict]) if colour and counts[verdict.value] else text)
    o = report.options
    outcome = "FAILED" if report.failed() else "OK"
    return (
        f"{o.protocol}/{o.role} at {o.endpoint} (dialect {report.dialect}): "
        f"{len(report.results)} cases in {report.duration_s:.1f} s: " + ", ".join(parts) + f"  => {outcome}"
    )
