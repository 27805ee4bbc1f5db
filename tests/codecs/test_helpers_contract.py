"""The library's promises beyond ``decode``: the public helpers raise only the project's
errors (DecodeError for bad input, ConfigError for an unknown name), and a message that
exists is immutable (docs/library.md)."""

from __future__ import annotations

from typing import Any

import pytest

from nfgate import codecs
from nfgate.codecs import dbp, dcp, memodb, nfp, sada
from nfgate.errors import ConfigError, DecodeError, EncodeError

NOT_FRAMES: list[Any] = [None, 0, 1.5, object(), [1, 2, 3], "frames"]


@pytest.mark.parametrize("module", [dbp, dcp, memodb, nfp, sada], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("bad", NOT_FRAMES, ids=repr)
def test_each_modules_detect_refuses_what_is_not_frames_with_decode_error(module: Any, bad: Any) -> None:
    # nfgate.codecs.<name>.detect was the raw detector: detect(None) was a TypeError
    # where codecs.get(name).detect(None) was a DecodeError.
    with pytest.raises(DecodeError):
        module.detect(bad)


def test_module_detect_still_names_the_dialect() -> None:
    assert nfp.detect([b"", b"NFPC01", b"0x01", b"echo"]) == "norfab"
    assert nfp.detect([b"", b"NFPC01", b"\x01"]) == "spec"


def test_an_nfp_header_must_be_bytes_not_a_mutable_equal() -> None:
    # bytearray(b"NFPC01") == b"NFPC01": the message took it, could not be hashed, and
    # changed when the bytearray did.
    header = bytearray(nfp.CLIENT)
    with pytest.raises(TypeError, match="header must be bytes"):
        nfp.Post(header=header, service="echo", target="any", uuid="u", body=(b"x",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="header must be one of"):
        nfp.Post(header=b"NFPX01", service="echo", target="any", uuid="u", body=(b"x",))
    post = nfp.Post(header=nfp.CLIENT, service="echo", target="any", uuid="u", body=(b"x",))
    assert hash(post) == hash(
        nfp.Post(header=b"NFPC01", service="echo", target="any", uuid="u", body=(b"x",))
    )


@pytest.mark.parametrize("frame", ["1", None, 1, bytearray(b"1")], ids=repr)
@pytest.mark.parametrize("dialect", ["spec", "hermes"])
def test_decode_time_refuses_what_is_not_bytes_with_decode_error(frame: Any, dialect: str) -> None:
    with pytest.raises(DecodeError, match="must be bytes"):
        dbp.decode_time(frame, dialect)


def test_time_helpers_refuse_an_unknown_dialect() -> None:
    # "HERMES" used to mean the spec's ASCII time, quietly.
    with pytest.raises(ConfigError, match="unknown dialect 'HERMES'"):
        dbp.encode_time(1, "HERMES")
    with pytest.raises(ConfigError, match="unknown dialect 'bogus'"):
        dbp.decode_time(b"1", "bogus")
    assert dbp.decode_time(dbp.encode_time(1.5, "hermes"), "hermes") == 1.5


def test_the_other_public_helpers_raise_only_the_projects_errors() -> None:
    with pytest.raises(ConfigError, match="is a string, not list"):
        codecs.get([])  # type: ignore[arg-type]
    for bad in (None, b"any"):
        with pytest.raises(DecodeError, match="target must be a string"):
            nfp.parse_target(bad)  # type: ignore[arg-type]
    assert nfp.parse_target(" any ") == "any"
    with pytest.raises(DecodeError, match="channel identity must be bytes"):
        sada.identity_endpoint(None)  # type: ignore[arg-type]
    assert sada.identity_endpoint(b"10.0.0.1:5055") == "tcp://10.0.0.1:5055"


def test_the_json_helpers_refuse_what_is_not_theirs() -> None:
    nfp_codec = codecs.get("nfp")
    with pytest.raises(ConfigError, match="a message type is a string"):
        nfp_codec.message_type(None)  # type: ignore[arg-type]
    # Another protocol's message was written out labelled as an NFP one.
    with pytest.raises(EncodeError, match="not a nfp message: Ping"):
        nfp_codec.to_json(dcp.Ping())
    with pytest.raises(EncodeError, match="not a nfp message: object"):
        nfp_codec.to_json(object())  # type: ignore[arg-type]
    assert nfp_codec.to_json(nfp.Ready(service="echo"))["type"] == "READY"


@pytest.mark.parametrize("single", [b"", b"ab", "ab", bytearray(b"ab")], ids=repr)
def test_a_frames_field_given_one_byte_string_is_refused_not_iterated(single: Any) -> None:
    # data=b"" quietly became no frame at all, and b"ab" failed as "must hold bytes, got int".
    with pytest.raises(TypeError, match="expected a sequence of frames, got a single"):
        dcp.Request(service=b"s", data=single)
    with pytest.raises(TypeError, match="expected a sequence of frames, got a single"):
        nfp.Post(header=nfp.CLIENT, service="echo", target="any", uuid="u", body=single)
    assert dcp.Request(service=b"s", data=[b""]).data == (b"",)


@pytest.mark.parametrize("bad", [None, 5, [5], [10**12], ["{}"]], ids=repr)
def test_service_info_refuses_what_is_not_bytes_or_frames(bad: Any) -> None:
    # [10**12] would have been bytes(10**12): a terabyte of zeros.
    with pytest.raises(DecodeError, match="service information"):
        dbp.service_info(bad)
    assert dbp.service_info([b'{"name":', b'"x"}']) == {"name": "x"}
