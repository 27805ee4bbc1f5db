"""The DCP edge against raw DEALER peers (specs/dcp.md)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import zmq

import nfgate.edges.base
from nfgate.codecs import dcp
from nfgate.codecs.dcp.messages import Ping, Pong, Reconnect, Registration, Reply, Request

from .conftest import Running, beats, finish, nothing, recv, running_on, start_gateway, until

pytestmark = pytest.mark.timeout(30)


def send(sock: zmq.Socket[bytes], message: object, dialect: str = "spec") -> None:
    sock.send_multipart(dcp.encode(message, dialect))  # type: ignore[arg-type]


def get(sock: zmq.Socket[bytes]) -> object:
    return dcp.decode(recv(sock))


def worker(gw: Running, service: bytes, dialect: str = "spec") -> zmq.Socket[bytes]:
    sock = gw.dealer("dcp")
    send(sock, Registration(service=service), dialect)
    assert dcp.decode(recv(sock)) == Registration(
        service=service
    )  # "confirm it by responding with the same message"
    return sock


def serve_one(sock: zmq.Socket[bytes], transform: bytes = b"") -> Request:
    request = get(sock)
    assert isinstance(request, Request)
    send(sock, Reply(client=request.client, metadata=request.metadata, data=(*request.data, transform)))
    return request


def test_request_reply_returns_metadata_exactly(gw: Running) -> None:
    w = worker(gw, b"echo")
    client = gw.dealer("dcp")
    send(client, Request(service=b"echo", metadata=(b"m1", b"\x00\xff"), data=(b"hello", b"")))
    seen = serve_one(w, b"!")
    assert seen.client  # the broker inserted the client address
    assert seen.metadata == (b"m1", b"\x00\xff") and seen.data == (b"hello", b"")
    reply = get(client)
    assert reply == Reply(client=None, metadata=(b"m1", b"\x00\xff"), data=(b"hello", b"", b"!"))


def test_dagbox_client_gets_its_address_and_4_byte_types(gw: Running) -> None:
    w = worker(gw, b"echo", "dagbox")
    client = gw.dealer("dcp", identity=b"dgbx-client")
    send(client, Request(service=b"echo", metadata=(b"k",), data=(b"x",)), "dagbox")
    request = dcp.decode(recv(w), "dagbox")
    assert isinstance(request, Request) and request.client == b"dgbx-client"
    w.send_multipart(
        dcp.encode(Reply(client=request.client, metadata=request.metadata, data=(b"y",)), "dagbox")
    )
    frames = recv(client)
    assert len(frames[2]) == 4  # the DagBox type part
    assert dcp.decode(frames, "dagbox") == Reply(client=b"dgbx-client", metadata=(b"k",), data=(b"y",))


def test_pipelined_requests_one_at_a_time_per_worker(gw: Running) -> None:
    w = worker(gw, b"echo")
    client = gw.dealer("dcp")
    for i in range(10):
        send(client, Request(service=b"echo", metadata=(str(i).encode(),), data=(b"d%d" % i,)))
    for _ in range(10):
        request = get(w)
        assert isinstance(request, Request)
        assert nothing(w, 50)  # no second request while this one is held
        send(w, Reply(client=request.client, metadata=request.metadata, data=request.data))
    replies = {get(client).metadata[0] for _ in range(10)}  # type: ignore[attr-defined]
    assert replies == {str(i).encode() for i in range(10)}


def test_worker_gets_no_second_request_until_it_replies_or_pings(gw: Running) -> None:
    w = worker(gw, b"echo")
    client = gw.dealer("dcp")
    for i in range(2):
        send(client, Request(service=b"echo", metadata=(b"%d" % i,), data=(b"x",)))
    first = get(w)
    assert isinstance(first, Request)
    assert nothing(w, 300)  # "SHOULD NOT give more requests to that worker until it has responded"
    send(w, Ping())  # "Respond with a heartbeat to ask for more work"
    got = [get(w), get(w)]
    assert Pong() in got
    second = next(m for m in got if isinstance(m, Request))
    for req in (first, second):
        send(w, Reply(client=req.client, metadata=req.metadata, data=req.data))  # type: ignore[attr-defined]
    assert {get(client).metadata for _ in range(2)} == {(b"0",), (b"1",)}  # type: ignore[attr-defined]


def test_ping_pong_and_reconnect_for_unknown_worker(gw: Running) -> None:
    w = worker(gw, b"echo")
    send(w, Ping())
    assert get(w) == Pong()
    stranger = gw.dealer("dcp")
    send(stranger, Ping())
    assert get(stranger) == Reconnect()


def test_pings_and_pongs_are_counted_per_worker(gw: Running) -> None:
    w = worker(gw, b"echo")
    for _ in range(3):
        send(w, Ping())
        assert get(w) == Pong()
    until(lambda: beats(gw, "dcp") == (3, 3))  # 3 PONGs sent, 3 PINGs heard
    client = gw.dealer("dcp")
    send(client, Request(service=b"echo", data=(b"x",)))
    serve_one(w)
    assert isinstance(get(client), Reply)
    assert beats(gw, "dcp") == (3, 3)  # requests and replies are not heartbeats


def test_chained_request_reaches_the_original_client(gw: Running) -> None:
    first = worker(gw, b"stage1")
    second = worker(gw, b"stage2")
    client = gw.dealer("dcp")
    send(client, Request(service=b"stage1", metadata=(b"job-7",), data=(b"raw",)))
    req = get(first)
    assert isinstance(req, Request)
    # stage1 does part of the work and hands it on, keeping the client address
    send(first, Request(service=b"stage2", client=req.client, metadata=req.metadata, data=(b"half",)))
    req2 = serve_one(second, b"done")
    assert req2.client == req.client and req2.data == (b"half",)
    assert get(client) == Reply(client=None, metadata=(b"job-7",), data=(b"half", b"done"))
    # stage1 is free again: it gets the next request at once
    send(client, Request(service=b"stage1", metadata=(b"job-8",), data=(b"raw",)))
    assert isinstance(get(first), Request)


def test_garbage_does_not_disturb_other_peers(gw: Running) -> None:
    w = worker(gw, b"echo")
    client = gw.dealer("dcp")
    bad = gw.dealer("dcp")
    for junk in (
        [b"x"],
        [b"", b"DGBX\x02", b"\x04"],
        [b"", b"DGBX\x01", b"\x09", b"a"],
        [b"", b"DGBX\x01", b"\x05"],
    ):
        bad.send_multipart(junk)
    send(client, Request(service=b"echo", metadata=(b"ok",), data=(b"1",)))
    serve_one(w)
    assert get(client).metadata == (b"ok",)  # type: ignore[attr-defined]
    assert gw.gateway.edges["dcp"].stats()["undecodable"] >= 3


def test_a_bug_in_one_edges_flush_is_counted_and_the_loop_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nfgate.edges.nfp import NfpEdge

    calls = {"n": 0}
    flush = NfpEdge.flush

    def buggy(self: NfpEdge, now_ms: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug")
        flush(self, now_ms)

    monkeypatch.setattr(NfpEdge, "flush", buggy)
    running = start_gateway(tmp_path)
    try:
        until(lambda: running.gateway.internal_errors == 1)
        w = worker(running, b"echo")  # the loop still runs, and the DCP edge still flushes
        client = running.dealer("dcp")
        send(client, Request(service=b"echo", metadata=(b"m",), data=(b"x",)))
        serve_one(w)
        assert get(client) == Reply(client=None, metadata=(b"m",), data=(b"x", b""))
        assert calls["n"] > 1
    finally:
        running.gateway.internal_errors -= 1  # the one provoked; finish() asserts none other
        finish(running)


def test_client_records_stay_bounded_behind_a_long_lived_worker(tmp_path: Path) -> None:
    # The worker registers first, so its record is the oldest: the bound must pass over
    # it and forget clients, or every client after the bound would be kept for ever.
    with running_on(tmp_path, "[limits]\nmax_peers = 4\n") as gw:
        w = worker(gw, b"echo", "dagbox")  # its dialect is its record: forgotten, it would get spec frames

        def one_request(i: int) -> None:
            client = gw.dealer("dcp")
            send(client, Request(service=b"echo", metadata=(b"%d" % i,), data=(b"x",)))
            request = dcp.decode(recv(w), "dagbox")
            assert isinstance(request, Request)
            w.send_multipart(
                dcp.encode(Reply(client=request.client, metadata=request.metadata, data=(b"y",)), "dagbox")
            )
            assert get(client) == Reply(client=None, metadata=(b"%d" % i,), data=(b"y",))
            client.close(0)

        for i in range(12):
            one_request(i)
        stats = gw.gateway.edges["dcp"].stats()
        assert stats["workers"] == 1 and stats["peers"] <= 4
        one_request(12)  # the worker is still served in its own dialect


def test_a_request_over_max_message_bytes_in_small_frames_is_dropped_and_counted(tmp_path: Path) -> None:
    # [limits] max_message_bytes bounds a whole message, not only each frame (ZMQ_MAXMSGSIZE).
    with running_on(tmp_path, "[limits]\nmax_message_bytes = 4096\n") as gw:
        w = worker(gw, b"echo")
        client = gw.dealer("dcp")
        send(client, Request(service=b"echo", metadata=(b"big",), data=(b"x" * 2000,) * 3))
        send(client, Request(service=b"echo", metadata=(b"small",), data=(b"y",)))
        assert serve_one(w).metadata == (b"small",)
        reply = get(client)
        assert isinstance(reply, Reply) and reply.metadata == (b"small",)
        assert gw.gateway.edges["dcp"].stats()["too_large"] == 1
        assert nothing(w)  # the big one never reached the worker


def test_a_reply_with_changed_metadata_is_not_pinned_on_another_request(gw: Running) -> None:
    w = worker(gw, b"svc")
    client = gw.dealer("dcp")
    for key in (b"A", b"B"):
        send(client, Request(service=b"svc", metadata=(key,), data=(b"x",)))
    first = get(w)
    send(w, Ping())  # busy, but asks for more: now it holds both
    held = [first]
    for _ in range(4):
        got = get(w)
        if isinstance(got, Request):
            held.append(got)
            break
    assert sorted(r.metadata for r in held) == [(b"A",), (b"B",)]  # type: ignore[attr-defined]
    address = held[0].client  # type: ignore[attr-defined]
    send(w, Reply(client=address, metadata=(b"WRONG",), data=(b"?",)))  # which one? neither
    send(w, Reply(client=address, metadata=(b"B",), data=(b"b",)))
    send(w, Reply(client=address, metadata=(b"A",), data=(b"a",)))
    replies = {get(client).metadata: None for _ in range(2)}  # type: ignore[attr-defined]
    assert set(replies) == {(b"A",), (b"B",)}
    assert nothing(client)
    assert gw.gateway.edges["dcp"].stats()["unknown_reply"] == 1


def test_a_hand_on_with_a_stand_in_address_the_worker_no_longer_holds_is_dropped(gw: Running) -> None:
    # nfgate:<id> is the gateway's own stand-in for a client of another protocol; a
    # worker that lost the request (re-dispatched since) must not start it again with a
    # reply address no DCP peer has.
    w = worker(gw, b"stage1")
    send(w, Request(service=b"stage2", client=b"nfgate:1", metadata=(b"m",), data=(b"half",)))
    until(lambda: gw.gateway.edges["dcp"].stats()["stale_forward"] == 1)
    assert gw.gateway.router.stats()["accepted"] == 0


def warnings_of(caplog: pytest.LogCaptureFixture, edge: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith(edge)
    ]


def test_garbage_is_warned_about_once_a_minute_with_the_count_since(
    gw: Running, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An operator at INFO learns that a peer speaks something else, without a log line
    # per message (a hostile peer would flood the log).
    clock = [1000.0]
    monkeypatch.setattr(nfgate.edges.base, "_clock", lambda: clock[0])
    w = worker(gw, b"echo")
    client = gw.dealer("dcp")
    bad = gw.dealer("dcp")

    def garbage_then_a_request(count: int, tag: bytes) -> None:
        for _ in range(count):
            bad.send_multipart([b"", b"GET / HTTP/1.1"])
        # The bad messages were sent first from another socket; once the request is
        # relayed they are read too (a quiet loop reads every socket that is ready).
        send(client, Request(service=b"echo", metadata=(tag,), data=(b"1",)))
        assert serve_one(w).metadata == (tag,)
        assert get(client).metadata == (tag,)  # type: ignore[attr-defined]
        until(lambda: gw.gateway.edges["dcp"].stats()["undecodable"] >= total[0])

    total = [5]
    with caplog.at_level(logging.DEBUG, "nfgate"):
        garbage_then_a_request(5, b"a")
        total[0] = 25
        garbage_then_a_request(20, b"b")
        [first] = warnings_of(caplog, "dcp: undecodable")
        assert "1 such message(s)" in first and "at most once a minute" in first
        clock[0] += 61.0  # a minute on: the next one is warned about, with the count
        total[0] = 26
        garbage_then_a_request(1, b"c")
        assert len(warnings_of(caplog, "dcp: undecodable")) == 2
        assert "25 such message(s)" in warnings_of(caplog, "dcp: undecodable")[1]
        # Every one is still at DEBUG for whoever turns it on.
        debug = [
            r for r in caplog.records if r.levelno == logging.DEBUG and "undecodable from" in r.getMessage()
        ]
        assert len(debug) == 24


def test_a_message_over_a_limit_is_warned_about_naming_the_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_on(tmp_path, "[limits]\nmax_message_bytes = 4096\n") as gw:
        w = worker(gw, b"echo")
        client = gw.dealer("dcp")
        with caplog.at_level(logging.WARNING, "nfgate"):
            send(client, Request(service=b"echo", metadata=(b"big",), data=(b"x" * 2000,) * 3))
            send(client, Request(service=b"echo", metadata=(b"small",), data=(b"y",)))
            assert serve_one(w).metadata == (b"small",)
            [warning] = warnings_of(caplog, "dcp: too_large")
            assert "over 4096 bytes, dropped" in warning


def test_each_kind_of_bad_input_has_its_own_minute_of_warnings(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A flood of one kind (garbage on the port) must not hide the first warning of
    # another (a body refused for a NorFab worker, say).
    import nfgate.edges.base
    from nfgate.edges import EdgeSettings
    from nfgate.edges.dcp import DcpEdge

    monkeypatch.setattr(nfgate.edges.base, "_clock", lambda: 1000.0)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    edge = DcpEdge(EdgeSettings(name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context))
    try:
        with caplog.at_level(logging.WARNING, "nfgate"):
            for _ in range(3):
                edge.malformed("undecodable", "a peer", "garbage")
            edge.malformed("bodies_refused", "a client", "not JSON")
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert [m.split(" from ")[0] for m in warned] == ["dcp: undecodable", "dcp: bodies_refused"]
    finally:
        edge.close()
        context.term()


def test_a_worker_registering_for_another_service_leaves_the_first(gw: Running) -> None:
    w = worker(gw, b"first")
    until(lambda: [s.name for i in gw.gateway.router.workers() for s in i.services] == ["first"])
    send(w, Registration(service=b"second"))
    assert get(w) == Registration(service=b"second")
    until(lambda: [s.name for i in gw.gateway.router.workers() for s in i.services] == ["second"])
    client = gw.dealer("dcp")
    send(client, Request(service=b"first", metadata=(b"old",), data=(b"x",)))
    send(client, Request(service=b"second", metadata=(b"new",), data=(b"y",)))
    request = serve_one(w)  # only the second service's request reaches it
    assert request.metadata == (b"new",)
    assert get(client) == Reply(client=None, metadata=(b"new",), data=(b"y", b""))
    assert nothing(w)


def test_a_reply_with_changed_metadata_answers_the_one_request_held_for_that_client(gw: Running) -> None:
    w = worker(gw, b"svc")
    client = gw.dealer("dcp")
    send(client, Request(service=b"svc", metadata=(b"mine",), data=(b"x",)))
    request = get(w)
    assert isinstance(request, Request)
    # "Workers MUST copy these parts into the reply without any modifications": one that
    # did not, holding one request of that client, still answers it (and is counted).
    send(w, Reply(client=request.client, metadata=(b"changed",), data=(b"done",)))
    assert get(client) == Reply(client=None, metadata=(b"changed",), data=(b"done",))
    assert gw.gateway.edges["dcp"].stats()["reply_metadata_changed"] == 1
