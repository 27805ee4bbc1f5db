"""The report files: index.html's table matches report.json row for row, junit.xml has
one testcase per case, and index.html renders in headless Chromium."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from nfgate.conformance.report import write_reports
from tests.gateway.conftest import Running
from tests.tls import in_ci

from .conftest import run_suite

ROOT = Path(__file__).resolve().parents[2]


class CaseRows(HTMLParser):
    """Collects the case table's rows: (data-id, data-verdict, the verdict cell's text)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("class") == "case-row":
            self.rows.append(
                {"id": a.get("data-id") or "", "verdict": a.get("data-verdict") or "", "cell": ""}
            )
        elif tag == "td" and a.get("class") == "verdict" and self.rows:
            self._cell = "verdict"

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell == "verdict":
            self.rows[-1]["cell"] += data.strip()


@pytest.fixture
def report_dir(fast_gateway: Running, tmp_path: Path) -> Path:
    # A mix of verdicts: PASS, INFO, and FAIL (DagBox's 4-byte type parts, DCP-BROKER-5.2).
    report = run_suite(
        "dcp", "broker", fast_gateway.endpoint("dcp"), "dagbox", include=("*-6.1", "*-7.5", "*-7.8", "*-5.*")
    )
    out = tmp_path / "report"
    write_reports(report, out)
    return out


@pytest.mark.timeout(60)
def test_html_table_matches_report_json(report_dir: Path) -> None:
    data = json.loads((report_dir / "report.json").read_text())
    parser = CaseRows()
    parser.feed((report_dir / "index.html").read_text())
    assert [(r["id"], r["verdict"], r["cell"]) for r in parser.rows] == [
        (c["id"], c["verdict"], c["verdict"]) for c in data["cases"]
    ]
    assert {c["verdict"] for c in data["cases"]} >= {"PASS", "INFO", "FAIL"}
    html = (report_dir / "index.html").read_text()
    for case in data["cases"]:
        assert f'id="case-{case["id"]}"' in html  # each case's detail section
        for frame in case["frames"]:
            for hexed in frame["frames"]:
                assert hexed in html  # every frame, in hex


@pytest.mark.timeout(60)
def test_junit_has_one_testcase_per_case(report_dir: Path) -> None:
    data = json.loads((report_dir / "report.json").read_text())
    suite = ET.parse(report_dir / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == len(data["cases"]) == int(suite.get("tests", "-1"))
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert len(skipped) == data["summary"]["SKIP"] == int(suite.get("skipped", "-1"))
    assert sum(c.find("failure") is not None for c in cases) == data["summary"]["FAIL"]


@pytest.mark.timeout(120)
def test_screenshot_of_the_html_report(report_dir: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import screenshot_report
    finally:
        sys.path.pop(0)
    if screenshot_report.find_chromium() is None:
        missing = (
            "no headless Chromium installed (/usr/bin/chromium, chromium, chromium-browser, google-chrome)"
        )
        if in_ci():  # .ci/run installs it: in CI its absence is a failure
            pytest.fail(missing)
        pytest.skip(missing)
    png = tmp_path / "report.png"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "screenshot_report.py"),
            str(report_dir / "index.html"),
            str(png),
        ],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
