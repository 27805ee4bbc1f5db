"""Safir-Darbaan specifics the generic codec tests do not reach: the msgpack payload
helpers, PIRAN's request ids and identities, version-frame preservation, dialect
detection and message validation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfgate import codecs
from nfgate.codecs import dcp, sada
from nfgate.codecs.sada import payload
from nfgate.codecs.sada import session as sada_session
from nfgate.errors import ConfigError, DecodeError, EncodeError

CODEC = codecs.get("sada")

# --- msgpack payload helpers -----------------------------------------------------------

msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(msgpack_values)
def test_pack_unpack_roundtrip(value: Any) -> None:
    assert payload.unpack(payload.pack(value)) == value


def test_pack_uses_bin_and_str_types() -> None:
    assert payload.pack({"name": "Isa"}) == bytes.fromhex("81a46e616d65a3497361")
    assert payload.pack(b"\x00") == b"\xc4\x01\x00"  # bin 8, not raw str


@pytest.mark.parametrize("value", [object(), 2**64, -(2**63) - 1])
def test_pack_rejects_what_msgpack_cannot_hold(value: Any) -> None:
    with pytest.raises(EncodeError) as info:
        payload.pack(value)
    assert info.value.protocol == "sada"


def test_pack_rejects_a_self_referencing_container() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(EncodeError):
        payload.pack(loop)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\x92\x01", "not valid msgpack"),  # array of 2, one element present
        (b"\x01\x02", "1 trailing byte"),
        (b"\xc1", "not valid msgpack"),  # the one never-used type byte
        (b"\xa2\xff\xfe", "not valid msgpack"),  # str that is not UTF-8
        (b"\x81\x01\x02", "not valid msgpack"),  # int map key under strict_map_key
        (b"\x91" * 5000 + b"\xc0", "not valid msgpack"),  # nested too deep
        (b"\xd6\xff\x00", "not valid msgpack"),  # truncated timestamp extension
        (b"\xdd\xff\xff\xff\xff", "not valid msgpack"),  # array claiming 4G elements
    ],
)
def test_unpack_rejects_bad_msgpack_with_decode_error(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        payload.unpack(data)
    assert info.value.protocol == "sada"
    assert reason in info.value.reason


def test_unpack_limits_and_types() -> None:
    with pytest.raises(DecodeError, match="exceeds"):
        payload.unpack(payload.pack("x" * 100), max_size=50)
    with pytest.raises(DecodeError, match="must be bytes"):
        payload.unpack("81a0")  # type: ignore[arg-type]
    assert payload.unpack(b"\x81\x01\x02", strict_map_key=False) == {1: 2}
    assert payload.unpack(bytearray(b"\x93\x01\x02\x03")) == [1, 2, 3]


@given(st.binary(max_size=64))
def test_unpack_raises_only_decode_error(data: bytes) -> None:
    try:
        payload.unpack(data)
    except DecodeError as exc:
        assert exc.protocol == "sada" and exc.reason


def test_codec_never_touches_the_payload() -> None:
    not_msgpack = b"\xc1\xc1 not msgpack"
    frames = [b"", b"SADA1", b"REP", b"1", b"200", not_msgpack]
    assert CODEC.decode(frames) == sada.Rep(request_id="1", status=200, payload=not_msgpack)


# --- PIRAN request ids ----------------------------------------------------------------


def test_new_request_id_matches_hand_computed_piran_ids() -> None:
    # sum("RQ") + sum("AAAAAAAA") = 163 + 520 = 683; ('0' + 683) % 36 = 11 -> 'q'
    assert sada.new_request_id("RQ", 0, "AAAAAAAA") == "RQ-0-AAAAAAAA-Q"
    # '1', '2', '3' -> 12, 13, 14 -> 'z', 'h', 'b'
    assert sada.new_request_id("RQ", 123, "AAAAAAAA") == "RQ-123-AAAAAAAA-ZHB"
    assert (
        sada.new_request_id("RQ", 1_700_000_000_000, "AB12CD34") == "RQ-1700000000000-AB12CD34-0O77777777777"
    )


def test_new_request_id_uppercases_rand_as_darbaan_does() -> None:
    assert sada.new_request_id("RQ", 123, "aaaaaaaa") == "RQ-123-AAAAAAAA-ZHB"


def test_new_request_id_is_pure() -> None:
    assert sada.new_request_id("RQ", 42, "Z9Z9Z9Z9") == sada.new_request_id("RQ", 42, "Z9Z9Z9Z9")


@pytest.mark.parametrize(
    ("prefix", "millis", "rand", "error"),
    [
        ("R-Q", 1, "AAAAAAAA", ValueError),
        ("", 1, "AAAAAAAA", ValueError),
        ("RQ", -1, "AAAAAAAA", ValueError),
        ("RQ", 1, "AAAAAAA", ValueError),
        ("RQ", 1, "AAAA-AAA", ValueError),
        ("RQ", 1, "ÄAAAAAAA", ValueError),
        ("RQ", True, "AAAAAAAA", TypeError),
        ("RQ", "1", "AAAAAAAA", TypeError),
    ],
)
def test_new_request_id_rejects_bad_parts(
    prefix: str, millis: Any, rand: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        sada.new_request_id(prefix, millis, rand)


@given(
    prefix=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh0123456789_.", min_size=1, max_size=8),
    millis=st.integers(min_value=0, max_value=2**63 - 1),
    rand=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=8, max_size=8),
)
def test_parse_inverts_new_request_id(prefix: str, millis: int, rand: str) -> None:
    text = sada.new_request_id(prefix, millis, rand)
    parsed = sada.parse_piran_request_id(text)
    assert (parsed.prefix, parsed.millis, parsed.rand) == (prefix, millis, rand)
    assert len(parsed.checksum) == len(str(millis))
    assert str(parsed) == text


def test_checksum_counts_utf16_code_units_like_java() -> None:
    # U+1F600 is two UTF-16 units (0xD83D, 0xDE00) in Java's String.chars().
    assert sada.piran_checksum("\U0001f600", "0", "") == sada.piran_checksum("", "0", "\ud83d\ude00")
    total = 0xD83D + 0xDE00
    expected = "jsoefaumgcxqzhbntpkdyvliwr5946170382"[(ord("0") + total) % 36].upper()
    assert sada.piran_checksum("\U0001f600", "0", "") == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("RQ-0-AAAAAAAA-X", "checksum mismatch"),
        ("RQ-0-AAAAAAAA", "not a PIRAN request id"),
        ("RQ-0-AAAAAAAA-Q-1", "not a PIRAN request id"),
        ("RQ--AAAAAAAA-Q", "not a PIRAN request id"),
        ("RQ-1e3-AAAAAAAA-Q", "millis is not decimal"),
        ("RQ-0-AAAA-Q", "random part"),
        ("12345678", "not a PIRAN request id"),
    ],
)
def test_parse_piran_request_id_rejects(text: str, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        sada.parse_piran_request_id(text)
    assert reason in info.value.reason


def test_parse_without_verification_keeps_a_bad_checksum() -> None:
    parsed = sada.parse_piran_request_id("RQ-0-AAAAAAAA-X", verify=False)
    assert parsed == sada.PiranRequestId(prefix="RQ", millis=0, rand="AAAAAAAA", checksum="X")


# --- version frame ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [
        [b"INTR", b"example-service", b"1.2"],
        [b"RINTR"],
        [b"REQ", b"1", b"svc", b"", b"cat", b"act", b"body"],
        [b"REP", b"1", b"200", b"body"],
        [b"PING"],
        [b"PONG"],
    ],
)
@pytest.mark.parametrize("proto", [b"SADA1", b"SADA\x01"])
def test_version_frame_form_is_kept(proto: bytes, tail: list[bytes]) -> None:
    wire = [b"", proto, *tail]
    message = CODEC.decode(wire)
    assert getattr(message, "proto") == proto  # noqa: B009 - every SADA message has it
    assert CODEC.encode(message) == wire


def test_reply_goes_out_in_the_form_the_request_used() -> None:
    request = CODEC.decode([b"", b"SADA\x01", b"PING"])
    assert isinstance(request, sada.Ping)
    assert CODEC.encode(sada.Pong(proto=request.proto)) == [b"", b"SADA\x01", b"PONG"]


def test_default_version_frame_is_ascii() -> None:
    assert sada.Ping().proto == b"SADA1"
    assert CODEC.encode(sada.Rintr()) == [b"", b"SADA1", b"RINTR"]
    message, _ = CODEC.from_json({"type": "PING"})
    assert message == sada.Ping(proto=b"SADA1")


@pytest.mark.parametrize("proto", [b"SADA2", b"SADA", b"sada1", b""])
def test_other_version_frames_are_refused_at_construction(proto: bytes) -> None:
    with pytest.raises(ValueError, match="SADA1"):
        sada.Ping(proto=proto)


def test_piran_dialect_writes_only_ascii_version() -> None:
    with pytest.raises(EncodeError, match="SADA1"):
        CODEC.encode(sada.Ping(proto=b"SADA\x01"), "piran")


# --- dialects ---------------------------------------------------------------------------


def test_rep_status_per_dialect() -> None:
    rep = sada.Rep(request_id="1", status=503, payload=b"")
    assert CODEC.encode(rep, "spec")[4] == b"503"
    assert CODEC.encode(rep, "piran")[4] == b"\x00\x00\x01\xf7"


@pytest.mark.parametrize(
    ("frames", "dialect"),
    [
        ([b"", b"SADA1", b"REP", b"1", b"\x00\x00\x00\xc8", b""], "piran"),
        ([b"", b"SADA1", b"REP", b"1", b"200", b""], "spec"),
        ([b"", b"SADA1", b"REP", b"1", b"2000", b""], "spec"),  # four ASCII digits: not PIRAN
        ([b"", b"SADA1", b"REQ", b"1", b"\x00\x00\x00\xc8", b"", b"", b"", b""], "spec"),
        ([b"", b"SADA1", b"PING"], "spec"),
        ([b"", b"SADA1", b"REP"], "spec"),
        ([], "spec"),
    ],
)
def test_detect(frames: list[bytes], dialect: str) -> None:
    assert CODEC.detect(frames) == dialect


def test_piran_status_range_is_checked() -> None:
    with pytest.raises(DecodeError, match="status 600"):
        CODEC.decode([b"", b"SADA1", b"REP", b"1", (600).to_bytes(4, "big"), b""], "piran")


# --- identities -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "dialect", "identity"),
    [
        ("tcp://127.0.0.1:5055", "spec", b"tcp://127.0.0.1:5055"),
        ("tcp://127.0.0.1:5055", "piran", b"127.0.0.1:5055"),
        ("127.0.0.1:5055", "spec", b"tcp://127.0.0.1:5055"),
        ("127.0.0.1:5055", "piran", b"127.0.0.1:5055"),
        ("tcp://gw.example:5055", "piran", b"gw.example:5055"),
        ("tcp://[::1]:5055", "piran", b"::1:5055"),
    ],
)
def test_channel_identity(endpoint: str, dialect: str, identity: bytes) -> None:
    assert sada.channel_identity(endpoint, dialect) == identity


def test_channel_identity_defaults_to_the_spec_form() -> None:
    assert sada.channel_identity("tcp://192.168.55.162:5055") == b"tcp://192.168.55.162:5055"


@pytest.mark.parametrize(
    "endpoint",
    [
        "tcp://*:5055",
        "tcp://0.0.0.0:5055",
        "tcp://127.0.0.1",
        "tcp://127.0.0.1:0",
        "ipc:///tmp/x",
        "tcp://h:99999",
    ],
)
def test_channel_identity_needs_a_public_tcp_endpoint(endpoint: str) -> None:
    with pytest.raises(ValueError):
        sada.channel_identity(endpoint, "piran")


def test_identity_helpers_reject_unknown_dialects() -> None:
    with pytest.raises(ConfigError):
        sada.channel_identity("tcp://127.0.0.1:5055", "norfab")
    with pytest.raises(ConfigError):
        sada.server_identity("tcp://127.0.0.1:5055", "norfab")


def test_server_identity() -> None:
    assert sada.server_identity("tcp://10.0.0.7:6000", "spec") is None  # "MUST not set an identity"
    assert sada.server_identity("tcp://10.0.0.7:6000", "piran") == b"10.0.0.7:6000"


@pytest.mark.parametrize(
    ("identity", "endpoint"),
    [
        (b"tcp://10.0.0.1:5055", "tcp://10.0.0.1:5055"),
        (b"10.0.0.1:5055", "tcp://10.0.0.1:5055"),
        (b"::1:5055", "tcp://[::1]:5055"),
    ],
)
def test_identity_endpoint(identity: bytes, endpoint: str) -> None:
    assert sada.identity_endpoint(identity) == endpoint


@pytest.mark.parametrize("identity", [b"\x00k\x8b\x45\x67", b"", b"no-port", b"\xff:1"])
def test_identity_endpoint_rejects_random_identities(identity: bytes) -> None:
    with pytest.raises(DecodeError):
        sada.identity_endpoint(identity)


# --- message validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "fields", "error"),
    [
        (sada.Intr, {"services": "ab"}, TypeError),
        (sada.Intr, {"services": [("a",)]}, TypeError),
        (sada.Intr, {"services": [("\t", "1")]}, ValueError),
        (sada.Intr, {"services": [("a", 1)]}, TypeError),
        (sada.Intr, {"services": [("a", "1\n")]}, ValueError),
        (sada.Rep, {"request_id": "1", "status": True}, TypeError),
        (sada.Rep, {"request_id": "1", "status": 99}, ValueError),
        (sada.Rep, {"request_id": "1", "status": 600}, ValueError),
        (sada.Rep, {"request_id": "", "status": 200}, ValueError),
        (sada.Rep, {"request_id": "1", "status": 200, "payload": "text"}, TypeError),
        (sada.Req, {"request_id": "1\x00", "service": "s", "category": "c", "action": "a"}, ValueError),
        (sada.Req, {"request_id": "1", "service": "s", "category": "", "action": "a"}, ValueError),
        (sada.Req, {"request_id": "1", "service": b"s", "category": "c", "action": "a"}, TypeError),
        (sada.Ping, {"proto": "SADA1"}, TypeError),
    ],
)
def test_messages_are_validated_at_construction(
    cls: type[sada.SadaMessage], fields: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        cls(**fields)


def test_intr_services_become_tuples() -> None:
    intr = sada.Intr(services=[["a", "1"], ("b", "")])
    assert intr.services == (("a", "1"), ("b", ""))
    assert CODEC.encode(intr) == [b"", b"SADA1", b"INTR", b"a", b"1", b"b", b""]


def test_req_version_defaults_to_any() -> None:
    req = sada.Req(request_id="1", service="echo", category="c", action="a")
    assert req.version == "" and req.payload == b""
    assert CODEC.encode(req)[5] == b""


def test_encode_refuses_other_protocols_messages() -> None:
    with pytest.raises(EncodeError, match="not a Safir-Darbaan message"):
        CODEC.encode(dcp.Ping())


def test_json_form_names_the_fields() -> None:
    rep = CODEC.decode([b"", b"SADA1", b"REP", b"12345678", b"\x00\x00\x00\xc8", b"{}"])
    assert CODEC.to_json(rep, "piran") == {
        "protocol": "sada",
        "dialect": "piran",
        "type": "REP",
        "proto": "5341444131",
        "request_id": "12345678",
        "status": 200,
        "payload": "7b7d",
    }


# --- review fixes: ids as sent, long millis, identities both ways ------------------------


@pytest.mark.parametrize("millis", ["007", "0", "0000000000000000001", "1700000000000"])
def test_a_parsed_request_id_prints_as_it_was_sent(millis: str) -> None:
    text = f"RQ-{millis}-ABCDEFGH-{sada.piran_checksum('RQ', millis, 'ABCDEFGH')}"
    parsed = sada.parse_piran_request_id(text)
    assert str(parsed) == text
    assert parsed.millis == int(millis)
    assert sada.parse_piran_request_id(str(parsed)) == parsed


def test_request_ids_that_differ_in_leading_zeros_differ() -> None:
    a = sada.parse_piran_request_id("RQ-007-AAAAAAAA-X", verify=False)
    b = sada.parse_piran_request_id("RQ-7-AAAAAAAA-X", verify=False)
    assert a.millis == b.millis and a != b


@pytest.mark.parametrize("millis", ["1" * 4301, "1" * 20, "9223372036854775808"])
def test_millis_beyond_a_java_long_is_a_decode_error(millis: str) -> None:
    rid = f"RQ-{millis}-ABCDEFGH-{sada.piran_checksum('RQ', millis, 'ABCDEFGH')}"
    with pytest.raises(DecodeError, match="Java long"):
        sada.parse_piran_request_id(rid)
    with pytest.raises(DecodeError, match="Java long"):
        sada.parse_piran_request_id(f"RQ-{millis}-ABCDEFGH-X", verify=False)
    assert sada_session.piran_evidence(request_id=rid) is False


def test_new_request_id_stays_within_a_java_long() -> None:
    assert sada.parse_piran_request_id(sada.new_request_id("RQ", 2**63 - 1, "AAAAAAAA")).millis == 2**63 - 1
    with pytest.raises(ValueError):
        sada.new_request_id("RQ", 2**63, "AAAAAAAA")


def test_piran_request_id_checks_its_millis_text() -> None:
    with pytest.raises(ValueError):
        sada.PiranRequestId(prefix="RQ", millis=7, rand="AAAAAAAA", checksum="X", millis_text="8")
    assert str(sada.PiranRequestId(prefix="RQ", millis=7, rand="AAAAAAAA", checksum="X")) == "RQ-7-AAAAAAAA-X"


@pytest.mark.parametrize(
    "endpoint", ["\x96:86", "tcp://h\x00st:80", "tcp://\ud800:80", "tcp://h:" + "1" * 5000]
)
@pytest.mark.parametrize("dialect", ["spec", "piran"])
def test_channel_identity_refuses_what_identity_endpoint_cannot_read(endpoint: str, dialect: str) -> None:
    with pytest.raises(ValueError):
        sada.channel_identity(endpoint, dialect)
    with pytest.raises(ValueError):
        sada.server_identity(endpoint, dialect)


@given(
    endpoint=st.text(alphabet=st.sampled_from("tcp:/[]*0.1h: \x96\x00"), max_size=14)
    | st.text(max_size=8).map(lambda h: f"tcp://{h}:5055"),
    dialect=st.sampled_from(["spec", "piran"]),
)
def test_identity_endpoint_reads_every_channel_identity(endpoint: str, dialect: str) -> None:
    try:
        identity = sada.channel_identity(endpoint, dialect)
    except ValueError:
        return
    sada.identity_endpoint(identity)


@given(st.text(alphabet="0123456789-RQAB", max_size=30))
def test_piran_evidence_never_raises(request_id: str) -> None:
    sada_session.piran_evidence(request_id=request_id, identity=request_id.encode())
