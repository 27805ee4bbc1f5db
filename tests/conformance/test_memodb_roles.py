"""The MemoDB roles of the conformance suite: the broker role against nfgate's ``memodb``
edge (all PASS, INFO allowed), the worker role against a small conforming worker
written here, and against a sloppy worker whose departures are reported per clause."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pynng
import pytest

from nfgate.codecs import memodb
from nfgate.codecs.memodb import Disconnect, Heartbeat, Job, Ready, Result
from nfgate.conformance.model import Verdict
from nfgate.errors import DecodeError
from tests.gateway.conftest import Running, finish, start_gateway

from .conftest import assert_all_pass, explain, run_suite
from .peers import free_port

HEARTBEAT_MS = 300
TOML = f"[edges.memodb]\nheartbeat_ms = {HEARTBEAT_MS}\nliveness = 3\n"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Running]:
    running = start_gateway(tmp_path, TOML)
    try:
        yield running
    finally:
        finish(running)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dialect", ["spec", "bcdb"])
def test_memodb_broker_suite_passes_against_nfgate(gateway: Running, dialect: str) -> None:
    report = run_suite("memodb", "broker", gateway.endpoint("memodb"), dialect, heartbeat_ms=HEARTBEAT_MS)
    assert report.dialect == dialect
    assert len(report.results) >= 23
    assert_all_pass(report)


class TinyMemodbWorker(threading.Thread):
    """A MemoDB worker on one req0 socket: READY, JOB -> RESULT (payload reversed),
    HEARTBEAT -> HEARTBEAT, DISCONNECT or anything undecodable -> READY again; READY
    again too when the broker is silent for 3 intervals. ``sloppy`` breaks rules: no
    ID in its messages, DISCONNECT ignored (it answers with a HEARTBEAT)."""

    def __init__(
        self,
        endpoint: str,
        services: tuple[str, ...],
        *,
        sloppy: bool = False,
        lifetime_s: float = 90.0,
        tls: pynng.TLSConfig | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.endpoint = endpoint
        self.tls = tls  # for a tls+tcp:// endpoint
        self.services = services
        self.sloppy = sloppy
        self.stopping = threading.Event()
        self.deadline = time.monotonic() + lifetime_s
        self.readies = 0

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)

    def run(self) -> None:
        with pynng.Req0(resend_time=600_000) as sock:
            if self.tls is not None:
                sock.tls_config = self.tls
            sock.dial(self.endpoint, block=False)
            ident = b""
            silent_since = time.monotonic()
            self._send(sock, Ready(services=self.services))
            while not self.stopping.is_set() and time.monotonic() < self.deadline:
                try:
                    data = sock.recv(block=False)
                except RuntimeError:  # pynng cannot return an empty message
                    data = b""
                except pynng.TryAgain:
                    # A broker silent for 3 intervals is gone: start again (a new request
                    # on a req0 socket abandons the old one).
                    if time.monotonic() - silent_since > 3 * HEARTBEAT_MS / 1000:
                        self._send(sock, Ready(services=self.services))
                        silent_since = time.monotonic()
                    time.sleep(0.01)
                    continue
                silent_since = time.monotonic()
                try:
                    message = memodb.decode([data], "spec")
                except DecodeError:
                    self._send(sock, Ready(services=self.services))
                    continue
                if isinstance(message, Job):
                    ident = b"" if self.sloppy else message.id
                    self._send(sock, Result(id=ident, payload=message.payload[::-1]))
                elif isinstance(message, Heartbeat):
                    self._send(sock, Heartbeat(id=b"" if self.sloppy else message.id))
                elif isinstance(message, Disconnect) and not self.sloppy:
                    self._send(sock, Ready(services=self.services))
                else:
                    self._send(sock, Heartbeat(id=ident))

    def _send(self, sock: pynng.Req0, message: object) -> None:
        if isinstance(message, Ready):
            self.readies += 1
        sock.send(memodb.encode(message, "spec")[0])  # type: ignore[arg-type]


@pytest.mark.timeout(120)
def test_memodb_worker_suite_passes_against_a_conforming_worker() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    worker = TinyMemodbWorker(endpoint, ("tiny",))
    worker.start()
    try:
        report = run_suite("memodb", "worker", endpoint, "auto", heartbeat_ms=HEARTBEAT_MS)
    finally:
        worker.stop()
    assert len(report.results) >= 17
    assert_all_pass(report)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dialect", ["spec", "bcdb"])
def test_memodb_worker_suite_reports_the_departures_of_a_sloppy_worker(dialect: str) -> None:
    """No ID in its messages, DISCONNECT ignored, and (for bcdb's broker) a READY whose
    services are not in canonical order: each departure reported on its clause."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    worker = TinyMemodbWorker(endpoint, ("sloppy-long-name", "sloppy"), sloppy=True)
    worker.start()
    try:
        report = run_suite("memodb", "worker", endpoint, dialect, heartbeat_ms=HEARTBEAT_MS)
    finally:
        worker.stop()
    verdicts = {r.id: r.verdict for r in report.results}
    assert verdicts["MEMODB-WORKER-4.2"] is Verdict.NON_STRICT, explain(report)  # RESULT without its ID
    assert verdicts["MEMODB-WORKER-4.4"] is Verdict.NON_STRICT, explain(report)  # DISCONNECT ignored
    expected = Verdict.NON_STRICT if dialect == "bcdb" else Verdict.SKIP
    assert verdicts["MEMODB-WORKER-10.1"] is expected, explain(report)  # bcdb would drop its READY
    assert len(report.results) >= 17  # the run completed


@pytest.mark.timeout(30)
def test_a_silent_memodb_broker_does_not_hang_the_suite() -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with pynng.Rep0(listen=endpoint):  # takes requests, never answers
        started = time.monotonic()
        report = run_suite("memodb", "broker", endpoint, "spec", timeout_s=0.5)
    assert time.monotonic() - started < 20
    assert report.counts()["FAIL"] >= 1
    assert report.counts()["PASS"] == 0


@pytest.mark.timeout(60)
def test_a_peer_that_never_completes_the_nng_handshake_costs_each_case_its_timeout() -> None:
    # A TCP listener that takes connections and never speaks SP: NNG's blocking dial
    # would wait 10 s per socket, past the case deadline (a case dials up to twice).
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        for _ in range(100_000):  # bounded; ends with the test
            if stop.is_set():
                return
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        endpoint = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        report = run_suite(
            "memodb", "broker", endpoint, "spec", timeout_s=0.3, include=("MEMODB-BROKER-3.1",)
        )
        took = time.monotonic() - started
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()
    assert report.counts()["FAIL"] == 1
    assert "NNG session" in report.results[0].reason
    assert took < 8  # NNG's blocking dial alone took 10 s
