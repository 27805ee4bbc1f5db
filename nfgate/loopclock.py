"""The event loop's clock: monotonic milliseconds that do not jump across a stall.

When the gateway's process is paused (SIGSTOP, a VM paused or migrated, the process
swapped out), the monotonic clock runs on while the loop does not. On resume the
routing core and the edges, given a ``now`` seconds later, would find every worker
silent for longer than its liveness and remove it, and expire queued requests, before
the loop had read the heartbeats and replies that waited in the sockets meanwhile: the
peers missed nothing, the gateway did. (Measured: a 3 s SIGSTOP of ``nfgate serve`` with
400 workers beating every 1000 ms, liveness 3, removed 255 to 400 of them.)

:class:`LoopClock` wraps the monotonic clock: a gap between two reads over
``stall_ms`` is a stall, and the loop's clock advances by only ``stall_ms`` for it. The
loop resumes, reads what waited, and the peers' queued heartbeats refresh their
liveness before anything is due. A peer that really went silent is still removed, a
little later (by the stall's excess, once). A loop that reads its clock often (it does
at least every :data:`nfgate.gateway.MAX_SLEEP_MS`) keeps real time, so the heartbeats
it sends keep their rate; that is why the threshold is a second: with 100 ms, a loaded
loop's iterations crossed it and its clock ran slow.

Pure but for the WARNING it logs: the source is passed in (a test's fake clock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["STALL_MS", "STALL_WARN_MS", "LoopClock", "monotonic_ms"]

log = logging.getLogger("nfgate.gateway")

# A gap between two reads of the loop's clock over this is a stall. It must stay well
# above the longest poll the loop asks for (nfgate.gateway.MAX_SLEEP_MS) plus its
# overshoot, or an idle loop would count a stall a second.
STALL_MS = 1000
STALL_WARN_MS = 10_000  # at most one WARNING about stalls per this long (a thrashing host stalls often)


def monotonic_ms() -> int:
    """The monotonic clock in whole milliseconds. Raises nothing."""
    return time.monotonic_ns() // 1_000_000


class LoopClock:
    """A callable returning the loop's time in ms (see the module docstring).

    ``stall_ms`` 0 turns the stall handling off: the clock is then ``source`` itself.
    ``stalls`` counts the stalls met, ``stalled_ms`` the time taken out of the loop's
    clock for them (each stall's gap less ``stall_ms``). Calling it raises nothing.
    """

    def __init__(
        self,
        source: Callable[[], int] = monotonic_ms,
        *,
        stall_ms: int = STALL_MS,
        warn_every_ms: int = STALL_WARN_MS,
    ) -> None:
        if stall_ms < 0:
            raise ValueError(f"stall_ms must be 0 (off) or more, got {stall_ms}")
        self._source = source
        self.stall_ms = stall_ms
        self._warn_every_ms = warn_every_ms
        # Set at the first read, not here: the gateway is built a while before it runs
        # (its store read, its edges bound), and that wait is no stall.
        self._last: int | None = None
        self._offset = 0  # source time less loop time: the sum of the stalls' excesses
        self.stalls = 0
        self.stalled_ms = 0
        self._warn_at: int | None = None  # source time before which stalls are not warned of
        self._unwarned = 0  # stalls since the last WARNING, not warned of
        self._unwarned_ms = 0

    def __call__(self) -> int:
        real = self._source()
        last, self._last = self._last, real
        if last is not None and self.stall_ms:
            gap = real - last
            if gap > self.stall_ms:
                self._stalled(gap, real)
        return real - self._offset

    def _stalled(self, gap: int, real: int) -> None:
        excess = gap - self.stall_ms
        self._offset += excess
        self.stalls += 1
        self.stalled_ms += excess
        self._unwarned += 1
        self._unwarned_ms += excess
        if self._warn_at is not None and real < self._warn_at:
            return
        earlier = ""
        if self._unwarned > 1:
            earlier = f"; {self._unwarned} stall(s) ({self._unwarned_ms} ms) since the last of these warnings"
        log.warning(
            "the event loop was stalled for %d ms (the process paused or starved: SIGSTOP, a VM "
            "pause, swapping?); timers shifted by %d ms so that heartbeats and replies queued "
            "meanwhile are read before any worker or request expires%s (at most one such "
            "warning per %d s)",
            gap,
            excess,
            earlier,
            self._warn_every_ms // 1000,
        )
        self._warn_at = real + self._warn_every_ms
        self._unwarned = 0
        self._unwarned_ms = 0

    def stats(self) -> dict[str, int]:
        """``stalls`` and ``stalled_ms``, for the gateway's counters. Raises nothing."""
        return {"stalls": self.stalls, "stalled_ms": self.stalled_ms}
