"""``nfgate discover``: listen for DBP catalog beacons and print what is heard.

The beacon is the UDP datagram ``SHALOM <port>`` (design.md, DBP notes), sent every
second by each catalog (``nfgate serve``'s ``dbp`` edge, or Hermes) to UDP port 5245.
Each catalog heard is printed once, as one JSON object per line::

    {"catalog": "tcp://127.0.0.1:5246", "from": "127.0.0.1:5246"}

Exit status 0 when at least one catalog was heard, 1 when none was within ``--timeout``,
2 when the port cannot be bound.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import time

import click

from nfgate.cliparams import FiniteRange
from nfgate.codecs import dbp
from nfgate.errors import DecodeError

__all__ = ["discover", "listen"]


def listen(sock: socket.socket, timeout: float, count: int) -> list[tuple[str, str]]:
    """``(catalog URL, sender)`` for each distinct catalog heard on ``sock`` within
    ``timeout`` seconds, stopping early after ``count`` (0: no limit). Datagrams that are
    not beacons are ignored. Never raises for network input."""
    heard: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while count == 0 or len(heard) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        readable, _, _ = select.select([sock], [], [], left)
        if not readable:
            break
        try:
            data, sender = sock.recvfrom(2048)
        except OSError:
            continue
        try:
            port = dbp.decode_beacon(data)
        except DecodeError:
            continue
        url = f"tcp://{sender[0]}:{port}"
        if url not in heard:
            heard[url] = f"{sender[0]}:{sender[1]}"
            click.echo(json.dumps({"catalog": url, "from": heard[url]}))
            sys.stdout.flush()
    return list(heard.items())


@click.command()
@click.option("--address", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option("--port", default=dbp.BEACON_PORT, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--timeout", default=3.0, show_default=True, type=FiniteRange(0, 3600), help="Seconds to listen."
)
@click.option("--count", default=0, type=click.IntRange(0), help="Stop after this many catalogs (0: none).")
def discover(address: str, port: int, timeout: float, count: int) -> None:
    """Listen for DBP catalog beacons (UDP 'SHALOM <port>') and print each catalog heard."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        # Several listeners on one host (several tools, or tests) may share the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((address, port))
        except (OSError, OverflowError) as exc:
            click.echo(f"nfgate: cannot listen on udp://{address}:{port}: {exc}", err=True)
            sys.exit(2)
        heard = listen(sock, timeout, count)
    finally:
        sock.close()
    sys.exit(0 if heard else 1)
