"""The suite over CURVE (``--curve-server-key``, ``--curve-secret-key``), against nfgate's
CURVE edges: the NFP, DCP and DBP brokers and the SADA channel as a CURVE client, the
SADA server role as a CURVE server that nfgate's ``sada-server`` edge connects to; and a
CURVE peer reached without its key, or with a wrong one, named in one line before any
case runs (libzmq never retries a handshake that failed on the mechanism: every case
would have waited in vain, and the first send blocked for ever).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
import zmq.auth

from nfgate.codecs.dcp.messages import Ping
from nfgate.conformance.context import CaseContext, NoAnswer
from nfgate.conformance.curve import SuiteCurve, load_curve
from nfgate.conformance.model import Clause, RunOptions
from nfgate.conformance.registry import Session, find_role, select
from nfgate.conformance.runner import run
from tests.gateway.conftest import Running, finish, start_gateway, until

from .conftest import HEARTBEAT_MS, assert_all_pass, explain, run_suite
from .peers import TinyDcpWorker, free_port
from .test_sada_roles import ChannelClient


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    """Two ZeroMQ certificate pairs, as NorFab and ``zmq.auth`` write them."""
    made: dict[str, Path] = {}
    for name in ("broker", "suite"):
        public, secret = zmq.auth.create_certificates(str(tmp_path), name)
        Path(secret).chmod(0o600)
        made[name], made[f"{name}_secret"] = Path(public), Path(secret)
    return made


@pytest.fixture
def curve_gateway(tmp_path: Path, keys: dict[str, Path]) -> Iterator[Running]:
    """nfgate with CURVE on its NFP, DCP, DBP and SADA channel edges (one server key)."""
    secret = keys["broker_secret"]
    toml = "[routing]\nqueue_expiry_ms = 1000\n" + "".join(
        f'[edges.{edge}]\nheartbeat_ms = {HEARTBEAT_MS}\nliveness = 3\ncurve_secret_key = "{secret}"\n'
        for edge in ("nfp", "dcp", "sada")
    )
    toml += f'[edges.dbp]\ncurve_secret_key = "{secret}"\n'
    running = start_gateway(tmp_path, toml)
    try:
        yield running
    finally:
        finish(running)


def _client(keys: dict[str, Path], codec: str = "nfp") -> SuiteCurve:
    curve = load_curve(str(keys["broker"]), None, binds=False, codec=codec)
    assert curve is not None and curve.client is not None
    return curve


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("protocol", "role", "edge", "include"),
    [
        ("nfp", "broker", "nfp", ("NFP-BROKER-5.*", "NFP-BROKER-7.*", "NFP-BROKER-3.*")),
        ("dcp", "broker", "dcp", ()),
        ("dbp", "catalog", "dbp", ()),
    ],
)
def test_broker_roles_pass_over_curve(
    curve_gateway: Running,
    keys: dict[str, Path],
    protocol: str,
    role: str,
    edge: str,
    include: tuple[str, ...],
) -> None:
    report = run_suite(
        protocol, role, curve_gateway.endpoint(edge), "spec", include=include, curve=_client(keys, protocol)
    )
    assert len(report.results) >= 8
    assert_all_pass(report)


@pytest.mark.timeout(120)
def test_sada_channel_role_passes_over_curve(curve_gateway: Running, keys: dict[str, Path]) -> None:
    curve = _client(keys, "sada")
    client = ChannelClient(curve_gateway.endpoint("sada"), curve=curve.client)
    client.start()
    try:
        report = run_suite("sada", "channel", curve_gateway.endpoint("sada"), "spec", curve=curve)
    finally:
        client.stop()
    assert len(report.results) >= 17
    assert client.replies > 0, explain(report)  # REQs reached the suite's server through the channel
    assert_all_pass(report)


@pytest.mark.timeout(120)
def test_sada_server_role_as_a_curve_server_against_the_sada_server_edge(
    tmp_path: Path, keys: dict[str, Path]
) -> None:
    """The suite binds as a CURVE channel; nfgate's sada-server edge trusts its key."""
    channel_url = f"tcp://127.0.0.1:{free_port()}"
    toml = (
        f"[routing]\nqueue_expiry_ms = 300\n"
        f'[edges.sada-server]\nchannels = ["{channel_url}"]\nrefresh_ms = 100\n'
        f'curve_server_key = "{keys["suite"]}"\n'
        f"[edges.dcp]\nheartbeat_ms = {HEARTBEAT_MS}\nliveness = 3\n"
    )
    gateway = start_gateway(tmp_path, toml)
    worker = TinyDcpWorker(gateway.endpoint("dcp"), b"tiny", "spec", heartbeat_s=HEARTBEAT_MS / 1000)
    worker.start()
    try:
        # The worker registered, so that the gateway's INTR names "tiny".
        until(lambda: any(w.peer.edge == "dcp" for w in gateway.gateway.router.workers()))
        curve = load_curve(None, keys["suite_secret"], binds=True, codec="sada")
        report = run_suite("sada", "server", channel_url, "spec", curve=curve)
    finally:
        worker.stop()
        finish(gateway)
    assert len(report.results) >= 18
    assert_all_pass(report)


CONFORMANCE = (sys.executable, "-m", "nfgate", "conformance")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CONFORMANCE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.timeout(120)
def test_a_curve_broker_reached_without_its_key_or_with_another_is_named_before_any_case(
    curve_gateway: Running, keys: dict[str, Path], tmp_path: Path
) -> None:
    endpoint = curve_gateway.endpoint("nfp")
    common = ["-p", "nfp", "-r", "broker", "-e", endpoint, "--timeout", "1", "--heartbeat-ms", "200"]
    missing = _cli(*common)
    assert missing.returncode == 2, missing.stdout + missing.stderr
    # "runs a ZeroMQ security mechanism ...", or, when the server closed before its
    # error reached the suite (a loaded machine), the handshake failure naming both causes
    assert "--curve-server-key" in missing.stderr and len(missing.stderr.splitlines()) == 1
    assert "NFP-BROKER" not in missing.stdout  # found before any case ran
    wrong = _cli(*common, "--curve-server-key", str(keys["suite"]))
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert "is --curve-server-key its public key" in wrong.stderr
    report = tmp_path / "report"
    right = _cli(
        *common,
        "--curve-server-key",
        str(keys["broker"]),
        "--cases",
        "NFP-BROKER-5.[12]",
        "--report",
        str(report),
    )
    assert right.returncode == 0, right.stdout + right.stderr
    assert "CURVE on: as a CURVE client of" in right.stdout
    assert "PASS 2" in right.stdout
    # The report says how the run was secured, with public keys only.
    server_public, _ = zmq.auth.load_certificate(keys["broker"])
    curve = json.loads((report / "report.json").read_text())["options"]["curve"]
    assert curve["as"] == "client" and curve["server_key"] == server_public.decode()
    assert "the suite a client of" in (report / "index.html").read_text()


@pytest.mark.timeout(60)
def test_curve_given_to_a_plain_peer_is_named_before_any_case() -> None:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    plain = ctx.socket(zmq.ROUTER)
    plain.setsockopt(zmq.LINGER, 0)
    port = plain.bind_to_random_port("tcp://127.0.0.1")
    try:
        public, _ = zmq.curve_keypair()
        done = _cli(
            "-p",
            "dcp",
            "-r",
            "broker",
            "-e",
            f"tcp://127.0.0.1:{port}",
            "--curve-server-key",
            public.decode(),
        )
    finally:
        plain.close(0)
        ctx.term()
    assert done.returncode == 2, done.stdout + done.stderr
    # "does not run CURVE: leave out --curve-server-key", or, when the plain peer closed
    # before its error reached the suite (a loaded machine), the failure naming both causes
    assert "--curve-server-key" in done.stderr and "CURVE" in done.stderr, done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-p", "memodb", "-r", "broker", "-e", "tcp://127.0.0.1:9", "--curve-server-key", "{broker}"],
            "runs over NNG",
        ),
        (
            ["-p", "nfp", "-r", "worker", "-e", "tcp://127.0.0.1:0", "--curve-server-key", "{broker}"],
            "the suite binds",
        ),
        (
            ["-p", "nfp", "-r", "broker", "-e", "tcp://127.0.0.1:9", "--curve-secret-key", "{suite_secret}"],
            "needs the peer's public key",
        ),
        (
            ["-p", "nfp", "-r", "broker", "-e", "tcp://127.0.0.1:9", "--curve-server-key", "{nowhere}"],
            "--curve-server-key:",
        ),
        (
            ["-p", "nfp", "-r", "worker", "-e", "tcp://127.0.0.1:0", "--curve-secret-key", "{suite}"],
            "holds no secret key",
        ),
    ],
)
def test_curve_options_misused_are_one_line_and_exit_2(
    tmp_path: Path, keys: dict[str, Path], args: list[str], message: str
) -> None:
    names = {**{k: str(v) for k, v in keys.items()}, "nowhere": str(tmp_path / "nowhere.key")}
    done = _cli(*[a.format(**names) for a in args])
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(30)
def test_a_send_with_no_connection_to_send_on_gives_up_at_the_timeout() -> None:
    """A DEALER with no connection blocks a send for ever: what the suite's sockets are
    left with when libzmq drops a connection for good (a CURVE server reached without
    its key, which can start after the run's handshake check). A case's send must end
    as a NoAnswer at the run's --timeout, not hang the suite. The socket is disconnected
    here, so that no connection can be there (libzmq may keep a dropped one's pipe)."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    options = RunOptions(protocol="dcp", role="broker", endpoint=endpoint, timeout_s=0.5)
    session = Session(find_role("dcp", "broker"), options, "spec")
    case = CaseContext(session=session, clause=Clause(section="s", text="t", keyword="MUST"), budget_s=5.0)
    try:
        dealer = case.dealer("client")
        dealer.sock.disconnect(endpoint)
        start = time.monotonic()
        with pytest.raises(NoAnswer, match="connection to the peer to send on"):
            dealer.send(Ping())
        assert time.monotonic() - start < 3.0
        assert not case.frames  # nothing recorded as sent
    finally:
        case.close()
        session.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("suite_curve", [False, True])
def test_a_worker_whose_handshake_fails_is_told_why(
    keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch, suite_curve: bool
) -> None:
    """The suite binds (worker role); the worker under test connects with CURVE while the
    suite runs none, or with another server key while it runs CURVE. It is never heard,
    and the cases say why rather than only "no READY"."""
    import nfgate.conformance.link as link_module

    monkeypatch.setattr(link_module, "CONNECT_WAIT_S", 1.0)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    worker = ctx.socket(zmq.DEALER)
    worker.setsockopt(zmq.LINGER, 0)
    public, secret = zmq.curve_keypair()
    wrong_server, _ = zmq.curve_keypair()
    worker.curve_serverkey, worker.curve_publickey, worker.curve_secretkey = wrong_server, public, secret
    worker.connect(endpoint)  # libzmq retries until the suite binds
    curve = load_curve(None, keys["suite_secret"], binds=True, codec="nfp") if suite_curve else None
    announced: list[str] = []
    try:
        found = find_role("nfp", "worker")
        options = RunOptions(
            protocol="nfp", role="worker", endpoint=endpoint, timeout_s=0.5, heartbeat_ms=200, curve=curve
        )
        report = run(found, options, select(found, ("NFP-WORKER-7.1",), ()), announce=announced.append)
    finally:
        worker.close(0)
        ctx.term()
    # Without CURVE in the suite: "runs a ZeroMQ security mechanism (CURVE?): give the
    # suite a key pair with --curve-secret-key", or, when the worker closed before the
    # suite's error reached it (a loaded machine), the handshake failure naming the option.
    why = "does it use the suite's public key" if suite_curve else "--curve-secret-key"
    assert any(why in line for line in announced), announced
    assert why in report.results[0].reason, report.results[0].reason
