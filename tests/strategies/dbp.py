"""Hypothesis strategies for every DBP message, per dialect."""

from __future__ import annotations

from hypothesis import strategies as st

from nfgate.codecs import dbp

from ._common import MessageStrategies, frame, printable_text

# JSON-looking bodies as well as arbitrary bytes: the codec carries both untouched.
service_json = st.builds(
    dbp.make_info,
    name=printable_text,
    ip=st.just("127.0.0.1"),
    port=st.integers(1, 65535),
    function=printable_text,
    heartbeat=st.integers(1, 60),
)
body = service_json | frame
bodies = st.lists(body, max_size=4).map(tuple)
query = st.sampled_from(["", "*"]) | printable_text


def _time(dialect: str) -> st.SearchStrategy[float]:
    if dialect == "hermes":
        # The wire holds a float32, so only float32 values survive the round trip.
        return st.floats(min_value=0, width=32, allow_nan=False, allow_infinity=False)
    return st.integers(0, 2**53).map(float) | st.floats(min_value=0, allow_nan=False, allow_infinity=False)


def messages(dialect: str) -> MessageStrategies:
    t = _time(dialect)
    # Hermes's APPROVED is always ["", "OwO", t, ""]: no configuration changes.
    changes = st.just(()) if dialect == "hermes" else bodies
    return {
        "REQUEST": st.builds(dbp.Request, time=t, query=query),
        "REPLY": st.builds(dbp.Reply, time=t, info=body),
        "REGISTRATION": st.builds(dbp.Registration, time=t, info=st.lists(body, min_size=1, max_size=4)),
        "UPDATE": st.builds(dbp.Update, time=t, info=st.lists(body, min_size=1, max_size=4)),
        "APPROVED": st.builds(dbp.Approved, time=t, changes=changes),
        "DENIED": st.builds(dbp.Denied, time=t, reasons=bodies),
        "HEARTBEAT": st.builds(dbp.Heartbeat, time=t, service=printable_text),
        "DISCONNECT": st.builds(dbp.Disconnect, time=t),
        "ACK": st.builds(dbp.Ack, time=t),
    }
