"""The least a Python DCP broker can do: the bench's floor for a translating broker.

``python -m nfgate.bench.lean [--bind URL]`` prints ``nfgate.bench.lean listening on URL`` on
stderr and brokers DCP (spec dialect) until killed.

What it does, and no more: reads frames positionally (protocol and type by position,
nothing validated), keeps a deque of free workers per service, a dict of the request
each worker holds and a FIFO of requests waiting per service; one request per worker,
as nfgate gives a DCP worker; REGISTRATION echoed, PING answered with PONG. It uses the
same I/O calls as nfgate's transport (frame by frame, ``copy=False`` receives, the
Cython base class's send), so a ratio nfgate-dcp / lean-dcp is the price of what nfgate
adds over moving the same frames: decoding into validated messages, the command model,
the routing core (fair queues, targets, liveness, timeouts, redispatch), dialects,
counters. No liveness, no error handling: a bench reference, not a broker.
"""

from __future__ import annotations

import functools
import sys
from collections import deque

import zmq

from nfgate.bench.relay import serve

__all__ = ["lean", "main"]

PROTOCOL = b"DGBX\x01"
REGISTRATION, PING, PONG, REQUEST, REPLY = b"\x01", b"\x02", b"\x03", b"\x04", b"\x05"
_NOBLOCK = int(zmq.NOBLOCK)
_MORE = int(zmq.NOBLOCK | zmq.SNDMORE)


def lean(sock: zmq.Socket[bytes]) -> None:
    """Broker forever on a bound ROUTER (returns only if the socket is closed)."""
    recv = sock.recv
    send = functools.partial(zmq.backend.Socket.send, sock)
    services: dict[bytes, bytes] = {}  # worker -> service
    free: dict[bytes, deque[bytes]] = {}  # service -> idle workers
    waiting: dict[bytes, deque[list[bytes]]] = {}  # service -> [client, metadata+data...]
    held: dict[bytes, bytes] = {}  # worker -> client it serves
    pong = [b"", PROTOCOL, PONG]

    def out(frames: list[bytes]) -> None:
        for frame in frames[:-1]:
            send(frame, _MORE)
        send(frames[-1], _NOBLOCK)

    def dispatch(worker: bytes, service: bytes, client: bytes, rest: list[bytes]) -> None:
        held[worker] = client
        out([worker, b"", PROTOCOL, REQUEST, service, client, *rest])

    while True:
        frame = recv(0, copy=False)  # blocks for the first frame of a message
        parts = [frame.bytes]
        while frame.more:
            frame = recv(_NOBLOCK, copy=False)
            parts.append(frame.bytes)
        sender, kind = parts[0], parts[3]
        if kind == REQUEST:  # [c, "", P, 04, service, client?, metadata..., "", data...]
            service = services.get(sender)
            client = parts[5] if service is not None else sender  # a worker's chained request
            name = parts[4]
            idle = free.get(name)
            if idle:
                dispatch(idle.popleft(), name, client, parts[6:])
            else:
                waiting.setdefault(name, deque()).append([client, *parts[6:]])
        elif kind == REPLY:  # [w, "", P, 05, client, metadata..., "", data...]
            client = held.pop(sender)
            out([client, b"", PROTOCOL, REPLY, b"", *parts[5:]])
            service = services[sender]
            queue = waiting.get(service)
            if queue:
                first = queue.popleft()
                dispatch(sender, service, first[0], first[1:])
            else:
                free[service].append(sender)
        elif kind == REGISTRATION:
            services[sender] = parts[4]
            out(parts)
            queue = waiting.get(parts[4])
            if queue:
                first = queue.popleft()
                dispatch(sender, parts[4], first[0], first[1:])
            else:
                free.setdefault(parts[4], deque()).append(sender)
        elif kind == PING:
            out([sender, *pong])


def main(argv: list[str] | None = None) -> int:
    return serve(lean, "nfgate.bench.lean", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
