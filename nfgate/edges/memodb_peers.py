"""What the MemoDB edge (:mod:`nfgate.edges.memodb`) holds for each client request and
each registered worker. Kept apart from the edge, which drives them.
"""

from __future__ import annotations

from nfgate.codecs.memodb.session import WorkerState
from nfgate.model import Peer, Request

__all__ = ["MemodbClient", "MemodbWorker"]


class MemodbClient:
    """A MemoDB client request the edge holds (one NNG context), until its RESULT."""

    __slots__ = ("core_id", "dialect", "echo", "pipe")

    def __init__(self, echo: bytes, dialect: str, pipe: int) -> None:
        self.echo = echo  # the ID its JOB carried (empty from a spec client), sent back
        self.dialect = dialect
        self.pipe = pipe
        self.core_id = 0  # known once the core accepted the request


class MemodbWorker:
    """A registered MemoDB worker: its ID, its connection and the request it holds."""

    __slots__ = (
        "aborted",
        "beats_heard",
        "beats_sent",
        "ctx",
        "dialect",
        "id",
        "job",
        "name",
        "peer",
        "pending",
        "pipe",
        "state",
    )

    def __init__(self, wid: bytes, peer: Peer, name: str, dialect: str, pipe: int) -> None:
        self.id = wid
        self.peer = peer
        self.name = name
        self.dialect = dialect
        self.pipe = pipe  # the connection its last message came on
        self.state = WorkerState.NONE
        self.ctx: int | None = None  # transport key of the held request
        self.job: int | None = None  # core id of the JOB it works on
        self.aborted = False  # that job was cancelled by its client (NFP DELETE)
        self.pending: Request | None = None  # a job waiting for the worker's next request
        self.beats_sent = self.beats_heard = 0  # HEARTBEATs answered and received (show_workers)
