"""nfgate.fdlimit: the start's check of the open-file limit, and FdWatch (pure parts)."""

from __future__ import annotations

import errno
import logging
import resource

import pytest
import zmq

from nfgate import fdlimit
from nfgate.errors import ConfigError, TransportError
from nfgate.fdlimit import FdWatch, Limit
from nfgate.metrics import render

pytestmark = pytest.mark.timeout(30)


def test_a_limit_too_low_for_the_edges_is_one_line_naming_it() -> None:
    need = fdlimit.start_need(6, metrics=True)
    fdlimit.check_start(Limit(soft=need, hard=need), 6, metrics=True)  # just enough
    with pytest.raises(ConfigError) as low:
        fdlimit.check_start(Limit(soft=need - 1, hard=need - 1), 6, metrics=True)
    text = str(low.value)
    assert "\n" not in text
    assert f"is {need - 1}" in text and f"at least {need}" in text and "ulimit -n" in text


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    assert fdlimit.raised_target(Limit(soft=1024, hard=4096)) == 4096
    assert fdlimit.raised_target(Limit(soft=4096, hard=4096)) == 4096
    unlimited = Limit(soft=1024, hard=resource.RLIM_INFINITY)
    assert fdlimit.raised_target(unlimited) == fdlimit.UNLIMITED_TARGET
    assert fdlimit.raised_target(Limit(soft=100_000, hard=resource.RLIM_INFINITY)) == 100_000


def test_a_small_room_for_peers_is_warned_about() -> None:
    need = fdlimit.start_need(5, metrics=False)
    assert fdlimit.room_warning(Limit(soft=need + fdlimit.WARN_ROOM, hard=99999), 5, False) is None
    warning = fdlimit.room_warning(Limit(soft=need + 10, hard=99999), 5, False)
    assert warning is not None and "room for about 10 connected peers" in warning


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.EMFILE, "Too many open files"),
        OSError(errno.ENFILE, "Too many open files in system"),
        zmq.ZMQError(errno.EMFILE),
        TransportError("nfp edge: cannot bind: Too many open files"),
    ],
)
def test_exhaustion_is_recognised_however_it_is_said(exc: BaseException) -> None:
    assert fdlimit.is_exhaustion(exc)


def test_exhaustion_is_recognised_behind_a_wrapping_error() -> None:
    try:
        try:
            raise OSError(errno.EMFILE, "no")
        except OSError:
            raise ConfigError("cannot open the job store") from None
    except ConfigError as wrapped:
        assert fdlimit.is_exhaustion(wrapped)
    assert not fdlimit.is_exhaustion(OSError(errno.EADDRINUSE, "Address already in use"))
    assert not fdlimit.is_exhaustion(ConfigError("config: bad key"))


def test_fdwatch_counts_each_look_and_warns_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    # free, out x3, free, out (within the minute), then out again a minute later, free.
    out = [False, True, True, True, False, True, True, False]
    clock = [0.0]
    watch = FdWatch(Limit(soft=64, hard=64), probe=lambda: out.pop(0), clock=lambda: clock[0])
    caplog.set_level(logging.WARNING, logger="nfgate")

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records]

    assert watch.stats() == {"fd_exhausted": 0, "fd_limit": 64}
    for _ in range(3):
        clock[0] += 1
        assert watch.check() is True
    assert len(said()) == 1 and "out of file descriptors (open-file limit 64)" in said()[0]
    assert watch.check() is False
    assert "free again" in said()[-1]  # once, after a WARNING
    clock[0] += 1
    assert watch.check() is True  # an outage within the minute: counted, not said
    assert len(said()) == 2
    clock[0] += fdlimit.WARN_EVERY_S
    assert watch.check() is True
    assert len(said()) == 3 and "(4 such look(s)" in said()[-1]  # 3 since the first WARNING, and this one
    assert watch.check() is False and "free again" in said()[-1]
    assert watch.exhausted == 5


def test_fdwatch_probe_sees_a_process_with_descriptors_free() -> None:
    assert fdlimit._probe() is False


def test_the_process_section_is_exported() -> None:
    page = render({"process": {"fd_exhausted": 3, "fd_limit": 1024}}, {}, 1.0)
    assert "# TYPE nfgate_process_fd_limit gauge\nnfgate_process_fd_limit 1024\n" in page
    assert "# TYPE nfgate_process_fd_exhausted_total counter\nnfgate_process_fd_exhausted_total 3\n" in page
