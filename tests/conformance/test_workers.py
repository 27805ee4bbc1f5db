"""The worker roles, the suite as broker, against small conforming workers written here
(tests/conformance/peers.py): all PASS (INFO allowed), in every dialect, but the
departures a deployed dialect is made of, each FAIL on its clause (NorFab's ASCII
command frames and missing OPEN, DagBox's 4-byte type part)."""

from __future__ import annotations

from typing import Any

import pytest

from nfgate.conformance.model import Verdict

from .conftest import HEARTBEAT_MS, assert_all_pass, explain, run_suite
from .peers import TinyDcpWorker, TinyNfpWorker, free_port


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dialect", ["spec", "norfab"])
def test_nfp_worker_suite_passes_against_a_conforming_worker(dialect: str) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    worker = TinyNfpWorker(endpoint, "tiny", dialect, heartbeat_s=HEARTBEAT_MS / 1000)
    worker.start()  # it connects first; ZeroMQ delivers once the suite has bound
    try:
        report = run_suite("nfp", "worker", endpoint, "auto")
    finally:
        worker.stop()
    assert report.dialect == dialect
    assert len(report.results) >= 18
    assert_all_pass(report, frozenset({"NFP-WORKER-3.2", "NFP-WORKER-6.1"} if dialect == "norfab" else ()))
    assert worker.connections >= 3  # first, after DISCONNECT, after the broker fell silent


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("breaks", "failed"),
    [
        ("ready-again", {"NFP-WORKER-7.2"}),  # "The worker MUST NOT send a further READY"
        # "... MUST close its socket, and reconnect to the broker on a new socket"
        ("same-socket", {"NFP-WORKER-7.1", "NFP-WORKER-7.2"}),
        # "... it must send no further commands to the broker": blamed on 7.1, not 9.1
        ("old-socket-beats", {"NFP-WORKER-7.1"}),
    ],
)
def test_a_worker_breaking_the_conversation_rules_fails_their_clauses(breaks: str, failed: set[str]) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    worker = TinyNfpWorker(endpoint, "tiny", "spec", heartbeat_s=HEARTBEAT_MS / 1000, breaks=breaks)
    worker.start()
    try:
        report = run_suite("nfp", "worker", endpoint, "spec")
    finally:
        worker.stop()
    assert {r.id for r in report.results if r.verdict is Verdict.FAIL} == failed, explain(report)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dialect", ["spec", "dagbox"])
def test_dcp_worker_suite_passes_against_a_conforming_worker(dialect: str) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    worker = TinyDcpWorker(endpoint, b"tiny", dialect, heartbeat_s=HEARTBEAT_MS / 1000)
    worker.start()
    try:
        report = run_suite("dcp", "worker", endpoint, "auto")
    finally:
        worker.stop()
    assert report.dialect == dialect
    assert len(report.results) >= 15
    assert_all_pass(report, frozenset({"DCP-WORKER-5.2"} if dialect == "dagbox" else ()))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("protocol", "case", "peer"),
    [
        ("nfp", "NFP-WORKER-9.1", lambda url, hb: TinyNfpWorker(url, "tiny", "spec", heartbeat_s=hb)),
        ("dcp", "DCP-WORKER-8.1", lambda url, hb: TinyDcpWorker(url, b"tiny", "spec", heartbeat_s=hb)),
    ],
)
def test_a_worker_flooding_heartbeats_breaks_the_agreed_interval(protocol: str, case: str, peer: Any) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    worker = peer(endpoint, HEARTBEAT_MS / 1000 / 20)  # twenty beats per agreed interval
    worker.start()
    try:
        report = run_suite(protocol, "worker", endpoint, "spec", include=(case,))
    finally:
        worker.stop()
    (result,) = report.results
    assert result.verdict is Verdict.FAIL, result
    assert "apart, agreed every" in result.reason
