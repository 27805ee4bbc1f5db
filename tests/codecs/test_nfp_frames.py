"""``response_frames``: the broker's RESPONSE to a client built from its parts, as the
NFP edge sends every 202 and relayed result. Same frames as ``encode`` of the message,
and the same refusals as the message's own checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfgate.codecs.nfp import codec
from nfgate.codecs.nfp.messages import BROKER, Post, Response
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


@given(printable, bodies, st.binary(min_size=1, max_size=20), printable, printable)
def test_dispatch_frames_are_what_encode_gives(
    uuid: str, body: tuple[bytes, ...], client: bytes, service: str, target: str
) -> None:
    routed = Post(header=BROKER, client=client, uuid=uuid, body=body)
    assert codec.dispatch_frames(uuid, body, "norfab", client=client) == codec.encode(routed, "norfab")
    addressed = Post(header=BROKER, service=service, target=target, uuid=uuid, body=body)
    frames = codec.dispatch_frames(uuid, body, "spec", service=service, target=target)
    assert frames == codec.encode(addressed, "spec")
    assert codec.decode(frames, "spec") == addressed


@pytest.mark.parametrize(
    ("dialect", "kwargs", "reason"),
    [
        ("norfab", {"uuid": "u1", "body": (b"x",)}, "routed"),  # NorFab workers need the client
        ("norfab", {"uuid": "u\n", "body": (b"x",), "client": b"c"}, "printable"),
        ("spec", {"uuid": "u1", "body": (b"x",), "service": "e\x00", "target": "any"}, "printable"),
        ("spec", {"uuid": "u1", "body": (), "service": "echo", "target": "any"}, "one or more"),
    ],
)
def test_dispatch_frames_refuse_what_encode_refuses(
    dialect: str, kwargs: dict[str, object], reason: str
) -> None:
    with pytest.raises(EncodeError, match=reason):
        codec.dispatch_frames(dialect=dialect, **kwargs)  # type: ignore[arg-type]
