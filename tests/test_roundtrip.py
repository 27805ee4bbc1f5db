"""Property tests: decode(encode(m)) == m for every message type of every protocol and
dialect, and decode never raises anything but DecodeError."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nfgate import codecs
from nfgate.codecs import Message

from . import strategies
from .conftest import scaled
from .protocols import CASES, IDS, PROTOCOLS


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_strategies_cover_every_message_type(protocol: str) -> None:
    # Some types exist only in a dialect (NorFab's EVENT, say): the union must cover all.
    codec = codecs.get(protocol)
    covered = {t for dialect in codec.dialects for t in strategies.messages(protocol, dialect)}
    assert {cls.TYPE for cls in codec.messages} <= covered


@pytest.mark.parametrize(("protocol", "dialect"), CASES, ids=IDS)
def test_decode_encode_roundtrip(protocol: str, dialect: str) -> None:
    codec = codecs.get(protocol)
    any_message = st.one_of(*strategies.messages(protocol, dialect).values())

    @settings(max_examples=scaled(400))
    @given(any_message)
    def check(message: Message) -> None:
        wire = codec.encode(message, dialect)
        assert all(isinstance(f, bytes) for f in wire)
        assert codec.decode(wire, dialect) == message
        assert codec.encode(codec.decode(wire, dialect), dialect) == wire

    check()


@pytest.mark.parametrize(("protocol", "dialect"), CASES, ids=IDS)
def test_json_form_roundtrip(protocol: str, dialect: str) -> None:
    codec = codecs.get(protocol)
    any_message = st.one_of(*strategies.messages(protocol, dialect).values())

    @settings(max_examples=scaled(100))
    @given(any_message)
    def check(message: Message) -> None:
        obj: dict[str, Any] = codec.to_json(message, dialect)
        assert obj["type"] == message.TYPE and obj["protocol"] == protocol
        assert codec.from_json(obj) == (message, dialect)

    check()
