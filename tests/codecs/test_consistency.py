"""The rules every codec follows alike (docs/library.md, "Rules every codec follows"),
checked over the five codecs at once rather than in each codec's own tests, so that a
codec that drifts from the others fails here.

* A field of the wrong Python type is a ``TypeError`` at construction; a value of the
  right type the wire cannot carry is a ``ValueError``; decoding raises ``DecodeError``
  only.
* An empty service name is accepted on construction, encoded, and decoded back, by
  every codec in every dialect but bcdb's READY (its broker drops such a worker).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from nfgate import codecs
from nfgate.codecs import Message
from nfgate.errors import EncodeError
from tests import vectors

from ..protocols import PROTOCOLS


def _valid_messages() -> list[tuple[str, str, Message]]:
    """(protocol, dialect, message) for every valid golden vector."""
    found: list[tuple[str, str, Message]] = []
    for _, vector in vectors.load():
        if "message" not in vector or vector["protocol"] not in PROTOCOLS:
            continue
        codec = codecs.get(vector["protocol"])
        found.append(
            (vector["protocol"], vector["dialect"], codec.decode(vectors.frames(vector), vector["dialect"]))
        )
    return found


DECODED = _valid_messages()
# One message per (protocol, message class).
MESSAGES = list({(p, m.TYPE): (p, m) for p, _, m in reversed(DECODED)}.values())
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


def _without_service_names(message: Message) -> Message | None:
    """``message`` with every service name it holds made empty (None: it names none)."""
    names = {f.name for f in attrs.fields(type(message))}
    value = getattr(message, "service", None)
    if value is not None:
        return attrs.evolve(message, service=type(value)())
    if "services" in names and message.services:  # type: ignore[attr-defined]
        services = message.services  # type: ignore[attr-defined]
        emptied = tuple(("", s[1]) if isinstance(s, tuple) else "" for s in services)
        return attrs.evolve(message, services=emptied)
    return None


NAMED = [
    pytest.param(protocol, dialect, emptied, id=f"{protocol}-{dialect}-{message.TYPE}-{i}")
    for i, (protocol, dialect, message) in enumerate(DECODED)
    if (emptied := _without_service_names(message)) is not None
]


def test_every_codec_has_messages_naming_a_service() -> None:
    assert {p for p, *_ in (param.values for param in NAMED)} == set(PROTOCOLS)


@pytest.mark.parametrize(("protocol", "dialect", "message"), NAMED)
def test_an_empty_service_name_is_built_encoded_and_decoded(
    protocol: str, dialect: str, message: Message
) -> None:
    codec = codecs.get(protocol)
    if protocol == "memodb" and dialect == "bcdb" and message.TYPE == "READY":
        # bcdb's broker drops a READY naming an empty service: a dialect's rule, said in
        # docs/protocols/memodb.md, not the codec's.
        with pytest.raises(EncodeError, match="must not be empty"):
            codec.encode(message, dialect)
        return
    assert codec.decode(codec.encode(message, dialect), dialect) == message


def test_the_frame_builders_take_an_empty_service_name_as_encode_does() -> None:
    # The broker's hot-path builders make the message classes' checks, no more.
    from nfgate.codecs import dcp, nfp
    from nfgate.codecs.dcp import codec as dcp_codec
    from nfgate.codecs.nfp import codec as nfp_codec

    response = nfp.Response(header=nfp.BROKER, service="", uuid="u", status=200, body=(b"x",))
    assert nfp_codec.response_frames("", "u", 200, (b"x",), "spec") == nfp.encode(response, "spec")
    post = nfp.Post(header=nfp.BROKER, service="", target="any", uuid="u", body=(b"x",))
    frames = nfp_codec.dispatch_frames("u", (b"x",), "spec", service="", target="any")
    assert frames == nfp.encode(post, "spec")
    request = dcp.Request(service=b"", metadata=(b"k",), data=(b"x",))
    assert dcp_codec.request_frames(b"", None, (b"k",), (b"x",), "spec") == dcp.encode(request, "spec")


def _public() -> list[Any]:
    """(qualified name, object) of every name the codec package and modules export."""
    import importlib

    modules = ["nfgate.codecs", "nfgate.codecs._base"] + [f"nfgate.codecs.{p}" for p in PROTOCOLS]
    found = []
    for name in modules:
        module = importlib.import_module(name)
        for attr in module.__all__:
            found.append(pytest.param(module, getattr(module, attr), id=f"{name}.{attr}"))
    return found


@pytest.mark.parametrize(("module", "obj"), _public())
def test_every_public_name_says_what_it_raises(module: Any, obj: Any) -> None:
    import inspect

    if not callable(obj) or inspect.ismodule(obj):
        return  # constants, type unions, submodules
    if isinstance(obj, type) and issubclass(obj, Message) and obj is not Message:
        # Message classes: the Message base and each messages module say it once for all.
        doc = inspect.getmodule(obj).__doc__ or ""  # type: ignore[union-attr]
        assert "TypeError" in doc and "ValueError" in doc and "DecodeError" in doc
        return
    doc = (obj.__doc__ if isinstance(obj, type) else inspect.getdoc(obj)) or ""
    assert "raise" in doc.lower(), f"{obj!r}: the docstring does not say what it raises"
    if isinstance(obj, type):
        for name, member in vars(obj).items():
            if callable(member) and not name.startswith("_"):
                assert "raise" in (member.__doc__ or "").lower(), f"{obj.__name__}.{name}"
