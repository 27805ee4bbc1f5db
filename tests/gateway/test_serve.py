"""`nfgate serve` as a user runs it: a subprocess, log lines, signals, exit statuses,
and the job store surviving kill -9."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Disconnect, Get, Keepalive, Post, Ready, Response
from nfgate.edges.kinds import KINDS
from nfgate.store import JobRecord, JobStore
from tests.ports import random_bind_args, random_binds
from tests.serving import LISTEN, Server, metrics_url, start, stop

from .conftest import until

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


RANDOM = tuple(random_bind_args())


def test_logs_each_edge_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    server = start("--data-dir", str(tmp_path), *RANDOM)
    assert set(server.endpoints) == {kind for kind, _ in random_binds()}
    assert all(
        url.startswith("tcp://127.0.0.1:") and not url.endswith(":0") for url in server.endpoints.values()
    )
    assert stop(server) == 0


def test_the_ready_line_says_when_the_job_store_does_not_fsync(tmp_path: Path) -> None:
    # An operator reading the log must see that acknowledged jobs would not survive a
    # crash of the machine; the default says nothing more than where the store is.
    default = start("--data-dir", str(tmp_path / "a"), *RANDOM)
    try:
        ready = [line for line in default.lines if "nfgate: ready" in line]
        assert ready == [f"nfgate: ready (job store {tmp_path / 'a'})\n"]
    finally:
        assert stop(default) == 0
    config = tmp_path / "nofsync.toml"
    config.write_text("[gateway]\nfsync = false\n")
    unsynced = start("--config", str(config), "--data-dir", str(tmp_path / "b"), *RANDOM)
    try:
        ready = [line for line in unsynced.lines if "nfgate: ready" in line]
        assert ready == [f"nfgate: ready (job store {tmp_path / 'b'}, fsync off)\n"]
    finally:
        assert stop(unsynced) == 0


def test_sigint_also_drains_and_exits_0(tmp_path: Path) -> None:
    server = start("--data-dir", str(tmp_path), *RANDOM)
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(timeout=15) == 0


def _catches_sigterm(pid: int) -> bool:
    """True once the process has its SIGTERM handler (Linux: SigCgt in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads SigCgt from /proc")
@pytest.mark.timeout(120)
def test_a_signal_during_start_up_is_not_lost(tmp_path: Path) -> None:
    # The inventory is a FIFO: reading it holds the gateway in build() until this test
    # writes it, after the SIGTERM (systemctl stop right after start), which must still
    # stop the gateway once it is built, exit 0.
    inventory = tmp_path / "inventory.yaml"
    os.mkfifo(inventory)
    config = tmp_path / "slow.toml"
    config.write_text("[edges.nfp]\ninventory = 'inventory.yaml'\n")
    args = ["--config", str(config), "--data-dir", str(tmp_path / "data"), "--no-metrics", *RANDOM]
    proc = subprocess.Popen(
        [sys.executable, "-m", "nfgate", "serve", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        until(lambda: _catches_sigterm(proc.pid), timeout=30)
        proc.send_signal(signal.SIGTERM)
        writer: list[int] = []

        def reader_waits() -> bool:  # the gateway has opened the FIFO: it is in build()
            try:
                writer.append(os.open(inventory, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as exc:  # ENXIO: no reader yet
                assert exc.errno == errno.ENXIO, exc
            return bool(writer)

        until(reader_waits, timeout=30)
        os.write(writer[0], b"workers: {}\n")
        os.close(writer[0])
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None and "nfgate: stopped" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def run_bad(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nfgate", "serve", *args], capture_output=True, text=True, timeout=30
    )


def test_bad_config_is_one_line_naming_the_key_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[edges.nfp]\nbnd = 'tcp://127.0.0.1:1'\n")
    done = run_bad("--config", str(config), "--data-dir", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "edges.nfp.bnd" in done.stderr
    config.write_text("[routing]\nqueue_expiry_ms = 'soon'\n")
    done = run_bad("--config", str(config), "--data-dir", str(tmp_path))
    assert done.returncode == 2 and "routing.queue_expiry_ms" in done.stderr
    config.write_text('[edges.dcp]\ncurve_allow = "keys"\n')
    done = run_bad("--config", str(config), "--data-dir", str(tmp_path))
    assert done.returncode == 2 and "edges.dcp.curve_allow needs edges.dcp.curve_secret_key" in done.stderr
    config.write_text('[edges.nfp]\ncurve_secret_key = "missing.key_secret"\n')
    done = run_bad("--config", str(config), "--data-dir", str(tmp_path))
    assert (
        done.returncode == 2 and done.stderr.count("\n") == 1 and "edges.nfp.curve_secret_key" in done.stderr
    )
    for key, value in (("inventory", "nope.yaml"), ("files_root", "nope_dir")):
        config.write_text(f'[edges.nfp]\n{key} = "{value}"\n')
        done = run_bad("--config", str(config), "--data-dir", str(tmp_path))
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert f"edges.nfp.{key}" in done.stderr and value in done.stderr
    config.write_text("this is [not toml\n")
    done = run_bad("--config", str(config), "--data-dir", str(tmp_path))
    assert done.returncode == 2 and "not valid TOML" in done.stderr


def test_an_allow_list_that_would_refuse_everyone_stops_serve_with_one_line(tmp_path: Path) -> None:
    # Before, pyzmq logged "Failed to load CURVE certs" and the gateway started, ready,
    # refusing every client.
    import zmq.auth

    _, secret_file = zmq.auth.create_certificates(tmp_path, "broker")
    allow = tmp_path / "clients"
    allow.mkdir()
    zmq.auth.create_certificates(allow, "good")
    (allow / "notes.key").write_text("# not a certificate\n")
    config = tmp_path / "nfgate.toml"
    config.write_text(f'[edges.nfp]\ncurve_secret_key = "{secret_file}"\ncurve_allow = "{allow}"\n')
    done = run_bad("--config", str(config), "--data-dir", str(tmp_path), *RANDOM)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "edges.nfp.curve_allow" in done.stderr and "notes.key" in done.stderr


def test_a_curve_secret_key_other_users_can_read_is_warned_about(tmp_path: Path) -> None:
    import zmq.auth

    _, secret_file = zmq.auth.create_certificates(tmp_path, "broker")
    config = tmp_path / "nfgate.toml"
    config.write_text(f'[edges.nfp]\ncurve_secret_key = "{secret_file}"\n')
    for mode, warned in ((0o644, True), (0o600, False)):
        Path(secret_file).chmod(mode)
        server = start("--config", str(config), "--data-dir", str(tmp_path), *RANDOM)
        try:
            lines = [line for line in server.lines if "can be read by other users" in line]
            assert lines == (
                [
                    f"nfgate: nfp edge: the CURVE secret key {secret_file} can be read by other users (mode 644): chmod 600 it\n"
                ]
                if warned
                else []
            ), mode
        finally:
            assert stop(server) == 0


def test_an_allow_list_refuses_unlisted_keys_counts_them_and_warns_of_open_edges(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    """The startup warning names the edges any peer can register services on; a refused
    handshake is one log line naming the key and counts as curve_refused in the metrics;
    a listed key gets in."""
    import zmq.auth

    _, secret_file = zmq.auth.create_certificates(tmp_path, "broker")
    server_public, _ = zmq.auth.load_certificate(secret_file)
    allow = tmp_path / "clients"
    allow.mkdir()
    listed = zmq.auth.load_certificate(zmq.auth.create_certificates(allow, "listed")[1])
    stranger = zmq.auth.load_certificate(zmq.auth.create_certificates(tmp_path, "stranger")[1])
    config = tmp_path / "nfgate.toml"
    config.write_text(f'[edges.nfp]\ncurve_secret_key = "{secret_file}"\ncurve_allow = "{allow}"\n')
    server = start("--config", str(config), "--data-dir", str(tmp_path), *RANDOM, "--no-sada")
    try:
        warning = [line for line in server.lines if "can register any service" in line]
        assert warning == [
            "nfgate: nfp checks who may serve, but any peer of dcp, memodb, dbp can register any "
            "service (lock those edges down too, or switch them off with --no-EDGE: docs/broker.md, CURVE)\n"
        ]

        def answered(pair: tuple[bytes, bytes | None]) -> bool:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.curve_serverkey = server_public
            sock.curve_publickey, sock.curve_secretkey = pair[0], pair[1]
            sock.connect(server.endpoints["nfp"])
            sock.send_multipart(
                nfp.encode(
                    Post(
                        header=CLIENT, service="nobody", target="any", uuid=uuidlib.uuid4().hex, body=(b"x",)
                    ),
                    "spec",
                )
            )
            got = sock.poll(2000) != 0
            sock.close(0)
            return got

        assert answered(listed)
        assert not answered(stranger)
        key = stranger[0].decode()
        until(lambda: any(key in line for line in server.lines))
        refusals = [line for line in server.lines if key in line]
        assert len(refusals) == 1 and "nfp edge: refused a CURVE client" in refusals[0]
        counted: list[str] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the loop publishes its counters once a second
            with urllib.request.urlopen(metrics_url(server), timeout=5) as response:
                page = response.read().decode()
            counted = [line for line in page.splitlines() if 'event="curve_refused"' in line]
            if counted and not counted[0].endswith(" 0"):
                break
            time.sleep(0.2)
        # Only the nfp edge runs CURVE.
        assert len(counted) == 1 and 'edge="nfp"' in counted[0] and not counted[0].endswith(" 0"), counted
    finally:
        assert stop(server) == 0


def test_start_up_mistakes_are_one_line_before_any_edge_binds(tmp_path: Path) -> None:
    """An inventory that does not render, a capture folder that cannot be made, a
    capture edge that is not served: one line, exit 2, no "listening" line before it."""
    config = tmp_path / "c.toml"
    (tmp_path / "a-file").write_text("")
    cases = [
        ("x: {{ 1/0 }}\n", "", "ZeroDivisionError"),
        ("a: &x [*x]\n", "", "contains itself"),
        ("x: 1\n", "[capture]\ndir = 'a-file/cap'\n", "capture: cannot create"),
        ("x: 1\n", "[capture]\ndir = 'caps'\nedges = ['nfq']\n", "capture.edges: no edge nfq"),
    ]
    for inventory, extra, needle in cases:
        (tmp_path / "inv.yaml").write_text(inventory)
        config.write_text(f"[edges.nfp]\ninventory = 'inv.yaml'\n{extra}")
        done = run_bad("--config", str(config), "--data-dir", str(tmp_path / "d"), *RANDOM)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and needle in done.stderr, done.stderr


@pytest.mark.parametrize("kind", ["nfp", "dcp"])  # the first edge bound, and one after it
def test_port_in_use_is_one_line_naming_the_edge_exit_2(tmp_path: Path, kind: str) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = run_bad(
            "--data-dir",
            str(tmp_path),
            "--bind",
            f"{kind}=tcp://127.0.0.1:{port}",
            *random_bind_args(but=kind),
        )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr  # no "listening" line of an edge before it
    assert f"{kind} edge: cannot bind" in done.stderr and "address already in use" in done.stderr


def _recv(sock: zmq.Socket[bytes]) -> object:
    for _ in range(50):
        if not sock.poll(5000):
            pytest.fail("no reply")
        message = nfp.decode(sock.recv_multipart())
        if not isinstance(message, Keepalive):
            return message
    pytest.fail("only keepalives")


def test_accepted_job_survives_kill_9_and_is_dispatched_after_restart(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    server = start("--data-dir", str(tmp_path), *RANDOM)
    url = server.endpoints["nfp"]
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.setsockopt(zmq.IDENTITY, b"durable-client")
    client.connect(url)
    job = uuidlib.uuid4().hex
    client.send_multipart(
        nfp.encode(Post(header=CLIENT, service="later", target="any", uuid=job, body=(b"x",)))
    )
    accepted = _recv(client)
    assert accepted.status == 202  # type: ignore[attr-defined]
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=10)

    port = url.rsplit(":", 1)[1]
    again = start(
        "--data-dir", str(tmp_path), "--bind", f"nfp=tcp://127.0.0.1:{port}", *random_bind_args(but="nfp")
    )
    try:
        assert any("stored job(s) taken up again" in line for line in again.lines)
        worker = ctx.socket(zmq.DEALER)
        worker.setsockopt(zmq.LINGER, 0)
        worker.setsockopt(zmq.IDENTITY, b"late-worker")
        worker.connect(url)
        worker.send_multipart(nfp.encode(Ready(service="later")))
        dispatched = _recv(worker)
        assert isinstance(dispatched, Post) and dispatched.uuid == job and dispatched.body == (b"x",)
        worker.send_multipart(
            nfp.encode(Response(header=WORKER, service="later", uuid=job, status=200, body=(b"y",)))
        )
        # The relayed RESPONSE may reach the client or not (it may still be reconnecting
        # to the new process); the stored result is what GET serves either way.
        for _ in range(50):
            client.send_multipart(
                nfp.encode(Get(header=CLIENT, service="later", target="any", uuid=job, body=(b"",)))
            )
            answer = _recv(client)
            if isinstance(answer, Response) and answer.status == 200:
                break
            time.sleep(0.1)
        assert answer == Response(header=b"NFPB01", service="later", uuid=job, status=200, body=(b"y",))
        worker.close()
    finally:
        client.close()
        assert stop(again) == 0


def _logged(ctx: zmq.Context[zmq.Socket[bytes]], url: str) -> list[str]:
    """The messages ``get_logs`` (mmi.service.broker) gives, every one it keeps."""
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    client.connect(url)
    try:
        ask = {"task": "get_logs", "kwargs": {"last": 0}, "args": []}
        body = (json.dumps(ask).encode(),)
        client.send_multipart(
            nfp.encode(
                Post(
                    header=CLIENT,
                    service="mmi.service.broker",
                    target="any",
                    uuid=uuidlib.uuid4().hex,
                    body=body,
                )
            )
        )
        answer = _recv(client)
        assert isinstance(answer, Response) and answer.status == 200
        return [record["message"] for record in json.loads(answer.body[0].decode("utf-8"))]
    finally:
        client.close()


def _wait_for_line(server: Server, needle: str) -> str:
    until(lambda: any(needle in line for line in server.lines), timeout=10)
    return next(line for line in server.lines if needle in line)


def test_workers_joining_and_leaving_are_logged_and_served_by_get_logs(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    # What NorFab's broker logs at INFO ("registered new worker", "worker keepalives
    # expired") an operator replacing it must still see: in the log and from get_logs.
    server = start("--data-dir", str(tmp_path), *RANDOM)
    try:
        url = server.endpoints["nfp"]
        worker = ctx.socket(zmq.DEALER)
        worker.setsockopt(zmq.LINGER, 0)
        worker.setsockopt(zmq.IDENTITY, b"log-worker")
        worker.connect(url)
        worker.send_multipart(nfp.encode(Ready(service="echo")))
        joined = _wait_for_line(server, "worker log-worker registered")
        assert joined == "nfgate: nfp: worker log-worker registered for echo\n"
        worker.send_multipart(nfp.encode(Disconnect(header=WORKER, service="echo")))
        left = _wait_for_line(server, "worker log-worker left")
        assert left == "nfgate: nfp: worker log-worker left: worker sent DISCONNECT\n"

        messages = _logged(ctx, url)
        # The start-up lines too: they are logged before the loop runs.
        assert f"nfp edge (nfp) listening on {url}" in messages
        assert any(m.startswith("ready (job store ") for m in messages)
        assert joined.removeprefix("nfgate: ").strip() in messages
        assert left.removeprefix("nfgate: ").strip() in messages
        worker.close()
    finally:
        assert stop(server) == 0


def test_a_peers_service_name_cannot_forge_log_lines(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    # A DCP service name "MAY contain any character": a newline in it must not start a
    # line of the peer's own, an escape must not reach the operator's terminal, and an
    # undecodable byte must not cost the line ("--- Logging error ---").
    server = start("--data-dir", str(tmp_path), *RANDOM)
    try:
        worker = ctx.socket(zmq.DEALER)
        worker.setsockopt(zmq.LINGER, 0)
        worker.setsockopt(zmq.RCVTIMEO, 5000)
        worker.setsockopt(zmq.IDENTITY, b"forger")
        worker.connect(server.endpoints["dcp"])
        worker.send_multipart(dcp.encode(Registration(service=b"x\nnfgate: ready (forged)\x1b[31m\xff")))
        assert dcp.decode(worker.recv_multipart()) == Registration(
            service=b"x\nnfgate: ready (forged)\x1b[31m\xff"
        )
        joined = _wait_for_line(server, "registered for x")
        assert (
            joined
            == "nfgate: dcp: worker dcp-666f72676572 registered for x\\nnfgate: ready (forged)\\x1b[31m\\udcff\n"
        )
        assert joined.removeprefix("nfgate: ").strip() in _logged(ctx, server.endpoints["nfp"])
        worker.close()
    finally:
        assert stop(server) == 0
    lines = server.read_to_the_end()
    assert not any(line.startswith("nfgate: ready (forged)") or "\x1b" in line for line in lines)
    assert not any("Logging error" in line for line in lines)


def _port_free(url: str) -> bool:
    host, port = url.removeprefix("tcp://").rsplit(":", 1)
    with socket.socket() as probe:
        try:
            probe.bind((host, int(port)))
        except OSError:
            return False
    return True


def test_readme_run_command_serves_the_embedded_defaults(tmp_path: Path) -> None:
    """The README's run command ends in a bare ``nfgate serve``: with no arguments it must
    bind every edge on its documented default endpoint."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```sh\n")[1:]]
    assert blocks[0].endswith("&& nfgate serve"), "the first command in the README runs the broker"
    defaults = {kind: spec.binds[0] for kind, spec in KINDS.items() if spec.binds}
    taken = [url for url in [*defaults.values(), "tcp://127.0.0.1:9464"] if not _port_free(url)]
    if taken:
        pytest.skip(f"default ports already in use on this machine: {taken}")
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "nfgate", "serve"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    server = Server(proc, {}, [])
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            server.lines.append(line)
            if not line or "nfgate: ready" in line:
                break
            if m := LISTEN.search(line):
                server.endpoints[m.group(1)] = m.group(3)
        assert server.endpoints == defaults
        assert any("metrics on http://127.0.0.1:9464/metrics" in line for line in server.lines)
        assert (tmp_path / "nfgate" / "jobs.sqlite3").exists()
    finally:
        assert stop(server) == 0


def test_metrics_endpoint_counts_what_the_gateway_did(
    tmp_path: Path, ctx: zmq.Context[zmq.Socket[bytes]]
) -> None:
    server = start("--data-dir", str(tmp_path), *RANDOM)
    try:
        url = metrics_url(server)
        client = ctx.socket(zmq.DEALER)
        client.setsockopt(zmq.LINGER, 0)
        client.connect(server.endpoints["nfp"])
        job = uuidlib.uuid4().hex
        client.send_multipart(
            nfp.encode(Post(header=CLIENT, service="nobody", target="any", uuid=job, body=(b"x",)), "spec")
        )
        assert client.poll(5000), "no 202"
        client.send_multipart([b"garbage"])
        deadline = time.monotonic() + 5
        page = ""
        while time.monotonic() < deadline:  # the loop publishes its counters once a second
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                page = response.read().decode()
            # The undecodable line is there from the start (at 0): wait for its 1, which a
            # publication between the 202 and the garbage's read does not have yet.
            if "nfgate_core_accepted_total 1" in page and 'event="undecodable"} 1' in page:
                break
            time.sleep(0.2)
        assert "nfgate_core_accepted_total 1" in page, page
        assert "nfgate_core_queued 1" in page
        assert 'nfgate_edge_events_total{edge="nfp",protocol="nfp",event="undecodable"} 1' in page
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=5)
        assert missing.value.code == 404
        client.close(0)
    finally:
        assert stop(server) == 0


def test_metrics_port_in_use_is_one_line_exit_2(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = run_bad("--data-dir", str(tmp_path), *RANDOM, "--metrics", f"http://127.0.0.1:{port}")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "metrics" in done.stderr, done.stderr


def test_a_second_gateway_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    first = start("--data-dir", str(tmp_path), *RANDOM)
    try:
        done = run_bad("--data-dir", str(tmp_path), *random_bind_args())
        assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
        assert f"in use by another nfgate (pid {first.proc.pid})" in done.stderr
    finally:
        assert stop(first) == 0


def test_a_second_gateway_on_the_same_config_names_the_data_dir_not_the_metrics_port(tmp_path: Path) -> None:
    # The same configuration started twice: both the data dir and the metrics port are
    # the first one's, and the data dir is the cause to name.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        metrics = f"http://127.0.0.1:{probe.getsockname()[1]}"
    first = start("--data-dir", str(tmp_path), *RANDOM, "--metrics", metrics)
    try:
        done = run_bad("--data-dir", str(tmp_path), *random_bind_args(), "--metrics", metrics)
        assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
        assert f"in use by another nfgate (pid {first.proc.pid})" in done.stderr
    finally:
        assert stop(first) == 0


def _damage_a_row(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE jobs SET body = x'c1'")  # 0xc1: a byte msgpack never uses
    db.commit()
    db.close()


def _scribble_the_pages(path: Path) -> None:
    # Random bytes over every page after the first (the schema): the tables' pages.
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(4096)
        f.write(os.urandom(size - 4096))


@pytest.mark.parametrize("damage", [_damage_a_row, _scribble_the_pages])
def test_a_damaged_job_store_is_one_line_exit_2(tmp_path: Path, damage: Callable[[Path], None]) -> None:
    store = JobStore(tmp_path / "jobs.sqlite3", fsync=False, checkpoint_s=None)
    for n in range(200):  # a few pages of queued jobs
        store.add(
            JobRecord(
                uuid=f"{n:032x}",
                service="echo",
                target="any",
                edge="nfp",
                protocol="nfp/spec",
                client=b"c1",
                body=(b"x" * 100,),
                created_ms=n,
            )
        )
    store.close()  # the last connection: SQLite checkpoints the WAL into the file
    damage(tmp_path / "jobs.sqlite3")
    done = run_bad("--data-dir", str(tmp_path), *random_bind_args())
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "job store" in done.stderr and str(tmp_path) in done.stderr, done.stderr
