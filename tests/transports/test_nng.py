"""The NNG transport: a rep0 socket with one context per held request, on loopback."""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pynng
import pytest
from pynng import lib

from nfgate.errors import TransportError
from nfgate.transports.nng import RepEndpoint, client_tls, connect_req, nng_url, server_tls
from tests.gateway.conftest import until
from tests.tls import needs_openssl, self_signed

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def rep() -> Iterator[RepEndpoint]:
    endpoint = RepEndpoint("tcp://127.0.0.1:*", max_contexts=8)
    try:
        yield endpoint
    finally:
        endpoint.close()


def wait_recv(endpoint: RepEndpoint, timeout: float = 3.0) -> tuple[int, int, bytes]:
    """Poll the endpoint's fd as the gateway does, then receive one request."""
    poller = select.poll()
    poller.register(endpoint.fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = endpoint.recv()
        if got is not None:
            return got
        poller.poll(50)
    pytest.fail("no request")


def ask(sock: pynng.Req0 | pynng.Context, data: bytes, out: dict[bytes, bytes]) -> threading.Thread:
    """Send ``data`` and store the reply in ``out`` from a thread (req0 recv blocks)."""

    def run() -> None:
        sock.send(data)
        try:
            out[data] = sock.recv()
        except pynng.NNGException as exc:
            out[data] = repr(exc).encode()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_url_forms() -> None:
    assert nng_url("tcp://127.0.0.1:*") == "tcp://127.0.0.1:0"
    assert nng_url("ipc:///tmp/x.sock") == "ipc:///tmp/x.sock"
    with pytest.raises(TransportError):
        nng_url("udp://127.0.0.1:5")


def test_bind_resolves_port_and_conflict_is_a_transport_error(rep: RepEndpoint) -> None:
    assert rep.endpoint.startswith("tcp://127.0.0.1:") and not rep.endpoint.endswith(":0")
    with pytest.raises(TransportError, match="address already in use"):
        RepEndpoint(rep.endpoint)


def test_nothing_waiting_is_none_and_does_not_block(rep: RepEndpoint) -> None:
    started = time.monotonic()
    assert rep.recv() is None
    assert time.monotonic() - started < 0.5


def test_requests_held_on_contexts_answered_out_of_order(rep: RepEndpoint) -> None:
    sock = connect_req(rep.endpoint)
    try:
        replies: dict[bytes, bytes] = {}
        threads = [ask(sock.new_context(), b"r%d" % i, replies) for i in range(5)]
        held = dict((data, key) for key, _, data in (wait_recv(rep) for _ in range(5)))
        assert rep.held == 5 and set(held) == {b"r%d" % i for i in range(5)}
        for data in sorted(held, reverse=True):  # the last asked is answered first
            assert rep.send(held[data], data.upper())
        for t in threads:
            t.join(5)
        assert replies == {b"r%d" % i: b"R%d" % i for i in range(5)}
        assert rep.held == 0 and not rep.send(held[b"r0"], b"twice")  # answered already
        assert (rep.received, rep.sent, rep.receive_failures, rep.send_failures) == (5, 5, 0, 0)
    finally:
        sock.close()


def test_dropped_request_gets_no_reply(rep: RepEndpoint) -> None:
    sock = connect_req(rep.endpoint, recv_timeout_ms=300)
    try:
        sock.send(b"x")
        key, _, _ = wait_recv(rep)
        assert rep.drop(key) and not rep.drop(key)
        with pytest.raises(pynng.Timeout):
            sock.recv()
        assert rep.dropped == 1
    finally:
        sock.close()


def test_requests_beyond_max_contexts_are_refused_and_counted() -> None:
    rep = RepEndpoint("tcp://127.0.0.1:*", max_contexts=2)
    socks = [connect_req(rep.endpoint, recv_timeout_ms=300) for _ in range(3)]
    try:
        for i, sock in enumerate(socks[:2]):
            sock.send(b"%d" % i)
            wait_recv(rep)
        socks[2].send(b"2")
        deadline = time.monotonic() + 3
        while rep.refused == 0 and time.monotonic() < deadline:
            assert rep.recv() is None
            time.sleep(0.01)
        assert rep.refused == 1 and rep.held == 2
        assert (rep.received, rep.receive_failures) == (3, 1)
    finally:
        for sock in socks:
            sock.close()
        rep.close()


def test_large_replies_to_contexts_sharing_one_pipe_are_reaped(rep: RepEndpoint) -> None:
    sock = connect_req(rep.endpoint, recv_timeout_ms=10_000)
    try:
        replies: dict[bytes, bytes] = {}
        threads = [ask(sock.new_context(), b"%d" % i, replies) for i in range(3)]
        keys = [wait_recv(rep)[0] for _ in range(3)]
        big = b"\xab" * (16 * 1024 * 1024)
        for key in keys:  # the second and third wait for the pipe: they must not block us
            started = time.monotonic()
            assert rep.send(key, big)
            assert time.monotonic() - started < 0.5
        deadline = time.monotonic() + 10
        while rep.reap() and time.monotonic() < deadline:
            assert rep.retry_after_ms() is not None
            time.sleep(0.005)
        assert rep.reap() == 0 and rep.retry_after_ms() is None
        for t in threads:
            t.join(10)
        assert all(len(v) == len(big) for v in replies.values()) and len(replies) == 3
        assert rep.send_failed == 0
    finally:
        sock.close()


def test_reply_to_a_peer_that_left_is_harmless(rep: RepEndpoint) -> None:
    sock = connect_req(rep.endpoint)
    sock.send(b"x")
    key, _, _ = wait_recv(rep)
    sock.close()
    time.sleep(0.1)
    assert rep.send(key, b"nobody listens")
    rep.reap()
    assert rep.held == 0


def test_ipc(tmp_path: Path) -> None:
    rep = RepEndpoint(f"ipc://{tmp_path}/memodb.sock")
    sock = connect_req(rep.endpoint)
    try:
        sock.send(b"ping")
        key, _, data = wait_recv(rep)
        assert data == b"ping" and rep.send(key, b"pong")
        assert sock.recv() == b"pong"
    finally:
        sock.close()
        rep.close()


@needs_openssl
def test_tls_with_a_self_signed_certificate(tmp_path: Path) -> None:
    cert, both = self_signed(tmp_path)
    rep = RepEndpoint("tls+tcp://127.0.0.1:*", tls=server_tls(both))
    sock = connect_req(rep.endpoint, tls=client_tls(cert.read_text()))
    try:
        assert rep.endpoint.startswith("tls+tcp://127.0.0.1:")
        sock.send(b"secret")
        key, _, data = wait_recv(rep)
        assert data == b"secret" and rep.send(key, b"ok")
        assert sock.recv() == b"ok"
    finally:
        sock.close()
        rep.close()


def test_tls_url_without_certificate_is_refused() -> None:
    with pytest.raises(TransportError, match="certificate"):
        RepEndpoint("tls+tcp://127.0.0.1:*")


@needs_openssl
def test_a_tls_file_that_does_not_load_is_named_with_its_config_key(tmp_path: Path) -> None:
    # The operator must be told which of the two files is wrong: a missing CA file was
    # reported as the certificate's fault.
    cert, both = self_signed(tmp_path)
    with pytest.raises(TransportError, match=r"^tls_ca_file: cannot load TLS CA certificates .*missing\.pem"):
        server_tls(both, tmp_path / "missing.pem")
    with pytest.raises(TransportError, match=r"^tls_cert_key_file: cannot load TLS certificate .*cert\.pem"):
        server_tls(cert)  # the certificate without its key


def _completed(endpoint: RepEndpoint) -> int:
    return sum(1 for aio, _ in endpoint.posted if not lib.nng_aio_busy(aio))


def test_posted_receives_take_requests_and_unpost_hands_the_socket_back_to_the_fd(
    rep: RepEndpoint,
) -> None:
    sock = connect_req(rep.endpoint)
    try:
        rep.post(4)
        assert len(rep.posted) == 4 and rep.pending
        replies: dict[bytes, bytes] = {}
        threads = [ask(sock.new_context(), b"p%d" % i, replies) for i in range(3)]
        # Taken by NNG's threads: the fd stays down, as nothing waits for a context.
        until(lambda: _completed(rep) == 3)
        assert not select.select([rep.fd], [], [], 0)[0]
        taken = [rep.recv() for _ in range(3)]
        got = {data: key for key, _, data in filter(None, taken)}
        assert set(got) == {b"p0", b"p1", b"p2"}
        assert rep.received_posted == 3 and rep.held == 3
        assert len(rep.posted) == 4  # a harvest posts new receives in place of the completed ones
        for data, key in got.items():
            assert rep.send(key, data.upper())
        for t in threads:
            t.join(5)
        assert replies == {b"p0": b"P0", b"p1": b"P1", b"p2": b"P2"}
        rep.unpost()
        assert not rep.posted and not rep.pending and rep.recv() is None
        # With nothing posted, a request raises the fd again and is read on the caller's thread.
        threads = [ask(sock, b"late", replies)]
        key, _, data = wait_recv(rep)
        assert data == b"late" and rep.received_posted == 3
        assert rep.send(key, b"LATE")
        threads[0].join(5)
        assert replies[b"late"] == b"LATE"
    finally:
        sock.close()


def test_unpost_keeps_a_request_a_posted_receive_already_took(rep: RepEndpoint) -> None:
    sock = connect_req(rep.endpoint)
    try:
        rep.post(2)
        replies: dict[bytes, bytes] = {}
        thread = ask(sock, b"taken", replies)
        until(lambda: _completed(rep) == 1)
        rep.unpost()
        assert not rep.posted and rep.pending  # withdrawn, but the request is not lost
        key, _, data = rep.recv()  # type: ignore[misc]
        assert data == b"taken" and not rep.pending
        assert rep.send(key, b"kept")
        thread.join(5)
        assert replies[b"taken"] == b"kept"
    finally:
        sock.close()


def test_posted_receives_count_against_max_contexts() -> None:
    rep = RepEndpoint("tcp://127.0.0.1:*", max_contexts=3)
    sock = connect_req(rep.endpoint)
    try:
        sock.send(b"held")
        wait_recv(rep)
        rep.post(10)
        assert len(rep.posted) == 2  # one context holds a request: two are left
    finally:
        sock.close()
        rep.close()  # withdraws what is posted: must not hang


def test_close_with_receives_posted_returns() -> None:
    rep = RepEndpoint("tcp://127.0.0.1:*", max_contexts=8)
    rep.post(8)
    started = time.monotonic()
    rep.close()
    assert time.monotonic() - started < 2 and not rep.posted


def test_a_posted_request_whose_connection_closed_before_it_was_read_is_dropped(rep: RepEndpoint) -> None:
    sock = connect_req(rep.endpoint)
    rep.post(2)
    sock.send(b"orphan")
    until(lambda: _completed(rep) == 1)  # NNG gave it to a posted receive...
    sock.close()  # ...then the connection went, before the loop read it
    gone: list[int] = []
    until(lambda: bool(gone.extend(rep.closed_pipes()) or gone))
    assert rep.recv() is None  # no request from a peer the edge was told is gone
    assert rep.orphaned == 1 and rep.held == 0 and rep.received == 0
