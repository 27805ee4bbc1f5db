"""The suite against nfgate itself, for every role nfgate plays: all PASS (INFO allowed),
but the form case of a deployed dialect (NorFab's ASCII command frames, DagBox's 4-byte
type part), which nfgate speaks to such peers and the suite reports against the spec.

In-process gateway (tests/gateway/conftest.py) with 200 ms heartbeats, and once through
``nfgate serve`` + the ``nfgate conformance`` command line with ``--report``.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nfgate.cli import serve
from nfgate.conformance.model import Verdict
from tests.gateway.conftest import Running

from .conftest import HEARTBEAT_MS, assert_all_pass, run_suite

LISTENING = re.compile(r"nfgate: (\S+) edge \(([^)]+)\) listening on (tcp://\S+)")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("dialect", ["spec", "norfab"])
def test_nfp_broker_suite_passes_against_nfgate(fast_gateway: Running, dialect: str) -> None:
    report = run_suite("nfp", "broker", fast_gateway.endpoint("nfp"), dialect)
    assert report.dialect == dialect
    assert len(report.results) >= 30
    assert_all_pass(report, frozenset({"NFP-BROKER-3.2"} if dialect == "norfab" else ()))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dialect", ["spec", "dagbox"])
def test_dcp_broker_suite_passes_against_nfgate(fast_gateway: Running, dialect: str) -> None:
    report = run_suite("dcp", "broker", fast_gateway.endpoint("dcp"), dialect)
    assert report.dialect == dialect
    assert len(report.results) >= 20
    assert_all_pass(report, frozenset({"DCP-BROKER-5.2"} if dialect == "dagbox" else ()))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("protocol", "expected"), [("nfp", "spec"), ("dcp", "spec")])
def test_auto_dialect_detects_the_spec_dialect(fast_gateway: Running, protocol: str, expected: str) -> None:
    report = run_suite(protocol, "broker", fast_gateway.endpoint(protocol), "auto", include=("*-5.1",))
    assert report.dialect == expected


def _other_edges_off() -> list[str]:
    """Every ``--no-...`` switch of ``nfgate serve`` but those of the NFP and DCP edges."""
    flags = [opt for param in serve.params for opt in param.opts if opt.startswith("--no-")]
    return [flag for flag in flags if flag not in ("--no-nfp", "--no-dcp")]


def _serve(tmp_path: Path) -> tuple[subprocess.Popen[bytes], dict[str, str], Path]:
    config = tmp_path / "nfgate.toml"
    config.write_text(
        f"[edges.nfp]\nheartbeat_ms = {HEARTBEAT_MS}\nliveness = 3\n"
        f"[edges.dcp]\nheartbeat_ms = {HEARTBEAT_MS}\nliveness = 3\n"
    )
    err = tmp_path / "serve.err"
    cmd = [
        sys.executable,
        "-m",
        "nfgate",
        "serve",
        "--config",
        str(config),
        "--bind",
        "nfp=tcp://127.0.0.1:0",
        "--bind",
        "dcp=tcp://127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "data"),
        # Only the edges under test: the others' default ports may be taken on this machine.
        *_other_edges_off(),
    ]
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp_path)
    edges: dict[str, str] = {}
    for _ in range(400):
        edges = {m[0]: m[2] for m in LISTENING.findall(err.read_text())}
        if {"nfp", "dcp"} <= set(edges) or proc.poll() is not None:
            break
        time.sleep(0.05)
    if not {"nfp", "dcp"} <= set(edges):
        proc.kill()
        pytest.fail(f"nfgate serve did not start:\n{err.read_text()}")
    return proc, edges, err


def _stop(proc: subprocess.Popen[bytes]) -> int | None:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        return None


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("protocol", "dialect"), [("nfp", "norfab"), ("dcp", "spec")])
def test_cli_against_nfgate_serve_writes_reports(tmp_path: Path, protocol: str, dialect: str) -> None:
    proc, edges, err = _serve(tmp_path)
    try:
        out = tmp_path / "report"
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "nfgate",
                "conformance",
                "--protocol",
                protocol,
                "--role",
                "broker",
                "--endpoint",
                edges[protocol],
                "--dialect",
                dialect,
                "--timeout",
                "1.5",
                "--heartbeat-ms",
                str(HEARTBEAT_MS),
                "--report",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=200,
            cwd=tmp_path,
        )
    finally:
        status = _stop(proc)
    # In NorFab's dialect nfgate's command frames are NorFab's: that one departure FAILs.
    departures = {"NFP-BROKER-3.2"} if dialect == "norfab" else set()
    assert cli.returncode == (1 if departures else 0), "\n".join(
        line for line in (cli.stdout + cli.stderr).splitlines() if "PASS " not in line
    )
    assert status == 0, err.read_text()
    data = json.loads((out / "report.json").read_text())
    assert data["failed"] is bool(departures) and data["dialect"] == dialect
    assert {c["id"] for c in data["cases"] if c["verdict"] == "FAIL"} == departures
    assert all(c["verdict"] in ("PASS", "INFO", "SKIP", "FAIL") for c in data["cases"])
    assert (out / "junit.xml").read_text().startswith("<?xml")
    assert "<table" in (out / "index.html").read_text()
    # One line per case (no progress-bar redraws when stdout is not a terminal) + a summary.
    lines = [line for line in cli.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == len(data["cases"])
    assert "\r" not in cli.stdout
    assert f"{Verdict.FAIL.value} {len(departures)}" in cli.stdout
