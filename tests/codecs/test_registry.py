"""The registry's ``Codec`` contract (docs/library.md): only ``None`` means "detect" or
"the spec's dialect"; any other name the codec lacks, the empty one too, is a
``ConfigError``. And the shared frame helpers keep their promises on peer input."""

from __future__ import annotations

import pytest

from nfgate import codecs
from nfgate.codecs import _base, dcp
from nfgate.errors import ConfigError, DecodeError

from ..protocols import PROTOCOLS


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_empty_dialect_is_unknown(protocol: str) -> None:
    codec = codecs.get(protocol)
    message = codec.messages[0]
    with pytest.raises(ConfigError, match="unknown dialect ''"):
        codec.decode([b""], "")
    with pytest.raises(ConfigError, match="unknown dialect ''"):
        codec.encode(message, "")  # type: ignore[arg-type]  # the dialect is refused first


def test_none_still_means_detect_and_default() -> None:
    codec = codecs.get("dcp")
    frames = [b"", b"DGBX\x01", b"\x02"]
    assert codec.decode(frames, None) == dcp.Ping()
    assert codec.encode(dcp.Ping(), None) == frames
    assert codec.to_json(dcp.Ping())["dialect"] == "spec"
    with pytest.raises(ConfigError):
        codec.to_json(dcp.Ping(), "")


def test_ascii_int_refuses_more_digits_than_int_reads() -> None:
    assert _base.ascii_int("x", b"0042", "n") == 42
    with pytest.raises(DecodeError, match="too many digits"):
        _base.ascii_int("x", b"1" * 5000, "n")
