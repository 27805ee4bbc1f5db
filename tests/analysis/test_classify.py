"""The commands table's derived columns (nfgate/analysis/classify.py): pure, no Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfgate import codecs
from nfgate.analysis.classify import COLUMNS, classify
from nfgate.codecs import dcp, memodb, nfp, sada
from nfgate.codecs.dbp import udp as dbp_udp
from nfgate.codecs.dbp.messages import Heartbeat as DbpHeartbeat
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.memodb.messages import Job, Result
from nfgate.codecs.nfp.messages import BROKER, CLIENT, WORKER, Event, Get, Post, Response
from nfgate.codecs.sada.messages import Rep, Req
from nfgate.errors import DecodeError
from tests import vectors

VALID = [(vid, v) for vid, v in vectors.load() if "message" in v and v.get("detected", True)]
INVALID = [(vid, v) for vid, v in vectors.load() if "error" in v]


@pytest.mark.parametrize(("vid", "vector"), VALID, ids=[vid for vid, _ in VALID])
def test_every_golden_vector_is_typed_as_its_message(vid: str, vector: dict[str, Any]) -> None:
    row = classify(vector["protocol"], "zmq", vectors.frames(vector))
    assert row["error"] is None
    assert (row["dialect"], row["type"]) == (vector["dialect"], vector["message"]["type"])
    assert row["role"] in ("request", "reply", "interim", "query", "control")


@pytest.mark.parametrize(("vid", "vector"), INVALID, ids=[vid for vid, _ in INVALID])
def test_an_invalid_vector_is_malformed_with_the_decoders_reason(vid: str, vector: dict[str, Any]) -> None:
    # Invalid in its vector's dialect; classify decodes in the dialect it detects, as
    # the gateway does, so some (another dialect's form) are valid messages there.
    codec = codecs.get(vector["protocol"])
    data = vectors.frames(vector)
    row = classify(vector["protocol"], "zmq", data)
    try:
        message = codec.decode(data, codec.detect(data))
    except DecodeError as exc:
        if codec.detect(data) == vector["dialect"]:
            assert vector["error"] in str(exc)
        assert row["error"] == str(exc)
        assert {k: v for k, v in row.items() if k != "error"} == dict.fromkeys(COLUMNS[:-1])
    else:
        assert (row["error"], row["type"]) == (None, message.TYPE)


def test_nfp_a_post_is_answered_by_its_first_final_response() -> None:
    uuid = "b" * 32
    post = classify(
        "nfp", "zmq", nfp.encode(Post(header=CLIENT, service="svc", target="any", uuid=uuid, body=(b"",)))
    )
    assert (post["role"], post["service"], post["key"]) == ("request", "svc", uuid)
    for status, role in (
        (202, "interim"),
        (201, "interim"),
        (300, "interim"),
        (200, "reply"),
        (408, "reply"),
    ):
        response = Response(header=BROKER, service="svc", uuid=uuid, status=status, body=(b"",))
        row = classify("nfp", "zmq", nfp.encode(response, "norfab"))
        assert (row["dialect"], row["role"], row["status"], row["key"]) == ("norfab", role, status, uuid)
    event = classify(
        "nfp",
        "zmq",
        nfp.encode(Event(header=WORKER, client=b"c1", uuid=uuid, status=200, body=(b"",)), "norfab"),
    )
    assert event["role"] == "interim"
    get = classify(
        "nfp", "zmq", nfp.encode(Get(header=CLIENT, service="svc", target="any", uuid=uuid, body=(b"",)))
    )
    assert (get["role"], get["key"]) == ("query", uuid)


NORFAB = json.loads((Path(__file__).resolve().parent.parent / "captures" / "norfab-0.25.json").read_text())


def test_real_norfab_traffic_is_classified_as_a_norfab_user_reads_it() -> None:
    rows = [(c, classify("nfp", "zmq", [bytes.fromhex(f) for f in c["frames"]])) for c in NORFAB]
    for capture, row in rows:
        broken = capture["description"].startswith("Reply to a spec-dialect POST")  # NorFab's own bug
        assert (row["error"] is not None) == broken, capture["description"]
        assert row["dialect"] == (None if broken else "norfab")
    roles = {(c["direction"], r["type"], r["status"]): r["role"] for c, r in rows if r["type"]}
    assert roles[("client->broker", "POST", None)] == roles[("broker->worker", "POST", None)] == "request"
    for status in (201, 202, 300, 102):  # accepted, dispatched, pending, waiting for input
        assert roles[("broker->client", "RESPONSE", status)] == "interim", status
    for status in (200, 400, 404):
        assert roles[("broker->client", "RESPONSE", status)] == "reply", status
    assert roles[("client->broker", "GET", None)] == "query"
    assert roles[("worker->broker", "KEEPALIVE", None)] == "control"
    # A client's job is paired with its result: POST and the relayed 200 share the uuid.
    post = next(r for c, r in rows if c["direction"] == "client->broker" and r["type"] == "POST")
    assert any(
        r["key"] == post["key"] and r["role"] == "reply" and r["status"] == 200
        for c, r in rows
        if c["direction"] == "broker->client"
    )


def test_request_and_reply_keys_match_per_protocol() -> None:
    pairs = [
        (
            "dcp",
            dcp.encode(DcpRequest(service=b"s", client=b"c", metadata=(b"a", b"b"), data=(b"x",))),
            dcp.encode(DcpReply(client=b"c", metadata=(b"a", b"b"), data=(b"y",))),
            "61.62",
        ),
        (
            "memodb",
            memodb.encode(Job(id=b"\x01\x02", service="s", timeout_ms=10, payload=b"")),
            memodb.encode(Result(id=b"\x01\x02", payload=b"")),
            "0102",
        ),
        (
            "sada",
            sada.encode(
                Req(request_id="r7", service="s", version="1", category="c", action="a", payload=b"")
            ),
            sada.encode(Rep(request_id="r7", status=200, payload=b"")),
            "r7",
        ),
    ]
    for protocol, request, reply, key in pairs:
        asked, answered = classify(protocol, "zmq", request), classify(protocol, "zmq", reply)
        assert (asked["role"], asked["service"], asked["key"]) == ("request", "s", key), protocol
        assert (answered["role"], answered["key"]) == ("reply", key), protocol


def test_dbp_datagrams_are_decoded_as_udp() -> None:
    beat = dbp_udp.encode_heartbeat_datagram(DbpHeartbeat(time=1.5, service="svc"))
    assert (
        classify("dbp", "udp", [beat])[:1] if False else classify("dbp", "udp", [beat])["type"] == "HEARTBEAT"
    )
    assert classify("dbp", "udp", [dbp_udp.encode_beacon(5246)])["type"] == "BEACON"
    assert classify("dbp", "udp", [b"nonsense"])["error"]
    assert classify("dbp", "udp", [b"a", b"b"])["error"] == "dbp: a datagram is one frame, got 2"


@given(
    protocol=st.sampled_from(["nfp", "dbp", "memodb", "dcp", "sada"]),
    transport=st.sampled_from(["zmq", "udp", "nng"]),
    frames=st.lists(st.binary(max_size=40), max_size=8),
)
def test_any_frames_give_a_row_and_never_raise(protocol: str, transport: str, frames: list[bytes]) -> None:
    row = classify(protocol, transport, frames)
    assert set(row) == set(COLUMNS)
    assert (row["error"] is None) == (row["type"] is not None)
