"""DBP-specific unit tests: time parts, dialect detection, the Hermes dialect, service
information helpers and the UDP datagrams. The generic vector, round-trip and robustness
tests cover the frame codec as a whole."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfgate import codecs
from nfgate.codecs import Message, dbp
from nfgate.errors import DecodeError, EncodeError

from ..strategies._common import printable_text

T = 1732251000.0
HERMES_T = struct.pack("<f", 1732251008.0)


def test_registry_returns_this_codec() -> None:
    assert codecs.get("dbp") is dbp.CODEC
    assert dbp.CODEC.dialects == ("spec", "hermes")
    assert {cls.TYPE for cls in dbp.CODEC.messages} == {
        "REQUEST",
        "REPLY",
        "REGISTRATION",
        "UPDATE",
        "APPROVED",
        "DENIED",
        "HEARTBEAT",
        "DISCONNECT",
        "ACK",
    }


# -- time parts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (b"1732251000", 1732251000.0),
        (b"1732251000.123", 1732251000.123),
        (b"0", 0.0),
        (b"0.5", 0.5),
        (b"01732251000", 1732251000.0),  # not canonical, still accepted
        (b"1732251000.000", 1732251000.0),
    ],
)
def test_time_text_int_and_float_forms(text: bytes, seconds: float) -> None:
    assert dbp.decode_time(text) == seconds
    message = dbp.decode([b"", b"u.u", text])
    assert isinstance(message, dbp.Ack)
    assert message.time == seconds
    assert isinstance(message.time, float)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (1732251000.0, b"1732251000"),
        (1732251000.123, b"1732251000.123"),
        (0.0, b"0"),
        (0.1, b"0.1"),
        (1e-05, b"0.00001"),  # repr says "1e-05": the wire never uses exponents
        (1e20, b"100000000000000000000"),
    ],
)
def test_time_text_is_canonical(seconds: float, text: bytes) -> None:
    assert dbp.encode_time(seconds) == text
    assert dbp.encode(dbp.Ack(time=seconds)) == [b"", b"u.u", text]


@given(st.floats(min_value=0, allow_nan=False, allow_infinity=False))
def test_time_text_reads_back_exactly(seconds: float) -> None:
    text = dbp.encode_time(seconds)
    assert b"e" not in text and b"-" not in text
    assert dbp.decode_time(text) == seconds


@pytest.mark.parametrize(
    "text", [b"", b"-1", b"+1", b"1e9", b"1.", b".5", b"1,5", b" 1", b"1 ", b"nan", b"inf", b"\xd9\xa1"]
)
def test_time_text_rejects(text: bytes) -> None:
    with pytest.raises(DecodeError, match="not ASCII decimal epoch seconds"):
        dbp.decode_time(text)


def test_time_text_too_large_for_a_float_is_rejected() -> None:
    with pytest.raises(DecodeError, match="not a finite number"):
        dbp.decode_time(b"9" * 400)


def test_hermes_time_is_little_endian_float32() -> None:
    assert dbp.encode_time(1732251008.0, "hermes") == HERMES_T == bytes.fromhex("1b80ce4e")
    assert dbp.decode_time(HERMES_T, "hermes") == 1732251008.0
    # Like Hermes's own struct.pack("f", time.time()), encoding rounds to float32.
    assert dbp.encode_time(T, "hermes") == HERMES_T


def test_hermes_time_errors() -> None:
    with pytest.raises(EncodeError, match="float32"):
        dbp.encode_time(1e39, "hermes")
    with pytest.raises(DecodeError, match="4 bytes"):
        dbp.decode_time(b"1732251000", "hermes")
    with pytest.raises(DecodeError, match="negative"):
        dbp.decode_time(struct.pack("<f", -0.0), "hermes")


@pytest.mark.parametrize("seconds", [-1.0, math.nan, math.inf, -1, 10**400, True, "1"])
def test_encode_time_rejects_what_no_dialect_can_say(seconds: Any) -> None:
    with pytest.raises(EncodeError):
        dbp.encode_time(seconds)


def test_encode_time_takes_ints() -> None:
    assert dbp.encode_time(1732251000) == b"1732251000"
    assert dbp.encode_time(1732251008, "hermes") == HERMES_T


# -- message construction ------------------------------------------------------------


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -math.inf, -1.0])
def test_time_must_be_finite_and_non_negative(seconds: float) -> None:
    with pytest.raises(ValueError):
        dbp.Ack(time=seconds)


@pytest.mark.parametrize("seconds", [True, "1732251000", None, b"1"])
def test_time_must_be_a_number(seconds: Any) -> None:
    with pytest.raises(TypeError):
        dbp.Ack(time=seconds)


def test_time_is_normalised_to_float() -> None:
    assert dbp.Ack(time=1732251000).time == 1732251000.0
    assert isinstance(dbp.Ack(time=1732251000).time, float)
    assert math.copysign(1, dbp.Ack(time=-0.0).time) == 1


def test_message_field_validation() -> None:
    with pytest.raises(ValueError, match="non-printable"):
        dbp.Request(time=T, query="echo\n")
    with pytest.raises(TypeError):
        dbp.Request(time=T, query=b"echo")  # type: ignore[arg-type]
    assert dbp.Heartbeat(time=T, service="").service == ""  # as in every codec (test_consistency)
    with pytest.raises(ValueError, match="empty"):
        dbp.Registration(time=T, info=())
    with pytest.raises(TypeError):
        dbp.Denied(time=T, reasons=("why",))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        dbp.Reply(time=T, info="{}")  # type: ignore[arg-type]
    assert dbp.Request(time=T, query="").query == ""
    assert dbp.Approved(time=T, changes=[b"{}"]).changes == (b"{}",)


def test_encode_refuses_foreign_messages() -> None:
    class Other(Message):
        TYPE = "OTHER"

    with pytest.raises(EncodeError, match="not a DBP message"):
        dbp.encode(Other())


# -- dialects --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "dialect"),
    [
        ([b"", b"u.u", b"1732251000"], "spec"),
        ([b"", b"u.u", b"1234"], "spec"),  # four ASCII digits
        ([b"", b"u.u", b"12.5"], "spec"),
        ([b"", b"u.u", HERMES_T], "hermes"),
        ([b"", b"OmO", b"1732251000"], "hermes"),  # the tag alone decides
        ([b"", b"u.u", b"1234"[:3] + b"x"], "hermes"),
        ([b"", b"OmO"], "hermes"),
        ([], "spec"),
        ([b""], "spec"),
        ([b"", b"u.u"], "spec"),
    ],
)
def test_detect(frames: list[bytes], dialect: str) -> None:
    assert dbp.detect(frames) == dialect
    assert dbp.CODEC.detect(frames) == dialect


def test_hermes_approved_is_four_frames_with_an_empty_last_one() -> None:
    assert dbp.encode(dbp.Approved(time=1732251008.0), "hermes") == [b"", b"OwO", HERMES_T, b""]
    assert dbp.encode(dbp.Approved(time=1732251008.0)) == [b"", b"OwO", b"1732251008"]
    with pytest.raises(EncodeError, match="no configuration changes"):
        dbp.encode(dbp.Approved(time=T, changes=(b"{}",)), "hermes")


def test_denied_tag_per_dialect() -> None:
    denied = dbp.Denied(time=1732251008.0, reasons=(b"no",))
    assert dbp.encode(denied)[1] == b"(O_O)"
    assert dbp.encode(denied, "hermes")[1] == b"OmO"
    assert dbp.decode([b"", b"OmO", HERMES_T, b"no"]) == denied


def test_decode_errors_name_the_message_type_and_frame() -> None:
    with pytest.raises(DecodeError) as info:
        dbp.decode([b"", b"<3", b"1732251000", b"\x00"])
    assert info.value.protocol == "dbp"
    assert "HEARTBEAT frame 3 (service name)" in info.value.reason


def test_json_form() -> None:
    reply = dbp.Reply(time=1732251000.5, info=b"{}")
    obj = dbp.CODEC.to_json(reply)
    assert obj == {
        "protocol": "dbp",
        "dialect": "spec",
        "type": "REPLY",
        "time": 1732251000.5,
        "info": "7b7d",
    }
    assert dbp.CODEC.from_json(obj) == (reply, "spec")


# -- service information -----------------------------------------------------------


SPEC_INFO = {"name": "echo", "ip": "127.0.0.1", "port": 5300, "function": "echo", "heartbeat": 5}
HERMES_INFO = {
    "name": "Rohan",
    "interfaces": {"router": {"ip": "10.0.0.7", "port": 5301}},
    "reg_time": "Fri Nov 22 04:50:00 2024",
    "topics": None,
}


def test_service_info_from_each_carrier() -> None:
    data = json.dumps(SPEC_INFO).encode()
    assert dbp.service_info(data) == SPEC_INFO
    assert dbp.service_info(dbp.Reply(time=T, info=data)) == SPEC_INFO
    assert dbp.service_info(dbp.Registration(time=T, info=(data,))) == SPEC_INFO
    assert dbp.service_info(dbp.Update(time=T, info=(b'{"heartbeat":', b" 10}"))) == {"heartbeat": 10}
    assert dbp.service_info([data[:5], data[5:]]) == SPEC_INFO
    assert dbp.missing_required(dbp.service_info(data)) == []


def test_hermes_registration_is_mapped_to_the_spec_keys() -> None:
    frames = [b"", b"UwU", HERMES_T, json.dumps(HERMES_INFO).encode()]
    registration = dbp.decode(frames)
    assert isinstance(registration, dbp.Registration)
    assert dbp.detect(frames) == "hermes"
    info = dbp.service_info(registration)
    assert info["name"] == "Rohan"
    assert info["ip"] == "10.0.0.7"
    assert info["port"] == 5301
    # unknown keys are kept, Hermes's own included
    assert info["interfaces"] == HERMES_INFO["interfaces"]
    assert info["reg_time"] == HERMES_INFO["reg_time"]
    assert "topics" in info
    assert dbp.missing_required(info) == ["function", "heartbeat"]
    # the message itself is untouched: bodies are never re-serialised
    assert dbp.encode(registration, "hermes") == frames


def test_hermes_mapping_does_not_override_spec_keys() -> None:
    info = dbp.service_info(json.dumps({**SPEC_INFO, **HERMES_INFO, "name": "echo"}).encode())
    assert (info["ip"], info["port"]) == ("127.0.0.1", 5300)


@pytest.mark.parametrize(
    "interfaces", [None, "router", {"router": "127.0.0.1:1"}, {"dealer": {"ip": "x", "port": 1}}, []]
)
def test_odd_interfaces_are_left_alone(interfaces: Any) -> None:
    info = dbp.service_info(json.dumps({"name": "x", "interfaces": interfaces}).encode())
    assert info == {"name": "x", "interfaces": interfaces}
    assert dbp.missing_required(info) == ["ip", "port", "function", "heartbeat"]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b'{"a": NaN}', "not JSON"),
        # Valid JSON syntax, but inf as a float: it would go back out as Infinity (not JSON).
        (b'{"a": 1e999}', "not JSON"),
        (b'{"a": 1} {}', "not JSON"),
        (b"\xff{}", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (b'"echo"', "must be a JSON object, got str"),
        (b"null", "must be a JSON object, got NoneType"),
        (b"[" * 100_000, "not JSON"),
    ],
)
def test_service_info_rejects(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason) as info:
        dbp.service_info(data)
    assert info.value.protocol == "dbp"


def test_missing_required_keeps_spec_order() -> None:
    assert dbp.missing_required({}) == ["name", "ip", "port", "function", "heartbeat"]
    assert dbp.missing_required({"port": 1, "name": "x"}) == ["ip", "function", "heartbeat"]
    assert dbp.REQUIRED_KEYS == ("name", "ip", "port", "function", "heartbeat")


def test_make_info() -> None:
    data = dbp.make_info(name="echo", ip="127.0.0.1", port=5300, function="echo", heartbeat=5, topics=["a"])
    assert (
        data == b'{"name":"echo","ip":"127.0.0.1","port":5300,"function":"echo","heartbeat":5,"topics":["a"]}'
    )
    assert dbp.service_info(data) == {**SPEC_INFO, "topics": ["a"]}
    assert dbp.make_info(name="caf\u00e9", ip="::1", port=1, function="", heartbeat=0.5).decode("utf-8")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"port": 0}, ValueError),
        ({"port": 65536}, ValueError),
        ({"port": True}, TypeError),
        ({"port": "5300"}, TypeError),
        ({"heartbeat": 0}, ValueError),
        ({"heartbeat": math.nan}, ValueError),
        ({"heartbeat": "5"}, TypeError),
        ({"name": ""}, ValueError),
        ({"name": 1}, TypeError),
        ({"ip": None}, TypeError),
        ({"extra": math.inf}, ValueError),
        ({"extra": object()}, ValueError),  # a value JSON cannot hold, as the docstring says
    ],
)
def test_make_info_rejects(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        dbp.make_info(**{**SPEC_INFO, **kwargs})


# -- UDP datagrams -------------------------------------------------------------------


def test_heartbeat_datagram() -> None:
    heartbeat = dbp.Heartbeat(time=1732251000.5, service="echo")
    assert dbp.encode_heartbeat_datagram(heartbeat) == b"<3 1732251000.5 echo"
    assert dbp.decode_heartbeat_datagram(b"<3 1732251000.5 echo") == heartbeat
    assert dbp.decode_heartbeat_datagram(bytearray(b"<3 1732251000 echo")) == dbp.Heartbeat(
        time=T, service="echo"
    )
    # the name runs to the end of the datagram, spaces included
    assert dbp.decode_heartbeat_datagram(b"<3 0 my service").service == "my service"
    # ...and may be empty, as a HEARTBEAT's service frame may
    assert dbp.decode_heartbeat_datagram(b"<3 0 ") == dbp.Heartbeat(time=0, service="")
    assert dbp.encode_heartbeat_datagram(dbp.Heartbeat(time=0, service="")) == b"<3 0 "


def test_heartbeat_datagram_is_the_frames_after_the_delimiter() -> None:
    heartbeat = dbp.Heartbeat(time=1732251000.123, service="echo")
    assert dbp.encode_heartbeat_datagram(heartbeat) == b" ".join(dbp.encode(heartbeat)[1:])


@given(
    st.builds(
        dbp.Heartbeat,
        time=st.floats(min_value=0, allow_nan=False, allow_infinity=False),
        service=printable_text | st.just("a b"),
    )
)
def test_heartbeat_datagram_roundtrip(heartbeat: dbp.Heartbeat) -> None:
    assert dbp.decode_heartbeat_datagram(dbp.encode_heartbeat_datagram(heartbeat)) == heartbeat


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "must start with"),
        (b"<3", "must start with"),
        (b"</3 1 echo", "must start with"),
        (b"<3 1732251000", "no service name"),
        (b"<3  echo", "not ASCII decimal"),
        (b"<3 1e9 echo", "not ASCII decimal"),
        (b"<3 1 \xff", "not UTF-8"),
        (b"<3 1 echo\n", "non-printable"),
        ("<3 1 echo", "must be bytes"),
    ],
)
def test_heartbeat_datagram_rejects(data: Any, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        dbp.decode_heartbeat_datagram(data)


def test_encode_heartbeat_datagram_wants_a_heartbeat() -> None:
    with pytest.raises(EncodeError):
        dbp.encode_heartbeat_datagram(dbp.Ack(time=T))  # type: ignore[arg-type]


def test_beacon() -> None:
    assert dbp.encode_beacon(5246) == b"SHALOM 5246"
    assert dbp.decode_beacon(b"SHALOM 5246") == 5246
    assert dbp.decode_beacon(memoryview(b"SHALOM 1")) == 1
    assert dbp.BEACON_PORT == 5245
    assert dbp.CATALOG_PORT == 5246


BAD_BEACONS = [b"", b"SHALOM", b"SHALOM ", b"SHALOM 0", b"SHALOM 65536", b"SHALOM 123456", b"SHALOM -1"]
BAD_BEACONS += [b"SHALOM 52 46", b"SHALOM 5246\n", b"shalom 5246", b"SHALOM\t5246", b"SHALOM \xd9\xa1"]


@pytest.mark.parametrize("data", [*BAD_BEACONS, None])
def test_beacon_rejects(data: Any) -> None:
    with pytest.raises(DecodeError):
        dbp.decode_beacon(data)


@pytest.mark.parametrize("port", [0, 65536, -1, True, "5246", 5246.0])
def test_encode_beacon_rejects(port: Any) -> None:
    with pytest.raises(EncodeError):
        dbp.encode_beacon(port)


@given(st.binary(max_size=64))
def test_datagram_decoders_raise_only_decode_error(data: bytes) -> None:
    for decoder in (dbp.decode_heartbeat_datagram, dbp.decode_beacon):
        try:
            decoder(data)
        except DecodeError as exc:
            assert exc.protocol == "dbp"


@given(st.integers(1, 65535))
def test_beacon_roundtrip(port: int) -> None:
    assert dbp.decode_beacon(dbp.encode_beacon(port)) == port


# -- review fixes ------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["spec", "hermes"])
def test_negative_zero_time_is_written_as_zero(dialect: str) -> None:
    frame = dbp.encode_time(-0.0, dialect)
    assert frame == dbp.encode_time(0.0, dialect)
    assert dbp.decode_time(frame, dialect) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [{"name": "\x07"}, {"name": "echo\n"}, {"name": "\u200b"}, {"port": 70000}, {"heartbeat": -1}],
)
def test_make_info_refuses_what_check_registration_denies(kwargs: dict[str, Any]) -> None:
    from nfgate.codecs.dbp.session import check_registration

    info = {**SPEC_INFO, **kwargs}
    assert check_registration(info, "spec", dbp.REQUIRED_KEYS)  # denied...
    with pytest.raises(ValueError):  # ...so not made
        dbp.make_info(**info)


@given(
    name=st.text(max_size=6),
    ip=st.text(max_size=4),
    port=st.integers(-1, 70000),
    function=st.text(max_size=4),
    heartbeat=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2, 2),
)
def test_make_info_and_check_registration_agree(
    name: str, ip: str, port: int, function: str, heartbeat: float
) -> None:
    from nfgate.codecs.dbp.session import check_registration

    try:
        data = dbp.make_info(name=name, ip=ip, port=port, function=function, heartbeat=heartbeat)
    except ValueError:
        info = {"name": name, "ip": ip, "port": port, "function": function, "heartbeat": heartbeat}
        assert check_registration(info, "spec", dbp.REQUIRED_KEYS)
        return
    assert check_registration(dbp.service_info(data), "spec", dbp.REQUIRED_KEYS) == []
