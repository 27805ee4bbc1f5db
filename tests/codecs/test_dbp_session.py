"""DBP's pure session tables (nfgate.codecs.dbp.session): the peer command table, the
heartbeat path (UDP, then ZeroMQ after a missed beat), registration rules and the JSON
envelope a DBP service that is a worker receives and answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfgate.codecs import dbp
from nfgate.codecs.dbp.session import (
    BEATS,
    TRANSITIONS,
    Action,
    Beat,
    BeatAction,
    Liveness,
    Mode,
    PeerState,
    apply_update,
    check_registration,
    heartbeat_ms,
    parse_reply,
    request_envelope,
    step,
)

TYPES = {cls.TYPE for cls in dbp.CODEC.messages}
pytestmark = pytest.mark.timeout(60)

GOOD = {"name": "s", "ip": "127.0.0.1", "port": 5300, "function": "echo", "heartbeat": 1}


def test_the_peer_table_covers_every_state_and_command() -> None:
    assert set(TRANSITIONS) == {(state, t) for state in PeerState for t in TYPES}
    with pytest.raises(KeyError):
        step(PeerState.PEER, "NOPE")


@pytest.mark.parametrize(
    ("state", "kind", "expected"),
    [
        (PeerState.PEER, "REGISTRATION", (PeerState.SERVICE, Action.REGISTER)),
        (PeerState.PEER, "UPDATE", (PeerState.PEER, Action.DENY)),
        (PeerState.PEER, "HEARTBEAT", (PeerState.PEER, Action.RECONNECT)),
        (PeerState.PEER, "DISCONNECT", (PeerState.PEER, Action.IGNORE)),
        (PeerState.SERVICE, "DISCONNECT", (PeerState.PEER, Action.LEAVE)),
        (PeerState.SERVICE, "APPROVED", (PeerState.PEER, Action.UNEXPECTED)),
        (PeerState.PEER, "REPLY", (PeerState.PEER, Action.UNEXPECTED)),
        (PeerState.SERVICE, "REPLY", (PeerState.SERVICE, Action.REPLY)),
    ],
)
def test_peer_transitions(state: PeerState, kind: str, expected: tuple[PeerState, Action]) -> None:
    assert step(state, kind) == expected


def test_the_beat_table_covers_every_mode_and_beat() -> None:
    assert set(BEATS) == {(mode, beat) for mode in Mode for beat in Beat}


def test_a_missed_udp_beat_switches_to_zmq_and_silence_expires() -> None:
    live = Liveness(interval_ms=100, heard_ms=0, send_ms=100)
    assert live.due(149, 3) is None
    assert live.due(150, 3) is Beat.MISSED  # 1.5 intervals of silence
    assert live.deadline(3) == 100
    switched, action = live.on(Beat.MISSED, 150)
    assert action is BeatAction.SWITCH and switched.mode is Mode.ZMQ
    assert switched.send_ms == 150  # beats on the new path at once
    assert switched.due(299, 3) is None and switched.due(300, 3) is Beat.EXPIRED
    touched, action = switched.on(Beat.UDP, 250)  # a late datagram keeps it alive, on ZeroMQ
    assert action is BeatAction.TOUCH and touched.mode is Mode.ZMQ and touched.heard_ms == 250
    _, action = touched.on(Beat.EXPIRED, 600)
    assert action is BeatAction.EXPIRE


def test_a_zmq_beat_from_the_service_moves_the_broker_too() -> None:
    live = Liveness(interval_ms=100, heard_ms=0, send_ms=100)
    moved, action = live.on(Beat.ZMQ, 50)
    assert action is BeatAction.TOUCH and moved.mode is Mode.ZMQ and moved.heard_ms == 50


def test_heartbeat_ms_is_bounded() -> None:
    assert heartbeat_ms(0.001) == 50 and heartbeat_ms(2.5) == 2500 and heartbeat_ms(1e9) == 3_600_000
    # check_registration approves any finite positive heartbeat: the largest ones too.
    for huge in (1e308, 10**400):
        assert check_registration({**GOOD, "heartbeat": huge}, "spec", dbp.REQUIRED_KEYS) == []
        assert heartbeat_ms(huge) == 3_600_000


def test_expiry_is_never_later_than_the_deadline_says() -> None:
    # A UDP service's miss comes after 1.5 intervals; with liveness 1 expiry comes first.
    live = Liveness(interval_ms=1000, heard_ms=0, send_ms=10_000)
    assert live.deadline(1) == 1000 and live.due(1000, 1) is Beat.EXPIRED
    assert live.deadline(3) == 1500 and live.due(1500, 3) is Beat.MISSED


def test_a_body_of_a_number_no_double_holds_is_a_bad_body() -> None:
    reply = parse_reply(b'{"id":"1","body":1e999}')
    assert reply is not None and reply.status == 500 and "bad body" in reply.problem


def test_registration_rules() -> None:
    assert check_registration(GOOD, "spec", dbp.REQUIRED_KEYS) == []
    assert check_registration({"name": "s"}, "spec", dbp.REQUIRED_KEYS) == [
        "missing required key(s): ip, port, function, heartbeat"
    ]
    bad = {**GOOD, "name": "", "ip": 1, "port": True, "function": None, "heartbeat": float("inf")}
    assert len(check_registration(bad, "spec", dbp.REQUIRED_KEYS)) == 5
    hermes = dbp.service_info(b'{"name":"h","interfaces":{"router":{"ip":"127.0.0.1","port":5}}}')
    assert check_registration(hermes, "hermes", dbp.REQUIRED_KEYS) == []
    assert check_registration({"topics": []}, "hermes", dbp.REQUIRED_KEYS) == [
        "name must be a non-empty printable string"
    ]


def test_update_merges_and_keeps_the_name() -> None:
    merged, reasons = apply_update(GOOD, {"port": 6000, "extra": [1]}, "spec", dbp.REQUIRED_KEYS)
    assert reasons == [] and merged["port"] == 6000 and merged["extra"] == [1] and merged["name"] == "s"
    _, reasons = apply_update(GOOD, {"name": "t"}, "spec", dbp.REQUIRED_KEYS)
    assert reasons == ["name cannot be changed by UPDATE: register again"]
    _, reasons = apply_update(GOOD, {"heartbeat": 0}, "spec", dbp.REQUIRED_KEYS)
    assert reasons == ["heartbeat must be a positive number of seconds"]


def test_envelope_round_trip_text_and_binary() -> None:
    text = json.loads(request_envelope(request_id=7, service="echo", body=(b"a", b"\xc3\xa9")))
    assert text == {"id": "7", "service": "echo", "body": ["a", "é"], "encoding": "utf-8"}
    binary = json.loads(
        request_envelope(request_id=8, service="x", body=(b"\xff",), action=("run", "cat"), version="2")
    )
    assert binary["encoding"] == "base64" and binary["body"] == ["/w=="]
    assert binary["action"] == {"name": "run", "category": "cat"} and binary["version"] == "2"
    assert request_envelope(request_id=1, service="s", body=(b"\n\x01",)).isprintable()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"id": "7", "body": ["A"]}, (7, 200, (b"A",), "")),
        ({"id": 7, "status": 404, "body": "one"}, (7, 404, (b"one",), "")),
        ({"id": "7", "body": {"k": 1}}, (7, 200, (b'{"k":1}',), "")),
        ({"id": "7", "encoding": "base64", "body": ["/w=="]}, (7, 200, (b"\xff",), "")),
        ({"id": "7"}, (7, 200, (), "")),
        ({"id": "x", "body": []}, (None, 200, (), "")),
        ({"id": "7", "status": 100}, (7, 500, (), "bad status 100")),
        ({"id": "7", "status": True}, (7, 500, (), "bad status True")),
        ({"id": "7", "encoding": "rot13"}, (7, 500, (), "bad encoding 'rot13'")),
    ],
)
def test_parse_reply(answer: dict[str, Any], expected: tuple[Any, ...]) -> None:
    got = parse_reply(json.dumps(answer).encode())
    assert got is not None
    assert (got.request_id, got.status, got.body, got.problem) == expected


def test_bad_base64_body_is_a_500() -> None:
    got = parse_reply(b'{"id":"1","encoding":"base64","body":["!!"]}')
    assert got is not None and got.status == 500 and got.problem.startswith("bad body")


@pytest.mark.parametrize("info", [b"plain", b"[1]", b'{"body":[]}', b"\xff", b"{" * 100_000])
def test_not_an_envelope(info: bytes) -> None:
    assert parse_reply(info) is None


@given(st.binary(max_size=256))
def test_parse_reply_never_raises(info: bytes) -> None:
    parse_reply(info)


_VALUES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)


@given(
    st.dictionaries(
        st.sampled_from(["status", "encoding", "body", "other"]),
        _VALUES | st.lists(_VALUES, max_size=3) | st.dictionaries(st.text(max_size=3), _VALUES, max_size=2),
        max_size=4,
    )
)
def test_parse_reply_never_raises_on_json_objects(obj: dict[str, Any]) -> None:
    parse_reply(json.dumps({**obj, "id": "1"}).encode())


@pytest.mark.parametrize(
    ("raw_id", "expected"),
    [
        ("1" * 4301, None),  # beyond Python's int() digit limit: names no request we sent
        ("1" * 21, None),
        ("0" * 30 + "12", 12),  # leading zeros do not count
        ("99999999999999999999", 99999999999999999999),  # 20 digits: the longest taken
    ],
)
def test_parse_reply_reads_long_ids_without_raising(raw_id: str, expected: int | None) -> None:
    got = parse_reply(b'{"id":"' + raw_id.encode() + b'"}')
    assert got is not None and got.request_id == expected


def test_check_registration_takes_a_huge_integer_heartbeat() -> None:
    # JSON integers have no size limit; math.isfinite() overflowed on this one.
    info = dbp.service_info(b'{"name":"a","ip":"x","port":1,"function":"f","heartbeat":1' + b"0" * 400 + b"}")
    assert check_registration(info, "spec", dbp.REQUIRED_KEYS) == []
    assert check_registration({**info, "port": 10**400}, "spec", dbp.REQUIRED_KEYS) == [
        "port must be an integer 1..65535"
    ]
