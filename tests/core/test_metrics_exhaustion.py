"""The metrics endpoint when the process is out of file descriptors.

A child Python with a low RLIMIT_NOFILE serves metrics, takes every free descriptor,
and counts its server's ``accept`` calls while a connection (this test's) waits in the
backlog. socketserver dropped the EMFILE and polled again at once: the listening socket
stays readable, so it spun a core (tens of thousands of accepts a second). Now it
pauses ``ACCEPT_BACKOFF_S`` between tries, and serves the connection once descriptors
are back. The bound on the count only rises with the time measured, so a slow machine
cannot fail it.
"""

from __future__ import annotations

import json
import resource
import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)

CHILD = textwrap.dedent(
    """
    import json, os, socket, sys, time
    from nfgate.metrics import MetricsServer

    calls = [0]
    accept = socket.socket.accept

    def counted(self):
        calls[0] += 1
        return accept(self)

    socket.socket.accept = counted
    server = MetricsServer("http://127.0.0.1:0", lambda: "up 1\\n")
    print(server.url, flush=True)
    held = []
    while len(held) < 100_000:
        try:
            held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            break
    print("exhausted", flush=True)
    sys.stdin.readline()  # the test's connection is in the backlog
    before, started = calls[0], time.monotonic()
    time.sleep(1.0)
    tried, took = calls[0] - before, time.monotonic() - started
    for fd in held:
        os.close(fd)
    print(json.dumps({"accepts": tried, "seconds": took, "cpu": time.process_time()}), flush=True)
    sys.stdin.readline()  # the test has its answer
    server.close()
    """
)


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def test_an_accept_out_of_descriptors_backs_off_and_is_served_later() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_limit,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        url = child.stdout.readline().strip()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert child.stdout.readline().strip() == "exhausted"  # no accept can succeed from here
        with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
            conn.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            child.stdin.write("go\n")
            child.stdin.flush()
            seen = json.loads(child.stdout.readline())
            answer = b""
            while len(answer) < 100_000:  # bounded; the server closes after one answer
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk
        child.stdin.write("done\n")
        child.stdin.flush()
        assert child.wait(timeout=20) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    print(
        f"accepts in {seen['seconds']:.2f} s out of descriptors: {seen['accepts']}, cpu {seen['cpu']:.2f} s"
    )
    assert 1 <= seen["accepts"] <= seen["seconds"] / 0.25 + 3, seen
    assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"up 1\n"), answer[:200]
