"""``nfgate serve`` on a full disk: the child's RLIMIT_FSIZE is low and SIGXFSZ ignored,
so the job store's writes past it fail in the kernel with EFBIG, as on a full disk.

A POST whose job record cannot be written gets NFP's 500 ("job store unavailable"),
never a 202; the failure is logged and counted; other clients and later jobs that fit
are served as before.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid as uuidlib
from pathlib import Path

import pytest
import zmq

from nfgate.codecs import nfp
from nfgate.codecs.nfp.messages import CLIENT, Get, Post, Response
from tests.ports import random_bind_args
from tests.serving import metrics_url, start, stop

pytestmark = [pytest.mark.timeout(90), pytest.mark.slow]

FSIZE = 512 * 1024  # room for the store's first pages and a few small jobs


def _ask(client: zmq.Socket[bytes], message: Post | Get) -> Response:
    client.send_multipart(nfp.encode(message, "spec"))
    assert client.poll(10_000), "no answer"
    answer = nfp.decode(client.recv_multipart())
    assert isinstance(answer, Response), answer
    return answer


def _post(client: zmq.Socket[bytes], body: bytes) -> tuple[str, Response]:
    job = uuidlib.uuid4().hex
    return job, _ask(client, Post(header=CLIENT, service="nobody", target="any", uuid=job, body=(body,)))


def _event(page: str, event: str) -> int:
    found = re.search(
        rf'^nfgate_edge_events_total{{edge="nfp",protocol="nfp",event="{event}"}} (\d+)$', page, re.M
    )
    return int(found.group(1)) if found else -1


def test_a_job_the_full_disk_cannot_hold_gets_500_and_the_gateway_serves_on(tmp_path: Path) -> None:
    server = start("--data-dir", str(tmp_path), *random_bind_args(), fsize=FSIZE)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        first, other = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
        for sock in (first, other):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(server.endpoints["nfp"])
        kept, answer = _post(first, b"small")
        assert answer.status == 202
        refused, answer = _post(first, b"x" * (2 * FSIZE))  # its WAL frames pass the limit
        assert answer.status == 500 and answer.uuid == refused, answer
        assert "job store unavailable" in json.loads(answer.body[0])["errors"][0]
        # Other clients, and jobs that still fit, are served as before.
        pending = _ask(other, Get(header=CLIENT, service="nobody", target="any", uuid=kept, body=(b"",)))
        assert pending.status == 300
        unknown = _ask(other, Get(header=CLIENT, service="nobody", target="any", uuid=refused, body=(b"",)))
        assert unknown.status == 400  # never stored
        _, answer = _post(other, b"small again")
        assert answer.status == 202, answer
        page = ""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the loop publishes once a second
            with urllib.request.urlopen(metrics_url(server), timeout=5) as response:
                page = response.read().decode()
            if _event(page, "jobs_refused") >= 1:
                break
            time.sleep(0.2)
        assert _event(page, "jobs_refused") == 1 and _event(page, "store_errors") >= 1, page
        failed = [
            line for line in server.lines if "the job store failed, new jobs are refused with 500" in line
        ]
        # The kernel's EFBIG is SQLite's SQLITE_IOERR_WRITE ("disk I/O error"); ENOSPC its
        # SQLITE_FULL ("database or disk is full").
        assert failed and ("disk I/O error" in failed[0] or "full" in failed[0]), failed
        assert any("the job store works again" in line for line in server.lines)
        for sock in (first, other):
            sock.close(0)
    finally:
        ctx.destroy(linger=0)
        assert stop(server) == 0
    assert not any("Traceback" in line for line in server.read_to_the_end()), server.lines
