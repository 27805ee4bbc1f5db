"""Golden vectors: every vector decodes to its message and encodes back to its bytes."""

from __future__ import annotations

from typing import Any

import pytest

from nfgate import codecs
from nfgate.errors import DecodeError

from .protocols import PROTOCOLS
from .vectors import frames, load

ALL = [(i, v) for i, v in load() if v["protocol"] in PROTOCOLS]
VALID = [(i, v) for i, v in ALL if "message" in v]
INVALID = [(i, v) for i, v in ALL if "error" in v]


def test_every_protocol_has_vectors_for_every_message_type() -> None:
    for name in PROTOCOLS:
        codec = codecs.get(name)
        covered = {v["message"]["type"] for _, v in VALID if v["protocol"] == name}
        missing = {cls.TYPE for cls in codec.messages} - covered
        assert not missing, f"{name}: no golden vector for {sorted(missing)}"


def test_every_vector_is_well_formed() -> None:
    for vid, v in ALL:
        assert v.get("section"), f"{vid}: no spec section cited"
        assert v.get("dialect") in codecs.get(v["protocol"]).dialects, f"{vid}: unknown dialect"
        assert ("message" in v) != ("error" in v), f"{vid}: needs exactly one of message/error"


@pytest.mark.parametrize(("vid", "vector"), VALID, ids=[i for i, _ in VALID])
def test_decode_matches_and_encode_restores_the_wire(vid: str, vector: dict[str, Any]) -> None:
    codec = codecs.get(vector["protocol"])
    wire = frames(vector)
    expected, _ = codec.from_json({**vector["message"], "dialect": vector["dialect"]})
    assert codec.decode(wire, vector["dialect"]) == expected
    assert codec.encode(expected, vector["dialect"]) == wire
    if vector.get("detected", True):
        assert codec.detect(wire) == vector["dialect"]
        assert codec.decode(wire) == expected


@pytest.mark.parametrize(("vid", "vector"), INVALID, ids=[i for i, _ in INVALID])
def test_invalid_vector_is_rejected_with_its_reason(vid: str, vector: dict[str, Any]) -> None:
    codec = codecs.get(vector["protocol"])
    with pytest.raises(DecodeError) as info:
        codec.decode(frames(vector), vector["dialect"])
    assert vector["error"].lower() in info.value.reason.lower()
    assert info.value.protocol == vector["protocol"]
    # A reason a person can act on: one line, not a validator's repr of the attribute.
    assert "\n" not in info.value.reason and "Attribute(" not in info.value.reason, info.value.reason
