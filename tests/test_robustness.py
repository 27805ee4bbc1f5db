"""Arbitrary input never escapes as anything but DecodeError.

Two generators: fully random frame lists (and random single frames, MemoDB's shape),
and mutations of the golden vectors, which reach far deeper into each decoder than
random bytes do.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nfgate import codecs
from nfgate.codecs import Message
from nfgate.errors import DecodeError

from .conftest import scaled
from .protocols import CASES, IDS, PROTOCOLS
from .vectors import frames, load


def _decodes_or_rejects(protocol: str, dialect: str | None, wire: list[bytes]) -> None:
    codec = codecs.get(protocol)
    try:
        result = codec.decode(wire, dialect)
    except DecodeError as exc:
        assert exc.protocol == protocol and exc.reason
        # MemoDB's decoder turns an unforeseen exception into DecodeError as a last
        # safety net; in tests that net must never be needed.
        assert not exc.reason.startswith("undecodable message"), exc.reason
        return
    assert isinstance(result, Message)
    codec.detect(wire)  # must not raise either


@pytest.mark.parametrize(("protocol", "dialect"), CASES, ids=IDS)
@settings(max_examples=scaled(1500))
@given(wire=st.lists(st.binary(max_size=40), max_size=12))
def test_random_frames(protocol: str, dialect: str, wire: list[bytes]) -> None:
    _decodes_or_rejects(protocol, dialect, wire)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@settings(max_examples=scaled(1500))
@given(data=st.binary(max_size=200))
def test_random_single_frame_and_autodetect(protocol: str, data: bytes) -> None:
    _decodes_or_rejects(protocol, None, [data])


def _mutated(vector_frames: list[bytes]) -> st.SearchStrategy[list[bytes]]:
    def mutate(draw: Any) -> list[bytes]:
        wire = list(vector_frames)
        for _ in range(draw(st.integers(1, 4))):
            op = draw(st.sampled_from(["flip", "drop", "insert", "truncate", "dup", "replace"]))
            if op != "insert" and not wire:
                op = "insert"
            i = draw(st.integers(0, max(len(wire) - 1, 0)))
            if op == "flip" and wire[i]:
                j = draw(st.integers(0, len(wire[i]) - 1))
                wire[i] = wire[i][:j] + bytes([wire[i][j] ^ draw(st.integers(1, 255))]) + wire[i][j + 1 :]
            elif op == "drop":
                del wire[i]
            elif op == "insert":
                wire.insert(i, draw(st.binary(max_size=8)))
            elif op == "truncate":
                wire[i] = wire[i][: draw(st.integers(0, len(wire[i])))]
            elif op == "dup":
                wire.insert(i, wire[i])
            elif op == "replace":
                wire[i] = draw(st.binary(max_size=12))
        return wire

    return st.composite(lambda draw: mutate(draw))()


VECTORS = [(i, v) for i, v in load() if "message" in v]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_mutated_vectors(protocol: str) -> None:
    mine = [v for _, v in VECTORS if v["protocol"] == protocol]
    assert mine, f"no vectors for {protocol}"
    strategy = st.sampled_from(mine).flatmap(lambda v: st.tuples(st.just(v["dialect"]), _mutated(frames(v))))

    @settings(max_examples=scaled(3000))
    @given(strategy)
    def check(case: tuple[str, list[bytes]]) -> None:
        dialect, wire = case
        _decodes_or_rejects(protocol, dialect, wire)
        _decodes_or_rejects(protocol, None, wire)

    check()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("wire", [None, 123, b"\x00\x01", "text", [b"", 5]], ids=repr)
def test_anything_that_is_not_a_list_of_frames_is_a_decode_error(protocol: str, wire: Any) -> None:
    # docs/library.md: decode "accepts any input" and raises DecodeError or returns.
    with pytest.raises(DecodeError) as caught:
        codecs.get(protocol).decode(wire)
    assert caught.value.protocol == protocol and "frame" in caught.value.reason
