"""The bench's load generator: raw DEALER clients or workers, in a process of their own.

``python -m nfgate.bench.load workers --dialect D --endpoint URL --count M`` connects M
worker DEALERs, registers them, prints ``ready`` on stdout and echoes jobs until killed
(or ``--max-seconds``). With ``--confirm``, it prints ``registered`` only once every
worker has heard from the broker after its READY (a KEEPALIVE: the broker sends those
only to registered workers).

``python -m nfgate.bench.load clients --dialect D --endpoint URL --clients N --window W
--warmup S --duration S [--broker-pid PID]`` drives N DEALERs from one ``zmq.Poller``
loop, each keeping W requests outstanding, and prints one JSON object: requests done in
the measured window (warm-up excluded), req/s, p50/p99 latency, the broker's CPU and
RSS over that window (psutil on ``--broker-pid``), and correctness counts (every reply
is checked against the body sent: ``mismatches``, ``errors``, ``unanswered``, and in
the NFP dialects ``unacknowledged``, a final reply with no 202 before it); only right
answers count as requests done.

Every loop here is bounded in time. Frames go frame by frame with int flags, as
nfgate's transport does, so the generator spends as little as it can per message.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from typing import Any

import psutil
import zmq

from nfgate.bench.dialects import CLIENT_ONLY, FINAL, INTERIM, Dialect, make_body, make_key

__all__ = ["figures", "main", "run_clients", "run_workers"]

_NOBLOCK = int(zmq.NOBLOCK)
_MORE = int(zmq.SNDMORE)
_send = zmq.backend.Socket.send
HELLO_TIMEOUT_S = 10.0
DRAIN_S = 3.0  # after the window: how long replies still outstanding may take


class RunClock:
    """The clock of one load run: ``warmup`` seconds of load, then ``duration`` measured
    seconds (the broker process ``proc``'s CPU and RSS read at both ends, when given),
    then up to :data:`DRAIN_S` for the replies still outstanding. The drivers call
    :meth:`advance` at the top of every turn and read :attr:`sending` and
    :attr:`measuring`."""

    def __init__(self, warmup: float, duration: float, proc: Any, clock: Any = time.perf_counter) -> None:
        start = clock()
        self.measure_at, self.end_at = start + warmup, start + warmup + duration
        self.drain_until = self.end_at + DRAIN_S
        self.measuring, self.sending = False, True
        self.start = self.end = 0.0  # the measured window, in clock seconds
        self.cpu = 0.0  # seconds of CPU the broker spent in the window
        self.rss = 0  # the broker's RSS at the window's end
        self._proc = proc

    def _cpu(self) -> float:
        t = self._proc.cpu_times()
        return float(t.user + t.system)

    def advance(self, now: float) -> None:
        """Open or close the measured window if ``now`` says so."""
        if not self.sending:
            return
        if not self.measuring and now >= self.measure_at:
            self.measuring, self.start = True, now
            if self._proc is not None:
                self.cpu = -self._cpu()
        elif self.measuring and now >= self.end_at:
            self.end = now
            if self._proc is not None:
                self.cpu += self._cpu()
                self.rss = self._proc.memory_info().rss
            self.measuring = self.sending = False

    def over(self, now: float, idle: bool) -> bool:
        """True once the load stopped and nothing is outstanding (``idle``) or the drain ran out."""
        return not self.sending and (idle or now >= self.drain_until)

    def wait_ms(self, now: float) -> int:
        """How long a poll may wait: until the window's next edge, 50 ms at most."""
        edge = (
            self.measure_at
            if self.sending and not self.measuring
            else self.end_at
            if self.sending
            else self.drain_until
        )
        return max(0, min(50, int((edge - now) * 1000) + 1))


def recv_frames(sock: zmq.Socket[bytes]) -> list[bytes]:
    """One waiting message; raises zmq.Again when there is none."""
    # Frames tell whether more parts follow without getsockopt(RCVMORE) (see
    # nfgate.transports.zmq, which reads the same way).
    frame = sock.recv(_NOBLOCK, copy=False)
    parts = [frame.bytes]
    while frame.more:
        frame = sock.recv(_NOBLOCK, copy=False)
        parts.append(frame.bytes)
    return parts


def send_frames(sock: zmq.Socket[bytes], frames: list[bytes]) -> None:
    # The Cython base class's send: pyzmq's Python wrapper costs as much as the send.
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        _send(sock, frame, _MORE if i < last else 0)


def _dealer(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, identity: bytes) -> zmq.Socket[bytes]:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.SNDHWM, 100_000)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.connect(endpoint)
    return sock


def _await(socks: list[zmq.Socket[bytes]], accept: Any, what: str, timeout: float = HELLO_TIMEOUT_S) -> None:
    """Wait until every socket got one message ``accept(frames)`` likes.

    Raises RuntimeError naming ``what`` if that takes longer than ``timeout`` seconds.
    """
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    pending = set(socks)
    deadline = time.monotonic() + timeout
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"{len(pending)} of {len(socks)} sockets got no {what} in {timeout:.0f} s")
        for sock, _ in poller.poll(int(left * 1000) + 1):
            while True:
                try:
                    frames = recv_frames(sock)
                except zmq.Again:
                    break
                if accept(frames):
                    pending.discard(sock)
    for sock in socks:
        poller.unregister(sock)


def _raise_fd_limit(count: int) -> None:
    # Each DEALER holds a mailbox and a TCP connection: 1,000 workers need ~2,000 fds.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * count + 256
    if soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


# --------------------------------------------------------------------- workers


def run_workers(
    dialect: Dialect, endpoint: str, count: int, *, confirm: bool = False, max_seconds: float = 3600.0
) -> None:
    """Register ``count`` workers and echo jobs until ``max_seconds`` pass.

    Raises RuntimeError when the broker does not acknowledge the workers in time.
    """
    _raise_fd_limit(count)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, count + 64)
    tag = os.getpid()
    names = [b"bw-%d-%d" % (tag, i) for i in range(count)]
    socks = [_dealer(ctx, endpoint, name) for name in names]
    try:
        if dialect.worker_hello is not None:
            for sock in socks:
                send_frames(sock, dialect.worker_hello)
            _await(socks, dialect.is_ack, "answer to OPEN")
        for sock in socks:
            send_frames(sock, dialect.worker_ready)
        if dialect.name in ("raw", "dcp"):
            _await(socks, dialect.is_ack, "answer to READY")
        print("ready", flush=True)
        if confirm:
            _await(socks, lambda frames: True, "message after READY (KEEPALIVE)", timeout=12.0)
            print("registered", flush=True)
        _echo(dialect, socks, names, max_seconds)
    finally:
        for sock in socks:
            sock.close(0)
        ctx.term()


def _echo(dialect: Dialect, socks: list[zmq.Socket[bytes]], names: list[bytes], max_seconds: float) -> None:
    poller = zmq.Poller()
    index: dict[zmq.Socket[bytes], int] = {}
    for i, sock in enumerate(socks):
        poller.register(sock, zmq.POLLIN)
        index[sock] = i
    work, heartbeat = dialect.work, dialect.worker_heartbeat
    busy = [False] * len(socks)
    now = time.monotonic()
    stop_at = now + max_seconds
    next_beat = now + 1.0
    while now < stop_at:
        for sock, _ in poller.poll(200):
            i = index[sock]
            for _ in range(256):
                try:
                    frames = recv_frames(sock)
                except zmq.Again:
                    break
                reply = work(frames, names[i])
                if reply is not None:
                    send_frames(sock, reply)
                    busy[i] = True
        now = time.monotonic()
        if heartbeat is not None and now >= next_beat:
            # Spec peers beat only when idle (any traffic counts); NorFab counts only KEEPALIVE.
            for i, sock in enumerate(socks):
                if dialect.heartbeat_always or not busy[i]:
                    send_frames(sock, heartbeat)
                busy[i] = False
            next_beat = now + 1.0


# --------------------------------------------------------------------- clients


def _percentile(sorted_ns: list[int], q: float) -> float:
    if not sorted_ns:
        return 0.0
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1000.0


def run_clients(
    dialect: Dialect,
    endpoint: str,
    *,
    clients: int,
    window: int,
    warmup: float,
    duration: float,
    size: int = 100,
    broker_pid: int = 0,
) -> dict[str, Any]:
    """Drive the load and return the figures (see the module docstring).

    Raises RuntimeError if the broker does not answer the dialect's hello in time.
    """
    proc = psutil.Process(broker_pid) if broker_pid else None
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    tag = os.getpid()
    socks = [_dealer(ctx, endpoint, b"bc-%d-%d" % (tag, i)) for i in range(clients)]
    try:
        if dialect.client_hello is not None:
            for sock in socks:
                send_frames(sock, dialect.client_hello)
            _await(socks, dialect.is_ack, "answer to OPEN")
        return _drive(dialect, socks, tag, window, warmup, duration, size, proc)
    finally:
        for sock in socks:
            sock.close(0)
        ctx.term()


def _drive(
    dialect: Dialect,
    socks: list[zmq.Socket[bytes]],
    tag: int,
    window: int,
    warmup: float,
    duration: float,
    size: int,
    proc: Any,
) -> dict[str, Any]:
    clock, clock_ns = time.perf_counter, time.perf_counter_ns
    poller = zmq.Poller()
    index: dict[zmq.Socket[bytes], int] = {}
    for i, sock in enumerate(socks):
        poller.register(sock, zmq.POLLIN)
        index[sock] = i
    outstanding: list[dict[bytes, tuple[int, bytes]]] = [{} for _ in socks]
    seq = [0] * len(socks)
    base = (tag & 0xFFFF) << 12  # client numbers unique across the runs of one bench
    request, parse, matches = dialect.request, dialect.parse, dialect.matches

    def fire(i: int) -> None:
        key = make_key(base + i, seq[i])
        seq[i] += 1
        body = make_body(key, size)
        send_frames(socks[i], request(key, body))
        outstanding[i][key] = (clock_ns(), body)

    counts = dict.fromkeys(
        ("sent", "done", "errors", "mismatches", "unknown", "interim", "unacknowledged"), 0
    )
    # Keys whose 202 came (NFP: the final reply must follow its request's own 202).
    acked: set[bytes] = set()
    wants_ack = dialect.acknowledged
    latencies: list[int] = []
    run_clock = RunClock(warmup, duration, proc, clock)
    measured = 0
    for i in range(len(socks)):
        for _ in range(window):
            fire(i)
    while True:
        now = clock()
        run_clock.advance(now)
        if run_clock.over(now, not any(outstanding)):
            break
        measuring, sending = run_clock.measuring, run_clock.sending
        for sock, _ in poller.poll(run_clock.wait_ms(now)):
            i = index[sock]
            mine = outstanding[i]
            for _ in range(1024):
                try:
                    frames = recv_frames(sock)
                except zmq.Again:
                    break
                kind, key, ok, body = parse(frames)
                if kind != FINAL:
                    if kind == INTERIM:
                        counts["interim"] += 1
                        if wants_ack and key in mine:
                            acked.add(key)
                    continue
                entry = mine.pop(key, None)
                if entry is None:
                    counts["unknown"] += 1
                    continue
                counts["done"] += 1
                if wants_ack and key not in acked:
                    counts["unacknowledged"] += 1
                elif not ok:
                    counts["errors"] += 1
                elif not matches(body, entry[1]):
                    counts["mismatches"] += 1
                elif measuring:  # only a right answer counts as throughput
                    measured += 1
                    latencies.append(clock_ns() - entry[0])
                acked.discard(key)
                if sending:
                    fire(i)
    counts["sent"] = sum(seq)
    unanswered = sum(len(o) for o in outstanding)
    return figures(measured, latencies, run_clock, proc, counts, unanswered)


def figures(
    measured: int, latencies: list[int], clock: RunClock, proc: Any, counts: dict[str, int], unanswered: int
) -> dict[str, Any]:
    """The JSON figures of one client run (shared with :mod:`nfgate.bench.nng_load`):
    ``latencies`` in ns (sorted here), the window and the broker's CPU and RSS from
    ``clock`` (meaningless when ``proc`` is None)."""
    latencies.sort()
    elapsed = max(1e-9, clock.end - clock.start)
    cpu, rss = clock.cpu, clock.rss
    return {
        "requests": measured,
        "seconds": round(elapsed, 3),
        "req_per_s": round(measured / elapsed, 1),
        "p50_us": round(_percentile(latencies, 0.50), 1),
        "p99_us": round(_percentile(latencies, 0.99), 1),
        "broker_cpu_s": round(cpu, 3) if proc is not None else None,
        "cpu_us_per_req": round(cpu / measured * 1e6, 1) if proc is not None and measured else None,
        "broker_rss_bytes": rss if proc is not None else None,
        **counts,
        "unanswered": unanswered,
    }


# ------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nfgate.bench.load", description=__doc__)
    sub = parser.add_subparsers(dest="role", required=True)
    w = sub.add_parser("workers")
    c = sub.add_parser("clients")
    for p in (w, c):
        p.add_argument("--dialect", required=True)
        p.add_argument("--endpoint", required=True)
    w.add_argument("--count", type=int, default=1)
    w.add_argument("--confirm", action="store_true")
    w.add_argument("--max-seconds", type=float, default=3600.0)
    c.add_argument("--clients", type=int, default=1)
    c.add_argument("--window", type=int, default=1)
    c.add_argument("--warmup", type=float, default=1.0)
    c.add_argument("--duration", type=float, default=3.0)
    c.add_argument("--size", type=int, default=100)
    c.add_argument("--broker-pid", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.role == "clients" and args.dialect == "memodb":
            # MemoDB clients are NNG req0 sockets, not DEALERs: a loop of their own.
            from nfgate.bench import nng_load

            result = nng_load.run_clients(
                args.endpoint,
                clients=args.clients,
                window=args.window,
                warmup=args.warmup,
                duration=args.duration,
                size=args.size,
                broker_pid=args.broker_pid,
            )
            print(json.dumps(result), flush=True)
            return 0
        dialect = Dialect(args.dialect)
        if args.role == "workers":
            if args.dialect in CLIENT_ONLY:
                raise ValueError(f"no bench worker speaks {args.dialect}")
            run_workers(
                dialect, args.endpoint, args.count, confirm=args.confirm, max_seconds=args.max_seconds
            )
        else:
            result = run_clients(
                dialect,
                args.endpoint,
                clients=args.clients,
                window=args.window,
                warmup=args.warmup,
                duration=args.duration,
                size=args.size,
                broker_pid=args.broker_pid,
            )
            print(json.dumps(result), flush=True)
    except (RuntimeError, ImportError, ValueError) as exc:
        print(f"bench load: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
