"""The worker roles, the suite as broker, against small conforming workers written here
(tests/conformance/peers.py): all PASS (INFO allowed), in every dialect."""

from __future__ import annotations

import pytest

from .conftest import HEARTBEAT_MS, assert_all_pass, run_suite
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
    assert_all_pass(report)
    assert worker.connections >= 3  # first, after DISCONNECT, after the broker fell silent


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
    assert_all_pass(report)
