"""The frame of the stateful tests of request lifecycles (test_nfp_lifecycle.py,
test_cross_lifecycle.py): a gateway stepped by hand with a test clock and a throwaway
job store, workers that may go silent, one final answer per request, and an end that
lets every request finish before the checks."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import ClassVar

import zmq
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nfgate.edges import EdgeSettings
from nfgate.gateway import Gateway
from nfgate.store import JobStore

HEARTBEAT = (100, 3)  # ms, liveness: a silent worker is gone after 300 ms
SETTLE_ROUNDS = 60  # at the end: rounds of "every worker answers all it holds, 500 ms pass"


class Lives(RuleBasedStateMachine):
    """Subclasses set ``ROSTER`` (worker -> its dialect or edge), build ``gateway`` and
    implement :meth:`reply`, :meth:`time_passes` and :meth:`check`; they record every
    final answer a client gets in ``finals`` and every job a worker is given in
    ``held`` (worker -> key it knows the job by -> what it needs to answer)."""

    ROSTER: ClassVar[dict[bytes, str]]
    gateway: Gateway

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="nfgate-lives-"))
        self.now = 0
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.store = JobStore(self.dir / "jobs.sqlite3", fsync=False)
        self.workers = dict(self.ROSTER)  # and the fresh ones of settle()
        self.registered: set[bytes] = set()
        self.silent: set[bytes] = set()  # gone without a word: never heard again
        self.held: dict[bytes, dict[bytes, object]] = {w: {} for w in self.ROSTER}
        self.finals: dict[bytes, list[tuple[int, bytes]]] = {}

    def settings(self, name: str) -> EdgeSettings:
        return EdgeSettings(
            name=name,
            protocol=name,
            url="tcp://127.0.0.1:0",
            context=self.context,
            options={"heartbeat": HEARTBEAT},
        )

    def register(self, worker: bytes) -> None:
        raise NotImplementedError

    def reply(self, worker: bytes, key: bytes) -> None:
        raise NotImplementedError

    def time_passes(self, ms: int) -> None:
        raise NotImplementedError

    def check(self) -> None:
        raise NotImplementedError

    @rule(data=st.data())
    def answer(self, data: st.DataObject) -> None:
        """A live worker answers one of the jobs it holds."""
        worker = data.draw(st.sampled_from(sorted(self.ROSTER)))
        if worker in self.registered and self.held[worker]:
            self.reply(worker, data.draw(st.sampled_from(sorted(self.held[worker]))))

    @precondition(lambda self: len(self.silent) < len(self.ROSTER) - 1)
    @rule(data=st.data())
    def vanish(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(sorted(self.ROSTER)))
        if worker in self.registered:
            self.registered.discard(worker)
            self.silent.add(worker)
            self.held[worker].clear()

    @invariant()
    def one_final_each(self) -> None:
        for key, answers in self.finals.items():
            assert len(answers) == 1, f"{key!r} got {answers}"

    def enlist(self, worker: bytes, kind: str) -> None:
        """A fresh worker for the end (``kind``: its dialect or edge), registered."""
        self.workers[worker], self.held[worker] = kind, {}
        self.register(worker)

    def settle(self) -> None:
        """Every worker left answers all it holds, time passes, until all is over."""
        for _ in range(SETTLE_ROUNDS):
            for worker in sorted(self.registered):
                for key in sorted(self.held[worker]):
                    self.reply(worker, key)
            self.time_passes(500)
        self.check()

    def teardown(self) -> None:
        try:
            self.settle()
        finally:
            self.gateway.close()
            self.store.close()
            self.context.term()
            shutil.rmtree(self.dir, ignore_errors=True)
