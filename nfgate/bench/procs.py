"""Child processes of the bench: brokers and load generators, always killed on exit.

Each child's stdout and stderr lines are read by a daemon thread into a queue (so a
chatty child never blocks on a full pipe); :meth:`Child.expect` waits for a line
matching a pattern. On Linux a child also gets SIGTERM if the bench itself dies
(``PR_SET_PDEATHSIG``), so a killed bench leaves no broker behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import IO

__all__ = ["Child", "ChildError", "children"]

STOP_TIMEOUT_S = 5.0


class ChildError(RuntimeError):
    """A child exited, or did not print what was expected in time."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


class Child:
    """One child process (``argv`` after ``python``), started at construction."""

    def __init__(self, name: str, argv: Sequence[str]) -> None:
        self.name = name
        self.lines: queue.Queue[tuple[str, str]] = queue.Queue()
        self.stderr_tail: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        for stream, tag in ((self.proc.stdout, "out"), (self.proc.stderr, "err")):
            threading.Thread(target=self._pump, args=(stream, tag), daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _pump(self, stream: IO[str] | None, tag: str) -> None:
        if stream is None:
            return
        with contextlib.suppress(ValueError, OSError):  # the stream closed under us at stop()
            for line in stream:
                line = line.rstrip("\n")
                if tag == "err":
                    self.stderr_tail = [*self.stderr_tail[-9:], line]
                self.lines.put((tag, line))

    def expect(self, pattern: str, timeout: float, stream: str = "") -> re.Match[str]:
        """The first line (of ``stream``, "out" or "err"; "" for either) matching ``pattern``.

        Raises ChildError if the child exits or ``timeout`` seconds pass first.
        """
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildError(
                    f"{self.name}: no line matching {pattern!r} in {timeout:.0f} s{self._tail()}"
                )
            try:
                tag, line = self.lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    raise ChildError(
                        f"{self.name} exited with status {self.proc.returncode}{self._tail()}"
                    ) from None
                continue
            if stream and tag != stream:
                continue
            found = regex.search(line)
            if found:
                return found

    def _tail(self) -> str:
        time.sleep(0.1)  # let the pump threads catch the last words
        return (": " + " | ".join(self.stderr_tail[-3:])) if self.stderr_tail else ""

    def stop(self) -> None:
        """SIGTERM; another after a second (``nfgate serve`` drains on the first and
        stops on the second: a measurement does not wait for requests its clients
        gave up on); SIGKILL after a grace period. Idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(1)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@contextlib.contextmanager
def children() -> Iterator[list[Child]]:
    """A list to add children to; every one is stopped on the way out, exception or not."""
    started: list[Child] = []
    try:
        yield started
    finally:
        for child in reversed(started):
            with contextlib.suppress(Exception):
                child.stop()
