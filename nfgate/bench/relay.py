"""The bench's ceiling: a minimal raw pyzmq ROUTER relay, no decoding.

``python -m nfgate.bench.relay [--bind URL]`` prints ``nfgate.bench.relay listening on URL`` on
stderr and relays until killed.

One ROUTER socket for clients and workers, as NorFab's broker and nfgate's edges have,
so the comparison is socket for socket. A worker says ``["", "READY"]`` (answered
``["", "OK"]``); a client sends ``["", service, key, body]``, which goes to the next
worker round-robin as ``["", client, key, body]``; the worker sends that back and the
relay returns ``["", key, body]`` to the client. The service frame is not read. Requests
that arrive before any worker wait in a list (the bench starts workers first).

``--fast`` (the bench's ``raw-fast``, not in its default run): the same routing with
the I/O calls nfgate's transport and the lean DCP broker use (frame by frame,
``copy=False`` receives, the Cython base class's send), about 1.1 times the plain
relay's throughput sync and 1.5 to 1.8 times pipelined here: the ceiling for a Python broker
that tunes its calls as nfgate does, where the plain relay is what the issue names.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

import zmq

__all__ = ["main", "relay", "relay_fast", "serve"]

_NOBLOCK = int(zmq.NOBLOCK)
_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)


def relay(sock: zmq.Socket[bytes]) -> None:
    """Relay forever on a bound ROUTER (returns only if the socket is closed)."""
    _route(sock.recv_multipart, sock.send_multipart)


def relay_fast(sock: zmq.Socket[bytes]) -> None:
    """:func:`relay` with nfgate's I/O calls (module docstring, ``--fast``)."""
    recv = sock.recv
    send: Callable[[bytes, int], object] = functools.partial(zmq.backend.Socket.send, sock)

    def recv_all() -> list[bytes]:
        frame = recv(0, copy=False)
        msg = [frame.bytes]
        while frame.more:
            frame = recv(_NOBLOCK, copy=False)
            msg.append(frame.bytes)
        return msg

    def send_all(frames: list[bytes]) -> None:
        for frame in frames[:-1]:
            send(frame, _MORE)
        send(frames[-1], _NOBLOCK)

    _route(recv_all, send_all)


def _route(recv: Callable[[], list[bytes]], send: Callable[[list[bytes]], object]) -> None:
    """The relay's routing (module docstring) over one ROUTER's ``recv`` and ``send``."""
    workers: list[bytes] = []
    known: set[bytes] = set()
    waiting: list[list[bytes]] = []
    turn = 0
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
    args = list(sys.argv[1:] if argv is None else argv)
    fast = "--fast" in args
    if fast:
        args.remove("--fast")
    return serve(relay_fast if fast else relay, "nfgate.bench.relay", __doc__, args)


if __name__ == "__main__":
    sys.exit(main())
