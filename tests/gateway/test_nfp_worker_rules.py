"""NFP workers that break the worker dialog (specs/nfp.md "Opening and Closing": "The
worker MUST NOT send a further READY"; "The broker MUST respond to any valid but
unexpected command by sending DISCONNECT and then no further commands to that worker"):
told DISCONNECT and dropped, and the job they held is not lost."""

from __future__ import annotations

import pytest

from nfgate.codecs.nfp.messages import BROKER, WORKER, Disconnect, Post, Ready, Response

from .conftest import Running, until
from .nfp_helpers import get, post, quiet, send, spec_worker

pytestmark = pytest.mark.timeout(60)


def test_a_second_ready_gets_disconnect_and_the_job_it_held_goes_to_another_worker(gw: Running) -> None:
    first = spec_worker(gw, "echo", b"w1")
    client = gw.dealer("nfp")
    job = post(client, "echo", b"ping")
    accepted = get(client)
    assert isinstance(accepted, Response) and accepted.status == 202
    assert isinstance(get(first), Post)
    second = spec_worker(gw, "echo", b"w2")

    send(first, Ready(service="echo"))  # again
    told = get(first)
    assert isinstance(told, Disconnect) and told.body == b"READY sent twice"
    until(lambda: [w.name for w in gw.gateway.router.workers()] == ["w2"])
    assert gw.gateway.edges["nfp"].stats()["repeated_ready"] == 1

    again = get(second)
    assert isinstance(again, Post) and again.uuid == job and again.body == (b"ping",)
    send(second, Response(header=WORKER, service="echo", uuid=job, status=200, body=(b"pong",)))
    assert get(client) == Response(header=BROKER, service="echo", uuid=job, status=200, body=(b"pong",))
    # "no further commands to that worker": its late answer is not relayed either.
    send(first, Response(header=WORKER, service="echo", uuid=job, status=200, body=(b"late",)))
    assert quiet(client)
