"""The DBP catalog role of the conformance suite: against nfgate's ``dbp`` edge (all
PASS, INFO allowed) in both dialects, and against a Hermes-style catalog written here,
whose departures are reported per clause while the run completes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import dbp
from nfgate.codecs.dbp import Ack, Approved, Denied, Registration, Reply, Request, Update
from nfgate.conformance.model import Verdict
from nfgate.errors import DecodeError
from tests.gateway.conftest import Running, finish, start_gateway

from .conftest import assert_all_pass, explain, run_suite
from .peers import SilentRouter, free_port

HEARTBEAT_MS = 200
TOML = '[edges.dbp]\nbeacon = ""\nliveness = 3\n'


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Running]:
    running = start_gateway(tmp_path, TOML)
    try:
        yield running
    finally:
        finish(running)


@pytest.mark.timeout(150)
def test_dbp_catalog_suite_passes_against_nfgate(gateway: Running) -> None:
    report = run_suite("dbp", "catalog", gateway.endpoint("dbp"), "spec", heartbeat_ms=HEARTBEAT_MS)
    assert report.dialect == "spec"
    assert len(report.results) >= 29
    assert_all_pass(report)


@pytest.mark.timeout(150)
def test_dbp_catalog_suite_as_a_hermes_peer_reports_only_the_hermes_form(gateway: Running) -> None:
    """Spoken to in Hermes's dialect, nfgate answers in it: everything passes but the
    check of the spec's form, which reports the float32 time parts as a departure."""
    report = run_suite("dbp", "catalog", gateway.endpoint("dbp"), "hermes", heartbeat_ms=HEARTBEAT_MS)
    assert report.dialect == "hermes"
    departures = {r.id for r in report.results if r.verdict in (Verdict.FAIL, Verdict.NON_STRICT)}
    assert departures == {"DBP-CATALOG-1.1"}, explain(report)


@pytest.mark.timeout(60)
def test_auto_dialect_detects_the_spec_catalog(gateway: Running) -> None:
    report = run_suite("dbp", "catalog", gateway.endpoint("dbp"), "auto", include=("*-2.1",))
    assert report.dialect == "spec"


class HermesCatalog(threading.Thread):
    """A catalog the way Hermes writes one: float32 time parts, ``OmO`` for DENIED,
    ``["", "OwO", t, ""]`` for APPROVED, ``u.u`` for UPDATE, Hermes's error object for
    an unknown name, no heartbeats and no DISCONNECT."""

    def __init__(self, endpoint: str, lifetime_s: float = 120.0) -> None:
        super().__init__(daemon=True)
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.endpoint = endpoint
        self.stopping = threading.Event()
        self.deadline = time.monotonic() + lifetime_s
        self.catalog: dict[str, dict[str, object]] = {}

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.context.destroy(linger=0)

    def run(self) -> None:
        sock = self.context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(self.endpoint)
        try:
            while not self.stopping.is_set() and time.monotonic() < self.deadline:
                if not sock.poll(50):
                    continue
                identity, *frames = sock.recv_multipart()
                answer = self.answer(frames)
                if answer is not None:
                    sock.send_multipart([identity, *dbp.encode(answer, "hermes")])
        finally:
            sock.close(0)

    def answer(self, frames: list[bytes]) -> object | None:
        try:
            message = dbp.decode(frames, dbp.detect(frames))
        except DecodeError:
            return None
        t = time.time()
        if isinstance(message, Registration):
            try:
                info = json.loads(b"".join(message.info))
            except ValueError:
                return Denied(time=t, reasons=(b"bad json",))
            if not isinstance(info, dict) or "name" not in info:
                return Denied(time=t, reasons=(b"no name",))
            self.catalog[str(info["name"])] = info
            return Approved(time=t)
        if isinstance(message, Update):
            return Ack(time=t)
        if isinstance(message, Request):
            if message.query in ("", "*"):
                body = self.catalog
            else:
                body = self.catalog.get(message.query) or {
                    "Error": f"No Registered Service With the Name {message.query}"
                }
            return Reply(time=t, info=json.dumps(body).encode())
        return None


@pytest.mark.timeout(150)
def test_dbp_catalog_suite_reports_a_hermes_catalog() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    catalog = HermesCatalog(endpoint)
    catalog.start()
    try:
        report = run_suite("dbp", "catalog", endpoint, "spec", heartbeat_ms=HEARTBEAT_MS)
    finally:
        catalog.stop()
    verdicts = {r.id: r.verdict for r in report.results}
    assert len(report.results) >= 29  # the run completed
    # float32 time parts and OmO: outside the spec dialect.
    assert verdicts["DBP-CATALOG-1.1"] is Verdict.FAIL, explain(report)
    # No heartbeats at all ("Both broker and worker MUST send heartbeats").
    assert verdicts["DBP-CATALOG-4.1"] is Verdict.FAIL, explain(report)
    # No DISCONNECT for an unexpected command.
    assert verdicts["DBP-CATALOG-5.2"] is Verdict.FAIL, explain(report)


@pytest.mark.timeout(30)
def test_a_silent_catalog_does_not_hang_the_suite() -> None:
    silent = SilentRouter()
    silent.start()
    try:
        started = time.monotonic()
        report = run_suite("dbp", "catalog", silent.endpoint, "auto", timeout_s=0.5)
    finally:
        silent.stop()
    assert time.monotonic() - started < 20
    assert report.counts()["FAIL"] >= 1
    assert report.counts()["PASS"] == 0
