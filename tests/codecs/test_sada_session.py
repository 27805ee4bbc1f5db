"""Safir-Darbaan's session tables and pure rules (nfgate.codecs.sada.session)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfgate.codecs import sada
from nfgate.codecs.sada import session
from nfgate.codecs.sada.session import Action, ChannelState, ServerState

TYPES = [m.TYPE for m in sada.CODEC.messages]


def test_tables_cover_every_state_and_message_type() -> None:
    assert set(session.CHANNEL) == {(s, t) for s in ChannelState for t in TYPES}
    assert set(session.SERVER) == {(s, t) for s in ServerState for t in TYPES}


def test_channel_rules() -> None:
    n, s, c = ChannelState.NEW, ChannelState.SERVER, ChannelState.CLIENT
    assert session.channel_step(n, "INTR") == (s, Action.REGISTER)
    assert session.channel_step(n, "REQ") == (c, Action.REQUEST)
    assert session.channel_step(s, "REQ") == (s, Action.REQUEST)  # still a worker
    assert session.channel_step(n, "REP") == (n, Action.RINTR)  # a server we do not know
    assert session.channel_step(n, "PONG") == (n, Action.RINTR)
    assert session.channel_step(s, "PONG") == (s, Action.HEARTBEAT)
    assert session.channel_step(s, "RINTR")[1] is Action.UNEXPECTED
    with pytest.raises(KeyError):
        session.channel_step(n, "NOPE")


def test_server_rules() -> None:
    new, intro = ServerState.NEW, ServerState.INTRODUCED
    assert session.server_step(new, "RINTR") == (intro, Action.INTR)
    assert session.server_step(new, "PING") == (intro, Action.PONG)
    assert session.server_step(intro, "REQ") == (intro, Action.REQUEST)
    for t in ("INTR", "REP", "PONG"):
        assert session.server_step(intro, t)[1] is Action.UNEXPECTED


def test_piran_evidence() -> None:
    rid = sada.new_request_id("RQ", 1_700_000_000_000, "AB12CD34")
    assert session.piran_evidence(identity=b"10.0.0.1:5055")
    assert session.piran_evidence(request_id=rid)
    assert not session.piran_evidence(identity=b"tcp://10.0.0.1:5055")
    assert not session.piran_evidence(identity=b"\x00k\x8bEg")  # libzmq's generated identity
    assert not session.piran_evidence(request_id="a-b-c-d")
    assert not session.piran_evidence(request_id=rid[:-1] + "X")  # bad checksum
    assert not session.piran_evidence(identity=b"10.0.0.1:5055", proto=sada.PROTO_BYTE)


@given(st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=2**45))
def test_request_ids_are_valid_piran_ids(seq: int, millis: int) -> None:
    rid = session.request_id(seq, millis)
    parsed = sada.parse_piran_request_id(rid)
    assert parsed.prefix == "RQ" and parsed.millis == millis


def test_request_ids_differ_by_sequence() -> None:
    ids = {session.request_id(seq, 1_700_000_000_000) for seq in range(1000)}
    assert len(ids) == 1000
    with pytest.raises(ValueError):
        session.request_id(-1, 0)
