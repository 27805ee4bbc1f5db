"""Every event an edge counts is declared in its ``EVENTS``, so that its counter exists,
at 0, from the start.

Prometheus's ``increase()`` and ``rate()`` see nothing of a counter's first value: a
series that appears at 1 (the first undecodable message, the first unroutable reply)
hides exactly the increase an operator's alert is waiting for. The edges count with a
``Counter`` seeded from ``EVENTS``; this test reads the edge modules and finds every
name counted with a literal, so a new counter left out of ``EVENTS`` fails here.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest
import zmq

from nfgate.edges import Edge, EdgeSettings
from nfgate.edges.dbp import DbpEdge
from nfgate.edges.dcp import DcpEdge
from nfgate.edges.memodb import MemodbEdge
from nfgate.edges.nfp import NfpEdge
from nfgate.edges.sada import SadaChannelEdge
from nfgate.edges.sada_server import SadaServerEdge
from nfgate.metrics import render
from nfgate.transports.zmq import Limits, connect_dealer

EDGES = Path(__file__).resolve().parent.parent.parent / "nfgate" / "edges"
ALL: tuple[type[Edge], ...] = (DbpEdge, DcpEdge, MemodbEdge, NfpEdge, SadaChannelEdge, SadaServerEdge)
# Which edges each module counts for (helpers count through their edge's counters).
MODULES: dict[str, tuple[type[Edge], ...]] = {
    "__init__.py": ALL,
    "base.py": ALL,
    "router_edge.py": ALL,
    "dbp.py": (DbpEdge,),
    "dcp.py": (DcpEdge,),
    "memodb.py": (MemodbEdge,),
    "nfp.py": (NfpEdge,),
    "nfp_jobs.py": (NfpEdge,),
    "nfp_retention.py": (NfpEdge,),
    "nfp_services.py": (NfpEdge,),
    "sada.py": (SadaChannelEdge,),
    "sada_server.py": (SadaServerEdge,),
}


def counted(path: Path) -> set[str]:
    """Names counted with a literal: ``….counters["x"]``, ``bad_input(peer, "x", …)``
    and NfpJobs's ``self.count("x")``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "counters"
            and isinstance(node.slice, ast.Constant)
        ):
            names.add(node.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            args = node.args
            if node.func.attr == "bad_input" and len(args) > 1 and isinstance(args[1], ast.Constant):
                names.add(args[1].value)
            elif (
                node.func.attr == "count"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
                and args
                and isinstance(args[0], ast.Constant)
            ):
                names.add(args[0].value)
    return names


def test_the_name_reader_finds_what_the_edges_count() -> None:
    # The reader itself: a few names known to be counted each way.
    assert {"internal_errors"} <= counted(EDGES / "base.py")
    assert {"unroutable", "undecodable"} <= counted(EDGES / "router_edge.py")
    assert {"unknown_reply", "empty_service", "reconnects_sent"} <= counted(EDGES / "dcp.py")
    assert {"jobs_refused", "store_errors"} <= counted(EDGES / "nfp_jobs.py")
    assert {"jobs_expired", "expire_errors"} <= counted(EDGES / "nfp_retention.py")


@pytest.mark.parametrize("module", sorted(p.name for p in EDGES.glob("*.py")))
def test_every_counted_event_is_declared(module: str) -> None:
    names = counted(EDGES / module)
    edges = MODULES.get(module, ())
    assert names or edges or module not in MODULES
    assert not names or edges, f"{module} counts {sorted(names)}: add it to MODULES with its edges"
    for edge in edges:
        missing = names - set(edge.EVENTS)
        assert not missing, f"{edge.__name__}.EVENTS lacks {sorted(missing)} (counted in {module})"


def test_a_new_edge_exports_every_event_at_zero() -> None:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    edge = DcpEdge(EdgeSettings(name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context))
    try:
        stats = edge.stats()
        assert {name: stats[name] for name in DcpEdge.EVENTS} == dict.fromkeys(DcpEdge.EVENTS, 0)
        text = render({"edge:dcp": stats}, {"dcp": "dcp"}, 1.0)
        for name in DcpEdge.EVENTS:
            assert f'nfgate_edge_events_total{{edge="dcp",protocol="dcp",event="{name}"}} 0' in text
    finally:
        edge.close()
        context.destroy(linger=0)


def test_a_message_dropped_for_a_full_send_queue_is_counted_and_warned_of_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    settings = EdgeSettings(
        name="dcp", protocol="dcp", url="tcp://127.0.0.1:0", context=context, limits=Limits(high_water_mark=1)
    )
    edge = DcpEdge(settings)
    peer = connect_dealer(context, edge.endpoint, identity=b"slow")
    try:
        peer.setsockopt(zmq.RCVHWM, 1)
        peer.send_multipart([b"hello"])
        assert edge.transport.socket.poll(5000)
        got = edge.transport.recv()
        assert got is not None and got[0] == b"slow"
        body = b"x" * 65536
        with caplog.at_level(logging.DEBUG, logger="nfgate.edge"):
            # It never reads: libzmq's queues and the kernel's fill up (bounded).
            dropped = 0
            for _ in range(5000):
                if not edge.send(b"slow", [b"", body]):
                    dropped += 1
                    if dropped == 3:
                        break
        assert dropped == 3, "the peer's queue never filled"
        assert (edge.counters["send_queue_full"], edge.counters["unroutable"]) == (3, 0)
        assert edge.transport.queue_full == 3 and edge.traffic().send_failures == 3
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings  # the next two at DEBUG: a minute has not passed
        assert "dcp: send_queue_full to slow: message dropped" in warnings[0]
        assert "high_water_mark" in warnings[0]
    finally:
        peer.close(0)
        edge.close()
        context.destroy(linger=0)
