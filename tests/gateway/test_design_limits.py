"""design.md, "Durability, security, limits": "A limit hit is a counter, a log line and
the protocol's error reply". The queue limits (a full service queue, a request with no
worker past the queue expiry) for clients of every protocol, not only NFP's."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import nfp, sada
from nfgate.codecs.nfp.messages import CLIENT, Open, Post, Response
from nfgate.codecs.sada.messages import PROTO_ASCII, Intr, Rep, Req

from .conftest import recv, running_on
from .test_sada_edges import served_channel

pytestmark = pytest.mark.timeout(60)

LIMITS = """
[routing]
queue_expiry_ms = 300
max_queue_per_service = 1
"""


def _sada_req(sock: zmq.Socket[bytes], request_id: str) -> None:
    req = Req(
        proto=PROTO_ASCII,
        request_id=request_id,
        service="nobody",
        version="1",
        category="c",
        action="a",
        payload=b"x",
    )
    sock.send_multipart(sada.encode(req))


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_queue_limits_hit_by_a_sada_client_are_logged_counted_and_answered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="nfgate"), running_on(tmp_path, LIMITS) as gw:
        client = gw.dealer("sada")
        _sada_req(client, "RQ-queued-1")
        _sada_req(client, "RQ-refused")  # the service's queue holds one: refused at once
        answers = [sada.decode(recv(client)) for _ in range(2)]
        assert [(a.request_id, a.status) for a in answers if isinstance(a, Rep)] == [
            ("RQ-refused", 503),  # queue full
            ("RQ-queued-1", 503),  # no worker within the queue expiry
        ]
        stats = gw.gateway.router.stats()
        assert (stats["rejected"], stats["expired"]) == (1, 1)
    full = _lines(caplog, "service queue full")
    expired = _lines(caplog, "no worker within the queue expiry")
    assert full and expired, "a limit hit gives a log line"
    assert all(line.startswith("sada: ") for line in full + expired)
    assert "'nobody'" in full[0] and "'nobody'" in expired[0]


def test_an_nfp_job_past_the_queue_expiry_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="nfgate"), running_on(tmp_path, LIMITS) as gw:
        client = gw.dealer("nfp")
        client.send_multipart(nfp.encode(Open(header=CLIENT)))
        recv(client)
        client.send_multipart(
            nfp.encode(Post(header=CLIENT, service="nobody", target="any", uuid="a" * 32, body=(b"{}",)))
        )
        statuses = [nfp.decode(recv(client)) for _ in range(2)]
        assert [s.status for s in statuses if isinstance(s, Response)] == [202, 408]
    expired = _lines(caplog, "no worker within the queue expiry")
    assert expired and expired[0].startswith("nfp: "), "a limit hit gives a log line"


SMALL = """
[limits]
max_message_bytes = 1000
max_frames = 10
"""


@pytest.mark.parametrize("dialect", ["spec", "norfab"])
@pytest.mark.parametrize(
    ("body", "what"),
    [
        (tuple(b"x" for _ in range(12)), "too_many_frames"),  # 5 envelope frames + 12 > 10
        ((b"x" * 600, b"y" * 600), "too_large"),  # each frame under the limit, together over it
    ],
)
def test_an_nfp_post_over_a_message_limit_is_answered_400(
    tmp_path: Path, dialect: str, body: tuple[bytes, ...], what: str
) -> None:
    """A POST the transport drops for a limit is the client's error, not silence: the
    uuid was read before the limit, so the client gets its RESPONSE 400 naming it."""
    with running_on(tmp_path, SMALL) as gw:
        client = gw.dealer("nfp")
        if dialect == "spec":
            client.send_multipart(nfp.encode(Open(header=CLIENT)))
            recv(client)
        uuid = "c" * 32
        post = Post(header=CLIENT, service="echo", target="any", uuid=uuid, body=body)
        client.send_multipart(nfp.encode(post, dialect))
        answer = nfp.decode(recv(client))
        assert isinstance(answer, Response) and (answer.uuid, answer.status) == (uuid, 400)
        assert "limit" in answer.body[0].decode()
        assert gw.gateway.edges["nfp"].stats()[what] == 1


# A REQ whose payload is under the limit alone, over it with the other frames.
BIG_REQ = Req(
    proto=PROTO_ASCII,
    request_id="RQ-big",
    service="echo",
    version="1",
    category="c",
    action="a",
    payload=b"x" * 990,
)


def test_a_sada_req_over_the_message_limit_is_answered_400(tmp_path: Path) -> None:
    with running_on(tmp_path, SMALL) as gw:
        client = gw.dealer("sada")
        client.send_multipart(sada.encode(BIG_REQ))
        answer = sada.decode(recv(client))
        assert isinstance(answer, Rep) and (answer.request_id, answer.status) == ("RQ-big", 400)
        assert gw.gateway.edges["sada"].stats()["too_large"] == 1


def test_a_piran_req_over_the_message_limit_is_answered_in_piran(tmp_path: Path) -> None:
    """PIRAN reads a REP's status as a 4-byte int32: the 400 for a REQ dropped before its
    peer was known is in the dialect what was read shows (here its ip:port identity)."""
    with running_on(tmp_path, SMALL) as gw:
        client = gw.dealer("sada", identity=b"127.0.0.1:40002")  # PIRAN sets ip:port
        client.send_multipart(sada.encode(BIG_REQ))
        frames = recv(client)
        assert frames[4] == (400).to_bytes(4, "big"), frames
        assert sada.decode(frames, "piran") == Rep(
            proto=PROTO_ASCII, request_id="RQ-big", status=400, payload=b""
        )


def test_a_channels_req_over_the_message_limit_is_answered_400_by_the_server_edge(tmp_path: Path) -> None:
    """The gateway as a SADA server: a channel's REQ dropped for a limit is answered
    400 as the channel edge answers a client's, so the channel does not wait it out."""
    with served_channel(tmp_path, toml=SMALL) as (gw, channel):
        identity, *frames = recv(channel.sock)  # the gateway introduces itself first
        assert isinstance(sada.decode(frames), Intr)
        channel.server = identity
        channel.send(BIG_REQ)
        answer = channel.get()
        assert isinstance(answer, Rep) and (answer.request_id, answer.status) == ("RQ-big", 400)
        assert gw.gateway.edges["sada-server"].stats()["too_large"] == 1
