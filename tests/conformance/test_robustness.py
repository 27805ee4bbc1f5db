"""The suite never hangs: a silent peer and a peer that dies mid-run end quickly, with
the remaining cases SKIPped; and the command line's usage errors exit 2."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from nfgate.cli import main
from nfgate.codecs import dcp
from nfgate.codecs.dcp.messages import Registration
from nfgate.conformance.model import CaseResult, RunOptions, Verdict
from nfgate.conformance.registry import find_role, select
from nfgate.conformance.runner import run
from nfgate.edges.dcp import DcpEdge
from tests.gateway.conftest import finish, start_gateway

from .conftest import GATEWAY_TOML, HEARTBEAT_MS, assert_all_pass, run_suite
from .peers import AnsweringDisconnectBroker, BigPostBroker, SilentRouter, TinyDcpWorker, free_port
from .test_against_nfgate import _serve, _stop


@pytest.mark.timeout(60)
@pytest.mark.parametrize("protocol", ["nfp", "dcp"])
def test_silent_peer_is_reported_once_and_the_rest_skipped(protocol: str) -> None:
    peer = SilentRouter()
    peer.start()
    try:
        started = time.monotonic()
        role = find_role(protocol, "broker")
        options = RunOptions(
            protocol=protocol, role="broker", endpoint=peer.endpoint, dialect="spec", timeout_s=0.5
        )
        report = run(role, options, select(role))
        elapsed = time.monotonic() - started
    finally:
        peer.stop()
    first, rest = report.results[0], report.results[1:]
    assert first.verdict is Verdict.FAIL and "stopped answering" in first.reason
    assert rest and all(r.verdict is Verdict.SKIP and "stopped answering" in r.reason for r in rest)
    assert elapsed < 10, f"took {elapsed:.1f} s"
    assert peer.received > 0  # the suite did talk to it
    assert report.failed()


@pytest.mark.timeout(120)
def test_peer_dying_mid_run_skips_the_remaining_cases(tmp_path: Path) -> None:
    proc, edges, _ = _serve(tmp_path)
    seen: list[CaseResult] = []

    def kill_after_three(case: object, result: CaseResult) -> None:
        seen.append(result)
        if len(seen) == 3:
            proc.kill()
            proc.wait(10)

    try:
        role = find_role("dcp", "broker")
        options = RunOptions(
            protocol="dcp", role="broker", endpoint=edges["dcp"], dialect="spec", timeout_s=0.5
        )
        started = time.monotonic()
        report = run(role, options, select(role, exclude=("*-8.5",)), kill_after_three)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            _stop(proc)
    assert not any("stopped answering" in r.reason for r in report.results[:3])
    dead = [r for r in report.results if "stopped answering" in r.reason]
    assert len(dead) == len(report.results) - 3
    assert dead[0].verdict is Verdict.FAIL  # reported once...
    assert all(r.verdict is Verdict.SKIP for r in dead[1:])  # ...then skipped
    assert elapsed < 30, f"took {elapsed:.1f} s"


def test_list_prints_the_cases_without_running() -> None:
    result = CliRunner().invoke(
        main, ["conformance", "-p", "nfp", "-r", "broker", "--list", "--cases", "NFP-BROKER-7.*"]
    )
    assert result.exit_code == 0, result.output
    ids = [line.split()[0] for line in result.output.splitlines() if line.startswith("NFP-")]
    assert ids and all(i.startswith("NFP-BROKER-7.") for i in ids)


@pytest.mark.parametrize(
    "args",
    [
        ["-p", "nfp", "-r", "nobody", "--list"],
        ["-p", "nfp", "-r", "broker", "--dialect", "klingon", "-e", "tcp://127.0.0.1:1"],
        ["-p", "nfp", "-r", "broker"],
        ["-p", "dcp", "-r", "broker", "-e", "tcp://127.0.0.1:1", "--cases", "NOPE-*"],
        ["-p", "nfp", "-r", "broker", "-e", "tcp://127.0.0.1:1", "--timeout", "0"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(main, ["conformance", *args])
    assert result.exit_code == 2, result.output


@pytest.mark.timeout(30)
def test_worker_role_cannot_bind_is_a_usage_error() -> None:
    peer = SilentRouter()  # holds the port the suite is told to bind
    peer.start()
    try:
        result = CliRunner().invoke(main, ["conformance", "-p", "dcp", "-r", "worker", "-e", peer.endpoint])
    finally:
        peer.stop()
    assert result.exit_code == 2 and "cannot bind" in result.output, result.output


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("protocol", "role"),
    [("nfp", "broker"), ("dcp", "broker"), ("memodb", "broker"), ("dbp", "catalog"), ("sada", "channel")],
)
# libzmq would connect to port 4464 for 70000 (its low 16 bits); 0 is no port to connect to.
@pytest.mark.parametrize(
    "endpoint", ["notaurl", "tcp://127.0.0.1", "tcp://127.0.0.1:70000", "tcp://127.0.0.1:0"]
)
def test_an_address_no_socket_can_connect_to_is_a_usage_error(
    protocol: str, role: str, endpoint: str
) -> None:
    # Not a traceback (broker roles crashed on the first case's connect), not a run of
    # failed cases: the user's typo, one line, exit 2, before any case runs.
    result = CliRunner().invoke(main, ["conformance", "-p", protocol, "-r", role, "-e", endpoint])
    assert result.exit_code == 2, result.output
    assert f"nfgate: cannot connect to {endpoint}: " in result.output
    assert "PASS" not in result.output and "FAIL" not in result.output and "Traceback" not in result.output


def test_a_report_directory_that_cannot_be_made_is_refused_before_the_run(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    args = ["-p", "dcp", "-r", "broker", "-e", "tcp://127.0.0.1:1", "--report", str(blocker / "reports")]
    result = CliRunner().invoke(main, ["conformance", *args])
    assert result.exit_code == 2, result.output
    assert "cannot write the report to" in result.output
    assert "DCP-BROKER" not in result.output  # no case ran


@pytest.mark.timeout(60)
def test_worker_dying_mid_run_skips_the_remaining_cases() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    worker = TinyDcpWorker(endpoint, b"tiny", heartbeat_s=HEARTBEAT_MS / 1000)
    worker.start()
    seen: list[CaseResult] = []

    def stop_after_two(case: object, result: CaseResult) -> None:
        seen.append(result)
        if len(seen) == 2:
            worker.stop()

    role = find_role("dcp", "worker")
    options = RunOptions(
        protocol="dcp",
        role="worker",
        endpoint=endpoint,
        dialect="spec",
        timeout_s=0.5,
        heartbeat_ms=HEARTBEAT_MS,
    )
    started = time.monotonic()
    try:
        report = run(role, options, select(role), stop_after_two)
    finally:
        if worker.is_alive():
            worker.stop()
    elapsed = time.monotonic() - started
    dead = [r for r in report.results if "stopped answering" in r.reason]
    assert dead and dead[0].verdict is Verdict.FAIL
    assert all(r.verdict is Verdict.SKIP for r in dead[1:])
    assert len(dead) == len(report.results) - 2
    assert elapsed < 20, f"took {elapsed:.1f} s"


@pytest.mark.timeout(60)
def test_a_peer_dead_before_a_case_that_expects_silence_fails_that_case(tmp_path: Path) -> None:
    # NFP-BROKER-7.5 passes when the worker hears nothing: so does a dead broker. The
    # runner probes after a case that passed on silence, so the death is reported on
    # the case it spoiled, not on the next one.
    proc, edges, _ = _serve(tmp_path)

    def kill_after_first(case: object, result: CaseResult) -> None:
        proc.kill()
        proc.wait(10)

    try:
        role = find_role("nfp", "broker")
        options = RunOptions(
            protocol="nfp", role="broker", endpoint=edges["nfp"], dialect="spec", timeout_s=0.5
        )
        cases = select(role, include=("NFP-BROKER-6.1", "NFP-BROKER-7.5", "NFP-BROKER-7.6"))
        report = run(role, options, cases, kill_after_first)
    finally:
        if proc.poll() is None:
            _stop(proc)
    first, silent, after = report.results
    assert first.verdict is Verdict.PASS, first
    assert silent.id == "NFP-BROKER-7.5"
    assert silent.verdict is Verdict.FAIL, silent
    assert "silent, as the case expects, but the peer stopped answering" in silent.reason
    assert after.verdict is Verdict.SKIP, after


@pytest.mark.timeout(60)
def test_a_broker_answering_disconnect_with_a_keepalive_fails_the_clause() -> None:
    # The KEEPALIVE arrives as soon as one already on its way would: the case must not
    # drain it as "sent before the broker read the DISCONNECT".
    broker = AnsweringDisconnectBroker(HEARTBEAT_MS / 1000)
    broker.start()
    try:
        report = run_suite("nfp", "broker", broker.endpoint, "spec", include=("NFP-BROKER-7.5",))
    finally:
        broker.stop()
    (result,) = report.results
    assert broker.answered == 1
    assert result.verdict is Verdict.FAIL, result
    assert "Keepalive" in result.actual


@pytest.mark.timeout(120)
def test_a_broker_that_confirms_no_registration_fails_that_clause_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nfgate's DCP edge with its REGISTRATION echo dropped: it still registers, routes,
    # pongs and reconnects, so only DCP-BROKER-6.1 may fail; the cases that register a
    # worker go on without the echo instead of failing under their own clause.
    send = DcpEdge.send

    def no_echo(self: DcpEdge, address: bytes, frames: list[bytes]) -> bool:
        if isinstance(dcp.decode(frames, dcp.detect(frames)), Registration):
            return True
        return send(self, address, frames)

    monkeypatch.setattr(DcpEdge, "send", no_echo)
    gw = start_gateway(tmp_path, GATEWAY_TOML)
    try:
        report = run_suite("dcp", "broker", gw.endpoint("dcp"), "spec")
    finally:
        finish(gw)
    assert len(report.results) >= 20
    assert_all_pass(report, frozenset({"DCP-BROKER-6.1"}))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("answer", "verdict"),
    [("none", Verdict.PASS), ("response", Verdict.PASS), ("garbage", Verdict.FAIL)],
)
def test_a_post_of_200_frames_may_be_dropped_or_refused_but_not_answered_with_junk(
    answer: str, verdict: Verdict
) -> None:
    # "A POST command consists of 7 or more frames": 200 is well formed, so a broker
    # that drops it or refuses it (nfgate past max_frames) passes; junk back fails.
    broker = BigPostBroker(answer)
    broker.start()
    try:
        report = run_suite("nfp", "broker", broker.endpoint, "spec", include=("NFP-BROKER-11.7",))
    finally:
        broker.stop()
    (result,) = report.results
    assert broker.big_posts == 1
    assert result.verdict is verdict, result
