"""``nfgate analyze --master spark://...`` on a real Spark standalone cluster: a master
and a worker started from pyspark's own launcher (``bin/spark-class``), on 127.0.0.1
with random ports, their executors in JVMs and Python workers of their own.

The executors are given a PYTHONPATH whose ``nfgate`` refuses to import, standing for
a node where nfgate is not installed: the job can only succeed with the copy of nfgate
the driver ships (nfgate.analysis.storage.ship_package)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pyspark
import pytest

from tests.analysis.conftest import table

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
HIDDEN = 'raise ImportError("this executor imported an installed nfgate, not the shipped one")\n'


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], seconds: float = 90) -> re.Match[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    pytest.fail(f"no {pattern!r} in {log.name}:\n{log.read_text(errors='replace')[-3000:]}")


def _daemon(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_CLASS), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its JVM and children are one process group, killed as one
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("cluster")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        # The master's REST submission server listens on a fixed port (6066) unless disabled.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_log = tmp / "master.log"
        procs.append(
            _daemon(
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                ],
                master_log,
                env,
            )
        )
        url = _wait_for(master_log, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", procs[0]).group(1)
        worker_log = tmp / "worker.log"
        args = ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--port", "0"]
        args += ["--webui-port", "0", "--cores", "2", "--memory", "1g", "--work-dir", str(tmp / "work")]
        procs.append(_daemon(args, worker_log, env))
        _wait_for(worker_log, r"Successfully registered with master", procs[1])
        yield {"url": url, "env": env, "tmp": tmp}
    finally:
        for proc in procs:
            _stop(proc)


def test_a_hidden_nfgate_does_not_import(tmp_path: Path) -> None:
    """The control for the cluster run below: the executors' PYTHONPATH really hides nfgate."""
    (tmp_path / "nfgate").mkdir()
    (tmp_path / "nfgate" / "__init__.py").write_text(HIDDEN)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", "import nfgate"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # not the checkout, whose nfgate/ the interpreter would find first
        timeout=60,
    )
    assert proc.returncode != 0 and "not the shipped one" in proc.stderr


def test_analyze_on_a_standalone_cluster_matches_the_local_run(
    cluster: dict[str, Any], run: dict[str, Any]
) -> None:
    hidden = cluster["tmp"] / "hidden"
    (hidden / "nfgate").mkdir(parents=True)
    (hidden / "nfgate" / "__init__.py").write_text(HIDDEN)
    out = cluster["tmp"] / "out"
    env = {**cluster["env"], "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nfgate",
            "analyze",
            run["capture"].as_uri(),  # URIs: listed and written through Spark's filesystem layer
            "--out",
            out.as_uri(),
            "--master",
            cluster["url"],
            "--conf",
            f"spark.executorEnv.PYTHONPATH={hidden}",
            "--conf",
            "spark.cores.max=2",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith(f"-> {out.as_uri()}/report.html")
    # The executors ran in the worker's own directory (an application per run).
    assert list((cluster["tmp"] / "work").glob("app-*/0"))
    mine = {"out": out}
    for name in (
        "commands",
        "exchanges",
        "malformed",
        "aggregates/protocol",
        "aggregates/service",
        "aggregates/peer",
    ):
        rows = sorted(map(repr, table(mine, name)))
        assert rows == sorted(map(repr, table(run, name))), name
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(run["summary"]))
    assert (out / "report.html").read_text() == (run["out"] / "report.html").read_text()
    assert pq.read_table(out / "commands").num_rows == run["summary"]["messages"]


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nfgate", "analyze", *args, "--master", "local[1]"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_uri_that_cannot_be_read_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _analyze("nosuchfs://bucket/captures", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("nfgate: analyze: cannot read nosuchfs://bucket/captures (")
        and "nosuchfs" in last[40:]
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _analyze(empty.as_uri(), "--out", (tmp_path / "out").as_uri())
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"nfgate: analyze: no capture segments (capture-*.parquet) in {empty.as_uri()}"
    )


def test_a_bad_conf_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _analyze(str(tmp_path), "--out", str(tmp_path / "out"), "--conf", "spark.executor.memory")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "nfgate: --conf: expected KEY=VALUE, got 'spark.executor.memory'"
    ]
