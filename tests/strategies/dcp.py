"""Hypothesis strategies for every DCP message, per dialect."""

from __future__ import annotations

from hypothesis import strategies as st

from nfgate.codecs import dcp

from ._common import MessageStrategies, frame, nonempty_frame

client = st.none() | nonempty_frame
metadata = st.lists(nonempty_frame, max_size=4).map(tuple)


def _data(dialect: str) -> st.SearchStrategy[tuple[bytes, ...]]:
    # DagBox ends data at the first empty part, so it cannot carry empty data parts.
    part = nonempty_frame if dialect == "dagbox" else frame
    return st.lists(part, max_size=4).map(tuple)


def messages(dialect: str) -> MessageStrategies:
    data = _data(dialect)
    return {
        "REGISTRATION": st.builds(dcp.Registration, service=frame),
        "PING": st.just(dcp.Ping()),
        "PONG": st.just(dcp.Pong()),
        "RECONNECT": st.just(dcp.Reconnect()),
        "REQUEST": st.builds(dcp.Request, service=frame, client=client, metadata=metadata, data=data),
        "REPLY": st.builds(dcp.Reply, client=client, metadata=metadata, data=data),
    }
