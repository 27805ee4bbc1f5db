"""The bench's ceiling: a minimal raw pyzmq ROUTER relay, no decoding.

``python -m nfgate.bench.relay [--bind URL]`` prints ``nfgate.bench.relay listening on URL`` on
stderr and relays until killed.

One ROUTER socket for clients and workers, as NorFab's broker and nfgate's edges have,
so the comparison is socket for socket. A worker says ``["", "READY"]`` (answered
``["", "OK"]``); a client sends ``["", service, key, body]``, which goes to the next
worker round-robin as ``["", client, key, body]``; the worker sends that back and the
relay returns ``["", key, body]`` to the client. The service frame is not read. Requests
that arrive before any worker wait in a list (the bench starts workers first).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import zmq

__all__ = ["main", "relay", "serve"]


def relay(sock: zmq.Socket[bytes]) -> None:
    """Relay forever on a bound ROUTER (returns only if the socket is closed)."""
    workers: list[bytes] = []
    known: set[bytes] = set()
    waiting: list[list[bytes]] = []
    turn = 0
    recv, send = sock.recv_multipart, sock.send_multipart
    while True:
        msg = recv()
        sender = msg[0]
        if sender in known:  # a worker's echo: [w, "", client, key, body]
            send([msg[2], b"", *msg[3:]])
        elif len(msg) == 3 and msg[2] == b"READY":
            known.add(sender)
            workers.append(sender)
            send([sender, b"", b"OK"])
            for held in waiting:
                send([sender, b"", *held])
            waiting.clear()
        elif not workers:
            waiting.append([sender, *msg[3:]])
        else:  # a client's request: [c, "", service, key, body]
            turn = (turn + 1) % len(workers)
            send([workers[turn], b"", sender, *msg[3:]])


def serve(
    loop: Callable[[zmq.Socket[bytes]], None], prog: str, description: str | None, argv: list[str] | None
) -> int:
    """Bind a ROUTER (``--bind``, default a free loopback port), print ``<prog>
    listening on URL`` on stderr and run ``loop`` on it until killed: the main of the
    bench's reference brokers (this relay and :mod:`nfgate.bench.lean`)."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=description)
    parser.add_argument("--bind", default="tcp://127.0.0.1:*", help="ROUTER address (default: a free port)")
    args = parser.parse_args(argv)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 100_000)
    sock.setsockopt(zmq.RCVHWM, 100_000)
    sock.bind(args.bind)
    print(f"{prog} listening on {sock.getsockopt_string(zmq.LAST_ENDPOINT)}", file=sys.stderr, flush=True)
    try:
        loop(sock)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close(0)
        ctx.term()
    return 0


def main(argv: list[str] | None = None) -> int:
    return serve(relay, "nfgate.bench.relay", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
