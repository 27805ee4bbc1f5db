"""The MemoDB edge on gateways set up per test: garbage, failed jobs, context limits,
draining, a TLS bind, and the hand-stepped read loop under a burst (specs/memodb.md)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import cbor2
import pynng
import pytest
import zmq

from nfgate.codecs.memodb.messages import Disconnect, Job, Result
from nfgate.config import load
from nfgate.errors import ConfigError
from nfgate.serve import build
from nfgate.transports.nng import client_tls, connect_req
from tests.ports import random_binds
from tests.tls import needs_openssl, self_signed

from .conftest import Running, finish, start_gateway, until
from .memodb_helpers import FAST, Peers, _echo_worker, edge_stats, get, next_job, ready, send

pytestmark = pytest.mark.timeout(60)


def test_garbage_is_counted_and_harmless(gw: Running) -> None:
    peers = Peers(gw)  # default 10 s heartbeat: the worker waits through the junk
    try:
        _garbage(gw, peers)
    finally:
        peers.close()


def _garbage(gw: Running, peers: Peers) -> None:
    worker, client = peers.req(), peers.req()
    ready(gw, worker, "echo")
    junk = [
        b"",
        b"\xff",
        b"not cbor at all",
        cbor2.dumps(["memo02", 2, b"", "echo", 1]),
        cbor2.dumps(["memo01", 9, b""]),
        cbor2.dumps(["memo01", 2, b"", "", 5]),  # a JOB without a service name
        cbor2.dumps(["memo01", 1, b"", ["echo"]]) + b"payload",
        b"\x9f" * 1000,
    ]
    for data in junk:
        bad = peers.req(recv_ms=200)
        bad.send(data)
        with pytest.raises(pynng.Timeout):  # MemoDB has no error reply: the peer retries
            bad.recv()
    send(client, Job(service="echo", timeout_ms=5000, payload=b"still fine"))
    job = next_job(worker)
    send(worker, Result(id=job.id, payload=b"ok"))
    assert get(client) == Result(payload=b"ok")
    stats = edge_stats(gw)
    assert stats["undecodable"] == len(junk) - 1 and stats["bad_job"] == 1


def test_failed_job_gets_no_reply_and_is_counted(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, FAST + "[routing]\nqueue_expiry_ms = 200\n")
    peers = Peers(gw)
    try:
        client = peers.req(recv_ms=800)
        send(client, Job(service="nobody", timeout_ms=1000, payload=b"x"))
        with pytest.raises(pynng.Timeout):
            client.recv()
        until(lambda: edge_stats(gw).get("client_errors_unsent") == 1)
        assert edge_stats(gw)["held"] == 0  # the context was given back
    finally:
        peers.close()
        finish(gw)


def test_requests_beyond_max_contexts_are_refused_and_counted(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, FAST + "max_contexts = 2\n[routing]\nqueue_expiry_ms = 5000\n")
    peers = Peers(gw)
    try:
        first, second, third = peers.req(), peers.req(), peers.req(recv_ms=300)
        send(first, Job(service="later", timeout_ms=1000, payload=b"1"))
        send(second, Job(service="later", timeout_ms=1000, payload=b"2"))
        until(lambda: edge_stats(gw)["held"] == 2)
        send(third, Job(service="later", timeout_ms=1000, payload=b"3"))
        with pytest.raises(pynng.Timeout):
            third.recv()
        assert edge_stats(gw)["refused"] == 1
    finally:
        peers.close()
        finish(gw)


def test_one_connection_cannot_hold_every_context(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, FAST + "max_contexts_per_peer = 2\n[routing]\nqueue_expiry_ms = 5000\n")
    peers = Peers(gw)
    contexts: list[pynng.Context] = []
    try:
        hog = peers.req(recv_ms=300)
        contexts += [hog.new_context() for _ in range(3)]
        for i, ctx in enumerate(contexts):
            send(ctx, Job(service="later", timeout_ms=1000, payload=b"%d" % i))
        until(lambda: edge_stats(gw)["peer_limit"] == 1)  # the third of one connection
        other = peers.req(recv_ms=300)
        send(other, Job(service="later", timeout_ms=1000, payload=b"x"))
        until(lambda: edge_stats(gw)["held"] == 3)  # another connection still gets in
        assert edge_stats(gw)["peer_limit"] == 1
    finally:
        for ctx in contexts:  # before their socket: a context outliving it complains
            ctx.close()
        peers.close()
        finish(gw)


def test_stopping_gateway_disconnects_polling_workers(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path)
    peers = Peers(gw)
    try:
        worker = peers.req()
        ready(gw, worker, "echo")
        gw.stop()  # drain: the held long-poll is answered DISCONNECT
        message = get(worker)
        assert isinstance(message, Disconnect) and len(message.id) == 4
    finally:
        peers.close()
        finish(gw)


@needs_openssl
def test_tls_bind_from_the_config(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    config = tmp_path / "nfgate.toml"
    config.write_text('[edges.memodb]\ntls_cert_key_file = "both.pem"\n')
    binds = [(k, url) for k, url in random_binds() if k != "memodb"] + [("memodb", "tls+tcp://127.0.0.1:*")]
    cfg = load(config, data_dir=tmp_path / "data", binds=binds)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    gw = Running(build(cfg, context, wake_fd=reader.fileno()), context, writer)
    gw._closers = (reader, writer)  # type: ignore[attr-defined]
    gw.thread.start()
    socks: list[pynng.Req0] = []
    try:
        url = gw.endpoint("memodb")
        assert url.startswith("tls+tcp://127.0.0.1:")
        tls = client_tls(cert.read_text())
        worker, client = (connect_req(url, tls=tls) for _ in range(2))
        socks += [worker, client]
        ready(gw, worker, "secure")
        send(client, Job(service="secure", timeout_ms=5000, payload=b"over tls"))
        job = next_job(worker)
        send(worker, Result(id=job.id, payload=job.payload.upper()))
        assert get(client) == Result(payload=b"OVER TLS")
    finally:
        for sock in socks:
            sock.close()
        finish(gw)


@needs_openssl
def test_tls_settings_that_cannot_encrypt_are_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "nfgate.toml"
    config.write_text('[edges.memodb]\ntls_ca_file = "ca.pem"\n')
    (tmp_path / "ca.pem").write_text("")
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        # Refused as the config is loaded, before any edge binds.
        with pytest.raises(
            ConfigError, match=r"^config: edges\.memodb\.tls_ca_file needs edges\.memodb\.tls_cert_key_file$"
        ):
            load(config, data_dir=tmp_path / "data", binds=random_binds())
        # A file that does not load, and a tls+tcp:// bind without a certificate: named
        # with their section too (they said only tls_cert_key_file, as a TransportError).
        cert, _ = self_signed(tmp_path)
        config.write_text(f'[edges.memodb]\ntls_cert_key_file = "{cert.name}"\n')  # no key in it
        with pytest.raises(
            ConfigError,
            match=r"^config: edges\.memodb\.tls_cert_key_file: cannot load TLS certificate .*cert\.pem",
        ):
            build(load(config, data_dir=tmp_path / "data", binds=random_binds()), context)
        tls_bind = [(k, url) for k, url in random_binds() if k != "memodb"] + [
            ("memodb", "tls+tcp://127.0.0.1:*")
        ]
        config.write_text("")
        with pytest.raises(
            ConfigError,
            match=r"^config: edges\.memodb\.bind: tls\+tcp://127\.0\.0\.1:\* needs edges\.memodb\.tls_cert_key_file$",
        ):
            load(config, data_dir=tmp_path / "data", binds=tls_bind)
        # A certificate beside a plain tcp:// bind: it starts (an ipc:// bind may share
        # the table), and the log says that this bind is not encrypted.
        _, both = self_signed(tmp_path)
        config.write_text(f'[edges.memodb]\ntls_cert_key_file = "{both.name}"\n')
        cfg = load(config, data_dir=tmp_path / "data", binds=random_binds())
        with caplog.at_level("WARNING", logger="nfgate"):
            gw = build(cfg, context)
        # Who may register workers (serve's warning about open edges reads it): any peer
        # of a plain bind; only certified peers of a TLS bind with a CA file.
        assert gw.edges["memodb"].worker_access() == "any"
        gw.close()
        cert, _ = self_signed(tmp_path)
        config.write_text(f'[edges.memodb]\ntls_cert_key_file = "{both.name}"\ntls_ca_file = "{cert.name}"\n')
        binds = [(k, url) for k, url in random_binds() if k != "memodb"] + [
            ("memodb", "tls+tcp://127.0.0.1:*")
        ]
        gw = build(load(config, data_dir=tmp_path / "data", binds=binds), context)
        assert gw.edges["memodb"].worker_access() == "checked"
        gw.close()
    finally:
        context.term()
    warned = [r.getMessage() for r in caplog.records if "tls_cert_key_file" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(
        "memodb edge: tls_cert_key_file is set but tcp://127.0.0.1:"
    )
    assert warned[0].endswith(" is not tls+tcp://: its traffic is not encrypted")


def test_a_burst_goes_to_posted_receives_and_an_idle_loop_sleeps_on_the_fd_again(tmp_path: Path) -> None:
    # The gateway is stepped by hand, so that a burst is surely waiting when it reads.
    cfg = load(None, data_dir=tmp_path / "data", binds=random_binds())
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    gateway = build(cfg, context)
    edge = gateway.edges["memodb"]
    url = edge.endpoint
    shared = connect_req(url, recv_timeout_ms=5000)
    stop = threading.Event()
    served: list[int] = []
    contexts = [shared.new_context() for _ in range(4)]
    workers = [threading.Thread(target=_echo_worker, args=(c, stop, served), daemon=True) for c in contexts]
    clients = [connect_req(url, recv_timeout_ms=5000) for _ in range(32)]

    def step_until(predicate: object, steps: int = 5000) -> None:
        deadline = time.monotonic() + 10
        for _ in range(steps):
            if predicate() or time.monotonic() > deadline:  # type: ignore[operator]
                break
            gateway.step(max_wait_ms=20)
        assert predicate(), "condition not met in time"  # type: ignore[operator]

    try:
        for t in workers:
            t.start()
        step_until(lambda: len(gateway.router.workers()) == 4)
        for i, sock in enumerate(clients):
            send(sock, Job(service="echo", timeout_ms=5000, payload=b"%d" % i))
        time.sleep(0.3)  # all 32 at the socket before the next read: a burst
        # 4 READY, 32 JOB, 32 RESULT read; only the workers' next long-polls held.
        step_until(lambda: edge.transport.received == 68 and edge.transport.held == 4)
        for i, sock in enumerate(clients):
            assert get(sock) == Result(payload=b"%d" % i)
        stats = edge.stats()
        assert stats["received_posted"] > 0 and stats["refused"] == 0
        # Quiet again: the receives are withdrawn, so that the poll may sleep on the fd.
        step_until(lambda: not edge.pending(), steps=50)
        assert gateway._wait(gateway._clock(), 1000) > 0  # the next poll may sleep
        # A lone request is announced by the fd and served.
        send(clients[0], Job(service="echo", timeout_ms=5000, payload=b"late"))
        step_until(lambda: edge.transport.received == 70 and edge.transport.held == 4)
        assert get(clients[0]) == Result(payload=b"late")
        assert gateway.internal_errors == 0
    finally:
        stop.set()
        for sock in (*clients, *contexts, shared):
            sock.close()
        for t in workers:
            t.join(timeout=5)
        gateway.close()
        context.term()
