"""What a NorFab worker can take as a job's body (``nfgate.codecs.nfp.norfab_job``),
checked against orjson, which NorFab's worker reads it with: whatever the check lets
through, NorFab's ``_post`` reads as a dict, and files (task a string, timeout a
number SQLite stores)."""

from __future__ import annotations

import importlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nfgate.codecs.nfp.norfab_job import REASON, give_up_ms, refusal, result_ready

orjson = importlib.import_module("orjson")  # NorFab's own dependency (the test extra installs NorFab)


def norfab_files(body: tuple[bytes, ...]) -> bool:
    """What NorFab 0.25's worker does with the first frame, short of SQLite: True if
    ``_post`` reads it and SQLite stores its task and timeout."""
    try:
        data = orjson.loads(body[0] if body else b"")
        task, timeout = data.get("task"), data.get("timeout", 60)
    except (orjson.JSONDecodeError, AttributeError):
        return False
    storable = (str, int, float, type(None))
    if not isinstance(task, storable) or not isinstance(timeout, storable):
        return False
    return not any(isinstance(v, int) and not -(2**63) <= v < 2**63 for v in (task, timeout))


@pytest.mark.parametrize(
    "frame",
    [
        b'{"task":"echo","kwargs":{"a":1},"args":[],"timeout":15}',
        b"{}",
        b' {"task": null} \n',
        b'{"task":"x","timeout":1.5}',
        b'{"task":"x","timeout":null}',
        b'{"a":"\\ud83d\\ude00"}',  # a surrogate pair is one character
        b'{"a":1,"a":2}',
        b'{"kwargs":{"big":18446744073709551615}}',
        b'{"kwargs":{"tiny":1e-400}}',
        b'{"kwargs":{"digits":"' + b"7" * 400 + b'"}}',  # a long run of digits in a string
        b'{"kwargs":{"long":1' + b"0" * 300 + b"}}",  # a finite double in orjson
    ],
)
def test_what_norfab_takes_passes(frame: bytes) -> None:
    assert refusal((frame,)) == ""
    assert norfab_files((frame,))


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ((b"\xff\x00binary",), "; its body is not JSON"),
        ((), "; its body is not JSON"),  # sent as one empty frame
        ((b"",), "; its body is not JSON"),
        ((b"[1,2]",), ", not a JSON array"),
        ((b'"text"',), ", not a JSON string"),
        ((b"null",), ", not a JSON null"),
        ((b"12",), ", not a JSON number"),
        ((b'{"a":NaN}',), "; its body is not JSON"),  # json takes NaN and Infinity, orjson not
        ((b'{"a":-Infinity}',), "; its body is not JSON"),
        ((b'{"a":1e400}',), "; its body is not JSON"),  # infinite as a double
        ((b'{"a":1' + b"0" * 400 + b"}",), "; its body is not JSON"),
        ((b'{"a":"\\udc00"}',), "; its body is not JSON"),  # a lone surrogate
        ((b'{"a":"\\uD800x"}',), "; its body is not JSON"),
        ((b"\xef\xbb\xbf{}",), "; its body is not JSON"),  # a UTF-8 BOM
        (('{"a":"é"}'.encode("utf-16"),), "; its body is not JSON"),  # json guesses UTF-16
        ((b"[" * 5000 + b"]" * 5000,), "; its body is not JSON"),
        ((b'{"task":["echo"]}',), "; its task is not a string"),
        ((b'{"task":5}',), "; its task is not a string"),
        ((b'{"task":"x","timeout":"soon"}',), "; its timeout is not a number"),
        ((b'{"task":"x","timeout":[1]}',), "; its timeout is not a number"),
        ((b'{"task":"x","timeout":9223372036854775808}',), "; its timeout is not a number"),
    ],
)
def test_what_norfab_cannot_take_is_refused_with_the_reason(body: tuple[bytes, ...], why: str) -> None:
    assert refusal(body) == REASON + why


def test_only_the_first_frame_counts_as_in_norfab() -> None:
    assert refusal((b'{"task":"x"}', b"\xff anything")) == ""
    assert refusal((b"\xff", b'{"task":"x"}')) != ""


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=800)
@given(
    value=st.dictionaries(
        st.sampled_from(["task", "timeout", "args", "kwargs", "x"]), json_values, max_size=4
    )
    | json_values,
    raw=st.binary(max_size=40),
    use_raw=st.booleans(),
)
def test_whatever_the_check_lets_through_norfab_files(value: object, raw: bytes, use_raw: bool) -> None:
    if use_raw:
        frame = raw
    else:
        try:  # NaN and Infinity as json writes them; lone surrogates escaped
            frame = json.dumps(value).encode()
        except ValueError:
            return
    if refusal((frame,)) == "":
        assert norfab_files((frame,)), frame


# A NorFab worker's EVENT bodies, byte for byte as 0.24.16 and 0.25.0 send them
# (orjson.dumps of {"worker", "service", "uuid", **NorFabEvent.model_dump()}).
_EVENT = (
    b'{"worker":"w1","service":"echo","uuid":"u1","event_type":"%s","message":"%s","task":"echo",'
    b'"status":"%s","resource":[],"severity":"INFO","timestamp":"27-Nov-2026 21:45:08.708"}'
)


@pytest.mark.parametrize(
    ("frame", "ready"),
    [
        (_EVENT % (b"result_ready", b"completed", b"completed"), True),  # 0.25's last event
        (_EVENT % (b"progress", b"completed", b"completed"), True),  # 0.24's last event
        (_EVENT % (b"progress", b"starting", b"running"), False),  # every job's first
        (_EVENT % (b"progress", b"completed", b"running"), False),  # a task's own events
        (_EVENT % (b"progress", b"half done", b"completed"), False),
        (_EVENT % (b"input_request", b"completed", b"completed"), False),
        (b'{"event_type":"progress","message":"completed","status":"completed"', False),  # cut short
        (b'["progress","completed","completed"]', False),
        (b'\xff"completed"', False),
        (b"", False),
    ],
)
def test_result_ready_is_0_25s_event_or_0_24s_last_one(frame: bytes, ready: bool) -> None:
    assert result_ready(frame) is ready


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (b'{"task":"hello","kwargs":{"name":"any"},"args":[],"timeout":15}', 15_000),  # NorFab's own
        (b'{"task":"t","timeout":0.0015}', 2),  # rounded up: never 0 ("already given up")
        (b'{"task":"t","kwargs":{"timeout":5},"args":[]}', None),  # the task's, not the job's
        (b'{"task":"t","timeout":0}', None),  # NorFab's client reads 0 and null as its default
        (b'{"task":"t","timeout":null}', None),
        (b'{"task":"t","timeout":-1}', None),
        (b'{"task":"t","timeout":true}', None),
        (b'{"task":"t","timeout":"15"}', None),
        (b'{"task":"t","timeout":1e400}', None),  # infinite as a double
        (b'["timeout", 15]', None),
        (b'{"timeout": 15', None),  # not JSON
        (b'\xff"timeout"', None),
        (b"", None),
    ],
)
def test_give_up_ms_is_a_norfab_jobs_own_timeout(frame: bytes, expected: int | None) -> None:
    assert give_up_ms(frame) == expected
