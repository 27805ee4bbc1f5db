"""Scenario ``churn``: each broker's memory while clients come and go.

Every request comes from a DEALER of its own, with an identity of its own (a NorFab
client run, a script's fresh socket), closed once its answer is in. ZeroMQ tells a
ROUTER nothing when a peer leaves, so whatever a broker keeps per client stays until
the broker forgets it itself. For each broker (by default the raw relay, nfgate's DCP
and NorFab dialects and NorFab's broker) one child process runs ``clients`` such
clients one after the other against a fresh broker with its own workers, and reads the
broker's RSS after a warm-up and then at each quarter of the run. nfgate runs with
``[limits] max_peers`` set to ``max_peers``, lower than the run's clients, so that the
run passes the bound: the first half's bytes per client show what nfgate keeps per
client, the second half's that it stops growing. ``python -m nfgate.bench.churn`` is the
child's entry point.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil
import zmq

from nfgate.bench.dialects import FINAL, Dialect, make_body, make_key
from nfgate.bench.load import send_frames
from nfgate.bench.procs import Child, ChildError, children
from nfgate.bench.runner import DIALECT_OF, SETTLE_S, BenchError, _python_module, _workers, start_broker
from nfgate.transports.zmq import connect_dealer

__all__ = ["CHURN_BROKERS", "churn", "main", "run_churn"]

CHURN_BROKERS = ("raw", "nfgate-dcp", "nfgate-norfab", "norfab")
WORKERS = 4
SAMPLES = 4  # RSS read after the warm-up and at each quarter of the run
ANSWER_TIMEOUT_S = 5.0  # one client's wait for its answer (then it counts as failed)


def _one(ctx: zmq.Context[zmq.Socket[bytes]], dialect: Dialect, endpoint: str, n: int, size: int) -> bool:
    """One client's life: connect under a new identity, say hello if the dialect has
    one, send one request, wait for its final answer, close. True if it was right."""
    sock = connect_dealer(ctx, endpoint, b"churn-" + os.urandom(8).hex().encode())
    try:
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        if dialect.client_hello is not None:
            send_frames(sock, dialect.client_hello)
            if not sock.poll(int(ANSWER_TIMEOUT_S * 1000)):
                return False
            sock.recv_multipart()
        key = make_key(0, n)
        body = make_body(key, size)
        send_frames(sock, dialect.request(key, body))
        while (left := deadline - time.monotonic()) > 0 and sock.poll(int(left * 1000) + 1):
            kind, _, good, got = dialect.parse(sock.recv_multipart())
            if kind == FINAL:
                return good and dialect.matches(got, body)
        return False
    finally:
        sock.close(0)


def run_churn(
    dialect: Dialect,
    endpoint: str,
    *,
    clients: int,
    warmup: int,
    size: int,
    broker_pid: int,
    max_seconds: float,
) -> dict[str, Any]:
    """``warmup`` clients, then ``clients`` more, one after the other; the broker's RSS
    after the warm-up and at each quarter. Stops early (and says so in ``clients``)
    after ``max_seconds``."""
    proc = psutil.Process(broker_pid)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    marks = [round(clients * (i + 1) / SAMPLES) for i in range(SAMPLES)]
    samples: list[tuple[int, int]] = []
    failed = 0
    stop = time.monotonic() + max_seconds
    try:
        for n in range(warmup):
            failed += not _one(ctx, dialect, endpoint, n, size)
        samples.append((0, int(proc.memory_info().rss)))
        started = time.monotonic()
        done = 0
        while done < clients and time.monotonic() < stop:
            failed += not _one(ctx, dialect, endpoint, warmup + done, size)
            done += 1
            if done in marks:
                samples.append((done, int(proc.memory_info().rss)))
        seconds = time.monotonic() - started
    finally:
        ctx.term()
    return {
        "clients": done,
        "warmup_clients": warmup,
        "failed": failed,
        "clients_per_s": round(done / seconds, 1) if seconds else None,
        "rss_bytes": samples,
    }


def _per_client(samples: Sequence[Sequence[int]]) -> tuple[float | None, float | None]:
    """Bytes of RSS per client over the first and the second half of the run."""
    by_count = {int(n): int(rss) for n, rss in samples}
    counts = sorted(by_count)
    if len(counts) < 3:
        return None, None
    first, mid, last = counts[0], counts[len(counts) // 2], counts[-1]

    def rate(a: int, b: int) -> float | None:
        return round((by_count[b] - by_count[a]) / (b - a), 1) if b > a else None

    return rate(first, mid), rate(mid, last)


def measure(name: str, clients: int, max_peers: int, size: int) -> dict[str, Any]:
    """The churn figures of broker ``name``; raises :class:`BenchError`."""
    dialect = DIALECT_OF[name]
    bound = f"[limits]\nmax_peers = {max_peers}\n"
    with tempfile.TemporaryDirectory(prefix="nfgate-bench-") as workdir, children() as kids:
        try:
            broker, endpoint = start_broker(name, kids, workdir, extra_toml=bound)
            _workers(kids, dialect, endpoint, WORKERS)
            time.sleep(SETTLE_S)
            args = [
                "--dialect", dialect, "--endpoint", endpoint, "--clients", str(clients),
                "--warmup", str(max(100, clients // 20)), "--size", str(size), "--broker-pid", str(broker.pid),
            ]  # fmt: skip
            child = Child(f"{dialect} churn", _python_module("nfgate.bench.churn", *args))
            kids.append(child)
            line = child.expect(r"^\{.*\}$", 30.0 + clients / 20, stream="out").group(0)
        except ChildError as exc:
            raise BenchError(f"churn {name}: {exc}") from None
    figures: dict[str, Any] = json.loads(line)
    first, second = _per_client(figures["rss_bytes"])
    figures["bytes_per_client_first_half"] = first
    figures["bytes_per_client_second_half"] = second
    if name.startswith("nfgate-"):
        figures["max_peers"] = max_peers
    return figures


def churn(
    brokers: Sequence[str],
    clients: int,
    max_peers: int,
    size: int,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """One JSON-ready object with every broker's churn figures. Raises :class:`BenchError`."""
    figures = {}
    for name in brokers:
        progress(f"bench: churn: {clients} clients, one request each, against {name}")
        figures[name] = measure(name, clients, max_peers, size)
    return {
        "scenario": "churn",
        "clients": clients,
        "workers": WORKERS,
        "body_bytes": size,
        "brokers": figures,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nfgate.bench.churn", description=__doc__)
    parser.add_argument("--dialect", required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--clients", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--broker-pid", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    try:
        result = run_churn(
            Dialect(args.dialect),
            args.endpoint,
            clients=args.clients,
            warmup=args.warmup,
            size=args.size,
            broker_pid=args.broker_pid,
            max_seconds=args.max_seconds,
        )
    except (ValueError, psutil.Error) as exc:
        print(f"bench churn: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return 130
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
