"""index.html: one self-contained page (no scripts, no external files) a person can read:
a summary, a table of cases with coloured verdicts, then each case's clause, expected vs
actual and every frame exchanged (hex and decoded)."""

from __future__ import annotations

from html import escape

from nfgate.conformance.curve import SuiteCurve
from nfgate.conformance.model import CaseResult, FrameRecord, RunReport, Verdict

__all__ = ["index_html"]

BACKGROUND = {
    Verdict.PASS: "#d9f2d9",
    Verdict.FAIL: "#f8d0d0",
    Verdict.NON_STRICT: "#fbe9c0",
    Verdict.INFO: "#d6e6fa",
    Verdict.SKIP: "#e6e6e6",
}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #bbb; padding: 3px 6px; text-align: left; vertical-align: top; font-size: 0.9em; }
th { background: #f0f0f0; }
.verdict { font-weight: bold; white-space: nowrap; }
.summary span { display: inline-block; padding: 2px 8px; margin-right: 6px; border-radius: 3px; }
code, pre, .hex { font-family: ui-monospace, monospace; font-size: 0.85em; }
pre { white-space: pre-wrap; word-break: break-all; margin: 0; }
.case { border: 1px solid #ccc; border-left-width: 8px; padding: 0.5em 1em; margin: 1em 0; }
.frames td.hex { word-break: break-all; max-width: 36em; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; }
dt { font-weight: bold; }
"""


def _verdict_cell(verdict: Verdict) -> str:
    return f'<td class="verdict" style="background:{BACKGROUND[verdict]}">{escape(verdict.value)}</td>'


def _frames(records: tuple[FrameRecord, ...]) -> str:
    if not records:
        return "<p>No frames were exchanged.</p>"
    rows = []
    for f in records:
        hexes = "<br>".join(escape(x.hex()) or "<i>(empty)</i>" for x in f.frames)
        rows.append(
            f"<tr><td>{f.at_ms:.1f}</td><td>{escape(f.direction)}</td><td>{escape(f.peer)}</td>"
            f'<td class="hex">{hexes}</td><td><pre>{escape(f.decoded)}</pre></td></tr>'
        )
    return (
        '<table class="frames"><tr><th>ms</th><th>dir</th><th>socket</th><th>frames (hex)</th>'
        "<th>decoded</th></tr>" + "".join(rows) + "</table>"
    )


def _case_section(r: CaseResult) -> str:
    c = r.clause
    note = f" <i>({escape(c.note)})</i>" if c.note else ""
    return (
        f'<section class="case" id="case-{escape(r.id)}" style="border-left-color:{BACKGROUND[r.verdict]}">'
        f"<h3>{escape(r.id)} — {escape(r.title)} — {escape(r.verdict.value)}</h3><dl>"
        f"<dt>Clause</dt><dd>[{escape(c.keyword)}] {escape(c.section)}: {escape(c.text)}{note}</dd>"
        f"<dt>Reason</dt><dd>{escape(r.reason) or '—'}</dd>"
        f"<dt>Expected</dt><dd><pre>{escape(r.expected) or '—'}</pre></dd>"
        f"<dt>Actual</dt><dd><pre>{escape(r.actual) or '—'}</pre></dd>"
        f"<dt>Duration</dt><dd>{r.duration_s:.2f} s</dd></dl>"
        f"{_frames(r.frames)}</section>"
    )


def _curve(curve: SuiteCurve | None) -> str:
    if curve is None:
        return "off"
    if curve.client is None:
        return f"on (the suite a server, key {escape(curve.public_key.decode())})"
    return f"on (the suite a client of {escape(curve.client.server_key.decode())})"


def index_html(report: RunReport) -> str:
    o = report.options
    title = f"nfgate conformance: {o.protocol} {o.role} at {o.endpoint}"
    counts = report.counts()
    badges = "".join(
        f'<span style="background:{BACKGROUND[v]}">{escape(v.value)}: {counts[v.value]}</span>'
        for v in Verdict
    )
    rows = "".join(
        f'<tr class="case-row" data-id="{escape(r.id)}" data-verdict="{escape(r.verdict.value)}">'
        f'<td><a href="#case-{escape(r.id)}">{escape(r.id)}</a></td>{_verdict_cell(r.verdict)}'
        f"<td>{escape(r.title)}</td><td>{escape(r.clause.keyword)}</td><td>{escape(r.clause.section)}</td>"
        f"<td>{escape(r.reason)}</td></tr>"
        for r in report.results
    )
    outcome = "FAILED" if report.failed() else "OK"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{escape(title)}</h1>
<p>Dialect <b>{escape(report.dialect)}</b> (asked: {escape(o.dialect)}), timeout {o.timeout_s} s,
heartbeat {o.heartbeat_ms} ms, strict {"yes" if o.strict else "no"}, CURVE {_curve(o.curve)}. Started {escape(report.started)},
{report.duration_s:.1f} s, nfgate {escape(report.version)}. Result: <b>{outcome}</b>.</p>
<p class="summary">{badges}</p>
<table id="cases"><thead><tr><th>Case</th><th>Verdict</th><th>Title</th><th>Keyword</th><th>Section</th>
<th>Reason</th></tr></thead><tbody>{rows}</tbody></table>
<h2>Cases</h2>
{"".join(_case_section(r) for r in report.results)}
</body></html>
"""
