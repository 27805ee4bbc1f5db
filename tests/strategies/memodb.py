"""Hypothesis strategies for every MemoDB message, per dialect."""

from __future__ import annotations

from hypothesis import strategies as st

from nfgate.codecs import memodb
from nfgate.codecs.memodb.codec import canonical_order_key

from ._common import MessageStrategies

# Any text hypothesis draws is valid UTF-8 (it leaves out lone surrogates by default).
text = st.text(max_size=16)
payload = st.binary(max_size=256)
any_id = st.binary(max_size=16)
worker_id = st.binary(min_size=4, max_size=4)


def _bcdb_services() -> st.SearchStrategy[tuple[str, ...]]:
    # bcdb: non-empty names, strictly increasing in CBOR canonical order.
    names = st.lists(st.text(min_size=1, max_size=12), max_size=6, unique_by=canonical_order_key)
    return names.map(lambda xs: tuple(sorted(xs, key=canonical_order_key)))


def messages(dialect: str) -> MessageStrategies:
    if dialect == "bcdb":
        return {
            "READY": st.builds(memodb.Ready, id=st.just(b""), services=_bcdb_services()),
            "JOB": st.builds(
                memodb.Job,
                id=st.just(b"") | worker_id,
                service=text,
                timeout_ms=st.integers(0, 2**63 - 1),
                payload=payload,
            ),
            "RESULT": st.builds(
                memodb.Result, id=st.just(b"") | worker_id, disconnecting=st.none(), payload=payload
            ),
            "HEARTBEAT": st.builds(memodb.Heartbeat, id=worker_id),
            "DISCONNECT": st.builds(memodb.Disconnect, id=worker_id),
        }
    return {
        "READY": st.builds(memodb.Ready, id=any_id, services=st.lists(text, max_size=6).map(tuple)),
        "JOB": st.builds(
            memodb.Job, id=any_id, service=text, timeout_ms=st.integers(0, 2**64 - 1), payload=payload
        ),
        "RESULT": st.builds(
            memodb.Result, id=any_id, disconnecting=st.none() | st.booleans(), payload=payload
        ),
        "HEARTBEAT": st.builds(memodb.Heartbeat, id=any_id),
        "DISCONNECT": st.builds(memodb.Disconnect, id=any_id),
    }
