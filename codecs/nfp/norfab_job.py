"""What a NorFab 0.25 worker can take as a job's body (the POST a broker sends it), and
which of its EVENTs says a job's result is saved (:func:`result_ready`), and when a
NorFab client gives up on a job (:func:`give_up_ms`).

NorFab's worker files each POST in one thread (``_post`` in norfab/core/worker.py):
``data = orjson.loads(body)`` and ``data.get("task")`` with no guard around them, so a
body that is not a JSON object (bytes, an empty frame, a JSON array) kills that thread.
The worker goes on heartbeating, so it looks alive, and never files a job again: every
later request to it waits for ever. It then stores ``task`` and ``timeout`` in SQLite;
one SQLite cannot store (a list, an object, an integer beyond 64 bits) is logged and the
job dropped without an answer, and so is a failing task's job whose ``timeout`` is text
(the worker's error handling compares it with a number). Each such job holds one of
the worker's slots for good. Clients of other protocols send what they like, so the
NFP edge checks a body with :func:`refusal` before a NorFab worker gets it. Pure.
"""

from __future__ import annotations

import json
import json.scanner
import math
import re
from collections.abc import Callable
from typing import Any, Final, NoReturn

__all__ = ["REASON", "give_up_ms", "refusal", "result_ready"]

REASON: Final = "a NorFab worker takes a JSON object {task, kwargs, args}"

_INT64: Final = 2**63  # SQLite's integers are signed 64-bit


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")  # orjson refuses NaN and Infinity; json takes them


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e400: orjson refuses a number that is infinite as a double
        raise ValueError("number out of range")
    return value


def _int(text: str) -> int:
    # orjson reads an integer beyond 64 bits as a double, and refuses one too big for that.
    if len(text) > 300 and math.isinf(float(text)):
        raise ValueError("number out of range")
    return int(text)


def _scanner(parse_int: Callable[[str], Any] | None = None) -> Callable[[str, int], tuple[Any, int]]:
    # json's scanner itself (C), as JSONDecoder.decode calls it: a call through decode()
    # and raw_decode() is two more Python calls on every request to a NorFab worker.
    decoder = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite, parse_int=parse_int)
    return json.scanner.make_scanner(decoder)  # type: ignore[arg-type]  # typeshed: its own type


# It reads what orjson reads, as far as this check needs (the rest is in refusal). An
# integer hook is a Python call per integer (2000 integers tripled the scan's time):
# only a body with a run of 300 digits (an integer orjson may read as infinite, or a
# long digit string) is read with it. The run is found by mapping digits to "0" and the
# rest to " " and looking for 300 "0"s: a regular expression took 6 ns a byte, this 0.5.
_SCAN: Final = _scanner()
_SCAN_LONG: Final = _scanner(parse_int=_int)
_LONG_RUN: Final = b"0" * 300
_DIGITS: Final = bytes(0x30 if 0x30 <= c <= 0x39 else 0x20 for c in range(256))
_SPACE: Final = " \t\n\r"  # JSON's whitespace (json.decoder.WHITESPACE)
# A \uD800-\uDFFF escape: json takes one that pairs with nothing, orjson does not.
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89abcdefABCDEF]")
_STRICT: Final = json.JSONEncoder(ensure_ascii=False)
_KIND: Final = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def refusal(body: tuple[bytes, ...]) -> str:
    """Why a NorFab worker cannot take a job with ``body`` ("" when it can): its first
    frame (the one NorFab reads; none is an empty frame) must be a JSON object as orjson
    reads it (UTF-8, no NaN, no lone surrogate), whose ``task``, if any, is a string and
    whose ``timeout``, if any, a number or null. Never raises."""
    try:
        frame = body[0] if body else b""
        text = frame.decode("utf-8")  # strict: orjson takes UTF-8 only
        long = len(frame) >= len(_LONG_RUN) and _LONG_RUN in frame.translate(_DIGITS)
        scan = _SCAN_LONG if long else _SCAN
        value, end = scan(text, len(text) - len(text.lstrip(_SPACE)))
        if text[end:].strip(_SPACE):
            return f"{REASON}; its body is not JSON"  # something after the value
        if not isinstance(value, dict):
            return f"{REASON}, not a JSON {_KIND.get(type(value), 'value')}"
        if "\\u" in text and _SURROGATE_ESCAPE.search(text):
            _STRICT.encode(value).encode("utf-8")  # pairs were joined: a lone one raises
    except (StopIteration, ValueError, UnicodeError, RecursionError):
        return f"{REASON}; its body is not JSON"
    task = value.get("task")
    if task is not None and not isinstance(task, str):
        return f"{REASON}; its task is not a string"
    timeout = value.get("timeout")
    if timeout is not None and (
        not isinstance(timeout, (int, float))
        or (isinstance(timeout, int) and not -_INT64 <= timeout < _INT64)
    ):
        return f"{REASON}; its timeout is not a number"
    return ""


# NorFab 0.24 (0.24.16, the last 0.24.x) has no result_ready event type: a worker ends
# every job, failed or not, with ``job.event(message="completed", status="completed")``,
# a "progress" event, sent after the result is saved (``start_jobs_processor`` in
# norfab/core/worker.py), as 0.25 sends ``result_ready`` with that message and status.
_COMPLETED: Final = b'"completed"'


def result_ready(frame: bytes) -> bool:
    """Whether a NorFab worker's EVENT body (``frame``, its one JSON frame) says the job's
    result is saved, to be fetched with a GET: 0.25's ``result_ready`` event, or 0.24's
    last event, a "progress" one whose message and status are both "completed". Never raises."""
    if b'"result_ready"' in frame:
        return True
    if _COMPLETED not in frame:  # every other event, cheaply
        return False
    try:
        event = json.loads(frame)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return (
        isinstance(event, dict)
        and event.get("event_type") == "progress"
        and event.get("message") == "completed"
        and event.get("status") == "completed"
    )


# Beyond about 31,000 years a timeout is "never"; a float that large has no ms to count.
_LONGEST_S: Final = 1e12
# The C scanner on text: a third of json.loads(bytes), whose encoding detection is Python.
_PARSE: Final = json.JSONDecoder().raw_decode


def give_up_ms(frame: bytes) -> int | None:
    """When a NorFab client gives up on a job, in ms after it posted it: the ``timeout``
    (seconds) of its POST body's first frame, ``{"task", "kwargs", "args", "timeout"}``.
    NorFab's client then reports "timeout expired after N seconds" and never asks again;
    it sends no DELETE. None when there is none: no ``timeout`` at the top level, one
    that is not a positive number (NorFab's client reads ``0`` and null as its default),
    or a body that is not a JSON object. Never raises."""
    if b'"timeout"' not in frame:  # NorFab's client always sends one; others need no parse
        return None
    try:
        value = _PARSE(frame.decode("utf-8").lstrip(_SPACE))[0]
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    timeout = value.get("timeout") if isinstance(value, dict) else None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < _LONGEST_S:
        return None
    return math.ceil(timeout * 1000)
