"""The SADA roles of the conformance suite against nfgate: the server role against the
``sada-server`` edge (configured with the suite's channel URL) and the channel role
against the ``sada`` edge, all PASS (INFO allowed) in both dialects; and a PIRAN-style
server (int32 status, an ``ip:port`` identity) whose departures are reported per clause."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import zmq

from nfgate.codecs import sada
from nfgate.codecs.sada.messages import Intr, Ping, Pong, Rep, Req, Rintr
from nfgate.conformance.model import RunReport, Verdict
from nfgate.errors import DecodeError
from nfgate.transports.curve import ClientCurve, enable_client
from tests.gateway.conftest import Running, finish, start_gateway, until

from .conftest import assert_all_pass, explain, run_suite
from .peers import SilentRouter, TinyDcpWorker, free_port

HEARTBEAT_MS = 200


def server_gateway(tmp_path: Path, channel_url: str, dialect: str) -> Running:
    toml = (
        f"[routing]\nqueue_expiry_ms = 300\n"
        f'[edges.sada-server]\nchannels = ["{channel_url}"]\nrefresh_ms = 100\ndialect = "{dialect}"\n'
        f"[edges.dcp]\nheartbeat_ms = {HEARTBEAT_MS}\nliveness = 3\n"
    )
    return start_gateway(tmp_path, toml)


def run_server_suite(tmp_path: Path, gateway_dialect: str, dialect: str) -> RunReport:
    channel_url = f"tcp://127.0.0.1:{free_port()}"
    gateway = server_gateway(tmp_path, channel_url, gateway_dialect)
    worker = TinyDcpWorker(gateway.endpoint("dcp"), b"tiny", "spec", heartbeat_s=HEARTBEAT_MS / 1000)
    worker.start()
    try:
        # The worker registered, so that the gateway's INTR names "tiny".
        until(lambda: any(w.peer.edge == "dcp" for w in gateway.gateway.router.workers()))
        return run_suite("sada", "server", channel_url, dialect, heartbeat_ms=HEARTBEAT_MS)
    finally:
        worker.stop()
        finish(gateway)


@pytest.mark.timeout(120)
def test_sada_server_suite_passes_against_nfgate(tmp_path: Path) -> None:
    report = run_server_suite(tmp_path, "auto", "spec")
    assert report.dialect == "spec"
    assert len(report.results) >= 18
    assert_all_pass(report)


@pytest.mark.timeout(120)
def test_sada_server_suite_reports_nfgate_forced_to_piran(tmp_path: Path) -> None:
    """nfgate's server forced to PIRAN's dialect, tested by a PIRAN-style channel: its
    int32 REP status is reported as the departure it is; everything else passes."""
    report = run_server_suite(tmp_path, "piran", "piran")
    assert report.dialect == "piran"
    departures = {r.id for r in report.results if r.verdict in (Verdict.FAIL, Verdict.NON_STRICT)}
    assert departures == {"SADA-SERVER-8.1", "SADA-SERVER-4.2"}, explain(report)


class PiranServer(threading.Thread):
    """A server the way PIRAN's Safir writes one: its ROUTER sets the identity
    ``ip:port``, it addresses the channel as ``ip:port``, and REP statuses are 4-byte
    big-endian int32. Otherwise it behaves: INTR, PONG, RINTR -> INTR, REP 200.

    With ``dialect="spec"`` it is a spec server that sets no identity and says INTR
    only when it starts: a channel that restarts never hears from it again.

    ``intr_delay_s`` makes it slow to answer RINTR (a busy server): a PING sent after
    the RINTR is answered first. ``version`` replaces the version frame of everything
    it sends (an unknown protocol version)."""

    def __init__(
        self,
        channel_url: str,
        lifetime_s: float = 90.0,
        dialect: str = "piran",
        intr_delay_s: float = 0.0,
        version: bytes | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.channel_url = channel_url
        self.dialect = dialect
        self.intr_delay_s = intr_delay_s
        self.version = version
        self.stopping = threading.Event()
        self.deadline = time.monotonic() + lifetime_s

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.context.destroy(linger=0)

    def run(self) -> None:
        sock = self.context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        if self.dialect == "piran":
            sock.setsockopt(zmq.ROUTING_ID, f"127.0.0.1:{free_port()}".encode())
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        sock.connect(self.channel_url)
        channel = sada.channel_identity(self.channel_url, self.dialect)
        intr = self._encode(Intr(services=(("echo", "1"),)))
        try:
            for _ in range(500):  # until the connection is up
                try:
                    sock.send_multipart([channel, *intr])
                    break
                except zmq.ZMQError:
                    time.sleep(0.02)
            while not self.stopping.is_set() and time.monotonic() < self.deadline:
                if not sock.poll(50):
                    continue
                identity, *frames = sock.recv_multipart()
                try:
                    message = sada.decode(frames, self.dialect)
                except DecodeError:
                    continue
                answer: object | None = None
                if isinstance(message, Ping):
                    answer = Pong()
                elif isinstance(message, Rintr):
                    # Answered in order: the PINGs behind it wait too.
                    self.stopping.wait(self.intr_delay_s)
                    answer = Intr(services=(("echo", "1"),))
                elif isinstance(message, Req):
                    status = 200 if message.service == "echo" else 404
                    answer = Rep(request_id=message.request_id, status=status, payload=message.payload)
                if answer is not None:
                    try:
                        sock.send_multipart([identity, *self._encode(answer)])
                    except zmq.ZMQError:
                        continue
        finally:
            sock.close(0)

    def _encode(self, message: object) -> list[bytes]:
        frames = sada.encode(message, self.dialect)  # type: ignore[arg-type]
        if self.version is not None:
            frames[1] = self.version
        return frames


def run_against(dialect: str, intr_delay_s: float = 0.0, version: bytes | None = None) -> RunReport:
    """The server suite in ``dialect`` against a :class:`PiranServer` of that dialect."""
    channel_url = f"tcp://127.0.0.1:{free_port()}"
    server = PiranServer(channel_url, dialect=dialect, intr_delay_s=intr_delay_s, version=version)
    server.start()
    try:
        return run_suite("sada", "server", channel_url, dialect, heartbeat_ms=HEARTBEAT_MS)
    finally:
        server.stop()


@pytest.mark.timeout(120)
def test_sada_server_suite_reports_a_piran_server() -> None:
    report = run_against("piran")
    verdicts = {r.id: r.verdict for r in report.results}
    assert len(report.results) >= 18  # the run completed
    assert verdicts["SADA-SERVER-3.1"] is Verdict.FAIL, explain(report)  # it set an identity
    assert verdicts["SADA-SERVER-8.1"] is Verdict.NON_STRICT, explain(report)  # int32 status
    assert verdicts["SADA-SERVER-4.2"] is Verdict.NON_STRICT, explain(report)  # int32 status again
    assert verdicts["SADA-SERVER-6.1"] is Verdict.PASS, explain(report)


@pytest.mark.timeout(120)
def test_a_server_silent_after_the_channel_restarts_fails_that_case_alone() -> None:
    report = run_against("spec")
    verdicts = {r.id: r.verdict for r in report.results}
    assert verdicts["SADA-SERVER-10.1"] is Verdict.NON_STRICT, explain(report)
    # The restart is the last thing the suite does to the server: every other case
    # was judged on a channel the server knew.
    others = {case: v for case, v in verdicts.items() if case != "SADA-SERVER-10.1"}
    assert set(others.values()) <= {Verdict.PASS, Verdict.INFO}, explain(report)


@pytest.mark.timeout(120)
def test_an_intr_the_server_owed_the_old_channel_is_not_taken_for_a_new_introduction() -> None:
    """A slow server's answer to an earlier RINTR, still on its way when the suite
    restarts the channel, reaches the new channel: the suite waits for every answer
    it is owed before the restart, so that INTR does not pass the case."""
    report = run_against("spec", intr_delay_s=0.4)
    verdicts = {r.id: r.verdict for r in report.results}
    assert verdicts["SADA-SERVER-10.1"] is Verdict.NON_STRICT, explain(report)


@pytest.mark.timeout(120)
def test_a_server_speaking_an_unknown_version_is_graded_not_a_suite_error() -> None:
    """Nothing it sends decodes, its INTR included: the case of the opening INTR grades
    that (SHOULD), the form case names the version, and no case errs inside the suite."""
    report = run_against("spec", version=b"SADA\x07")
    verdicts = {r.id: r.verdict for r in report.results}
    assert not [r.id for r in report.results if "suite error" in r.reason], explain(report)
    assert verdicts["SADA-SERVER-2.1"] is Verdict.NON_STRICT, explain(report)
    assert verdicts["SADA-SERVER-4.2"] in (Verdict.FAIL, Verdict.NON_STRICT), explain(report)


CHANNEL_TOML = f"""
[routing]
queue_expiry_ms = 1000
[edges.sada]
heartbeat_ms = {HEARTBEAT_MS}
liveness = 3
"""


class ChannelClient(threading.Thread):
    """A client of nfgate's channel (the gateway takes REQ from any peer) asking for
    the suite server's service every 50 ms, so the channel sends the suite REQs."""

    def __init__(self, endpoint: str, lifetime_s: float = 90.0, curve: ClientCurve | None = None) -> None:
        super().__init__(daemon=True)
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.endpoint = endpoint
        self.curve = curve  # CURVE client keys, for a channel that runs CURVE
        self.stopping = threading.Event()
        self.deadline = time.monotonic() + lifetime_s
        self.replies = 0

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.context.destroy(linger=0)

    def run(self) -> None:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            enable_client(sock, self.curve)
        sock.connect(self.endpoint)
        n = 0
        try:
            while not self.stopping.is_set() and time.monotonic() < self.deadline:
                n += 1
                req = Req(
                    request_id=f"client-{n}",
                    service="nfgate-conformance",
                    version="1",
                    category="c",
                    action="a",
                    payload=b"p%d" % n,
                )
                sock.send_multipart(sada.encode(req, "spec"))
                if sock.poll(50):
                    for _ in range(100):
                        try:
                            frames = sock.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        try:
                            if isinstance(sada.decode(frames, sada.detect(frames)), Rep):
                                self.replies += 1
                        except DecodeError:
                            continue
        finally:
            sock.close(0)


@pytest.fixture
def channel_gateway(tmp_path: Path) -> Iterator[Running]:
    running = start_gateway(tmp_path, CHANNEL_TOML)
    try:
        yield running
    finally:
        finish(running)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dialect", ["spec", "piran"])
def test_sada_channel_suite_passes_against_nfgate(channel_gateway: Running, dialect: str) -> None:
    client = ChannelClient(channel_gateway.endpoint("sada"))
    client.start()
    try:
        report = run_suite(
            "sada", "channel", channel_gateway.endpoint("sada"), dialect, heartbeat_ms=HEARTBEAT_MS
        )
    finally:
        client.stop()
    assert report.dialect == dialect
    assert len(report.results) >= 17
    assert client.replies > 0  # the suite's server answered the channel's REQs
    if dialect == "spec":
        assert_all_pass(report)  # request ids carry the channel id, as the spec recommends
        return
    # A PIRAN server gets PIRAN's bare id form ("RQ-<millis>-..."), which PIRAN validates:
    # without the channel id the spec RECOMMENDS prepending, a departure the suite reports.
    departures = {r.id for r in report.results if r.verdict in (Verdict.FAIL, Verdict.NON_STRICT)}
    assert departures == {"SADA-CHANNEL-7.3"}, explain(report)
    assert_all_pass(
        attrs.evolve(report, results=tuple(r for r in report.results if r.id != "SADA-CHANNEL-7.3"))
    )


@pytest.mark.timeout(30)
def test_a_silent_channel_does_not_hang_the_suite() -> None:
    silent = SilentRouter()  # no identity: the suite's servers cannot even address it
    silent.start()
    try:
        started = time.monotonic()
        report = run_suite("sada", "channel", silent.endpoint, "auto", timeout_s=0.5)
    finally:
        silent.stop()
    assert time.monotonic() - started < 20
    assert report.counts()["FAIL"] >= 1
    assert report.counts()["PASS"] == 0
