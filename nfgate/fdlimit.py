"""The process's open-file limit (``RLIMIT_NOFILE``): raised at start, watched while running.

Every connected peer is a file descriptor, and so are the edges' own sockets, libzmq's
and NNG's internal pipes, the job store's files and each metrics scrape. ``nfgate
serve`` raises the soft limit to the hard one at start, as most servers do
(:func:`raise_soft_limit`); refuses to start, in one line, with a limit too low for its
edges (:func:`check_start`, :func:`exhausted_at_start`); warns when little room is left
for peers (:func:`room_warning`). While it runs, :class:`FdWatch` looks once a second
whether the process is out of descriptors, which otherwise shows only as peers that
cannot connect and store writes that fail: a rate-limited WARNING and the counter
``nfgate_process_fd_exhausted_total``.

The arithmetic is pure; only :func:`raise_soft_limit` and :meth:`FdWatch.probe` touch the
process.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import time
from collections.abc import Callable

import attrs

from nfgate.errors import ConfigError

__all__ = [
    "FdWatch",
    "Limit",
    "check_start",
    "exhausted_at_start",
    "is_exhaustion",
    "raise_soft_limit",
    "room_warning",
    "start_need",
]

log = logging.getLogger("nfgate")

# What a start takes, measured with `ls /proc/PID/fd` on `nfgate serve` (Linux, pyzmq
# 26, pynng 0.8): 19 descriptors with the NFP edge alone (stdio, the signal socketpair,
# libzmq's context, the job store's database, WAL, shm and lock files), 3 to 7 more per
# edge (a ZeroMQ socket, its mailbox and its monitor pair; NNG's pipes; DBP's UDP
# socket), 1 for the metrics listener; 41 for the default five edges and metrics.
# A little under what was measured: this is the limit below which a start cannot
# succeed; one just over it fails in the build, and is reported the same way.
START_BASE = 16
START_PER_EDGE = 4
START_METRICS = 1
# Below this many descriptors left for peers at start, a WARNING: a few hundred
# clients and workers would exhaust the process.
WARN_ROOM = 512
# When the hard limit is unlimited, the soft limit goes this high (the kernel refuses
# RLIM_INFINITY for RLIMIT_NOFILE: it is capped by fs.nr_open).
UNLIMITED_TARGET = 65536
WARN_EVERY_S = 60.0  # FdWatch's WARNING while the process stays out of descriptors
HINT = "raise it (ulimit -n, or LimitNOFILE= in the systemd unit): docs/broker.md, Resource limits of the OS"


@attrs.frozen(kw_only=True)
class Limit:
    """The open-file limit: ``soft`` is what binds the process, ``hard`` its ceiling
    (``resource.RLIM_INFINITY`` for none)."""

    soft: int
    hard: int


def start_need(edges: int, metrics: bool) -> int:
    """The fewest descriptors a start of ``edges`` edges (and the metrics endpoint) can
    take; a start with fewer cannot succeed. Pure."""
    return START_BASE + START_PER_EDGE * max(edges, 0) + (START_METRICS if metrics else 0)


def raised_target(limit: Limit) -> int:
    """The soft limit to ask for: the hard one (or :data:`UNLIMITED_TARGET`), never
    lower than the soft limit already is. Pure."""
    ceiling = UNLIMITED_TARGET if limit.hard == resource.RLIM_INFINITY else limit.hard
    return max(limit.soft, ceiling)


def raise_soft_limit() -> Limit:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; return the limit in force
    after (unchanged when the kernel refuses: the start check then decides). Raises
    nothing."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = raised_target(Limit(soft=soft, hard=hard))
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # above fs.nr_open, or a sandbox's refusal
            log.debug("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    return Limit(soft=soft, hard=hard)


def _too_low(soft: int, edges: int, need: int) -> str:
    return (
        f"the open-file limit (ulimit -n) is {soft}, too low to start {edges} edge(s):"
        f" they need at least {need} descriptors, and each peer one more; {HINT}"
    )


def check_start(limit: Limit, edges: int, metrics: bool) -> None:
    """Raise :class:`ConfigError` (one line, ``nfgate serve`` exits 2) when ``limit``
    cannot even start ``edges`` edges. Pure."""
    need = start_need(edges, metrics)
    if limit.soft < need:
        raise ConfigError(_too_low(limit.soft, edges, need))


def is_exhaustion(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) says the process or the system is out of
    file descriptors: ``EMFILE``/``ENFILE`` from the OS or libzmq, NNG's ``OutOfFiles``.
    Pure."""
    seen: BaseException | None = exc
    for _ in range(8):  # a cause chain is short; bounded all the same
        if seen is None:
            return False
        if getattr(seen, "errno", None) in (errno.EMFILE, errno.ENFILE):
            return True
        if type(seen).__name__ == "OutOfFiles":  # pynng's, not imported here
            return True
        if os.strerror(errno.EMFILE) in str(seen):  # an error that kept only the text
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def exhausted_at_start(limit: Limit, edges: int, metrics: bool) -> ConfigError:
    """The one-line error for a start that ran out of descriptors while binding. Pure."""
    return ConfigError(_too_low(limit.soft, edges, max(start_need(edges, metrics), limit.soft + 1)))


def room_warning(limit: Limit, edges: int, metrics: bool) -> str | None:
    """The WARNING to log at start when fewer than :data:`WARN_ROOM` descriptors are
    left for peers, else None. Pure."""
    room = limit.soft - start_need(edges, metrics)
    if room >= WARN_ROOM:
        return None
    return (
        f"the open-file limit (ulimit -n) is {limit.soft}: room for about {max(room, 0)} connected"
        f" peers (each is a descriptor) and the job store's writes; {HINT}"
    )


def _probe() -> bool:
    """True when the process cannot get a new descriptor right now: a ``dup`` of a
    standard stream and a ``close``, no file system, about a microsecond."""
    for fd in (0, 1, 2):  # one closed (a daemon's stdin) is tried past: EBADF
        try:
            os.close(os.dup(fd))
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                return True
            continue
        return False
    return False


class FdWatch:
    """Looks, each time :meth:`stats` is called (the gateway publishes once a second),
    whether the process is out of descriptors; counts each look that finds it so
    (``exhausted``). A WARNING at most every :data:`WARN_EVERY_S`, with the count of
    such looks since the last one, and after it one line when descriptors are free
    again: a flood that comes and goes every second (peers that retry) gives two lines
    a minute, not two a second. Raises nothing."""

    def __init__(
        self,
        limit: Limit,
        probe: Callable[[], bool] = _probe,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.exhausted = 0  # looks that found no descriptor free
        self._probe = probe
        self._clock = clock
        self._warned_at: float | None = None  # the last WARNING
        self._announced = False  # a WARNING went out and no "free again" since
        self._since = 0  # looks that found it so since the last WARNING

    def check(self) -> bool:
        """One look; True when the process is out of descriptors now."""
        if not self._probe():
            if self._announced:
                self._announced = False
                log.warning("file descriptors are free again (open-file limit %d)", self.limit.soft)
            return False
        self.exhausted += 1
        self._since += 1
        now = self._clock()
        if self._warned_at is None or now - self._warned_at >= WARN_EVERY_S:
            log.warning(
                "out of file descriptors (open-file limit %d): new peers cannot connect and job"
                " store writes may fail (%d such look(s), one a second, since the last of these"
                " warnings); %s",
                self.limit.soft,
                self._since,
                HINT,
            )
            self._warned_at, self._since, self._announced = now, 0, True
        return True

    def stats(self) -> dict[str, int]:
        """Looks once, then the counters the gateway publishes (``nfgate_process_*``)."""
        self.check()
        return {"fd_exhausted": self.exhausted, "fd_limit": self.limit.soft}
