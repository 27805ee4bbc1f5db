"""Hypothesis strategies for every NFP message, per dialect."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from nfgate.codecs import nfp

from ._common import MessageStrategies, frame, nonempty_frame, printable_text

text = printable_text
uuid = st.uuids().map(lambda u: u.hex)
body = st.lists(frame, min_size=1, max_size=3).map(tuple)
status = st.integers(100, 999)
status_text = st.just("") | st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ _-", min_size=1, max_size=20).filter(
    lambda s: s.isprintable()
)


def _job(cls: type[Any], dialect: str) -> st.SearchStrategy[Any]:
    addressed = st.builds(cls, header=st.just(nfp.CLIENT), service=text, target=text, uuid=uuid, body=body)
    if dialect == "spec":
        return addressed | st.builds(
            cls, header=st.just(nfp.BROKER), service=text, target=text, uuid=uuid, body=body
        )
    routed = st.builds(cls, header=st.just(nfp.BROKER), client=nonempty_frame, uuid=uuid, body=body)
    return addressed | routed


def _result(cls: type[Any], dialect: str) -> st.SearchStrategy[Any]:
    # NorFab compares the whole status frame: its dialect carries no status text.
    texts = status_text if dialect == "spec" else st.just("")

    def addressed(header: bytes) -> st.SearchStrategy[Any]:
        return st.builds(
            cls,
            header=st.just(header),
            service=text,
            uuid=uuid,
            status=status,
            status_text=texts,
            body=body,
        )

    if dialect == "spec":
        return addressed(nfp.WORKER) | addressed(nfp.BROKER)
    routed = st.builds(
        cls,
        header=st.just(nfp.WORKER),
        client=nonempty_frame,
        uuid=uuid,
        status=status,
        status_text=texts,
        body=body,
    )
    return addressed(nfp.BROKER) | routed


def messages(dialect: str) -> MessageStrategies:
    both = st.sampled_from([nfp.BROKER, nfp.WORKER])
    norfab = dialect == "norfab"
    disconnect = (
        st.builds(nfp.Disconnect, header=both, service=text, body=st.none())
        | st.builds(
            nfp.Disconnect,
            header=st.just(nfp.BROKER),
            service=text,
            body=st.none(),
            legacy_order=st.just(True),
        )
        if norfab
        else st.builds(nfp.Disconnect, header=both, service=text, body=frame)
    )
    out: MessageStrategies = {
        "OPEN": st.builds(nfp.Open, header=st.sampled_from([nfp.CLIENT, nfp.WORKER, nfp.BROKER]), body=frame),
        "READY": st.builds(nfp.Ready, service=text),
        "KEEPALIVE": st.builds(nfp.Keepalive, header=both, service=text),
        "DISCONNECT": disconnect,
        "POST": _job(nfp.Post, dialect),
        "GET": _job(nfp.Get, dialect),
        "DELETE": _job(nfp.Delete, dialect),
        "RESPONSE": _result(nfp.Response, dialect),
    }
    if norfab:
        out |= {
            "PUT": _job(nfp.Put, dialect),
            "EVENT": _result(nfp.Event, dialect),
            "STREAM": _result(nfp.Stream, dialect),
            "MMI": st.builds(
                nfp.Mmi, header=st.just(nfp.CLIENT), service=text, target=text, uuid=uuid, body=body
            )
            | st.builds(nfp.Mmi, header=st.just(nfp.BROKER), client=nonempty_frame, uuid=uuid, body=body)
            | st.builds(
                nfp.Mmi, header=st.just(nfp.BROKER), service=text, uuid=uuid, status=status, body=body
            )
            | st.builds(
                nfp.Mmi,
                header=st.just(nfp.WORKER),
                client=nonempty_frame,
                uuid=uuid,
                status=status,
                body=body,
            ),
        }
    return out
