"""The bench's MemoDB simple clients: NNG req0 sockets, one context per outstanding request.

Run through ``python -m nfgate.bench.load clients --dialect memodb ...`` (same options
and the same JSON figures as the DEALER clients of :mod:`nfgate.bench.load`).

Each of the ``clients`` req0 sockets opens ``window`` contexts (``nng_ctx``); a context
carries one JOB at a time (specs/memodb.md, "Simple client": a JOB with an empty ID,
answered by a RESULT), so the window is the number of contexts per socket, all
multiplexed on the socket's one TCP connection, as a MemoDB client pipelining over req0
would do.

NNG tells a context's completions only through an ``nng_aio``; pynng's public async API
allocates an aio, a future and an event-loop hand-off per operation. Here each context
keeps one aio for its whole life, with pynng's own completion callback
(``lib._async_complete``, which calls the Python callable registered in pynng's
``_aio_map`` under the aio's argument). That callable runs on an NNG thread: it appends
the context's index to a deque and writes one byte to a pipe the main loop polls, the
same shape as :mod:`nfgate.transports.nng`'s pipe-closed notifications. Per request:
two completions (the send, then the reply), one message alloc, one copy out.

Every loop here is bounded in time; every aio is stopped before the sockets close.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import os
import select
import time
from collections.abc import Callable
from typing import Any

import pynng
from pynng import ffi, lib

from nfgate.bench.dialects import SERVICE, make_body, make_key
from nfgate.bench.load import RunClock, figures
from nfgate.codecs import memodb
from nfgate.codecs.memodb.messages import Job, Result

__all__ = ["JOB_TIMEOUT_MS", "job_prefix", "result_prefix", "run_clients"]

JOB_TIMEOUT_MS = 30_000  # the JOB's timeout_ms: a worker gone mid-run is retried, not waited on
_AIO_TIMEOUT_MS = 20_000  # no request outstanding longer than the bench lasts after its window
_SEND, _RECV = 0, 1


def job_prefix() -> bytes:
    """The CBOR header of a client JOB for :data:`SERVICE`; the body follows it."""
    return memodb.encode(Job(service=SERVICE, timeout_ms=JOB_TIMEOUT_MS, payload=b""))[0]


def result_prefix() -> bytes:
    """The CBOR header of the RESULT a client gets (empty ID); its payload follows it."""
    return memodb.encode(Result(id=b"", payload=b""))[0]


def _aio_map() -> dict[int, Callable[[], None]]:
    # pynng's private map from an aio's callback argument to the Python callable that
    # ``lib._async_complete`` pops and calls (pynng/_aio.py).
    mapping: dict[int, Callable[[], None]] = importlib.import_module("pynng._aio")._aio_map
    return mapping


def _check(rv: int, what: str) -> None:
    if rv != 0:
        raise RuntimeError(f"{what} failed: {ffi.string(lib.nng_strerror(rv)).decode()}")


class _Lanes:
    """Every context of every socket; ``done`` gets a lane's index at each completion."""

    def __init__(self, socks: list[pynng.Req0], window: int) -> None:
        self.done: collections.deque[int] = collections.deque()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.ctxs: list[Any] = []
        self.aios: list[Any] = []
        self.callbacks: list[Callable[[], None]] = []
        self.args: list[int] = []
        self.stage: list[int] = []
        self.client: list[int] = []
        self.registry = _aio_map()
        for c, sock in enumerate(socks):
            for _ in range(window):
                ctx = ffi.new("nng_ctx *")
                _check(lib.nng_ctx_open(ctx, sock.socket), "nng_ctx_open")
                self.ctxs.append(ctx)
                self.client.append(c)
                self.stage.append(_SEND)
                callback = self._callback(len(self.aios))
                aiop = ffi.new("nng_aio **")
                _check(lib.nng_aio_alloc(aiop, lib._async_complete, ffi.cast("void *", id(callback))), "aio")
                lib.nng_aio_set_timeout(aiop[0], _AIO_TIMEOUT_MS)
                self.aios.append(aiop[0])
                self.callbacks.append(callback)
                self.args.append(id(callback))

    def _callback(self, lane: int) -> Callable[[], None]:
        done, wake = self.done, self.wake_w

        def complete() -> None:  # on an NNG thread
            done.append(lane)
            with contextlib.suppress(OSError):  # a full pipe wakes the loop anyway
                os.write(wake, b"\0")

        return complete

    def send(self, lane: int, data: bytes, msgp: Any) -> None:
        _check(lib.nng_msg_alloc(msgp, 0), "nng_msg_alloc")
        lib.nng_msg_append(msgp[0], data, len(data))
        aio = self.aios[lane]
        lib.nng_aio_set_msg(aio, msgp[0])
        self.stage[lane] = _SEND
        self.registry[self.args[lane]] = self.callbacks[lane]
        lib.nng_ctx_send(self.ctxs[lane][0], aio)

    def recv(self, lane: int) -> None:
        self.stage[lane] = _RECV
        self.registry[self.args[lane]] = self.callbacks[lane]
        lib.nng_ctx_recv(self.ctxs[lane][0], self.aios[lane])

    def close(self) -> None:
        for lane, aio in enumerate(self.aios):
            lib.nng_aio_stop(aio)  # cancels and waits for the callback
            msg = lib.nng_aio_get_msg(aio)
            if self.stage[lane] == _SEND and msg != ffi.NULL:
                lib.nng_msg_free(msg)  # a send that never went out still owns its message
            lib.nng_aio_free(aio)
        for ctx in self.ctxs:
            lib.nng_ctx_close(ctx[0])
        for arg in self.args:
            self.registry.pop(arg, None)
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def run_clients(
    endpoint: str,
    *,
    clients: int,
    window: int,
    warmup: float,
    duration: float,
    size: int = 100,
    broker_pid: int = 0,
) -> dict[str, Any]:
    """Drive ``clients`` req0 sockets with ``window`` contexts each; the figures of
    :func:`nfgate.bench.load.figures`. Raises RuntimeError when NNG fails or the dial
    does not connect, ImportError when ``broker_pid`` is given without psutil."""
    proc = None
    if broker_pid:
        proc = importlib.import_module("psutil").Process(broker_pid)
    socks: list[pynng.Req0] = []
    try:
        for _ in range(clients):
            sock = pynng.Req0()
            socks.append(sock)
            sock.dial(endpoint, block=True)
        lanes = _Lanes(socks, window)
        try:
            return _drive(lanes, warmup, duration, size, proc)
        finally:
            lanes.close()
    except pynng.NNGException as exc:
        raise RuntimeError(f"MemoDB clients on {endpoint}: {exc}") from None
    finally:
        for sock in socks:
            sock.close()


def _drive(lanes: _Lanes, warmup: float, duration: float, size: int, proc: Any) -> dict[str, Any]:
    clock, clock_ns = time.perf_counter, time.perf_counter_ns
    head, reply_head = job_prefix(), result_prefix()
    cut = len(reply_head)
    msgp = ffi.new("nng_msg **")
    count = len(lanes.aios)
    keys: list[bytes | None] = [None] * count
    bodies: list[bytes] = [b""] * count
    started = [0] * count
    seq = [0] * count
    base = (os.getpid() & 0xFFFF) << 12
    counts = dict.fromkeys(
        ("sent", "done", "errors", "mismatches", "unknown", "interim", "unacknowledged"), 0
    )
    latencies: list[int] = []

    def fire(lane: int) -> None:
        key = make_key(base + lane, seq[lane])
        seq[lane] += 1
        body = make_body(key, size)
        keys[lane], bodies[lane], started[lane] = key, body, clock_ns()
        lanes.send(lane, head + body, msgp)

    run_clock = RunClock(warmup, duration, proc, clock)
    measured = 0
    for lane in range(count):
        fire(lane)
    poller = select.poll()
    poller.register(lanes.wake_r, select.POLLIN)
    done, stage, aios = lanes.done, lanes.stage, lanes.aios
    while True:
        now = clock()
        run_clock.advance(now)
        if run_clock.over(now, all(k is None for k in keys)):
            break
        measuring, sending = run_clock.measuring, run_clock.sending
        if not done:
            poller.poll(run_clock.wait_ms(now))
        with contextlib.suppress(OSError):
            os.read(lanes.wake_r, 65536)
        while done:
            lane = done.popleft()
            aio = aios[lane]
            rv = lib.nng_aio_result(aio)
            if stage[lane] == _SEND:
                if rv != 0:  # never went out: the message is still ours
                    msg = lib.nng_aio_get_msg(aio)
                    if msg != ffi.NULL:
                        lib.nng_msg_free(msg)
                    counts["errors"] += 1
                    keys[lane] = None
                    if sending:
                        fire(lane)
                    continue
                lanes.recv(lane)
                continue
            key, keys[lane] = keys[lane], None
            if rv != 0 or key is None:
                counts["errors" if key is not None else "unknown"] += 1
            else:
                msg = lib.nng_aio_get_msg(aio)
                data = bytes(ffi.buffer(lib.nng_msg_body(msg), lib.nng_msg_len(msg)))
                lib.nng_msg_free(msg)
                counts["done"] += 1
                if not data.startswith(reply_head):
                    counts["errors"] += 1
                elif data[cut:] != bodies[lane]:
                    counts["mismatches"] += 1
                elif measuring:  # only a right answer counts as throughput
                    measured += 1
                    latencies.append(clock_ns() - started[lane])
            if sending:
                fire(lane)
    counts["sent"] = sum(seq)
    unanswered = sum(k is not None for k in keys)
    return figures(measured, latencies, run_clock, proc, counts, unanswered)
