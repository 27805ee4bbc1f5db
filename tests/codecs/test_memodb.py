"""MemoDB-specific codec tests: deterministic-CBOR rejections, field types, payload
byte-exactness, and the bcdb dialect's constraints. The generic vector, round-trip and
robustness tests cover the rest."""

from __future__ import annotations

import functools
import random
import tracemalloc
from collections.abc import Callable
from typing import Any

import attrs
import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nfgate.codecs import dcp, memodb
from nfgate.codecs.memodb.codec import canonical_order_key
from nfgate.errors import DecodeError, EncodeError

CODEC = memodb.CODEC
V = "666d656d6f3031"  # text(6) "memo01"
ECHO = "646563686f"  # text(4) "echo"
WID = "4401020304"  # bytes(4) 01020304


def wire(*hexparts: str) -> list[bytes]:
    return [bytes.fromhex("".join(hexparts))]


def peak_bytes(call: Callable[[], Any]) -> tuple[Any, int]:
    """``call()``'s result and the most memory Python held for it at any moment (bytes)."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def rejected(frames: list[bytes], dialect: str = "spec") -> str:
    with pytest.raises(DecodeError) as info:
        CODEC.decode(frames, dialect)
    assert info.value.protocol == "memodb"
    return info.value.reason


# ------------------------------------------------------------------- framing


def test_decode_needs_exactly_one_frame() -> None:
    good = CODEC.encode(memodb.Heartbeat(id=b"abcd"))
    assert "exactly one frame" in rejected([])
    assert "exactly one frame" in rejected([*good, b""])
    assert "exactly one frame" in rejected([good[0][:5], good[0][5:]])


def test_encode_returns_one_frame_and_accepts_buffer_types() -> None:
    message = memodb.Job(service="echo", timeout_ms=1, payload=b"xyz")
    frames = CODEC.encode(message)
    assert len(frames) == 1 and isinstance(frames[0], bytes)
    assert CODEC.decode([bytearray(frames[0])]) == message
    assert CODEC.decode([memoryview(frames[0])]) == message


def test_header_is_cbor2_canonical_encoding() -> None:
    message = memodb.Job(id=b"\x00" * 4, service="s\u00e9rvice", timeout_ms=2**40, payload=b"p")
    expected = cbor2.dumps(["memo01", 2, b"\x00" * 4, "s\u00e9rvice", 2**40], canonical=True)
    assert CODEC.encode(message) == [expected + b"p"]


def test_encoding_a_foreign_message_is_an_encode_error() -> None:
    with pytest.raises(EncodeError, match="not a MemoDB message"):
        CODEC.encode(dcp.Ping())


# ------------------------------------------------- deterministic CBOR (RFC 8949 §4.2)

NOT_DETERMINISTIC = "not deterministically encoded"

CANONICAL_REJECTIONS = [
    # non-shortest integers, every argument width
    pytest.param(("83", V, "1804", WID), NOT_DETERMINISTIC, id="type-1-byte-arg"),
    pytest.param(("83", V, "190004", WID), NOT_DETERMINISTIC, id="type-2-byte-arg"),
    pytest.param(("83", V, "1a00000004", WID), NOT_DETERMINISTIC, id="type-4-byte-arg"),
    pytest.param(("83", V, "1b0000000000000004", WID), NOT_DETERMINISTIC, id="type-8-byte-arg"),
    pytest.param(("85", V, "02", "40", ECHO, "1900ff"), NOT_DETERMINISTIC, id="timeout-255-in-2-bytes"),
    pytest.param(("85", V, "02", "40", ECHO, "1a0000ffff"), NOT_DETERMINISTIC, id="timeout-65535-in-4-bytes"),
    pytest.param(
        ("85", V, "02", "40", ECHO, "1b00000000ffffffff"), NOT_DETERMINISTIC, id="timeout-2**32-1-in-8-bytes"
    ),
    # non-shortest lengths
    pytest.param(("83", V, "04", "580401020304"), NOT_DETERMINISTIC, id="bytes-length-1-byte"),
    pytest.param(("83", V, "04", "59000401020304"), NOT_DETERMINISTIC, id="bytes-length-2-bytes"),
    pytest.param(("83", "7806", "6d656d6f3031", "04", WID), NOT_DETERMINISTIC, id="text-length"),
    pytest.param(("9803", V, "04", WID), NOT_DETERMINISTIC, id="array-length"),
    pytest.param(("84", V, "01", "40", "9a00000001", ECHO), NOT_DETERMINISTIC, id="services-length"),
    # indefinite-length items
    pytest.param(("9f", V, "04", WID, "ff"), "indefinite-length array", id="indefinite-array"),
    pytest.param(
        ("83", V, "04", "5f", "420102", "420304", "ff"), "indefinite-length byte", id="indefinite-bytes"
    ),
    pytest.param(
        ("83", "7f", "636d656d", "633031", "ff", "04", WID), "indefinite-length text", id="indefinite-text"
    ),
    pytest.param(
        ("84", V, "01", "40", "9f", ECHO, "ff"), "indefinite-length array", id="indefinite-services"
    ),
    pytest.param(("83", V, "1f", WID), "malformed CBOR", id="integer-with-ai-31"),
    # tags, anywhere
    pytest.param(("d9d9f7", "83", V, "04", WID), "CBOR tag", id="self-describe-tag-prefix"),
    pytest.param(("83", "c1", V, "04", WID), "CBOR tag", id="tagged-version"),
    pytest.param(("83", V, "c204", WID), "CBOR tag", id="bignum-tag-type"),
    pytest.param(("83", V, "04", "d818", WID), "CBOR tag", id="tag-24-id"),
    pytest.param(("84", V, "01", "40", "81", "d820", ECHO), "CBOR tag", id="tagged-service-name"),
    pytest.param(("85", V, "02", "40", ECHO, "c249010000000000000000"), "CBOR tag", id="bignum-timeout"),
    # floats where integers belong
    pytest.param(("83", V, "f93c00", WID), "floating-point", id="half-float-type"),
    pytest.param(("85", V, "02", "40", ECHO, "f90000"), "floating-point", id="half-float-timeout-zero"),
    pytest.param(("85", V, "02", "40", ECHO, "fa459c4000"), "floating-point", id="float32-timeout"),
    pytest.param(("85", V, "02", "40", ECHO, "fb40b3880000000000"), "floating-point", id="float64-timeout"),
    pytest.param(("84", V, "03", WID, "f93c00"), "floating-point", id="float-disconnecting"),
    # maps and simple values
    pytest.param(("a0",), "CBOR map", id="empty-map-header"),
    pytest.param(("84", V, "01", "40", "a0"), "CBOR map", id="map-services"),
    pytest.param(("83", V, "04", "f6"), "CBOR null", id="null-id"),
    pytest.param(("83", V, "04", "f7"), "CBOR undefined", id="undefined-id"),
    pytest.param(("83", V, "04", "f0"), "simple value 16", id="simple-16"),
    pytest.param(("84", V, "03", WID, "f815"), "simple value 24", id="two-byte-simple-true"),
    pytest.param(("ff",), "break", id="lone-break"),
    pytest.param(("83", V, "04", "ff"), "break", id="break-as-id"),
    pytest.param(("1c",), "reserved additional information 28", id="reserved-28"),
    pytest.param(("83", V, "04", "5d"), "reserved additional information 29", id="reserved-29-bytes"),
    pytest.param(("fc",), "reserved additional information 28", id="reserved-simple"),
]


@pytest.mark.parametrize(("hexparts", "error"), CANONICAL_REJECTIONS)
@pytest.mark.parametrize("dialect", ["spec", "bcdb"])
def test_non_canonical_or_foreign_cbor_is_rejected(
    hexparts: tuple[str, ...], error: str, dialect: str
) -> None:
    reason = rejected(wire(*hexparts), dialect)
    assert error.lower() in reason.lower()


def test_reencoding_check_is_the_last_line_of_defence() -> None:
    # Whatever the reader accepts must be byte-identical to the canonical encoding of
    # what it read; checked here over cbor2's non-canonical encodings of valid headers.
    header = ["memo01", 2, b"", "echo", 70000]
    canonical = cbor2.dumps(header, canonical=True)
    assert CODEC.decode([canonical]) == memodb.Job(service="echo", timeout_ms=70000)
    for variant in (
        # the same array with an indefinite length (built by hand: cbor2 5.6, the floor,
        # has no indefinite_containers option)
        bytes.fromhex("9f") + canonical[1:] + bytes.fromhex("ff"),
        bytes.fromhex("98 05") + canonical[1:],
    ):
        assert variant != canonical
        rejected([variant])


def test_every_truncation_of_a_header_is_rejected() -> None:
    headers = [
        CODEC.encode(memodb.Ready(services=("echo", "reverse")))[0],
        CODEC.encode(memodb.Job(id=b"abcd", service="echo", timeout_ms=2**64 - 1))[0],
        CODEC.encode(memodb.Result(id=b"abcd", disconnecting=True))[0],
        CODEC.encode(memodb.Disconnect(id=b"\x00" * 300))[0],
    ]
    for header in headers:
        for cut in range(len(header)):
            reason = rejected([header[:cut]])
            assert "truncated" in reason or "empty message" in reason


@pytest.mark.parametrize(
    "hexparts",
    [
        ("83", V, "04", "5bffffffffffffffff"),  # byte string of 2**64-1 bytes
        ("83", V, "04", "5b7fffffffffffffff", "00" * 64),
        ("83", "7bffffffffffffffff", "04", WID),  # text string of 2**64-1 bytes
        ("9bffffffffffffffff", V),  # array of 2**64-1 elements
        ("84", V, "01", "40", "9bffffffffffffffff"),  # service list of 2**64-1 names
        ("84", V, "01", "40", "9a7fffffff", ECHO * 100),
    ],
)
def test_huge_declared_lengths_fail_fast_without_allocating(hexparts: tuple[str, ...]) -> None:
    # Memory, not time, tells "allocated for the declared length" (a timed bound passes
    # a 100 MB preallocation and fails on a loaded machine): the message is < 1 KB.
    reason, peak = peak_bytes(lambda: rejected(wire(*hexparts)))
    assert "truncated" in reason
    assert peak < 256 * 1024, f"{peak} bytes held rejecting a message of < 1 KB"


def test_deep_nesting_is_rejected_without_recursion() -> None:
    assert "nested" in rejected([b"\x81" * 200_000 + b"\x00"])
    assert "nested" in rejected(wire("84", V, "01", "40", "81", "81", ECHO))


def test_invalid_utf8_in_text_is_rejected() -> None:
    assert "UTF-8" in rejected(wire("84", V, "01", "40", "81", "62c328"))
    assert "UTF-8" in rejected(wire("85", V, "02", "40", "63eda080", "00"))  # encoded surrogate


# ------------------------------------------------------------- field types


@pytest.mark.parametrize(
    ("hexparts", "error"),
    [
        (("83", V, "f4", WID), "message type must be an unsigned integer, got a boolean"),
        (("83", V, "21", WID), "message type must be an unsigned integer, got a negative integer"),
        (("83", V, "6101", WID), "message type must be an unsigned integer, got a text string"),
        (("83", V, "4101", WID), "message type must be an unsigned integer, got a byte string"),
        (("83", V, "1864", WID), "unknown message type 0x64"),
        (("83", V, "00", WID), "unknown message type 0x00"),
        (("83", "466d656d6f3031", "04", WID), "version field"),
        (("83", "666d656d6f3032", "04", WID), "unsupported protocol version 'memo02'"),
        (("83", "664d454d4f3031", "04", WID), "unsupported protocol version 'MEMO01'"),
        (("83", V, "04", "6401020304"), "ID must be a byte string, got a text string"),
        (("83", V, "04", "f5"), "ID must be a byte string, got a boolean"),
        (("83", V, "04", "80"), "ID must be a byte string, got an array"),
        (("85", V, "02", "40", "446563686f", "01"), "service name must be a text string, got a byte string"),
        (("85", V, "02", "40", ECHO, "f4"), "timeout must be an unsigned integer, got a boolean"),
        (
            ("85", V, "02", "40", ECHO, "3903e7"),
            "timeout must be an unsigned integer, got a negative integer",
        ),
        (("85", V, "02", "40", ECHO, "6131"), "timeout must be an unsigned integer, got a text string"),
        (("84", V, "03", WID, "00"), "disconnecting flag must be a boolean, got an unsigned integer"),
        (("84", V, "03", WID, "01"), "disconnecting flag must be a boolean"),
        (("84", V, "01", "40", "82", ECHO, "01"), "service name 1 must be a text string"),
        (("84", V, "01", "40", "4165"), "service list must be a CBOR array"),
        (("80",), "at least 3"),
        (("00",), "header must be a CBOR array, got an unsigned integer"),
        (("f5",), "header must be a CBOR array, got a boolean"),
    ],
)
def test_wrong_field_types_are_rejected(hexparts: tuple[str, ...], error: str) -> None:
    assert error.lower() in rejected(wire(*hexparts)).lower()


@pytest.mark.parametrize(
    ("hexparts", "error"),
    [
        (("83", V, "01", "40"), "READY header has 3 elements, expected 4: missing"),
        (("85", V, "01", "40", "80", "00"), "READY header has 5 elements, expected 4: unexpected trailing"),
        (
            ("86", V, "02", "40", ECHO, "00", "40"),
            "JOB header has 6 elements, expected 5: unexpected trailing",
        ),
        (
            ("85", V, "03", WID, "f5", "f5"),
            "RESULT header has 5 elements, expected 3 or 4: unexpected trailing",
        ),
        (("84", V, "04", WID, "40"), "HEARTBEAT header has 4 elements, expected 3"),
        (("84", V, "05", WID, "f4"), "DISCONNECT header has 4 elements, expected 3"),
    ],
)
def test_wrong_arity_is_rejected(hexparts: tuple[str, ...], error: str) -> None:
    assert error.lower() in rejected(wire(*hexparts)).lower()


@pytest.mark.parametrize("kind", ["01", "04", "05"])
def test_no_payload_messages_reject_trailing_bytes(kind: str) -> None:
    body = ("84", V, kind, "40", "80") if kind == "01" else ("83", V, kind, WID)
    CODEC.decode(wire(*body))
    assert "no payload" in rejected(wire(*body, "00"))
    assert "no payload" in rejected(wire(*body, *body))  # a second header is payload too


def test_bool_and_int_are_never_confused_by_the_messages() -> None:
    with pytest.raises(TypeError):
        memodb.Job(service="echo", timeout_ms=True)
    with pytest.raises(TypeError):
        memodb.Result(disconnecting=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        memodb.Job(service="echo", timeout_ms=1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: memodb.Job(service="echo", timeout_ms=-1), ValueError),
        (lambda: memodb.Job(service="echo", timeout_ms=2**64), ValueError),
        (lambda: memodb.Job(service=b"echo", timeout_ms=1), TypeError),
        (lambda: memodb.Job(service="\ud800", timeout_ms=1), ValueError),
        (lambda: memodb.Job(service="echo", timeout_ms=1, payload="x"), TypeError),
        (lambda: memodb.Ready(services="echo"), TypeError),
        (lambda: memodb.Ready(services=[b"echo"]), TypeError),
        (lambda: memodb.Ready(services=["ok", 3]), TypeError),
        (lambda: memodb.Heartbeat(id="abcd"), TypeError),
        (lambda: memodb.Disconnect(id=bytearray(b"abcd")), TypeError),
    ],
)
def test_messages_validate_at_construction(build: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        build()  # type: ignore[operator]


def test_messages_hold_tuples() -> None:
    ready = memodb.Ready(services=["b", "a"])
    assert ready.services == ("b", "a")
    assert memodb.Job(service="x", timeout_ms=2**64 - 1).timeout_ms == 2**64 - 1


def test_result_flag_absent_false_and_true_are_three_wire_forms() -> None:
    forms = {CODEC.encode(memodb.Result(id=b"w", disconnecting=d))[0] for d in (None, False, True)}
    assert len(forms) == 3
    for raw in forms:
        assert CODEC.encode(CODEC.decode([raw]))[0] == raw


# --------------------------------------------------------- payload exactness


def _big_payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("size", [3 * 2**20, 8 * 2**20 + 17])
def test_multi_megabyte_payloads_are_byte_exact(size: int) -> None:
    payload = _big_payload(size, size)
    for message in (
        memodb.Job(id=b"wkr1", service="compile", timeout_ms=600_000, payload=payload),
        memodb.Result(id=b"wkr1", payload=payload),
        memodb.Result(disconnecting=True, payload=payload),
    ):
        [raw] = CODEC.encode(message)
        [header] = CODEC.encode(attrs.evolve(message, payload=b""))
        assert raw == header + payload
        # One copy of the payload at most (the codec slices it out of the frame once):
        # a decoder that copied it piecewise or repeatedly would hold several.
        decoded, peak = peak_bytes(functools.partial(CODEC.decode, [raw]))
        assert peak < 2 * size, f"{peak} bytes held decoding a {size}-byte payload"
        assert decoded == message
        assert decoded.payload == payload  # type: ignore[attr-defined]
        assert CODEC.encode(decoded, "spec") == [raw]


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00",
        b"\xff",  # a CBOR break
        bytes.fromhex("83666d656d6f3031044401020304"),  # a whole HEARTBEAT
        bytes.fromhex("9f") * 1000,  # indefinite-length openers
        bytes.fromhex("5bffffffffffffffff"),  # a huge declared length
        bytes(range(256)) * 4,
    ],
)
def test_payload_is_opaque_even_when_it_looks_like_cbor(payload: bytes) -> None:
    raw = bytes.fromhex("85" + V + "02" + "40" + ECHO + "0a") + payload
    job = CODEC.decode([raw])
    assert job == memodb.Job(service="echo", timeout_ms=10, payload=payload)
    result = CODEC.decode([bytes.fromhex("83" + V + "03" + "40") + payload])
    assert result == memodb.Result(payload=payload)


# --------------------------------------------------------------------- bcdb


@pytest.mark.parametrize(
    "services",
    [
        (),
        ("echo",),
        ("a", "b", "aa"),
        ("z", "ab", "ba"),
        ("echo", "reverse"),
        ("b", "\u00e9"),  # 1 byte before 2 bytes
        ("ab", "\u00e9"),  # equal length: 0x61 < 0xc3
        ("x" * 23, "x" * 24, "y" * 24, "a" * 256),  # across CBOR length-encoding widths
    ],
)
def test_bcdb_accepts_services_in_canonical_order(services: tuple[str, ...]) -> None:
    message = memodb.Ready(services=services)
    [raw] = CODEC.encode(message, "bcdb")
    assert CODEC.encode(message, "spec") == [raw]
    assert CODEC.decode([raw], "bcdb") == message


@pytest.mark.parametrize(
    ("services", "error"),
    [
        (("b", "a"), "canonical order"),
        (("aa", "b"), "canonical order"),  # longer first
        (("reverse", "echo"), "canonical order"),
        (("\u00e9", "ab"), "canonical order"),
        (("echo", "echo"), "canonical order"),  # duplicates: bcdb wants strictly increasing
        (("", "a"), "must not be empty"),
        (("a" * 256, "x" * 24), "canonical order"),
    ],
)
def test_bcdb_rejects_services_out_of_canonical_order(services: tuple[str, ...], error: str) -> None:
    message = memodb.Ready(services=services)
    [raw] = CODEC.encode(message, "spec")  # the spec dialect keeps any order
    assert CODEC.decode([raw], "spec") == message
    reason = rejected([raw], "bcdb")
    assert error in reason and "bcdb" in reason
    with pytest.raises(EncodeError, match=error):  # bcdb never sorts for you
        CODEC.encode(message, "bcdb")


@given(st.lists(st.text(min_size=1, max_size=30), max_size=8))
@settings(max_examples=200)
def test_canonical_order_key_is_the_order_of_encoded_forms(names: list[str]) -> None:
    by_key = sorted(names, key=canonical_order_key)
    by_encoding = sorted(names, key=lambda n: (len(cbor2.dumps(n)), cbor2.dumps(n)))
    assert by_key == by_encoding


@pytest.mark.parametrize("cls", [memodb.Heartbeat, memodb.Disconnect])
@pytest.mark.parametrize("size", [0, 1, 3, 5, 8, 16])
def test_bcdb_worker_ids_are_exactly_4_bytes(cls: type[memodb.Heartbeat], size: int) -> None:
    message = cls(id=bytes(range(size)))
    [raw] = CODEC.encode(message)  # spec: any bytestring
    assert CODEC.decode([raw]) == message
    assert "4 bytes" in rejected([raw], "bcdb")
    with pytest.raises(EncodeError, match="4 bytes"):
        CODEC.encode(message, "bcdb")
    ok = cls(id=b"\xff\x00\x10\x7f")
    assert CODEC.decode(CODEC.encode(ok, "bcdb"), "bcdb") == ok


@pytest.mark.parametrize(
    "message",
    [
        memodb.Job(service="echo", timeout_ms=5, payload=b"p"),
        memodb.Job(id=b"\x00\x00\x00\x00", service="echo", timeout_ms=2**63 - 1),
        memodb.Result(payload=b"r"),
        memodb.Result(id=b"abcd", payload=b"r"),
    ],
)
def test_bcdb_job_and_result_take_an_empty_or_4_byte_id(message: memodb.Job | memodb.Result) -> None:
    assert CODEC.decode(CODEC.encode(message, "bcdb"), "bcdb") == message


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (memodb.Job(id=b"abc", service="echo", timeout_ms=5), "empty or 4 bytes"),
        (memodb.Job(id=b"abcde", service="echo", timeout_ms=5), "empty or 4 bytes"),
        (memodb.Result(id=b"12345678"), "empty or 4 bytes"),
        (memodb.Result(id=b"abcd", disconnecting=False), "no disconnecting flag"),
        (memodb.Result(id=b"abcd", disconnecting=True), "no disconnecting flag"),
        (memodb.Job(service="echo", timeout_ms=2**63), "int64"),
        (memodb.Ready(id=b"abcd", services=("echo",)), "ID must be empty"),
    ],
)
def test_bcdb_rejects_what_memodb_broker_rejects(message: memodb.MemodbMessage, error: str) -> None:
    [raw] = CODEC.encode(message, "spec")
    assert CODEC.decode([raw], "spec") == message
    assert error in rejected([raw], "bcdb")
    with pytest.raises(EncodeError, match=error):
        CODEC.encode(message, "bcdb")


@pytest.mark.parametrize(
    "frames",
    [
        [bytes.fromhex("84" + V + "01" + "40" + "82" + ECHO + "67726576657273" + "65")],
        [bytes.fromhex("84" + V + "01" + "40" + "82" + "67726576657273" + "65" + ECHO)],
        [bytes.fromhex("83" + V + "04" + "43010203")],
        [b"garbage"],
        [],
        [b"", b""],
    ],
)
def test_detect_always_answers_spec(frames: list[bytes]) -> None:
    assert CODEC.detect(frames) == "spec"


# ------------------------------------------------------------ robustness extras


_cbor_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.binary(max_size=8)
    | st.text(max_size=8)
    | st.sampled_from(["memo01", 0, 1, 2, 3, 4, 5, b"", b"abcd", "echo"]),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=12,
)


@given(
    header=st.lists(_cbor_values, max_size=6).map(lambda xs: ["memo01", *xs]) | _cbor_values,
    canonical=st.booleans(),
    payload=st.binary(max_size=8),
    dialect=st.sampled_from(["spec", "bcdb"]),
)
@settings(max_examples=1500)
def test_cbor_shaped_input_decodes_exactly_or_is_rejected(
    header: object, canonical: bool, payload: bytes, dialect: str
) -> None:
    raw = cbor2.dumps(header, canonical=canonical) + payload
    try:
        message = CODEC.decode([raw], dialect)
    except DecodeError as exc:
        assert exc.protocol == "memodb" and exc.reason
        return
    # Whatever is accepted is the one canonical spelling of its message.
    assert CODEC.encode(message, dialect) == [raw]


@given(st.binary(max_size=64), st.sampled_from(["spec", "bcdb"]))
@settings(max_examples=1500)
def test_accepted_random_bytes_reencode_to_themselves(raw: bytes, dialect: str) -> None:
    try:
        message = CODEC.decode([raw], dialect)
    except DecodeError:
        return
    assert CODEC.encode(message, dialect) == [raw]


def test_many_services_roundtrip() -> None:
    services = tuple(sorted({f"svc{i}" for i in range(20_000)}, key=canonical_order_key))
    message = memodb.Ready(services=services)
    assert CODEC.decode(CODEC.encode(message, "bcdb"), "bcdb") == message
