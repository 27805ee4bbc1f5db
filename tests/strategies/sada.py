"""Hypothesis strategies for every Safir-Darbaan message, per dialect."""

from __future__ import annotations

from hypothesis import strategies as st

from nfgate.codecs import sada

from ._common import MessageStrategies, frame, printable_text

version = st.just("") | printable_text
services = st.lists(st.tuples(printable_text, version), max_size=5).map(tuple)
status = st.integers(min_value=100, max_value=599)


def _proto(dialect: str) -> st.SearchStrategy[bytes]:
    # PIRAN only reads (and nfgate only writes to it) the ASCII form "SADA1".
    return st.just(sada.PROTO_ASCII) if dialect == "piran" else st.sampled_from(sada.PROTOS)


def messages(dialect: str) -> MessageStrategies:
    proto = _proto(dialect)
    return {
        "INTR": st.builds(sada.Intr, proto=proto, services=services),
        "RINTR": st.builds(sada.Rintr, proto=proto),
        "REQ": st.builds(
            sada.Req,
            proto=proto,
            request_id=printable_text,
            service=printable_text,
            version=version,
            category=printable_text,
            action=printable_text,
            payload=frame,
        ),
        "REP": st.builds(sada.Rep, proto=proto, request_id=printable_text, status=status, payload=frame),
        "PING": st.builds(sada.Ping, proto=proto),
        "PONG": st.builds(sada.Pong, proto=proto),
    }
