"""Hostile peers on every edge at once: the gateway raises nothing and keeps serving.

A few peers per edge, each with a fixed identity so that protocol state builds up,
send a seeded random mix of the golden vectors (every message type, every dialect, in
any order: RESPONSEs for jobs nobody sent, READY twice, results from strangers),
mutations of them and random frames. Every message must be read (the edges' traffic
counters), no handler may raise (the gateway counts what its loop caught as an internal
error, which must stay 0), and afterwards fresh peers are still served across protocols.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pyarrow.parquet as pq
import pynng
import pytest
import zmq

from nfgate.analysis.job import decode_batches
from nfgate.codecs import dcp, memodb, nfp
from nfgate.codecs.dcp.messages import Registration
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.memodb.messages import Job, Result
from nfgate.codecs.nfp.messages import CLIENT, Post, Response
from nfgate.codecs.sada.messages import Rep, Req
from nfgate.transports.nng import connect_req
from tests.vectors import frames, load

from .conftest import Running, finish, recv, start_gateway, until
from .test_sada_edges import Channel, dcp_worker

pytestmark = pytest.mark.timeout(90)

ZMQ_EDGES = {"nfp": "nfp", "dcp": "dcp", "dbp": "dbp", "sada": "sada"}  # edge -> vector folder
PEERS = 3  # per edge
MESSAGES = 2000  # per edge and seed
VECTORS = {
    protocol: [frames(v) for _, v in load(protocol) if "message" in v]
    for protocol in ("nfp", "dcp", "dbp", "sada", "memodb")
}


def _mutated(rng: random.Random, wire: list[bytes]) -> list[bytes]:
    wire = list(wire)
    for _ in range(rng.randint(1, 3)):
        if not wire:
            wire.append(rng.randbytes(rng.randint(0, 8)))
            continue
        i = rng.randrange(len(wire))
        op = rng.choice(("flip", "drop", "insert", "truncate", "dup", "replace"))
        if op == "flip" and wire[i]:
            j = rng.randrange(len(wire[i]))
            wire[i] = wire[i][:j] + bytes([wire[i][j] ^ rng.randint(1, 255)]) + wire[i][j + 1 :]
        elif op == "drop":
            del wire[i]
        elif op == "insert":
            wire.insert(i, rng.randbytes(rng.randint(0, 8)))
        elif op == "truncate":
            wire[i] = wire[i][: rng.randint(0, len(wire[i]))]
        elif op == "dup":
            wire.insert(i, wire[i])
        else:
            wire[i] = rng.randbytes(rng.randint(0, 12))
    return wire or [b""]


def _message(rng: random.Random, protocol: str) -> list[bytes]:
    roll = rng.random()
    if roll < 0.5:
        return rng.choice(VECTORS[protocol])
    if roll < 0.85:
        return _mutated(rng, rng.choice(VECTORS[protocol]))
    return [rng.randbytes(rng.randint(0, 20)) for _ in range(rng.randint(1, 6))]


def _drain(socks: list[zmq.Socket[bytes]]) -> None:
    # Read what the gateway answered, so that no send queue fills up.
    for sock in socks:
        for _ in range(1000):
            if not sock.poll(0):
                break
            sock.recv_multipart()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_hostile_peers_on_every_edge_raise_nothing_and_the_gateway_still_serves(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    # With capture on: the taps and the writer take whatever the hostile peers send.
    gw = start_gateway(tmp_path, "[edges.memodb]\nheartbeat_ms = 200\n", capture_dir=tmp_path / "capture")
    nng_socks: list[pynng.Req0] = []
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        dealers = {
            edge: [gw.dealer(edge, b"fz-%s-%d" % (edge.encode(), i)) for i in range(PEERS)]
            for edge in ZMQ_EDGES
        }
        nng_socks = [connect_req(gw.endpoint("memodb"), recv_timeout_ms=50) for _ in range(PEERS)]
        dbp_udp = gw.gateway.edges["dbp"].udp.address  # type: ignore[attr-defined]
        before = {edge: gw.gateway.edges[edge].traffic().received for edge in ZMQ_EDGES}
        for _ in range(MESSAGES):
            for edge, protocol in ZMQ_EDGES.items():
                rng.choice(dealers[edge]).send_multipart(_message(rng, protocol))
            # MemoDB is one CBOR frame per request (the first); a req0 socket may send
            # again without reading, which gives up its earlier request.
            rng.choice(nng_socks).send(_message(rng, "memodb")[0])
            udp.sendto(rng.randbytes(rng.randint(0, 40)), dbp_udp)
            _drain([s for socks in dealers.values() for s in socks])
        for edge in ZMQ_EDGES:  # every message read (libzmq drops none of these sizes)
            until(lambda e=edge: gw.gateway.edges[e].traffic().received - before[e] >= MESSAGES, timeout=20)
        assert gw.gateway.internal_errors == 0, f"seed {seed}: a handler raised (see the log)"
        _still_serves(gw, nng_socks)
        assert gw.gateway.internal_errors == 0
    finally:
        udp.close()
        for s in nng_socks:
            s.close()
        finish(gw)
    # Every message every transport moved is in the capture, written without an error.
    moved = sum(t.received + t.sent for t in (e.traffic() for e in gw.gateway.edges.values()))
    stats = gw.gateway.stats()["capture"]
    assert [stats[k] for k in ("records", "written", "dropped", "write_errors", "pending")] == [
        moved,
        moved,
        0,
        0,
        0,
    ]
    assert stats["segments"] >= 1 and moved > 4 * MESSAGES
    # And what `nfgate analyze` runs in Spark's workers reads all of it: a row per
    # message, the hostile ones as malformed with a reason, nothing raised.
    segments = sorted((tmp_path / "capture").glob("*.parquet"))
    batches = [b for path in segments for b in pq.read_table(path).to_batches(max_chunksize=4096)]
    rows = [row for out in decode_batches(iter(batches)) for row in out.to_pylist()]
    assert len(rows) == moved
    malformed = {r["protocol"] for r in rows if r["error"]}
    assert malformed == {"nfp", "dcp", "memodb", "dbp", "sada"}


def _still_serves(gw: Running, nng_socks: list[pynng.Req0]) -> None:
    """Fresh peers: an NFP client and a MemoDB client, both served by a fresh DCP worker
    of a service no hostile peer can have named."""
    worker = gw.dealer("dcp")
    worker.send_multipart(dcp.encode(Registration(service=b"after-fuzz")))
    assert dcp.decode(recv(worker)) == Registration(service=b"after-fuzz")
    client = gw.dealer("nfp")
    client.send_multipart(
        nfp.encode(
            Post(header=CLIENT, service="after-fuzz", target="any", uuid="f" * 32, body=(b"q1",)), "spec"
        )
    )
    request = dcp.decode(recv(worker))
    assert isinstance(request, DcpRequest) and request.data == (b"q1",)
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"a1",)))
    )
    replies = [nfp.decode(recv(client), "spec") for _ in range(2)]
    assert [r.status for r in replies] == [202, 200]  # type: ignore[attr-defined]
    assert isinstance(replies[1], Response) and replies[1].body == (b"a1",)
    mdb = connect_req(gw.endpoint("memodb"), recv_timeout_ms=3000)
    nng_socks.append(mdb)
    [data] = memodb.encode(Job(service="after-fuzz", timeout_ms=5000, payload=b"q2"), "spec")
    mdb.send(data)
    request = dcp.decode(recv(worker))
    assert isinstance(request, DcpRequest) and request.data == (b"q2",)
    worker.send_multipart(
        dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"a2",)))
    )
    assert memodb.decode([mdb.recv()], "spec") == Result(payload=b"a2")


@pytest.mark.parametrize("seed", [1, 2])
def test_a_hostile_sada_channel_raises_nothing_in_the_server_edge(tmp_path: Path, seed: int) -> None:
    # The sada-server edge connects out to channels: here one that sends it anything.
    rng = random.Random(seed)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    channel = Channel(context, "spec")
    gw = start_gateway(tmp_path, f'[edges.sada-server]\nchannels = ["{channel.url}"]\nrefresh_ms = 50\n')
    try:
        worker = dcp_worker(gw, b"upper")
        channel.intr_with("upper")
        edge = gw.gateway.edges["sada-server"]
        before = edge.traffic().received
        for sent in range(1, MESSAGES + 1):
            channel.sock.send_multipart([channel.server, *_message(rng, "sada")])
            _drain([channel.sock])
            if sent % 200 == 0:
                # A ROUTER drops what exceeds its high-water mark: keep the backlog short.
                until(lambda n=sent: edge.traffic().received - before >= n - 200, timeout=20)
        until(lambda: edge.traffic().received - before >= MESSAGES, timeout=20)
        assert gw.gateway.internal_errors == 0, f"seed {seed}: a handler raised (see the log)"
        channel.send(Req(request_id="after-fuzz", service="upper", category="c", action="a", payload=b"q"))
        for _ in range(100):  # bounded: past any REQ from the fuzz that reached the worker
            request = dcp.decode(recv(worker))
            assert isinstance(request, DcpRequest)
            reply = DcpReply(client=request.client, metadata=request.metadata, data=(b"A",))
            worker.send_multipart(dcp.encode(reply))
            if request.data == (b"q",):
                break
        for _ in range(1000):  # bounded: past the fuzz's answers and INTRs
            answer = channel.get()
            if isinstance(answer, Rep) and answer.request_id == "after-fuzz":
                assert answer.status == 200 and answer.payload == b"A"
                break
        else:
            pytest.fail("no REP for the request sent after the fuzz")
    finally:
        finish(gw)
        channel.sock.close(0)
        context.term()
