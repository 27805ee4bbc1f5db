"""Reports of a conformance run: the console summary, and the files ``--report DIR``
writes (report.json, junit.xml, index.html)."""

from __future__ import annotations

from pathlib import Path

from nfgate.conformance.model import RunReport
from nfgate.conformance.report.files import junit_xml, report_json
from nfgate.conformance.report.html import index_html

__all__ = ["FILES", "write_reports"]

FILES = ("report.json", "junit.xml", "index.html")


def write_reports(report: RunReport, directory: Path) -> list[Path]:
    """Write the three report files into ``directory`` (created if needed); returns
    their paths. Raises OSError when the directory cannot be written."""
    directory.mkdir(parents=True, exist_ok=True)
    contents = (report_json(report), junit_xml(report), index_html(report))
    paths = []
    for name, text in zip(FILES, contents, strict=True):
        path = directory / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
