"""The ZeroMQ transport on 127.0.0.1 with random ports: envelopes, limits, errors."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import zmq

from nfgate.errors import TransportError
from nfgate.transports.zmq import Limits, RouterEndpoint, connect_dealer, identity_lasts

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


def _recv(router: RouterEndpoint, deadline_s: float = 5.0) -> tuple[bytes, list[bytes]]:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if router.socket.poll(50):
            got = router.recv()
            if got is not None:
                return got
    raise AssertionError("nothing received in time")


def test_identity_is_stripped_on_receive_and_added_on_send(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    router = RouterEndpoint(ctx, "tcp://127.0.0.1:*")
    dealer = connect_dealer(ctx, router.endpoint, identity=b"w1")
    dealer.send_multipart([b"", b"DGBX\x01", b"\x02"])
    identity, frames = _recv(router)
    assert identity == b"w1" and frames == [b"", b"DGBX\x01", b"\x02"]
    assert router.send(identity, [b"", b"DGBX\x01", b"\x03"])
    assert dealer.poll(5000)
    assert dealer.recv_multipart() == [b"", b"DGBX\x01", b"\x03"]
    assert (router.received, router.sent, router.receive_failures, router.send_failures) == (1, 1, 0, 0)
    router.close()


def test_only_an_identity_the_peer_chose_is_taken_to_last(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    # A DEALER that sets none gets a new identity from the ROUTER on every connection:
    # nothing may wait for a worker to come back under it.
    router = RouterEndpoint(ctx, "tcp://127.0.0.1:*")
    made_up = []
    for _ in range(2):
        dealer = connect_dealer(ctx, router.endpoint, None)
        dealer.send_multipart([b"x"])
        made_up.append(_recv(router)[0])
        dealer.close(0)
    chosen = connect_dealer(ctx, router.endpoint, identity=b"w1")
    chosen.send_multipart([b"x"])
    assert _recv(router)[0] == b"w1" and identity_lasts(b"w1")
    assert made_up[0] != made_up[1] and not any(identity_lasts(i) for i in made_up)
    # NorFab's identities are names; a chosen five-byte one is kept unless it starts with a zero byte.
    assert identity_lasts(b"nornir-worker-1") and identity_lasts(b"w0001") and identity_lasts(b"\x00" * 6)
    router.close()


def test_port_in_use_is_a_one_line_transport_error(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    first = RouterEndpoint(ctx, "tcp://127.0.0.1:*")
    with pytest.raises(TransportError, match="address already in use"):
        RouterEndpoint(ctx, first.endpoint)
    first.close()


def test_reply_to_a_vanished_peer_is_counted_not_raised(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    router = RouterEndpoint(ctx, "tcp://127.0.0.1:*")
    assert router.send(b"nobody", [b"", b"x"]) is False
    assert router.unroutable == 1
    assert (router.sent, router.send_failures) == (0, 1)
    router.close()


def test_too_many_frames_are_dropped_and_counted(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    router = RouterEndpoint(ctx, "tcp://127.0.0.1:*", Limits(max_frames=4))
    dealer = connect_dealer(ctx, router.endpoint)
    dealer.send_multipart([b""] * 10)
    dealer.send_multipart([b"", b"ok"])
    # The oversized message is skipped; the next one from the same peer still arrives.
    _, frames = _recv(router)
    assert frames == [b"", b"ok"] and router.oversized == 1
    assert (router.received, router.receive_failures) == (2, 1)  # read, then refused
    router.close()


def test_oversized_frame_never_reaches_python(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    router = RouterEndpoint(ctx, "tcp://127.0.0.1:*", Limits(max_message_bytes=1024))
    big = connect_dealer(ctx, router.endpoint)
    big.send_multipart([b"", b"x" * 4096])
    small = connect_dealer(ctx, router.endpoint)
    small.send_multipart([b"", b"fine"])
    _, frames = _recv(router)
    assert frames == [b"", b"fine"]
    assert not router.socket.poll(200)  # the big one was dropped by libzmq
    router.close()


def test_a_message_over_the_byte_limit_in_small_frames_is_dropped_and_counted(
    ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    # ZMQ_MAXMSGSIZE bounds each frame; the sum of a message's frames is bounded here.
    router = RouterEndpoint(ctx, "tcp://127.0.0.1:*", Limits(max_message_bytes=1000))
    dealer = connect_dealer(ctx, router.endpoint)
    dealer.send_multipart([b"", b"x" * 600, b"y" * 600])  # 1200 bytes, each frame under 1000
    dealer.send_multipart([b"", b"a" * 500, b"b" * 500])  # exactly 1000: kept
    identity, frames = _recv(router)
    assert frames == [b"", b"a" * 500, b"b" * 500]
    assert router.too_large == 1 and router.oversized == 0
    assert (router.received, router.receive_failures) == (2, 1)
    assert router.send(identity, [b"", b"still served"])  # the peer is not cut off
    assert dealer.poll(5000) and dealer.recv_multipart() == [b"", b"still served"]
    router.close()


def fill(send: object, identity: bytes, tries: int = 5000) -> int:
    """Send 64 KiB messages to a peer that does not read until a send fails (bounded);
    the number sent."""
    body = b"x" * 65536
    for i in range(tries):
        if not send(identity, [b"", body]):  # type: ignore[operator]
            return i
    raise AssertionError(f"{tries} messages of 64 KiB sent and the queue never filled")


def test_a_full_send_queue_is_counted_apart_from_a_vanished_peer(ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    router = RouterEndpoint(ctx, "tcp://127.0.0.1:*", Limits(high_water_mark=1))
    dealer = connect_dealer(ctx, router.endpoint, identity=b"slow")
    dealer.setsockopt(zmq.RCVHWM, 1)
    dealer.send_multipart([b"hello"])
    identity, _ = _recv(router)
    sent = fill(router.send, identity)  # it never reads: libzmq's queues and the kernel's fill up
    assert router.last_full and router.queue_full == 1 and router.unroutable == 0
    assert not router.send(b"nobody", [b"", b"x"]) and not router.last_full
    assert (router.sent, router.queue_full, router.unroutable, router.send_failures) == (sent, 1, 1, 2)
    router.close()
