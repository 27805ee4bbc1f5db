"""Edges: one listening socket each, wiring transport + codec + session to the routing core.

An edge turns what arrives on its socket into core commands (:meth:`Edge.receive`), and
the core's outputs addressed to its peers into frames (:meth:`Edge.emit`). It owns
nothing but its socket and per-peer protocol state; routing decisions are the core's.
The contract and what every edge shares are in :mod:`nfgate.edges.base`, the ZeroMQ
ROUTER edge in :mod:`nfgate.edges.router_edge`; both are imported from here.
"""

from __future__ import annotations

from nfgate.edges.base import (
    BeatCounts,
    Edge,
    EdgeSettings,
    Traffic,
    WireCodec,
    WireCounts,
    WorkerAccess,
    forget_oldest,
    peer_label,
)
from nfgate.edges.router_edge import Decoding, RouterEdge
from nfgate.transports.zmq import identity_lasts

__all__ = [
    "BeatCounts",
    "Decoding",
    "Edge",
    "EdgeSettings",
    "RouterEdge",
    "Traffic",
    "WireCodec",
    "WireCounts",
    "WorkerAccess",
    "forget_oldest",
    "identity_lasts",
    "peer_label",
]
