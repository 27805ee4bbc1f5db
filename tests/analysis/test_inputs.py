"""What ``nfgate analyze`` does before Spark runs, and the pieces that run without it:
the segment check (nfgate/analysis/inputs.py), the source listing and the shipped
package (storage.py), Spark's start-up checks and failure lines (session.py), the
decoding of odd records (job.decode_batches) and the report's plots."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nfgate.analysis import inputs, report, session, storage
from nfgate.analysis.job import decode_batches
from nfgate.errors import ConfigError
from tests.analysis.conftest import analyze_cli
from tests.analysis.damaged import NO_FOOTER, damaged_source, odd_segment

pytestmark = [pytest.mark.timeout(120)]


def test_each_damaged_segment_is_skipped_with_its_reason(tmp_path: Path) -> None:
    expected = damaged_source(tmp_path / "src")
    checked = inputs.check_local(storage.listing(tmp_path / "src"))
    said = {str(Path(s.segment).relative_to(tmp_path / "src")): s.reason for s in checked.skipped}
    assert said == {name: reason for name, reason in expected.items() if reason is not None}
    read = sorted(Path(p.removeprefix("file://")).name for p in checked.usable)
    assert read == sorted(name for name, reason in expected.items() if reason is None)


def test_a_source_without_a_usable_segment_is_one_line_exit_2_before_any_jvm(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "capture-20261125T120000-1-00001.parquet").write_bytes(os.urandom(100))
    (source / "capture-20261125T120000-1-00002.parquet.partial").write_bytes(b"PAR1")
    proc = analyze_cli(
        str(source), "--out", str(tmp_path / "out"), env={**os.environ, "JAVA_HOME": "/nonexistent"}
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"nfgate: analyze: no usable capture segment in {source}: 2 skipped "
        f"({source}/capture-20261125T120000-1-00001.parquet: {NO_FOOTER} and 1 more)"
    ]


def test_an_unreadable_segment_is_skipped_with_the_systems_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = damaged_source(tmp_path / "src")
    locked = tmp_path / "src" / next(name for name, reason in expected.items() if reason is None)
    locked.chmod(0)
    if os.geteuid() == 0:  # root reads a mode-000 file: refuse it the way the kernel would
        real = Path.open

        def refuse(self: Path, *args: Any, **kwargs: Any) -> Any:
            if self == locked:
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", refuse)
    checked = inputs.check_local(storage.listing(tmp_path / "src"))
    assert ("cannot read: Permission denied") in {
        s.reason for s in checked.skipped if s.segment == str(locked)
    }
    assert locked.as_uri() not in checked.usable


def test_a_source_that_cannot_be_listed_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "src"
    (source / "gw2").mkdir(parents=True)
    (source / "capture-20261125T120000-1-00001.parquet").write_bytes(b"")
    if os.geteuid() == 0:  # root lists a mode-000 directory: refuse it the way the kernel would
        real = os.scandir
        refused: set[str] = set()

        def scandir(path: Any = ".") -> Any:
            if os.fspath(path) in refused:
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return real(path)

        monkeypatch.setattr(os, "scandir", scandir)
        deny = refused.add
    else:

        def deny(path: str) -> None:
            os.chmod(path, 0)

    deny(str(source / "gw2"))
    listed = storage.listing(source)
    assert [(s.segment, s.reason) for s in listed.skipped] == [
        (str(source / "gw2"), "cannot list this directory: Permission denied")
    ]
    deny(str(source))
    with pytest.raises(
        ConfigError, match=rf"^analyze: cannot read {re.escape(str(source))}: Permission denied$"
    ):
        storage.listing(source)
    if os.geteuid() != 0:
        os.chmod(source, 0o700)
        os.chmod(source / "gw2", 0o700)


def test_odd_records_decode_as_malformed_rows(tmp_path: Path) -> None:
    """Nulls (a capture not written by nfgate) and a message the gateway cut: rows with
    the reason, never an exception in Spark's Python worker."""
    odd_segment(tmp_path / "odd.parquet")
    table = pq.read_table(tmp_path / "odd.parquet")
    cut = table.slice(0, 1).to_pylist()[0] | {"frames": [b"", b"\x01"], "truncated": "frames", "ts_ns": 7}
    table = pa.concat_tables([table, pa.Table.from_pylist([cut], schema=table.schema)])
    rows = [r for batch in decode_batches(iter(table.to_batches())) for r in batch.to_pylist()]
    assert [r["error"] for r in rows] == [
        "capture: a null frame list or frame in the record",
        "capture: a null frame list or frame in the record",
        rows[2]["error"],
        "capture: the gateway dropped this message (more frames than max_frames); "
        "only its first 2 frame(s) were captured",
    ]
    assert rows[2]["error"] is not None  # no protocol: malformed, whatever the codec registry says
    assert [(r["frame_count"], r["bytes"]) for r in rows] == [(0, 0), (1, 0), (1, 1), (2, 1)]
    assert rows[3]["preview"] == "- 01" and rows[3]["type"] is None


def test_the_report_draws_records_without_a_time_or_protocol() -> None:
    summary: dict[str, Any] = {
        "segments": 1,
        "segments_skipped": 2,
        "skipped": [{"segment": "a.parquet", "reason": "empty file (0 bytes)"}],
        "messages": 2,
        "bytes": 0,
        "malformed": 2,
        "exchanges": 0,
        "unanswered": 0,
        "first_ts_ns": None,
        "last_ts_ns": None,
        "protocols": [],
        "services": [],
        "peers": [],
        "malformed_reasons": [],
    }
    plots = {
        "latency": [{"protocol": None, "bucket": None, "count": 1}],
        "timeline": [{"protocol": None, "step": None, "count": 1}, {"protocol": None, "step": 0, "count": 1}],
        "timeline_step_ns": 1_000_000,
    }
    page = report.render(summary, plots)
    assert "(none)" in page and "Segments skipped" in page and "And 1 more" in page


def test_the_shipped_zip_holds_every_package_directory(tmp_path: Path) -> None:
    """nfgate.codecs, .transports and .conformance live outside nfgate/ in a checkout:
    an executor without nfgate installed imports them from the zip alone."""
    added: list[str] = []
    spark = SimpleNamespace(sparkContext=SimpleNamespace(addPyFile=added.append))
    archive = storage.ship_package(spark, tmp_path)
    assert added == [str(archive)]
    names = set(zipfile.ZipFile(archive).namelist())
    for module in (
        "nfgate/__init__.py",
        "nfgate/analysis/classify.py",
        "nfgate/codecs/__init__.py",
        "nfgate/codecs/dcp/codec.py",
        "nfgate/transports/__init__.py",
        "nfgate/conformance/__init__.py",
    ):
        assert module in names, module
    # -S: no site, so no editable install's finder to fall back on; only the
    # dependencies' directory is added to the path, after the zip.
    code = (
        "import sys; sys.path[:0] = sys.argv[1:]\n"
        "import nfgate.analysis.classify, nfgate.codecs.dcp, nfgate.transports\n"
        "for m in (nfgate.analysis.classify, nfgate.codecs.dcp, nfgate.transports):\n"
        "    assert m.__file__.startswith(sys.argv[1]), m.__file__\n"
        "print(nfgate.analysis.classify.classify('dcp', 'zmq', [b'x'])['error'] is not None)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code, str(archive), sysconfig.get_paths()["purelib"]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,  # not the checkout, whose nfgate/ the interpreter would find first
        env={"PATH": os.environ.get("PATH", "")},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr[-2000:]


def test_masters_and_properties_spark_would_refuse_late_are_one_line_exit_2(tmp_path: Path) -> None:
    damaged_source(tmp_path / "src")
    env = {k: v for k, v in os.environ.items() if k not in ("HADOOP_CONF_DIR", "YARN_CONF_DIR")}
    for args, line in (
        (
            ["--master", "local[0]"],
            "nfgate: analyze: --master must be local[*], local[N], yarn, spark://HOST:PORT or k8s://URL, "
            "got 'local[0]'",
        ),
        (
            ["--master", "yarn"],
            "nfgate: analyze: --master yarn needs HADOOP_CONF_DIR or YARN_CONF_DIR set "
            "(the directory of the cluster's configuration)",
        ),
        (
            ["--master", "spark://127.0.0.1:1"],
            "nfgate: analyze: cannot reach the Spark master spark://127.0.0.1:1 (127.0.0.1:1: Connection refused)",
        ),
        (
            ["--conf", "spark.pyspark.driver.python=/usr/bin/python3"],
            "nfgate: analyze: --conf spark.pyspark.driver.python cannot apply: the driver is this nfgate "
            "process; run nfgate with that Python instead",
        ),
        (
            ["--until", "9999-12-31"],
            "nfgate: --until: '9999-12-31' is outside the times a capture holds "
            "(1677-09-21T00:12:44Z to 2262-04-11T23:47:16Z)",
        ),
        (
            ["--since", "1600-01-01"],
            "nfgate: --since: '1600-01-01' is outside the times a capture holds "
            "(1677-09-21T00:12:44Z to 2262-04-11T23:47:16Z)",
        ),
    ):
        proc = analyze_cli(str(tmp_path / "src"), "--out", str(tmp_path / "out"), *args, env=env)
        assert (proc.returncode, proc.stderr.strip().splitlines()) == (2, [line]), args
    # Set, but to a folder without yarn-site.xml: the YARN client would retry 0.0.0.0:8032.
    missing = tmp_path / "no-conf"
    proc = analyze_cli(
        str(tmp_path / "src"),
        "--out",
        str(tmp_path / "out"),
        "--master",
        "yarn",
        env={**env, "HADOOP_CONF_DIR": str(missing)},
    )
    assert (proc.returncode, proc.stderr.strip().splitlines()) == (
        2,
        [
            f"nfgate: analyze: --master yarn: no yarn-site.xml in {missing} "
            "(HADOOP_CONF_DIR, YARN_CONF_DIR: the directory of the cluster's configuration)"
        ],
    )


def test_java_is_blamed_only_when_it_is_missing_or_too_old(tmp_path: Path) -> None:
    assert session.java_problem() is None  # the Java 17 Spark runs on here
    missing = session.java_problem({"JAVA_HOME": str(tmp_path / "none")})
    assert missing == "Spark needs Java 17 or later, and there is no java in JAVA_HOME"
    old = tmp_path / "old" / "bin" / "java"
    old.parent.mkdir(parents=True)
    old.write_text("#!/bin/sh\necho 'openjdk version \"1.8.0_392\"' >&2\n")
    old.chmod(0o755)
    assert session.java_problem({"JAVA_HOME": str(tmp_path / "old")}) == (
        f"Spark needs Java 17 or later, and {old} is Java 8"
    )


class _Java:
    """A stand-in for a Java exception reached through Py4J."""

    def __init__(self, message: str | None, cause: _Java | None = None, name: str = "SparkException") -> None:
        self.message, self.cause, self.name = message, cause, name

    def getMessage(self) -> str | None:  # Java's names, as Py4J shows them
        return self.message

    def getCause(self) -> _Java | None:
        return self.cause

    def getClass(self) -> Any:
        return SimpleNamespace(getSimpleName=lambda: self.name)


def test_a_spark_failure_is_told_by_its_cause(tmp_path: Path) -> None:
    def failure(java: _Java) -> Exception:
        exc = Exception("An error occurred while calling o42.parquet.\n\tat org.apache...")
        exc.java_exception = java  # type: ignore[attr-defined]
        return exc

    refused = _Java("Connection refused", name="ConnectException")
    chain = _Java("An error has occurred.", _Java("Connection refused: /127.0.0.1:1", refused))
    assert session.reason(failure(chain)) == "An error has occurred: Connection refused: /127.0.0.1:1"
    assert session.reason(failure(_Java("Asked to run locally with 0 threads"))) == (
        "Asked to run locally with 0 threads"
    )
    worker = _Java("Traceback (most recent call last):\n  File ...\nTypeError: boom", name="PythonException")
    assert session.reason(failure(_Java("Job aborted due to stage failure", worker))) == (
        "Job aborted due to stage failure: TypeError: boom"
    )
    log = tmp_path / "spark.log"
    log.write_text(
        "WARNING: Using incubator modules\n"
        'Exception in thread "main" org.apache.spark.SparkException: When running with master '
        "'yarn' either HADOOP_CONF_DIR or YARN_CONF_DIR must be set in the environment.\n"
        "\tat org.apache.spark.deploy...\n"
    )
    exited = RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number.")
    assert session.reason(exited, log).startswith("org.apache.spark.SparkException: When running with master")
    assert session.log_note(log) == f"; Spark's log: {log}"


@pytest.mark.parametrize("missing", ["pyarrow", "pyspark"])
def test_analyze_without_the_spark_extra_is_one_line_exit_2(tmp_path: Path, missing: str) -> None:
    # A plain install (or nfgate[capture], pyarrow only): the module cannot be imported.
    source = tmp_path / "src"
    source.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.modules[{missing!r}] = None; sys.argv[0] = 'nfgate'; import nfgate.__main__",
            "analyze",
            str(source),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"nfgate: analyze needs {missing}: pip install 'nfgate[spark]'"
    ]
    assert not (tmp_path / "out").exists()
