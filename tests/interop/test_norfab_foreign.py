"""The real NorFab 0.25 client and worker meeting peers of other protocols through
nfgate (docs/translation.md "Status mapping", "Interim replies", "Bodies a NorFab
worker cannot take"):

- a NorFab client served by a SADA server answering 201, 204, 302, or 102 before its
  200, gets each result in NorFab's terms and stays alive for the next job (a 201 as
  it was sent killed its receiving thread, and every later job timed out);
- a NorFab worker sent bodies it cannot read by a DCP client (bytes, nothing, a JSON
  array) never gets them, and still serves the next job (it used to lose its POST
  thread for good while it kept heartbeating).

nfgate only: the real NorFab broker has neither a SADA nor a DCP edge.
"""

from __future__ import annotations

import json
import time
import traceback
from typing import Any

import pytest
import zmq

from nfgate.codecs import dcp, sada
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.sada.messages import Intr, Ping, Pong, Rep, Req

from .conftest import Broker, Peers
from .thread_peer import ThreadPeer

# service -> the REPs the SADA server answers with, in turn: (status, payload)
ANSWERS: dict[str, list[tuple[int, bytes]]] = {
    "s201": [(201, b'{"made": 1}')],
    "s204": [(204, b"")],
    "s302": [(302, b"elsewhere")],
    "s102": [(102, b"[1]"), (200, b'{"ok": 1}')],
    "s200": [(200, b'{"plain": 1}')],
}


class SadaStatusServer(ThreadPeer):
    """A raw SADA server (specs/sada.md) on a DEALER, introduced to nfgate's channel
    edge with the services of :data:`ANSWERS`, answering each REQ with its REPs.

    Runs in a thread that owns the socket; stops on ``stop`` or after ``lifetime`` seconds.
    """

    thread_name = "sada-status-server"

    def __init__(self, endpoint: str, lifetime: float = 80.0) -> None:
        super().__init__(endpoint, lifetime)
        self.requests: list[Req] = []

    def _run(self) -> None:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            sock.connect(self.endpoint)
            sock.send_multipart(sada.encode(Intr(services=tuple((name, "") for name in ANSWERS))))
            deadline = time.monotonic() + self.lifetime
            while not self.stop.is_set() and time.monotonic() < deadline:
                if not sock.poll(100):
                    continue
                message = sada.decode(sock.recv_multipart())
                if isinstance(message, Ping):
                    sock.send_multipart(sada.encode(Pong(proto=message.proto)))
                elif isinstance(message, Req):
                    self.requests.append(message)
                    for status, payload in ANSWERS.get(message.service, [(404, b"")]):
                        rep = Rep(request_id=message.request_id, status=status, payload=payload)
                        sock.send_multipart(sada.encode(rep))
                        time.sleep(0.05)  # the interim REP first, on its own
        except Exception:
            self.errors.append(traceback.format_exc())
        finally:
            sock.close(linger=0)


def _wait_for_sada(peers: Peers, server: SadaStatusServer) -> None:
    answer = peers.run_client("c-wait-sada", mmi="show_workers", timeout=10)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        rows = (answer.get("mmi") or {}).get("results") or []
        offered = {name for r in rows if isinstance(r, dict) for name in str(r.get("service")).split(",")}
        if offered >= set(ANSWERS):  # show_workers joins a worker's services with ","
            return
        time.sleep(0.5)
        answer = peers.run_client("c-wait-sada", mmi="show_workers", timeout=10)
    pytest.fail(f"the SADA server did not register: {answer!r} {server.errors}\n{peers.logs()}")


@pytest.mark.interop
@pytest.mark.timeout(120)
def test_a_norfab_client_gets_other_protocols_statuses_in_norfabs_terms(broker: Broker, peers: Peers) -> None:
    if broker.kind == "norfab":
        pytest.skip("the real NorFab broker has no SADA edge")
    # nfgate serves SADA by default: an edge that did not start fails here, not skips.
    assert "sada" in broker.edges, f"nfgate announced no sada edge: {broker.edges}"
    with SadaStatusServer(broker.edges["sada"]) as server:
        _wait_for_sada(peers, server)
        order = ["s201", "s204", "s302", "s102", "s200"]
        answer = peers.run_client(
            "c-sada", services=order, task="echo", workers="any", timeout=8, process_timeout=90
        )
    logs = f"client answer: {answer!r}\nSADA server errors: {server.errors}\n{peers.logs()}"
    assert not server.errors, logs
    jobs = {entry["service"]: entry["job"] for entry in answer.get("jobs", [])}
    assert list(jobs) == order, logs
    results: dict[str, dict[str, Any]] = {}
    for service, job in jobs.items():
        # None: the job timed out (a 204 or 302 ignored, or a client whose receiving
        # thread a 201 or 102 killed, which times out every job after it).
        assert isinstance(job, dict) and len(job) == 1, f"{service}: {job!r}\n{logs}"
        (results[service],) = job.values()
    for service, expected in (
        ("s201", {"made": 1}),
        ("s204", ""),
        ("s102", {"ok": 1}),
        ("s200", {"plain": 1}),
    ):
        entry = results[service]
        assert entry.get("failed") is False and entry.get("errors") == [], f"{service}: {entry!r}\n{logs}"
        assert entry.get("result") == expected, f"{service}: {entry!r}\n{logs}"
    failed = results["s302"]  # NorFab has no redirect: its failure form, as for a 4xx/5xx
    assert failed.get("failed") is True, logs
    assert failed.get("errors") == ["nfgate: 302 worker error"], logs


def _dcp_call(endpoint: str, service: bytes, data: tuple[bytes, ...], wait_ms: int) -> list[bytes] | None:
    """A DCP client's REQUEST; the REPLY's data parts, or None when none comes in ``wait_ms``."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        sock.send_multipart(dcp.encode(DcpRequest(service=service, metadata=(b"m",), data=data)))
        if not sock.poll(wait_ms):
            return None
        reply = dcp.decode(sock.recv_multipart())
        assert isinstance(reply, DcpReply), reply
        return list(reply.data)
    finally:
        ctx.destroy(linger=0)


@pytest.mark.interop
@pytest.mark.timeout(120)
def test_bodies_a_norfab_worker_cannot_read_never_reach_it(broker: Broker, peers: Peers) -> None:
    if broker.kind == "norfab":
        pytest.skip("the real NorFab broker has no DCP edge")
    assert broker.dcp, f"nfgate announced no dcp edge: {broker.edges}"
    peers.start_worker("nfw1", service="nfecho")
    good = json.dumps({"task": "echo", "kwargs": {"a": 1}, "args": [], "timeout": 10}).encode()
    first = peers.run_client(
        "c-before", service="nfecho", task="echo", workers="any", kwargs={"n": 1}, wait_workers=["nfw1"]
    )
    logs = f"{first!r}\n{peers.logs()}"
    assert (first.get("job") or {}).get("nfw1", {}).get("result") == {"n": 1}, logs
    for bad in ((b"\xff\x00binary",), (), (b"[1, 2]",), (b'{"task": ["echo"]}',)):
        # Refused by nfgate: DCP has no error reply, so nothing comes back.
        assert _dcp_call(broker.dcp, b"nfecho", bad, 1500) is None, f"{bad!r}\n{peers.logs()}"
    data = _dcp_call(broker.dcp, b"nfecho", (good,), 15_000)
    assert data is not None, f"no REPLY to a good job after the bad ones\n{peers.logs()}"
    assert json.loads(data[0])["nfw1"]["result"] == {"a": 1}, peers.logs()
    after = peers.run_client("c-after", service="nfecho", task="echo", workers="any", kwargs={"n": 2})
    logs = f"{after!r}\n{peers.logs()}"
    assert (after.get("job") or {}).get("nfw1", {}).get("result") == {"n": 2}, logs
    assert "Traceback" not in peers.logs(), peers.logs()  # its POST thread never failed
