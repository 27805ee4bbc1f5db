"""NorFab-shaped result bodies (``nfgate.codecs.nfp.session``): what a NorFab client
reads back as ``{worker: Result}``."""

from __future__ import annotations

import json

import pytest

from nfgate.codecs.nfp import session


def test_a_norfab_result_under_the_announced_name_passes_as_the_worker_wrote_it() -> None:
    # Spaces and key order as the worker wrote them: not re-encoded.
    body = b'{"w1": {"result": {"a": 1, "b": [1, 2]}, "failed": false}}'
    assert session.keyed_body("w1", "w1", (body,)) == body


def test_a_norfab_workers_result_under_the_announced_name_is_not_parsed() -> None:
    # Whatever the bytes: NorFab's broker relays them, and so does nfgate.
    for body in (b'{"w1": 1, "other": 2}', b"not json at all", b'{"w1": {"result": 1}}'):
        assert session.keyed_body("w1", "w1", (body,), norfab_worker=True) == body
    # Re-dispatched (another name) or several frames: parsed and re-keyed or wrapped.
    out = session.keyed_body("w1", "w2", (b'{"w2": {"result": 5}}',), norfab_worker=True)
    assert json.loads(out) == {"w1": {"result": 5}}
    two = session.keyed_body("w1", "w1", (b"a", b"b"), norfab_worker=True)
    assert json.loads(two)["w1"]["result"] == "ab"


def test_a_result_for_another_name_is_rekeyed() -> None:
    # Re-dispatched: the client was told "w1", the result came from "w2".
    out = session.keyed_body("w1", "w2", (b'{"w2": {"result": 5}}',))
    assert json.loads(out) == {"w1": {"result": 5}}


@pytest.mark.parametrize(
    "body",
    [
        (b"plain bytes",),  # a DCP or MemoDB worker's body
        (b'{"w1": 1, "other": 2}',),  # JSON, but not one key
        (b'{"w1":', b"1}"),  # two frames: not one JSON value
        (b'["w1"]',),
        (b"[" * 100_000 + b"]" * 100_000,),  # JSON nested too deeply for the json module: text
    ],
)
def test_anything_else_is_wrapped_in_norfab_result_fields(body: tuple[bytes, ...]) -> None:
    out = json.loads(session.keyed_body("w1", "w1", body))
    assert list(out) == ["w1"]
    assert out["w1"]["failed"] is False and out["w1"]["status"] == "completed"
    assert json.loads(session.dumps(session.keyed_result("w1", "w1", body))) == out
