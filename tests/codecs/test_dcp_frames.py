"""DCP's frame builders (``request_frames``/``reply_frames``), which the DCP edge uses to
encode what it relays without building a message first: the same frames as ``encode``
of the message, and the same refusals as the message's own checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfgate.codecs import dcp
from nfgate.codecs.dcp import codec
from nfgate.errors import EncodeError
from tests.strategies import dcp as strategies


@given(st.data(), st.sampled_from(codec.DIALECTS))
def test_builders_give_what_encode_gives(data: st.DataObject, dialect: str) -> None:
    request = data.draw(strategies.messages(dialect)["REQUEST"])
    reply = data.draw(strategies.messages(dialect)["REPLY"])
    assert codec.request_frames(
        request.service, request.client, request.metadata, request.data, dialect
    ) == codec.encode(request, dialect)
    assert codec.reply_frames(reply.client, reply.metadata, reply.data, dialect) == codec.encode(
        reply, dialect
    )
    # and they read back as the message they came from
    assert (
        codec.decode(codec.reply_frames(reply.client, reply.metadata, reply.data, dialect), dialect) == reply
    )


@pytest.mark.parametrize(
    ("client", "metadata", "data", "dialect", "reason"),
    [
        (None, (b"k", b""), (b"x",), "spec", "metadata parts must be non-empty"),
        (b"", (b"k",), (b"x",), "spec", "client address must be non-empty"),
        (None, (b"k",), (b"x", b""), "dagbox", "DagBox ends data"),
    ],
)
def test_builders_refuse_what_the_messages_refuse(
    client: bytes | None, metadata: tuple[bytes, ...], data: tuple[bytes, ...], dialect: str, reason: str
) -> None:
    # The message classes refuse these at construction (an empty metadata part would
    # read back as the delimiter, an empty address as "absent"); the builders refuse to
    # put them on the wire.
    with pytest.raises(EncodeError, match=reason):
        codec.request_frames(b"echo", client, metadata, data, dialect)
    with pytest.raises(EncodeError, match=reason):
        codec.reply_frames(client, metadata, data, dialect)
    if dialect == "spec":
        with pytest.raises(ValueError):
            dcp.Reply(client=client, metadata=metadata, data=data)


def test_type_part_per_dialect() -> None:
    assert codec.request_frames(b"echo", None, (), (b"x",), "spec")[2] == b"\x04"
    assert codec.request_frames(b"echo", None, (), (b"x",), "dagbox")[2] == b"\x04\x00\x00\x00"
    assert codec.reply_frames(None, (), (b"x",), "dagbox")[2] == b"\x05\x00\x00\x00"


def test_builders_check_the_service_and_client_types() -> None:
    with pytest.raises(EncodeError, match="service name must be bytes"):
        codec.request_frames("echo", None, (), (), "spec")  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="client address"):
        codec.reply_frames("c1", (), (), "spec")  # type: ignore[arg-type]


def test_builders_refuse_an_unknown_dialect() -> None:
    from nfgate.errors import ConfigError

    with pytest.raises(ConfigError, match="bogus"):
        codec.reply_frames(None, (), (), "bogus")
    with pytest.raises(ConfigError, match="bogus"):
        codec.request_frames(b"echo", None, (), (), "bogus")
