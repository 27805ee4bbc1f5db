"""Safir-Darbaan's per-peer state machines, as tables, plus the pure rules the gateway's
two SADA roles share (dialect evidence, request ids). No sockets, no clock.

Two tables, one per role nfgate plays (design.md "SADA"):

* :data:`CHANNEL` -- the gateway is a *channel*: peers connect to its ROUTER. A peer is
  ``NEW`` until it speaks; an INTR makes it a ``SERVER`` (a worker of the routing core),
  a REQ makes it a ``CLIENT`` (a gateway extension: the spec's channels are the clients,
  but a peer that sends REQ to a channel is served like one). A REP or PONG from a peer
  the channel does not know as a server is what a server says to a channel that lost
  its state, so it is asked to introduce itself again (RINTR Command).
* :data:`SERVER` -- the gateway is a *server*: it connects to channels. A channel is
  ``NEW`` until an INTR has reached it, then ``INTRODUCED``. Channels send RINTR, REQ
  and PING; a server never receives INTR, REP or PONG.
"""

from __future__ import annotations

from typing import Final

from nfgate.errors import DecodeError
from nfgate.tables import StateEnum

from .codec import identity_endpoint, new_request_id, parse_piran_request_id
from .messages import PROTO_ASCII

__all__ = [
    "CHANNEL",
    "SERVER",
    "Action",
    "ChannelState",
    "ServerState",
    "channel_step",
    "piran_evidence",
    "request_id",
    "server_step",
]


class ChannelState(StateEnum):
    """A peer of the gateway's channel edge: new, a server that introduced itself, or a client."""

    NEW = "new"  # connected, or forgotten (evicted, gateway restarted)
    SERVER = "server"  # introduced itself: a worker of the routing core
    CLIENT = "client"  # sent REQ: gets REP


class ServerState(StateEnum):
    """A channel as the gateway's server edge sees it: introduced (sent INTR) or not yet."""

    NEW = "new"  # INTR not delivered yet (not connected, or the channel is unknown)
    INTRODUCED = "introduced"


class Action(StateEnum):
    """What the gateway does with a message (:data:`CHANNEL`, :data:`SERVER`)."""

    REGISTER = "register"  # INTR: (re)register the server's services
    REQUEST = "request"  # REQ: route it through the core, answer REP
    REPLY = "reply"  # REP from a server: the answer to a REQ it holds
    HEARTBEAT = "heartbeat"  # PONG from a server: it is alive
    PONG = "pong"  # PING: answer PONG
    RINTR = "rintr"  # a server we do not know spoke: ask it to INTR again
    INTR = "intr"  # RINTR from a channel: send INTR
    UNEXPECTED = "unexpected"  # a message this role never receives: count and drop


N, S, C = ChannelState.NEW, ChannelState.SERVER, ChannelState.CLIENT

CHANNEL: Final[dict[tuple[ChannelState, str], tuple[ChannelState, Action]]] = {
    # INTR Command: "introducing server itself to the channel"; again after any change.
    (N, "INTR"): (S, Action.REGISTER),
    (S, "INTR"): (S, Action.REGISTER),
    (C, "INTR"): (S, Action.REGISTER),
    (N, "REQ"): (C, Action.REQUEST),
    (C, "REQ"): (C, Action.REQUEST),
    (S, "REQ"): (S, Action.REQUEST),  # a server may be a client too; it stays a worker
    (S, "REP"): (S, Action.REPLY),
    # RINTR Command: a channel that lost its state asks servers to introduce themselves.
    (N, "REP"): (N, Action.RINTR),
    (C, "REP"): (C, Action.RINTR),
    (N, "PONG"): (N, Action.RINTR),
    (C, "PONG"): (C, Action.RINTR),
    (S, "PONG"): (S, Action.HEARTBEAT),
    # PING is the channel's; a peer pinging us gets PONG (harmless, and lets a client
    # check the gateway is there). From a server it is traffic, hence a heartbeat too.
    (N, "PING"): (N, Action.PONG),
    (C, "PING"): (C, Action.PONG),
    (S, "PING"): (S, Action.PONG),
    (N, "RINTR"): (N, Action.UNEXPECTED),  # RINTR goes channel -> server only
    (C, "RINTR"): (C, Action.UNEXPECTED),
    (S, "RINTR"): (S, Action.UNEXPECTED),
}

SN, SI = ServerState.NEW, ServerState.INTRODUCED

SERVER: Final[dict[tuple[ServerState, str], tuple[ServerState, Action]]] = {
    # Any message from a channel proves the connection: a NEW channel is sent INTR first
    # (by the edge, whenever the next state is INTRODUCED and the state was NEW).
    (SN, "RINTR"): (SI, Action.INTR),
    (SI, "RINTR"): (SI, Action.INTR),
    (SN, "REQ"): (SI, Action.REQUEST),
    (SI, "REQ"): (SI, Action.REQUEST),
    (SN, "PING"): (SI, Action.PONG),
    (SI, "PING"): (SI, Action.PONG),
    (SN, "INTR"): (SN, Action.UNEXPECTED),  # server -> channel messages
    (SI, "INTR"): (SI, Action.UNEXPECTED),
    (SN, "REP"): (SN, Action.UNEXPECTED),
    (SI, "REP"): (SI, Action.UNEXPECTED),
    (SN, "PONG"): (SN, Action.UNEXPECTED),
    (SI, "PONG"): (SI, Action.UNEXPECTED),
}


def channel_step(state: ChannelState, message_type: str) -> tuple[ChannelState, Action]:
    """The channel's next state and action; raises KeyError for a type SADA lacks."""
    return CHANNEL[(state, message_type)]


def server_step(state: ServerState, message_type: str) -> tuple[ServerState, Action]:
    """The server's next state and action; raises KeyError for a type SADA lacks."""
    return SERVER[(state, message_type)]


def piran_evidence(*, identity: bytes = b"", request_id: str = "", proto: bytes = PROTO_ASCII) -> bool:
    """True when what a peer sent shows it is PIRAN (design.md "Safir-Darbaan / PIRAN").

    Evidence: an identity of the form ``ip:port`` (PIRAN sets one on servers and
    channels; the spec's servers set none and its channels use ``tcp://ip:port``), or a
    request id in PIRAN's form with a valid checksum. A version frame other than
    ``SADA1`` rules PIRAN out (it drops such messages). Never raises.
    """
    if proto != PROTO_ASCII:
        return False
    if identity and not identity.startswith(b"tcp://") and b":" in identity:
        try:
            identity_endpoint(identity)
        except DecodeError:
            pass
        else:
            return True
    if request_id.count("-") == 3:
        try:
            parse_piran_request_id(request_id)
        except DecodeError:
            return False
        return True
    return False


_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_RAND_SPACE = 36**8


def request_id(seq: int, millis: int) -> str:
    """The request id the gateway's channel gives its ``seq``-th REQ at epoch ``millis``.

    PIRAN's form (``RQ-<millis>-<8 alnum>-<checksum>``, checksum by Darbaan's rule) so
    that PIRAN servers, which validate ids, take it; for spec servers it is just a unique
    printable id ("should be unique across the cluster": millis plus a sequence number).
    Raises :class:`ValueError` for a negative ``seq`` or ``millis``, or a ``millis``
    beyond a Java long (:func:`~nfgate.codecs.sada.codec.new_request_id`).
    """
    if seq < 0:
        raise ValueError(f"seq must not be negative: {seq}")
    n = seq % _RAND_SPACE
    rand = ""
    for _ in range(8):
        n, digit = divmod(n, 36)
        rand = _ALNUM[digit] + rand
    return new_request_id("RQ", millis, rand)
