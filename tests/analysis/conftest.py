"""The analysis tests' shared run: a real gateway's capture, analysed once on a local
master (session scope: the cluster test compares its own run with this one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from nfgate.analysis.job import analyze
from nfgate.codecs import dcp, memodb, nfp
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.memodb.messages import Job, Result
from nfgate.codecs.nfp.messages import CLIENT, Open, Post
from nfgate.edges import Traffic
from tests.gateway.conftest import echo_one, echo_worker, finish, recv, start_gateway, until

QUIET = "[edges.nfp]\nheartbeat_ms = 60000\n[edges.dcp]\nheartbeat_ms = 60000\n[edges.memodb]\nheartbeat_ms = 60000\n"
JUNK = {"nfp": [b"x"], "dcp": [b"", b"\x01\x02"]}


def analyze_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``nfgate analyze ARGS`` in a child process (its exit code and output as a user sees them)."""
    return subprocess.run(
        [sys.executable, "-m", "nfgate", "analyze", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _traffic(tmp: Path) -> tuple[Path, dict[str, Traffic]]:
    """A gateway with capture on (its DBP edge beaconing): an NFP worker serves 3 DCP
    requests, a MemoDB JOB and an NFP spec POST; one DCP request waits for a service nobody offers; one
    undecodable message each on the NFP and DCP edges."""
    directory = tmp / "capture"
    # DBP on: its beacons are traffic of a protocol that serves no client here.
    gw = start_gateway(tmp, QUIET, disabled=["sada", "sada-server"], capture_dir=directory)
    try:
        worker = echo_worker(gw, b"echo-worker")

        client = gw.dealer("dcp", b"dcp-client")
        for i in range(3):
            client.send_multipart(
                dcp.encode(DcpRequest(service=b"echo", metadata=(b"m%d" % i,), data=(b"x",)))
            )
            echo_one(worker)
            recv(client)
        client.send_multipart(dcp.encode(DcpRequest(service=b"nobody", metadata=(b"q",), data=(b"x",))))
        from nfgate.transports.nng import connect_req

        req = connect_req(gw.endpoint("memodb"), recv_timeout_ms=3000)
        try:
            req.send(memodb.encode(Job(id=b"j1", service="echo", timeout_ms=5000, payload=b"p"))[0])
            echo_one(worker)
            assert isinstance(memodb.decode([req.recv()]), Result)
        finally:
            req.close()
        nclient = gw.dealer("nfp", b"nfp-client")
        nclient.send_multipart(nfp.encode(Open(header=CLIENT)))
        recv(nclient)
        post = Post(header=CLIENT, service="echo", target="any", uuid="a" * 32, body=(b"{}",))
        nclient.send_multipart(nfp.encode(post))
        echo_one(worker)
        statuses = [nfp.decode(recv(nclient), "spec").status for _ in range(2)]  # type: ignore[attr-defined]
        assert statuses == [202, 200]
        for edge, frames in JUNK.items():
            gw.dealer(edge, b"junk-" + edge.encode()).send_multipart(frames)
        until(lambda: sum(gw.gateway.edges[e].traffic().receive_failures for e in JUNK) == 2)
    finally:
        finish(gw)
    return directory, {name: gw.gateway.edges[name].traffic() for name in ("nfp", "dcp", "memodb")}


@pytest.fixture(scope="session")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("pipeline")
    capture, traffic = _traffic(tmp)
    out = tmp / "out"
    summary = analyze(capture, out, "local[1]")
    raw = [r for p in sorted(capture.glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    return {"capture": capture, "out": out, "summary": summary, "traffic": traffic, "raw": raw}


def table(run: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return pq.read_table(run["out"] / name).to_pylist()
