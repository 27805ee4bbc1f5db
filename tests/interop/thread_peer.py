"""A raw ZeroMQ peer on a thread of its own, for the interop tests' stand-ins (a DCP echo
worker, a SADA server answering set statuses) beside the real NorFab processes."""

from __future__ import annotations

import threading
from typing import Self

import zmq


class ThreadPeer:
    """Started by ``with``, stopped at the block's end or after ``lifetime`` seconds.

    Subclasses write :meth:`_run`, which owns its socket (made from ``ctx``), stops
    when ``stop`` is set or ``lifetime`` has passed, and puts what went wrong in
    ``errors`` for the test to assert on.
    """

    thread_name = "thread-peer"

    def __init__(self, endpoint: str, lifetime: float) -> None:
        self.endpoint = endpoint
        self.lifetime = lifetime
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.ctx.destroy(linger=0)

    def _run(self) -> None:
        raise NotImplementedError
