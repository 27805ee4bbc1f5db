"""An edge's socket replaced by in-memory queues that note every message read and sent,
in one list with whatever else a test records (the job store's fsyncs), so "before"
and "after" in a loop iteration are exact, not a matter of timing."""

from __future__ import annotations

from collections.abc import Callable

from nfgate.bench.path import MemoryTransport
from nfgate.edges import RouterEdge

Event = tuple[str, bytes, object]  # ("recv", peer, None), ("send", peer, decoded message), ...


class Recorded(MemoryTransport):
    """The bench's :class:`MemoryTransport`, appending to ``events`` as it goes."""

    def __init__(
        self, edge: RouterEdge, decode: Callable[[list[bytes]], object], events: list[Event]
    ) -> None:
        super().__init__(edge.transport.socket)
        self._decode = decode
        self.events = events
        edge.transport = self  # type: ignore[assignment]  # duck-typed: recv, send, socket

    def recv(self) -> tuple[bytes, list[bytes]] | None:
        got = super().recv()
        if got is not None:
            self.events.append(("recv", got[0], None))
        return got

    def send(self, identity: bytes, frames: list[bytes], *, probe: bool = False) -> bool:
        self.events.append(("send", identity, self._decode(frames)))
        return super().send(identity, frames, probe=probe)
