"""The suite against the real NorFab 0.25 (PyPI): its broker (``zmq_auth: false``, as
tests/interop/norfab_broker.py starts it) and one of its workers
(tests/interop/norfab_peer.py). The runs must reach the end and write a report;
NorFab's known departures from specs/nfp.md (docs/protocols/norfab-wire.md section 7)
must show as FAIL / NON-STRICT / INFO against their clause, never as suite errors.
"""

from __future__ import annotations

import importlib
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
import zmq.auth

from nfgate.conformance.curve import load_curve
from nfgate.conformance.model import RunReport, Verdict
from nfgate.conformance.report import write_reports

from .conftest import run_suite
from .peers import free_port

importlib.import_module("norfab")  # the test extra installs it: its absence fails, not skips
pytestmark = pytest.mark.interop

INTEROP = Path(__file__).resolve().parents[1] / "interop"
LISTENING = re.compile(r"listening on (tcp://\S+)")
NORFAB_HEARTBEAT_MS = 2500  # NFPBroker's and NFPWorker's default keepalive


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def norfab_broker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The broker's URL; ``indirect`` param "curve": NorFab's default, CURVE on."""
    err = tmp_path / "broker.err"
    extra = ["--zmq-auth"] if getattr(request, "param", None) == "curve" else []
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(INTEROP / "norfab_broker.py"),
                "--base-dir",
                str(tmp_path / "norfab"),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=tmp_path,
        )
    try:
        url = None
        for _ in range(400):
            found = LISTENING.search(err.read_text(errors="replace"))
            if found or proc.poll() is not None:
                url = found.group(1) if found else None
                break
            time.sleep(0.05)
        if url is None:
            pytest.fail(f"the NorFab broker did not start:\n{err.read_text(errors='replace')[-3000:]}")
        yield url
    finally:
        _stop(proc)


def _verdicts(report: RunReport) -> dict[str, Verdict]:
    return {r.id: r.verdict for r in report.results}


def _no_suite_errors(report: RunReport) -> None:
    errors = [f"{r.id}: {r.reason}" for r in report.results if r.reason.startswith("suite error")]
    assert not errors, "\n".join(errors)
    assert not any("stopped answering" in r.reason for r in report.results)


@pytest.mark.timeout(300)
def test_nfp_broker_suite_against_the_norfab_broker(norfab_broker: str, tmp_path: Path) -> None:
    report = run_suite(
        "nfp", "broker", norfab_broker, "norfab", heartbeat_ms=NORFAB_HEARTBEAT_MS, timeout_s=2.0
    )
    write_reports(report, tmp_path / "report")
    assert json.loads((tmp_path / "report" / "report.json").read_text())["cases"]
    _no_suite_errors(report)
    v = _verdicts(report)
    # Departures documented in docs/protocols/norfab-wire.md section 7, each by its clause.
    assert v["NFP-BROKER-3.2"] is Verdict.FAIL  # 1: ASCII command frames ("0x05")
    assert v["NFP-BROKER-5.1"] is Verdict.FAIL  # 2: no OPEN handshake
    assert v["NFP-BROKER-6.1"] is Verdict.FAIL
    assert v["NFP-BROKER-7.3"] is Verdict.FAIL  # 6: no DISCONNECT for unexpected commands
    assert v["NFP-BROKER-5.7"] is Verdict.NON_STRICT  # 9: no queueing
    assert v["NFP-BROKER-5.11"] is Verdict.NON_STRICT  # 7: comma-separated targets refused
    assert v["NFP-BROKER-5.12"] is Verdict.FAIL  # 11: DELETE never forwarded
    assert v["NFP-BROKER-5.6"] is Verdict.FAIL  # 8: an unknown uuid's GET dispatched (202), not 400
    assert v["NFP-BROKER-3.1"] is Verdict.FAIL  # 14: 5-frame RESPONSE to an unknown command
    assert v["NFP-BROKER-8.1"] is Verdict.INFO  # 3: routed POST layout
    # What NorFab does right passes.
    for case in ("NFP-BROKER-5.2", "NFP-BROKER-5.4", "NFP-BROKER-9.1", "NFP-BROKER-9.3", "NFP-BROKER-10.1"):
        assert v[case] is Verdict.PASS, case
    assert report.failed()


@pytest.mark.timeout(200)
def test_nfp_broker_suite_spec_dialect_against_the_norfab_broker(norfab_broker: str) -> None:
    # NorFab answers one-byte commands with its "Unsupported client command" text: the run
    # must still finish, grading that against the clauses.
    report = run_suite(
        "nfp",
        "broker",
        norfab_broker,
        "spec",
        heartbeat_ms=NORFAB_HEARTBEAT_MS,
        timeout_s=1.0,
        exclude=("*-9.*",),
    )
    _no_suite_errors(report)
    v = _verdicts(report)
    assert v["NFP-BROKER-5.2"] is Verdict.FAIL
    assert v["NFP-BROKER-3.1"] is Verdict.FAIL
    # Its answers, undecodable as the spec's, still have NorFab's ASCII command frames.
    assert v["NFP-BROKER-3.2"] is Verdict.FAIL


@pytest.mark.timeout(240)
def test_nfp_worker_suite_against_a_norfab_worker(tmp_path: Path) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(INTEROP / "norfab_peer.py"),
                "worker",
                "--name",
                "nfw1",
                "--service",
                "echo",
                "--endpoint",
                endpoint,
                "--base-dir",
                str(tmp_path / "norfab"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        report = run_suite("nfp", "worker", endpoint, "auto", heartbeat_ms=NORFAB_HEARTBEAT_MS, timeout_s=3.0)
    finally:
        _stop(proc)
    write_reports(report, tmp_path / "report")
    assert report.dialect == "norfab", log.read_text(errors="replace")[-3000:]
    _no_suite_errors(report)
    v = _verdicts(report)
    assert v["NFP-WORKER-6.1"] is Verdict.FAIL  # READY without OPEN: the dialect has none
    assert v["NFP-WORKER-3.2"] is Verdict.FAIL  # ASCII command frames
    assert v["NFP-WORKER-4.2"] is Verdict.NON_STRICT  # 201 and 404
    # NorFab's bug: a truncated POST kills its job thread (IndexError at work[2]). The
    # invalid inputs after it are not blamed for that: it answers no POST before them.
    assert v["NFP-WORKER-11.5"] is Verdict.FAIL
    for case in ("NFP-WORKER-11.6", "NFP-WORKER-11.7", "NFP-WORKER-11.8"):
        assert v[case] is Verdict.SKIP, case
    for case in (
        "NFP-WORKER-7.2",
        "NFP-WORKER-6.2",
        "NFP-WORKER-6.3",
        "NFP-WORKER-6.4",
        "NFP-WORKER-7.1",
        "NFP-WORKER-9.1",
        "NFP-WORKER-9.2",
    ):
        assert v[case] is Verdict.PASS, f"{case}\n{log.read_text(errors='replace')[-3000:]}"


@pytest.mark.timeout(200)
@pytest.mark.parametrize("norfab_broker", ["curve"], indirect=True)
def test_nfp_broker_suite_over_curve_against_norfabs_default_broker(
    norfab_broker: str, tmp_path: Path
) -> None:
    """NorFab's broker with CURVE on, as it runs unless told otherwise: without its key
    the suite says so before any case; with the public key file NorFab wrote (what its
    own clients read) the cases run and grade it as they do with CURVE off."""
    found = sorted((tmp_path / "norfab").rglob("public_keys/broker.key"))
    assert found, "NorFab wrote no broker.key"
    cli = [sys.executable, "-m", "nfgate", "conformance", "-p", "nfp", "-r", "broker", "-e", norfab_broker]
    missing = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "--curve-server-key" in missing.stderr
    curve = load_curve(str(found[0]), None, binds=False, codec="nfp")
    report = run_suite(
        "nfp",
        "broker",
        norfab_broker,
        "auto",
        heartbeat_ms=NORFAB_HEARTBEAT_MS,
        timeout_s=2.0,
        include=("NFP-BROKER-5.*", "NFP-BROKER-3.*"),
        curve=curve,
    )
    assert report.dialect == "norfab"
    _no_suite_errors(report)
    v = _verdicts(report)
    assert v["NFP-BROKER-5.2"] is Verdict.PASS and v["NFP-BROKER-5.4"] is Verdict.PASS
    assert v["NFP-BROKER-5.1"] is Verdict.FAIL  # no OPEN handshake, as with CURVE off
    assert v["NFP-BROKER-3.2"] is Verdict.FAIL  # ASCII command frames


@pytest.mark.timeout(200)
def test_nfp_worker_suite_as_a_curve_broker_against_a_norfab_worker(tmp_path: Path) -> None:
    """The suite binds as a CURVE broker (--curve-secret-key); a NorFab worker trusting
    its public key (inventory broker.shared_key) registers and is graded."""
    _, secret_file = zmq.auth.create_certificates(str(tmp_path), "suite")
    curve = load_curve(None, Path(secret_file), binds=True, codec="nfp")
    assert curve is not None
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    log = tmp_path / "worker.log"
    args = ["worker", "--name", "nfw1", "--service", "echo", "--endpoint", endpoint]
    args += ["--base-dir", str(tmp_path / "norfab"), f"--shared-key={curve.public_key.decode()}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(INTEROP / "norfab_peer.py"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        report = run_suite(
            "nfp",
            "worker",
            endpoint,
            "norfab",
            heartbeat_ms=NORFAB_HEARTBEAT_MS,
            timeout_s=3.0,
            include=("NFP-WORKER-7.*", "NFP-WORKER-6.2"),
            curve=curve,
        )
    finally:
        _stop(proc)
    _no_suite_errors(report)
    v = _verdicts(report)
    for case in ("NFP-WORKER-7.1", "NFP-WORKER-6.2"):
        assert v[case] is Verdict.PASS, f"{case}\n{log.read_text(errors='replace')[-3000:]}"
