"""``nfgate serve`` as a subprocess for tests: start it, read its log lines until
``ready``, stop it with SIGTERM (killed if it does not exit in time)."""

from __future__ import annotations

import re
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest

LISTEN = re.compile(r"nfgate: (\S+) edge \((\w+)\) listening on (\S+)")


class Server:
    def __init__(self, proc: subprocess.Popen[str], endpoints: dict[str, str], lines: list[str]) -> None:
        self.proc = proc
        self.endpoints = endpoints
        self.lines = lines
        self.reader: threading.Thread | None = None  # reads stderr into lines after "ready"

    def read_to_the_end(self, timeout: float = 10.0) -> list[str]:
        """Every line the process wrote, once it has exited: waits (bounded) for the reader
        to reach the end of stderr, so that a check that a line is absent sees them all."""
        assert self.proc.poll() is not None, "the process is still running"
        if self.reader is not None:
            self.reader.join(timeout)
            assert not self.reader.is_alive(), f"stderr not at its end {timeout} s after the exit"
        return self.lines


def start(
    *args: str, expect_ready: bool = True, nofile: int | None = None, fsize: int | None = None
) -> Server:
    """``nofile``: the child's RLIMIT_NOFILE, soft and hard; ``fsize``: its RLIMIT_FSIZE
    in bytes, with SIGXFSZ ignored, so that a write past it fails with EFBIG as on a
    full disk (this process's limits stay)."""

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an ignored signal stays so across exec
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    proc = subprocess.Popen(
        [sys.executable, "-m", "nfgate", "serve", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        preexec_fn=limit if nofile is not None or fsize is not None else None,
    )
    endpoints: dict[str, str] = {}
    lines: list[str] = []
    assert proc.stderr is not None
    deadline = time.monotonic() + 20
    while expect_ready and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if m := LISTEN.search(line):
            endpoints[m.group(1)] = m.group(3)
        if "nfgate: ready" in line:
            server = Server(proc, endpoints, lines)
            # Keep reading: a full stderr pipe would block the gateway's logging.
            server.reader = threading.Thread(target=_drain, args=(proc, lines), daemon=True)
            server.reader.start()
            return server
    if expect_ready:
        proc.kill()
        pytest.fail(f"serve did not get ready: {''.join(lines)}")
    return Server(proc, endpoints, lines)


def metrics_url(server: Server) -> str:
    """The metrics endpoint's URL, from the ``metrics on URL`` line of the log."""
    return next(line.split("metrics on ", 1)[1].strip() for line in server.lines if "metrics on " in line)


def _drain(proc: subprocess.Popen[str], lines: list[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)


def stop(server: Server) -> int:
    """SIGTERM; a second one if the gateway is still draining after a second (a test's
    teardown does not wait for requests its workers still hold: tests/gateway/test_drain.py
    tests the drain); killed if it has not exited 15 s later."""
    server.proc.send_signal(signal.SIGTERM)
    try:
        try:
            return server.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            server.proc.send_signal(signal.SIGTERM)
        return server.proc.wait(timeout=15)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
