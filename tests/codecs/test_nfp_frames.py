"""``response_frames``: the broker's RESPONSE to a client built from its parts, as the
NFP edge sends every 202 and relayed result. Same frames as ``encode`` of the message,
and the same refusals as the message's own checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfgate.codecs.nfp import codec
from nfgate.codecs.nfp.messages import BROKER, Response
from nfgate.errors import EncodeError

printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=40)
bodies = st.lists(st.binary(max_size=30), min_size=1, max_size=3).map(tuple)


@given(printable, printable, st.integers(100, 999), bodies, st.sampled_from(codec.DIALECTS))
def test_response_frames_are_what_encode_gives(
    service: str, uuid: str, status: int, body: tuple[bytes, ...], dialect: str
) -> None:
    message = Response(header=BROKER, service=service, uuid=uuid, status=status, body=body)
    frames = codec.response_frames(service, uuid, status, body, dialect)
    assert frames == codec.encode(message, dialect)
    assert codec.decode(frames, dialect) == message


@pytest.mark.parametrize(
    ("service", "uuid", "status", "body", "reason"),
    [
        ("echo\n", "u1", 200, (b"x",), "printable"),
        ("echo", "u\x00", 200, (b"x",), "printable"),
        ("echo", "u1", 99, (b"x",), "three-digit"),
        ("echo", "u1", 1000, (b"x",), "three-digit"),
        ("echo", "u1", True, (b"x",), "three-digit"),
        ("echo", "u1", 200, (), "one or more"),
        ("echo", "u1", 200, ("text",), "one or more"),
    ],
)
def test_response_frames_refuse_what_a_response_refuses(
    service: str, uuid: str, status: int, body: tuple[bytes, ...], reason: str
) -> None:
    with pytest.raises(EncodeError, match=reason):
        codec.response_frames(service, uuid, status, body, "spec")
    with pytest.raises((ValueError, TypeError)):
        Response(header=BROKER, service=service, uuid=uuid, status=status, body=body)
