"""report.json (everything) and junit.xml (one testcase per case, for CI)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from nfgate.conformance.model import CaseResult, RunReport, Verdict

__all__ = ["junit_xml", "report_json"]


def report_json(report: RunReport) -> str:
    return json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"


def _details(result: CaseResult) -> str:
    c = result.clause
    lines = [
        f"verdict: {result.verdict.value}",
        f"clause: [{c.keyword}] {c.section}: {c.text}" + (f" ({c.note})" if c.note else ""),
        f"reason: {result.reason}",
        f"expected: {result.expected}",
        f"actual: {result.actual}",
        "frames:",
    ]
    for f in result.frames:
        hexes = " ".join(x.hex() or "-" for x in f.frames)
        lines.append(f"  {f.at_ms:8.1f} ms {f.direction:8} {f.peer}: {hexes}\n{'':14}{f.decoded}")
    return "\n".join(lines)


def junit_xml(report: RunReport) -> str:
    """JUnit XML: FAIL is a failure (NON-STRICT too under --strict), SKIP is skipped;
    the clause, expected/actual and the frames go to system-out."""
    counts = report.counts()
    strict = report.options.strict
    failures = counts[Verdict.FAIL.value] + (counts[Verdict.NON_STRICT.value] if strict else 0)
    o = report.options
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"nfgate conformance {o.protocol}/{o.role} ({report.dialect})",
        tests=str(len(report.results)),
        failures=str(failures),
        errors="0",
        skipped=str(counts[Verdict.SKIP.value]),
        time=f"{report.duration_s:.3f}",
        timestamp=report.started,
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (("endpoint", o.endpoint), ("dialect", report.dialect), ("strict", str(strict))):
        ET.SubElement(props, "property", name=key, value=value)
    for r in report.results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"{o.protocol}.{o.role}",
            name=f"{r.id} {r.title}",
            time=f"{r.duration_s:.3f}",
        )
        bad = r.verdict is Verdict.FAIL or (strict and r.verdict is Verdict.NON_STRICT)
        if bad:
            failure = ET.SubElement(
                case, "failure", message=f"{r.verdict.value}: {r.reason}", type=r.verdict.value
            )
            failure.text = _details(r)
        elif r.verdict is Verdict.SKIP:
            ET.SubElement(case, "skipped", message=r.reason)
        out = ET.SubElement(case, "system-out")
        out.text = _details(r)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
