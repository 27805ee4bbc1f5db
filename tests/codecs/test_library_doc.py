"""The plugin example in docs/library.md works as the contracts above it say: run as
written, its codec refuses another protocol's message with EncodeError."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from nfgate.codecs import Codec, dcp
from nfgate.errors import DecodeError, EncodeError

DOC = Path(__file__).resolve().parents[2] / "docs" / "library.md"


def _example() -> types.ModuleType:
    found = re.search(r"```python\n(# myproto/codec\.py\n.*?)```", DOC.read_text(), re.S)
    assert found, "docs/library.md lost its plugin example"
    module = types.ModuleType("myproto_codec")
    exec(
        compile(found.group(1), str(DOC), "exec"), module.__dict__
    )  # the doc is ours: running it is the test
    return module


def test_the_plugin_example_follows_the_codec_contracts() -> None:
    example = _example()
    codec = example.CODEC
    assert isinstance(codec, Codec)
    hello = example.Hello(name=b"bob")
    assert codec.decode(codec.encode(hello)) == hello
    with pytest.raises(EncodeError):
        codec.encode(dcp.Ping())
    with pytest.raises(DecodeError):
        codec.decode([b"HELLO"])
