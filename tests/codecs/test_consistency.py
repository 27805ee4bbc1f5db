"""The rules every codec follows alike (docs/library.md, "Rules every codec follows"),
checked over the five codecs at once rather than in each codec's own tests, so that a
codec that drifts from the others fails here.

* A field of the wrong Python type is a ``TypeError`` at construction; a value of the
  right type the wire cannot carry is a ``ValueError``; decoding raises ``DecodeError``
  only.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from nfgate import codecs
from nfgate.codecs import Message
from tests import vectors

from ..protocols import PROTOCOLS


def _valid_messages() -> list[tuple[str, Message]]:
    """One decoded message per (protocol, message class) among the golden vectors."""
    found: dict[tuple[str, str], tuple[str, Message]] = {}
    for _, vector in vectors.load():
        if "message" not in vector or vector["protocol"] not in PROTOCOLS:
            continue
        codec = codecs.get(vector["protocol"])
        message = codec.decode(vectors.frames(vector), vector["dialect"])
        found.setdefault((vector["protocol"], message.TYPE), (vector["protocol"], message))
    return list(found.values())


MESSAGES = _valid_messages()
FIELDS = [
    pytest.param(message, field.name, id=f"{protocol}-{message.TYPE}-{field.name}")
    for protocol, message in MESSAGES
    for field in attrs.fields(type(message))
]


def test_the_vectors_cover_every_message_class() -> None:
    covered = {type(message) for _, message in MESSAGES}
    for protocol in PROTOCOLS:
        assert set(codecs.get(protocol).messages) <= covered, protocol


class _Stranger:
    """A value of no type any field takes (not iterable, not a number, not text)."""


@pytest.mark.parametrize(("message", "field"), FIELDS)
def test_a_field_of_the_wrong_type_is_a_type_error(message: Message, field: str) -> None:
    with pytest.raises(TypeError):
        attrs.evolve(message, **{field: _Stranger()})


# Text where bytes belong and bytes where text belongs: the mistakes a caller makes.
SWAPPED: list[Any] = [
    ("nfp", "Ready", {"service": b"echo"}),
    ("nfp", "Post", {"uuid": 7}),
    ("nfp", "Post", {"client": "w1"}),
    ("nfp", "Response", {"status": "200"}),
    ("nfp", "Response", {"status": True}),
    ("dbp", "Heartbeat", {"service": b"echo"}),
    ("memodb", "Job", {"service": b"echo"}),
    ("dcp", "Registration", {"service": "echo"}),
    ("dcp", "Request", {"client": "c1"}),
    ("sada", "Req", {"service": b"echo"}),
]


@pytest.mark.parametrize(("protocol", "type_name", "change"), SWAPPED)
def test_text_for_bytes_and_bytes_for_text_are_type_errors(
    protocol: str, type_name: str, change: dict[str, Any]
) -> None:
    (message,) = [m for p, m in MESSAGES if p == protocol and type(m).__name__ == type_name]
    with pytest.raises(TypeError):
        attrs.evolve(message, **change)
