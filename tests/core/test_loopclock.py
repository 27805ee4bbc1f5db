"""nfgate.loopclock.LoopClock: a stall of the loop is taken out of its clock, and only a stall."""

from __future__ import annotations

import logging

import pytest

from nfgate.gateway import Gateway
from nfgate.loopclock import STALL_MS, LoopClock
from nfgate.metrics import render
from nfgate.routing import Router


class Source:
    """A fake monotonic clock in ms, moved by hand."""

    def __init__(self, start: int = 50_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


def test_it_keeps_real_time_while_read_often() -> None:
    source = Source()
    clock = LoopClock(source)
    first = clock()
    for _ in range(100):  # a busy loop: 100 reads, 999 ms apart at most
        source.now += 999
        clock()
    assert clock() - first == 99_900
    assert (clock.stalls, clock.stalled_ms) == (0, 0)


def test_a_gap_over_the_threshold_advances_it_by_the_threshold_only() -> None:
    source = Source()
    clock = LoopClock(source)
    start = clock()
    source.now += 4000  # SIGSTOP for 4 s
    assert clock() == start + STALL_MS
    assert (clock.stalls, clock.stalled_ms) == (1, 4000 - STALL_MS)
    source.now += 500  # after the resume it runs at the real rate again
    assert clock() == start + STALL_MS + 500


def test_the_excess_of_each_stall_adds_up() -> None:
    source = Source()
    clock = LoopClock(source, stall_ms=1000)
    start = clock()
    for gap in (3000, 200, 1500, 1000):  # 1000 exactly is not a stall
        source.now += gap
        clock()
    assert clock.stalls == 2
    assert clock.stalled_ms == 2000 + 500
    assert clock() == start + 3000 + 200 + 1500 + 1000 - 2500


def test_its_time_never_goes_back_and_is_the_source_before_any_stall() -> None:
    source = Source(123_456)
    clock = LoopClock(source)
    assert clock() == 123_456
    seen = [clock()]
    for gap in (0, 5000, 1, 0, 20_000, 7):
        source.now += gap
        seen.append(clock())
    assert seen == sorted(seen)


def test_the_wait_before_the_first_read_is_no_stall() -> None:
    source = Source()
    clock = LoopClock(source)
    source.now += 60_000  # built, then its store read and its edges bound
    assert clock() == source.now
    assert clock.stalls == 0


def test_zero_turns_it_off() -> None:
    source = Source()
    clock = LoopClock(source, stall_ms=0)
    clock()
    source.now += 10_000
    assert clock() == source.now
    assert (clock.stalls, clock.stalled_ms) == (0, 0)
    assert clock.stats() == {"stalls": 0, "stalled_ms": 0}


def test_a_negative_threshold_is_refused() -> None:
    with pytest.raises(ValueError, match="stall_ms"):
        LoopClock(Source(), stall_ms=-1)


def test_one_warning_per_ten_seconds_saying_how_long_and_that_timers_shifted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = Source()
    clock = LoopClock(source)
    clock()
    with caplog.at_level(logging.WARNING, logger="nfgate.gateway"):
        source.now += 3500
        clock()
        for _ in range(3):  # three more within 10 s of the first warning: counted, not warned
            source.now += 2000
            clock()
        source.now += 4500  # 10.5 s after the first warning: warned, with the three before
        clock()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "stalled for 3500 ms" in warnings[0]
    assert "timers shifted by 2500 ms" in warnings[0]
    assert "4 stall(s) (6500 ms) since the last" in warnings[1]
    assert clock.stats() == {"stalls": 5, "stalled_ms": 2500 + 3 * 1000 + 3500}


def test_the_gateway_runs_on_it_and_exports_its_counters() -> None:
    gateway = Gateway(Router(), [], stall_ms=1500)
    assert gateway.loop_clock is not None and gateway.loop_clock.stall_ms == 1500
    core = gateway.stats()["core"]
    assert (core["stalls"], core["stalled_ms"]) == (0, 0)
    page = render(gateway.stats(), {}, 1.0)
    assert "nfgate_core_stalls_total 0" in page
    assert "nfgate_core_stalled_ms_total 0" in page
    # A test's own clock is its own: no stall handling, the counters at 0.
    assert Gateway(Router(), [], clock=lambda: 0).stats()["core"]["stalls"] == 0
