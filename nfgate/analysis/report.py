"""``report.html``: one self-contained page (no script, no link, no remote resource) with
the summary's tables and two plots drawn by matplotlib as inline SVG.

Runs on the driver with what :func:`nfgate.analysis.queries.summary` and
:func:`~nfgate.analysis.queries.plot_data` collected: small aggregates, never a table.
"""

from __future__ import annotations

import datetime
import html
import io
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

__all__ = ["render"]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td.text, th.text { text-align: left; }
.figure svg { max-width: 100%; height: auto; }
"""


def render(summary: dict[str, Any], plots: dict[str, Any]) -> str:
    """The page for ``summary`` (summary.json's content) and ``plots`` (plot_data)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>nfgate capture report</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>nfgate capture report</h1>",
        _overview(summary),
        "<h2>Protocols</h2>",
        _table(
            summary["protocols"],
            [
                "protocol",
                "messages_in",
                "messages_out",
                "bytes_in",
                "bytes_out",
                "malformed",
                "peers",
                "requests",
                "answered",
                "p50_us",
                "p90_us",
                "p99_us",
            ],
        ),
        "<h2>Client latency at the gateway</h2>",
        "<p>From a client's request read to its final reply sent, per protocol.</p>",
        _figure(_latency_svg(plots["latency"])),
        "<h2>Messages over time</h2>",
        _figure(_timeline_svg(plots["timeline"], plots["timeline_step_ns"])),
        "<h2>Services</h2>",
        _table(
            summary["services"],
            ["service", "side", "protocols", "requests", "answered", "errors", "p50_us", "p90_us", "p99_us"],
        ),
        "<h2>Busiest peers</h2>",
        _table(
            summary["peers"],
            ["gateway", "edge", "protocol", "peer", "dialects", "messages", "bytes", "malformed"],
        ),
        "<h2>Malformed messages</h2>",
        _table(summary["malformed_reasons"], ["protocol", "error", "count"])
        if summary["malformed_reasons"]
        else "<p>None: every captured message decoded.</p>",
        *_skipped(summary),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _skipped(summary: dict[str, Any]) -> list[str]:
    if not summary.get("segments_skipped"):
        return []
    listed = summary.get("skipped") or []
    more = summary["segments_skipped"] - len(listed)
    note = f"<p>And {more} more (counted, not listed).</p>" if more > 0 else ""
    return ["<h2>Segments skipped</h2>", _table(listed, ["segment", "reason"]) + note]


def _when(ts_ns: int | None) -> str:
    if ts_ns is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts_ns / 1e9, datetime.UTC).isoformat(timespec="milliseconds")


def _overview(s: dict[str, Any]) -> str:
    rows = [
        ("segments read", s["segments"]),
        ("segments skipped", s.get("segments_skipped", 0)),
        ("messages", s["messages"]),
        ("bytes", s["bytes"]),
        ("malformed messages", s["malformed"]),
        ("request/reply exchanges", s["exchanges"]),
        ("requests without a reply in the capture", s["unanswered"]),
        ("first message", _when(s["first_ts_ns"])),
        ("last message", _when(s["last_ts_ns"])),
    ]
    window = s.get("window") or {}
    for key, label in (("since_ns", "window from"), ("until_ns", "window until (excluded)")):
        if window.get(key) is not None:
            rows.append((label, _when(window[key])))
    body = "".join(
        f'<tr><th class="text">{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>' for k, v in rows
    )
    return f"<table>{body}</table>"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in sorted(value, key=str))
    return f"{value:,}" if isinstance(value, int) else str(value)


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "<p>None.</p>"
    text = {c for c in columns if any(isinstance(r.get(c), str | list) for r in rows)}

    def cls(c: str) -> str:
        return ' class="text"' if c in text else ""

    head = "".join(f"<th{cls(c)}>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td{cls(c)}>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(svg: str | None) -> str:
    return f'<div class="figure">{svg}</div>' if svg else "<p>No data.</p>"


def _svg(fig: Any) -> str:
    import matplotlib
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    # The same capture gives the same report, byte for byte: no date in the SVG's
    # metadata, and its element ids hashed with a fixed salt rather than a random one.
    with matplotlib.rc_context({"svg.hashsalt": "nfgate"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: inline in HTML


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display on a Spark driver
    import matplotlib.pyplot as plt

    return plt


def _name(protocol: str | None) -> str:
    # A record without a protocol (a capture not written by nfgate) still gets a line.
    return protocol if protocol is not None else "(none)"


def _latency_svg(points: Sequence[dict[str, Any]]) -> str | None:
    if not points:
        return None
    plt = _pyplot()
    series: dict[str, dict[int, int]] = defaultdict(dict)
    for p in points:
        if p["bucket"] is not None:
            series[_name(p["protocol"])][int(p["bucket"])] = int(p["count"])
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for protocol, buckets in sorted(series.items()):
        xs = sorted(buckets)
        # Bucket b holds latencies in [10^(b/10), 10^((b+1)/10)) µs: drawn at its middle.
        mids = [10 ** ((b + 0.5) / 10) for b in xs]
        ax.plot(mids, [buckets[b] for b in xs], marker="o", drawstyle="steps-mid", label=protocol)
    ax.set_xscale("log")
    ax.set_xlabel("latency (µs, log scale)")
    ax.set_ylabel("requests")
    ax.legend()
    return _svg(fig)


def _timeline_svg(points: Sequence[dict[str, Any]], step_ns: int) -> str | None:
    if not points:
        return None
    plt = _pyplot()
    step_s = step_ns / 1e9
    counts: dict[str, dict[int, int]] = defaultdict(dict)
    for p in points:
        if p["step"] is not None:  # a record without a time: not on a time axis
            counts[_name(p["protocol"])][int(p["step"])] = int(p["count"])
    if not counts:
        return None
    last = max(step for steps in counts.values() for step in steps)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for protocol, steps in sorted(counts.items()):
        # Every step, the empty ones as 0: a line across a quiet spell would invent traffic.
        ax.plot(
            [i * step_s for i in range(last + 1)],
            [steps.get(i, 0) / step_s for i in range(last + 1)],
            label=protocol,
        )
    ax.set_xlabel("seconds since the first message")
    ax.set_ylabel("messages per second")
    ax.legend()
    return _svg(fig)
