"""A POST reusing the uuid of a job that has finished: the uuid names the stored job (any
client may GET it), so the new POST is refused 400 and the first job's result is kept;
the worker is not left running a job nobody will read."""

from __future__ import annotations

import json

import pytest
import zmq

from nfgate.codecs import nfp
from nfgate.codecs.nfp.messages import BROKER, CLIENT, WORKER, Delete, Get, Keepalive, Post, Response

from .conftest import Running
from .nfp_helpers import get, new_uuid, post, send, spec_worker

pytestmark = pytest.mark.timeout(60)


def drained(sock: zmq.Socket[bytes]) -> list[object]:
    """What arrives until 300 ms pass quietly, broker KEEPALIVEs left out."""
    seen: list[object] = []
    for _ in range(20):
        if not sock.poll(300):
            break
        message = nfp.decode(sock.recv_multipart())
        if not isinstance(message, Keepalive):
            seen.append(message)
    return seen


def test_a_post_reusing_a_finished_jobs_uuid_is_400_and_the_result_stays(gw: Running) -> None:
    w = spec_worker(gw, "echo", b"w1")
    client = gw.dealer("nfp")
    job = new_uuid()
    send(client, Post(header=CLIENT, service="echo", target="any", uuid=job, body=(b"one",)))
    assert get(client).status == 202  # type: ignore[attr-defined]
    assert isinstance(get(w), Post)
    send(w, Response(header=WORKER, service="echo", uuid=job, status=200, body=(b"r1",)))
    first = Response(header=BROKER, service="echo", uuid=job, status=200, body=(b"r1",))
    assert get(client) == first

    for sock in (client, gw.dealer("nfp")):  # its own client again, or another one
        send(sock, Post(header=CLIENT, service="echo", target="any", uuid=job, body=(b"two",)))
        refused = get(sock)
        assert isinstance(refused, Response) and (refused.uuid, refused.status) == (job, 400)
        assert json.loads(refused.body[0])["errors"] == ["job uuid already used"]
        # Whatever reached the worker of it was taken back (the store finds the uuid
        # used once the core has routed the job).
        seen = drained(w)
        if seen:
            post_, cancel = seen
            assert isinstance(post_, Post) and post_.body == (b"two",)
            assert isinstance(cancel, Delete) and cancel.uuid == post_.uuid

    send(client, Get(header=CLIENT, service="echo", target="any", uuid=job, body=(b"",)))
    assert get(client) == first  # the stored result is the first job's
    # The worker is free: the next job is served.
    other = post(client, "echo", b"three")
    assert get(client).status == 202  # type: ignore[attr-defined]
    again = get(w)
    assert isinstance(again, Post) and again.uuid == other


def test_another_clients_post_with_a_running_jobs_uuid_for_another_service_is_400(gw: Running) -> None:
    w = spec_worker(gw, "echo", b"w1")
    owner = gw.dealer("nfp")
    job = new_uuid()
    send(owner, Post(header=CLIENT, service="echo", target="any", uuid=job, body=(b"one",)))
    assert get(owner).status == 202  # type: ignore[attr-defined]
    assert isinstance(get(w), Post)
    # Not the spec's retry (same job from a new socket): another service under that uuid.
    stranger = gw.dealer("nfp")
    send(stranger, Post(header=CLIENT, service="other", target="any", uuid=job, body=(b"x",)))
    refused = get(stranger)
    assert isinstance(refused, Response) and (refused.uuid, refused.status) == (job, 400)
    assert json.loads(refused.body[0])["errors"] == ["job uuid already in use"]
    # The running job is still its owner's.
    send(w, Response(header=WORKER, service="echo", uuid=job, status=200, body=(b"r1",)))
    assert get(owner) == Response(header=BROKER, service="echo", uuid=job, status=200, body=(b"r1",))
    assert drained(stranger) == []
