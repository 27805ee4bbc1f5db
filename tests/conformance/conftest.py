"""Shared helpers for the conformance-suite tests: an in-process nfgate with short
heartbeats, and running a role's cases through the runner API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nfgate.conformance.curve import SuiteCurve
from nfgate.conformance.model import RunOptions, RunReport, Verdict
from nfgate.conformance.registry import find_role, select
from nfgate.conformance.runner import run
from tests.gateway.conftest import Running, finish, start_gateway

HEARTBEAT_MS = 200  # nfgate's and the suite's agreed interval in these tests
GATEWAY_TOML = f"""
[edges.nfp]
heartbeat_ms = {HEARTBEAT_MS}
liveness = 3
[edges.dcp]
heartbeat_ms = {HEARTBEAT_MS}
liveness = 3
"""


@pytest.fixture
def fast_gateway(tmp_path: Path) -> Iterator[Running]:
    running = start_gateway(tmp_path, GATEWAY_TOML)
    try:
        yield running
    finally:
        finish(running)


def run_suite(
    protocol: str,
    role: str,
    endpoint: str,
    dialect: str,
    *,
    heartbeat_ms: int = HEARTBEAT_MS,
    timeout_s: float = 1.5,
    include: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    curve: SuiteCurve | None = None,
    tls: object = None,
) -> RunReport:
    found = find_role(protocol, role)
    options = RunOptions(
        protocol=protocol,
        role=role,
        endpoint=endpoint,
        dialect=dialect,
        timeout_s=timeout_s,
        heartbeat_ms=heartbeat_ms,
        curve=curve,
        tls=tls,
    )
    return run(found, options, select(found, include, exclude))


def explain(report: RunReport) -> str:
    """The results that are not PASS, for assertion messages."""
    lines = []
    for r in report.results:
        if r.verdict is not Verdict.PASS:
            lines.append(
                f"{r.id} {r.verdict.value}: {r.reason}\n  expected: {r.expected}\n  actual: {r.actual[:600]}"
            )
    return "\n".join(lines) or "all PASS"


def assert_all_pass(report: RunReport, departures: frozenset[str] = frozenset()) -> None:
    """Every case PASS or INFO; SKIP only for cases of another dialect. ``departures``:
    the cases that must FAIL instead (a deployed dialect's own form, which the run-wide
    form case reports against the spec whatever dialect the run speaks)."""
    for r in report.results:
        if r.id in departures:
            assert r.verdict is Verdict.FAIL, f"{r.id} is {r.verdict.value}\n{explain(report)}"
            continue
        ok = r.verdict in (Verdict.PASS, Verdict.INFO) or (
            r.verdict is Verdict.SKIP and r.reason.startswith("applies to the")
        )
        assert ok, f"{r.id} is {r.verdict.value}\n{explain(report)}"
    assert departures <= {r.id for r in report.results}
