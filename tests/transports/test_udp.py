"""The UDP transport on 127.0.0.1 with random ports: bind, batch receive, send, errors."""

from __future__ import annotations

import select
import socket

import pytest

from nfgate.errors import TransportError
from nfgate.transports.udp import UdpEndpoint, parse_address

pytestmark = pytest.mark.timeout(20)


def wait_readable(endpoint: UdpEndpoint, seconds: float = 5.0) -> None:
    readable, _, _ = select.select([endpoint.fileno()], [], [], seconds)
    assert readable, "nothing received in time"


def test_bind_random_port_send_and_receive_a_batch() -> None:
    a = UdpEndpoint("127.0.0.1", 0)
    b = UdpEndpoint("127.0.0.1", 0)
    try:
        assert a.address[0] == "127.0.0.1" and a.address[1] > 0
        assert a.endpoint == f"udp://127.0.0.1:{a.address[1]}"
        for i in range(5):
            assert b.sendto(b"d%d" % i, a.address)
        assert b.sent == 5
        got: list[tuple[bytes, tuple[str, int]]] = []
        for _ in range(50):  # bounded: loopback delivers at once, but wait for all five
            wait_readable(a)
            batch = a.recv_batch(3)
            assert 1 <= len(batch) <= 3, batch  # at most 3 per call
            got += batch
            if len(got) == 5:
                break
        assert [data for data, _ in got] == [b"d0", b"d1", b"d2", b"d3", b"d4"]
        assert {sender for _, sender in got} == {b.address}
        assert a.recv_batch(10) == []  # non-blocking when empty
        assert a.received == 5 and (a.receive_failures, b.send_failures) == (0, 0)
    finally:
        a.close()
        b.close()


def test_large_datagram_is_not_truncated() -> None:
    a = UdpEndpoint("127.0.0.1", 0)
    b = UdpEndpoint("127.0.0.1", 0)
    try:
        assert b.sendto(b"x" * 60_000, a.address)
        wait_readable(a)
        [(data, _)] = a.recv_batch(1)
        assert len(data) == 60_000
    finally:
        a.close()
        b.close()


def test_port_in_use_is_a_one_line_transport_error() -> None:
    first = UdpEndpoint("127.0.0.1", 0)
    try:
        with pytest.raises(TransportError, match="address already in use"):
            UdpEndpoint("127.0.0.1", first.address[1])
        with pytest.raises(TransportError, match="cannot bind"):
            UdpEndpoint("not-an-address.invalid", 0)
    finally:
        first.close()


def test_refused_send_is_counted_not_raised() -> None:
    a = UdpEndpoint("127.0.0.1", 0)
    try:
        assert not a.sendto(b"x", ("127.0.0.1", 70000))  # port out of range
        assert not a.sendto(b"x" * 70_000, ("127.0.0.1", 9))  # larger than a datagram
        assert a.send_errors == 2 and (a.sent, a.send_failures) == (0, 2)
    finally:
        a.close()


def test_broadcast_flag_is_set_when_asked() -> None:
    a = UdpEndpoint("127.0.0.1", 0, broadcast=True)
    try:
        assert a.socket.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) == 1
    finally:
        a.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:5246", ("127.0.0.1", 5246)), ("0.0.0.0:0", ("0.0.0.0", 0)), ("[::1]:5", ("::1", 5))],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "127.0.0.1", ":5", "h:", "h:x", "h:65536", "h:-1", "h:٣"])
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        parse_address(text)
