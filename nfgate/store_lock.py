"""The job store's lock file: one nfgate per data dir.

Two gateways on one data dir would both dispatch the unfinished jobs again at start,
and run them twice, so :class:`nfgate.store.JobStore` holds an exclusive ``flock`` on
``<store>.lock`` for as long as it is open; ``nfgate serve`` checks it before it binds
anything (:func:`check_unlocked`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from pathlib import Path

from nfgate.errors import ConfigError

__all__ = ["check_unlocked", "lock_path", "take_lock"]

log = logging.getLogger("nfgate.store")


def take_lock(path: Path) -> int:
    """Take the store's lock file (an exclusive ``flock``) and write our pid in it; return
    its descriptor, which holds the lock until closed or the process dies (kill -9 too).

    Why: two gateways on one data dir would both dispatch the unfinished jobs again at
    start, and run them twice. Raises :class:`ConfigError` naming the holder's pid when
    another process has it, :class:`OSError` when the file cannot be opened. A file
    system without locks (``ENOLCK``, some network mounts) is logged and not locked.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        in_use = _in_use(fd, path)
        os.close(fd)
        raise in_use from None
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            os.close(fd)
            raise
        log.warning("cannot lock %s (%s): nothing stops a second nfgate using this data dir", path, exc)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _in_use(fd: int, path: Path) -> ConfigError:
    """The error for a lock file ``path`` (open as ``fd``) another process holds,
    naming its pid as written in the file."""
    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
    return ConfigError(f"the job store {path.parent} is in use by another nfgate (pid {holder})")


def lock_path(db: Path) -> Path:
    """The lock file of the job store at ``db``."""
    return Path(f"{db}.lock")


def check_unlocked(path: Path) -> None:
    """Raise the :class:`ConfigError` :class:`JobStore` would, naming the holder's pid,
    when another process holds the store's lock file ``path``; else return at once.

    Why: ``nfgate serve`` binds its metrics port before it opens the store, so a second
    gateway on the same configuration would report that port in use, not the data dir
    it shares with the first. This check, made first, names the real cause. The lock is
    taken again, for good, when the store opens (a gateway started in between is
    refused there)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no lock file yet (a new data dir), or unreadable: the store says
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(fd, path) from None
    except OSError:  # no locks on this file system: the store logs it
        pass
    finally:
        os.close(fd)  # releases the lock, if taken
