"""DCP's per-peer state machine (specs/dcp.md "Connection", "Requests & Replies",
"Heartbeats"), as a table. Pure: no sockets, no clock.

A peer is a client until it registers ("When a component connects, it is considered to
be a client. A client MAY register itself as a service to become a worker"). The table
maps ``(state, message type)`` to the next state and the action the broker takes.
"""

from __future__ import annotations

from typing import Final

from nfgate.tables import StateEnum

__all__ = ["Action", "PeerState", "TRANSITIONS", "step"]


class PeerState(StateEnum):
    """A DCP peer: a client until it registers a service (Connection)."""

    CLIENT = "client"
    WORKER = "worker"


class Action(StateEnum):
    """What the broker does with a message from a peer (:data:`TRANSITIONS`)."""

    REGISTER = "register"  # echo the REGISTRATION to confirm it, register the service
    HEARTBEAT = "heartbeat"  # answer PONG; a busy worker asks for more work this way
    RECONNECT = "reconnect"  # "heartbeat ... from a worker that is not registered": RECONNECT
    REQUEST = "request"  # route it (a worker's may hand on a request it holds)
    REPLY = "reply"  # a worker answers a request it holds
    UNEXPECTED = "unexpected"  # a broker-only message, or a client's reply: count and drop


C, W = PeerState.CLIENT, PeerState.WORKER

TRANSITIONS: Final[dict[tuple[PeerState, str], tuple[PeerState, Action]]] = {
    (C, "REGISTRATION"): (W, Action.REGISTER),
    (W, "REGISTRATION"): (W, Action.REGISTER),  # a repeated registration (after RECONNECT)
    (C, "PING"): (C, Action.RECONNECT),
    (W, "PING"): (W, Action.HEARTBEAT),
    (C, "REQUEST"): (C, Action.REQUEST),
    (W, "REQUEST"): (W, Action.REQUEST),
    (C, "REPLY"): (C, Action.UNEXPECTED),  # nobody gave this peer a request
    (W, "REPLY"): (W, Action.REPLY),
    (C, "PONG"): (C, Action.UNEXPECTED),  # PONG and RECONNECT only go broker -> worker
    (W, "PONG"): (W, Action.UNEXPECTED),
    (C, "RECONNECT"): (C, Action.UNEXPECTED),
    (W, "RECONNECT"): (W, Action.UNEXPECTED),
}


def step(state: PeerState, message_type: str) -> tuple[PeerState, Action]:
    """The next state and the broker's action; raises KeyError for a type DCP lacks."""
    return TRANSITIONS[(state, message_type)]
