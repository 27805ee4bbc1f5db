"""The MemoDB roles over ``tls+tcp://`` (``--tls-ca``, ``--tls-cert-key``,
``--tls-server-name``): the broker role against nfgate's MemoDB edge with a TLS bind,
the worker role with the suite listening on TLS, and the options' misuse."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pynng
import pytest

from nfgate.conformance.tls import load_tls
from tests.gateway.conftest import Running, finish, random_binds, start_gateway
from tests.tls import needs_openssl, self_signed

from .conftest import assert_all_pass, run_suite
from .peers import free_port
from .test_memodb_roles import HEARTBEAT_MS, TinyMemodbWorker

pytestmark = needs_openssl


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost: (cert.pem, both.pem with its key)."""
    return self_signed(tmp_path)


@pytest.fixture
def tls_gateway(tmp_path: Path, certificate: tuple[Path, Path]) -> Iterator[Running]:
    toml = (
        f"[edges.memodb]\nheartbeat_ms = {HEARTBEAT_MS}\nliveness = 3\n"
        f'tls_cert_key_file = "{certificate[1]}"\n'
    )
    binds = [(k, url) for k, url in random_binds() if k != "memodb"] + [("memodb", "tls+tcp://127.0.0.1:*")]
    running = start_gateway(tmp_path, toml, binds=binds)
    try:
        yield running
    finally:
        finish(running)


@pytest.mark.timeout(120)
def test_memodb_broker_suite_passes_over_tls(tls_gateway: Running, certificate: tuple[Path, Path]) -> None:
    endpoint = tls_gateway.endpoint("memodb")
    assert endpoint.startswith("tls+tcp://")
    tls = load_tls(certificate[0], None, "localhost", binds=False, codec="memodb", endpoint=endpoint)
    report = run_suite("memodb", "broker", endpoint, "spec", heartbeat_ms=HEARTBEAT_MS, tls=tls)
    assert len(report.results) >= 23
    assert_all_pass(report)


@pytest.mark.timeout(120)
def test_memodb_worker_suite_listens_over_tls(certificate: tuple[Path, Path]) -> None:
    endpoint = f"tls+tcp://127.0.0.1:{free_port()}"
    client = pynng.TLSConfig(
        pynng.TLSConfig.MODE_CLIENT, server_name="localhost", ca_files=[str(certificate[0])]
    )
    worker = TinyMemodbWorker(endpoint, ("tiny",), tls=client)
    worker.start()
    try:
        tls = load_tls(None, certificate[1], None, binds=True, codec="memodb", endpoint=endpoint)
        report = run_suite("memodb", "worker", endpoint, "auto", heartbeat_ms=HEARTBEAT_MS, tls=tls)
    finally:
        worker.stop()
    assert len(report.results) >= 17
    assert_all_pass(report)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", "memodb", "-r", "broker", "-e", "tls+tcp://127.0.0.1:9"], "needs --tls-ca"),
        (["-p", "memodb", "-r", "worker", "-e", "tls+tcp://127.0.0.1:0"], "needs --tls-cert-key"),
        (
            ["-p", "memodb", "-r", "broker", "-e", "tcp://127.0.0.1:9", "--tls-ca", "{cert}"],
            "need a tls+tcp://",
        ),
        (["-p", "dcp", "-r", "broker", "-e", "tcp://127.0.0.1:9", "--tls-ca", "{cert}"], "CURVE"),
        (
            ["-p", "memodb", "-r", "broker", "-e", "tls+tcp://127.0.0.1:9", "--tls-ca", "{junk}"],
            "cannot load",
        ),
    ],
)
def test_tls_options_misused_are_one_line_and_exit_2(
    tmp_path: Path, certificate: tuple[Path, Path], args: list[str], message: str
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    argv = [a.format(cert=certificate[0], junk=junk) for a in args]
    done = subprocess.run(
        [sys.executable, "-m", "nfgate", "conformance", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
