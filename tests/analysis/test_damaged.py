"""``nfgate analyze`` over damaged captures, on a local master: bad segments are skipped
and reported rather than ending the run, segments deleted under the job (the gateway's
``max_bytes`` budget) too, and Spark's own failures are one line."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nfgate.analysis import inputs, queries
from nfgate.analysis.job import analyze
from nfgate.errors import ConfigError
from tests.analysis.conftest import table
from tests.analysis.damaged import damaged_source, good_segment

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

CUT = "capture: the gateway dropped this message (more frames than max_frames); only its first 2 frame(s) were captured"


def _expect(summary: dict[str, Any], expected: dict[str, str | None], name: Any) -> None:
    said = {name(s["segment"]): s["reason"] for s in summary["skipped"]}
    assert said == {n: reason for n, reason in expected.items() if reason is not None}
    assert summary["segments_skipped"] == len(said)
    assert summary["segments"] == sum(reason is None for reason in expected.values())


def test_damaged_segments_are_skipped_and_the_rest_analysed(tmp_path: Path) -> None:
    source = tmp_path / "src"
    expected = damaged_source(source)
    lines: list[str] = []
    summary = analyze(source, tmp_path / "out", "local[1]", warn=lines.append)
    _expect(summary, expected, lambda s: str(Path(s).relative_to(source)))
    assert lines == [f"analyze: skipped {s['segment']}: {s['reason']}" for s in summary["skipped"]]
    # The good segment's 3 records and the odd one's 3, none of them as rows of nulls.
    commands = table({"out": tmp_path / "out"}, "commands")
    assert len(commands) == summary["messages"] == 6
    assert all(r["edge"] == "dcp" for r in commands)
    errors = sorted(r["error"] for r in commands if r["error"] is not None)
    assert errors[:3] == sorted([CUT, *["capture: a null frame list or frame in the record"] * 2])
    assert len(errors) == 4 and errors[3].startswith("unknown protocol None")
    (exchange,) = [e for e in table({"out": tmp_path / "out"}, "exchanges") if e["peer"] == "client"]
    assert exchange["latency_us"] == 1.0  # the request at 1 µs, its reply at 2 µs
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Segments skipped" in page and "empty file (0 bytes)" in page


def test_a_uri_source_is_checked_through_sparks_filesystem_layer(tmp_path: Path) -> None:
    source = tmp_path / "src"
    expected = damaged_source(source)
    lines: list[str] = []
    summary = analyze(source.as_uri(), (tmp_path / "out").as_uri(), "local[1]", warn=lines.append)
    # Hadoop writes file:/path where Python writes file:///path.
    _expect(summary, expected, lambda s: str(Path(s.removeprefix("file:")).relative_to(source)))
    assert len(lines) == summary["segments_skipped"] and summary["messages"] == 6


def test_segments_deleted_while_the_job_runs_are_skipped_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    first = good_segment(source)
    second = shutil.copy(first, source / "capture-20261125T120000-2-00001.parquet")
    shutil.copy(first, source / "capture-20261125T120000-3-00001.parquet")
    check = inputs.check_local

    def check_then_delete(listed: Any) -> Any:
        checked = check(listed)
        first.unlink()  # after the check, before Spark lists the files
        return checked

    tables = queries.tables

    def delete_then_tables(commands: Any) -> Any:
        Path(second).unlink()  # after Spark listed it, before it reads it
        return tables(commands)

    monkeypatch.setattr(inputs, "check_local", check_then_delete)
    monkeypatch.setattr(queries, "tables", delete_then_tables)
    lines: list[str] = []
    summary = analyze(source, tmp_path / "out", "local[1]", warn=lines.append)
    assert {Path(s["segment"]).name: s["reason"] for s in summary["skipped"]} == {
        first.name: "deleted before it was read",
        Path(second).name: "deleted while the job ran: rows Spark had not read yet are missing",
    }
    assert (summary["segments"], summary["messages"]) == (1, 3)
    assert len(lines) == 2


def test_spark_pyspark_python_is_the_executors_python(tmp_path: Path) -> None:
    """pyspark reads the executors' Python from PYSPARK_PYTHON; the property works too."""
    source = tmp_path / "src"
    source.mkdir()
    good_segment(source)
    marker = tmp_path / "ran"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\necho ran >> "{marker}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    before = os.environ.get("PYSPARK_PYTHON")
    conf = {"spark.pyspark.python": str(wrapper)}
    summary = analyze(source, tmp_path / "out", "local[1]", conf=conf)
    assert summary["messages"] == 3
    assert marker.exists()  # Spark started its Python workers through the wrapper
    assert os.environ.get("PYSPARK_PYTHON") == before  # the process is left as it was


def test_a_bad_spark_setting_is_one_line_naming_it(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    good_segment(source)
    with pytest.raises(ConfigError) as caught:
        analyze(source, tmp_path / "out", "local[1]", conf={"spark.sql.shuffle.partitions": "abc"})
    message = str(caught.value)
    assert message.startswith("analyze: cannot start Spark on local[1] (") and "\n" not in message
    assert "spark.sql.shuffle.partitions" in message and "Java" not in message


def test_a_segment_damaged_inside_fails_the_job_in_one_line_exit_1(tmp_path: Path) -> None:
    """Its footer is intact, so the check passes it; Spark fails on its data. Spark's
    JVM writes its stack traces to a log file the line names, not to the terminal."""
    source = tmp_path / "src"
    source.mkdir()
    directory = tmp_path / "many"
    from nfgate.capture import Capture, CaptureConfig

    rng = random.Random(7)
    cap = Capture(CaptureConfig(dir=directory), flush_s=3600)
    tap = cap.tap_for("dcp", "dcp", "zmq")
    for _ in range(2000):
        tap("in", "p", [b"", rng.randbytes(200)])
    cap.close()
    (segment,) = directory.glob("*.parquet")
    data = bytearray(segment.read_bytes())
    quarter = len(data) // 4
    data[quarter : 2 * quarter] = rng.randbytes(quarter)
    damaged = source / "capture-20261125T120000-1-00001.parquet"
    damaged.write_bytes(bytes(data))
    args = [str(source), "--out", str(tmp_path / "out"), "--master", "local[1]"]
    proc = subprocess.run(
        [sys.executable, "-m", "nfgate", "analyze", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # where the kept log goes
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("nfgate: analyze: the Spark job failed: ") and damaged.name in line
    (log,) = tmp_path.glob("nfgate-analyze-*.log")
    assert line.endswith(f"; Spark's log: {log}") and "Exception" in log.read_text()
