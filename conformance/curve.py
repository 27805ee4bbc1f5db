"""CURVE on the suite's own sockets: ``--curve-server-key`` and ``--curve-secret-key``.

NorFab runs CURVE by default (its inventory's ``zmq_auth``), and a peer that runs it
answers nothing to a socket that does not: without these options the suite could grade
only peers with CURVE switched off. The suite takes the peer's public key the way
NorFab's clients do, from a ZeroMQ certificate file (NorFab's broker writes
``__norfab__/files/broker/public_keys/broker.key``) or as its 40-character Z85 text.

- Roles where the suite connects (broker, catalog, channel): ``--curve-server-key`` makes
  every connection a CURVE client of that key. The suite's own key pair is
  ``--curve-secret-key``'s, else one made for the run (NorFab's broker accepts any
  client key; a peer with an allow-list needs the file of a listed key).
- Roles where the suite binds (worker, server): ``--curve-secret-key`` makes the suite a
  CURVE server with that key pair, and its public key is printed for the peer under
  test; any client key is accepted (no ZAP handler runs), as NorFab's broker does.

CURVE is ZeroMQ's: MemoDB (NNG) has TLS instead (:mod:`nfgate.conformance.tls`).
"""

from __future__ import annotations

import time
from pathlib import Path

import attrs
import zmq
from zmq.utils.monitor import recv_monitor_message

from nfgate.errors import ConfigError
from nfgate.transports.curve import (
    HANDSHAKE_EVENTS,
    ClientCurve,
    Curve,
    client_keys,
    enable_client,
    enable_server,
    handshake_failure,
    load_server_keys,
)

__all__ = [
    "SUITE_DOMAIN",
    "HandshakeWatch",
    "SuiteCurve",
    "bind_secured",
    "connect_secured",
    "handshake_problem",
    "load_curve",
    "secure_connect",
]


SUITE_DOMAIN = "nfgate-conformance"  # the ZAP domain of the suite's CURVE server sockets


@attrs.frozen(kw_only=True)
class SuiteCurve:
    """The suite's CURVE settings for one run: as a client of the peer (``client``), or
    as a CURVE server with its own pair (``server``, no client allow-list)."""

    client: ClientCurve | None = None
    server: Curve | None = None

    @property
    def public_key(self) -> bytes:
        """The suite's own public key (for the peer under test)."""
        if self.client is not None:
            return self.client.public_key
        return self.server.public_key if self.server is not None else b""

    def describe(self) -> dict[str, str]:
        """For the report: the suite's part and the public keys (never a secret one)."""
        if self.client is None:
            return {"as": "server", "public_key": self.public_key.decode()}
        return {
            "as": "client",
            "server_key": self.client.server_key.decode(),
            "public_key": self.client.public_key.decode(),
        }


def load_curve(
    server_key: str | None, secret_file: Path | None, *, binds: bool, codec: str
) -> SuiteCurve | None:
    """The run's CURVE settings from the two options (None: no CURVE).

    Raises:
        ConfigError: a key that cannot be read; ``--curve-server-key`` for a role where
        the suite binds (the peer connects to the suite: give ``--curve-secret-key``), or
        ``--curve-secret-key`` alone where it connects; either option for MemoDB, which
        runs over NNG.
    """
    if server_key is None and secret_file is None:
        return None
    if codec == "memodb":
        raise ConfigError("CURVE is ZeroMQ's: MemoDB runs over NNG (use a plain or tls+tcp:// peer)")
    if binds:
        if server_key is not None:
            raise ConfigError(
                "--curve-server-key is for roles where the suite connects; here the suite binds: "
                "give --curve-secret-key to make it a CURVE server"
            )
        try:
            server = load_server_keys(secret_file or Path())
        except ConfigError as exc:  # worded for the gateway's config: say the option
            raise ConfigError(str(exc).replace("config: curve_secret_key", "--curve-secret-key", 1)) from None
        return SuiteCurve(server=server)
    if server_key is None:
        raise ConfigError(
            "--curve-secret-key alone: the suite connects here, so it needs the peer's public "
            "key too (--curve-server-key)"
        )
    return SuiteCurve(
        client=client_keys(server_key, secret_file, ("--curve-server-key", "--curve-secret-key"))
    )


def secure_connect(sock: zmq.Socket[bytes], curve: SuiteCurve | None) -> None:
    """Make ``sock``'s next connections CURVE clients of the peer (set before connect())."""
    if curve is not None and curve.client is not None:
        enable_client(sock, curve.client)


def connect_secured(sock: zmq.Socket[bytes], url: str, curve: SuiteCurve | None) -> None:
    """``sock.connect(url)``, as a CURVE client when the run has a server key."""
    secure_connect(sock, curve)
    sock.connect(url)


def bind_secured(sock: zmq.Socket[bytes], url: str, curve: SuiteCurve | None) -> None:
    """``sock.bind(url)``, as a CURVE server when the run has the suite's own key pair
    (any client key is taken: no ZAP handler runs). Raises what ``bind`` raises
    (:class:`zmq.ZMQError`)."""
    if curve is not None and curve.server is not None:
        enable_server(sock, curve.server, SUITE_DOMAIN)
    sock.bind(url)


def handshake_problem(
    context: zmq.Context[zmq.Socket[bytes]], url: str, curve: SuiteCurve | None, wait_s: float
) -> str | None:
    """Connect one DEALER to ``url`` as the cases will, and say what is wrong when the
    ZeroMQ handshake fails within ``wait_s``; None when it succeeds or nothing answers
    (a peer not started yet, or silent: the cases report that). Never raises.

    Why: a handshake that fails on the security mechanism (a CURVE peer reached without
    ``--curve-server-key``, or the other way round) is never retried by libzmq, so every
    case would wait in vain; the user's mistake is better named once, before the run.
    """
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    monitor = sock.get_monitor_socket(HANDSHAKE_EVENTS)
    failed = ""
    try:
        secure_connect(sock, curve)
        sock.connect(url)
        end = time.monotonic() + wait_s
        for _ in range(10_000):  # bounded: every pass waits or reads one event
            left = end - time.monotonic()
            if left <= 0 or not monitor.poll(int(left * 1000) + 1):
                break
            event = recv_monitor_message(monitor)
            kind, value = event["event"], event["value"]
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                return None
            failure = handshake_failure(kind, value)
            if failure == "mechanism":
                if curve is None:
                    return (
                        f"{url} runs a ZeroMQ security mechanism (CURVE, as NorFab does by default): "
                        "give its public key with --curve-server-key"
                    )
                return f"{url} does not run CURVE: leave out --curve-server-key"
            if failure == "refused":
                return (
                    f"{url} refused the suite's CURVE key (ZAP status {value}): give the certificate "
                    "of a key it allows with --curve-secret-key"
                )
            failed = f"{str(zmq.Event(kind).name).lower()} ({value})"  # libzmq retries: wait on
    except zmq.ZMQError:
        return None  # the address is checked apart; anything else is the cases' to see
    finally:
        sock.disable_monitor()
        monitor.close(0)
        sock.close(0)
    if not failed:
        return None
    if curve is not None:  # a plain peer may close before its error reaches us, too
        return (
            f"the CURVE handshake with {url} failed ({failed}): is --curve-server-key its public key, "
            "and does it run CURVE at all?"
        )
    # A CURVE server may close before its error reaches a plain client (EPIPE): say both.
    return (
        f"the ZeroMQ handshake with {url} failed ({failed}): is it a ZeroMQ peer? One running "
        "CURVE (NorFab's default) needs its public key: --curve-server-key"
    )


class HandshakeWatch:
    """Handshake failures on a socket the suite bound, for when the peer under test never
    speaks: a worker or server that connects with CURVE on one side only, or with another
    key, fails its handshake and is never seen otherwise. Read without blocking."""

    def __init__(self, sock: zmq.Socket[bytes]) -> None:
        self._sock = sock
        self._monitor: zmq.Socket[bytes] | None = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        )
        self._failure: tuple[int, int] | None = None  # the last (event, value) read
        self._mismatch = False  # one failed on the security mechanism

    def problem(self, curve: SuiteCurve | None) -> str | None:
        """What the failed handshakes say, or None when there was none. A mechanism
        mismatch seen once is the diagnosis: the others of the same peer may end in a
        bare EPIPE, when it closed before the suite's error reached it."""
        for _ in range(10_000):  # bounded: a peer retries every 100 ms at most
            if self._monitor is None or not self._monitor.poll(0):
                break
            event = recv_monitor_message(self._monitor)
            self._failure = (event["event"], event["value"])
            self._mismatch |= handshake_failure(*self._failure) == "mechanism"
        if self._failure is None:
            return None
        kind, value = self._failure
        if self._mismatch:
            if curve is None:
                return (
                    "a peer connected, but runs a ZeroMQ security mechanism (CURVE?): give the suite "
                    "a key pair with --curve-secret-key and the peer its public key"
                )
            return "a peer connected, but does not run CURVE: leave out --curve-secret-key"
        if curve is not None:
            return (
                "a peer connected, but its CURVE handshake failed: does it use the suite's public "
                f"key, {curve.public_key.decode()}?"
            )
        return (
            f"a peer connected, but its ZeroMQ handshake failed ({zmq.Event(kind).name}, {value}): "
            "one running CURVE needs the suite's key pair, --curve-secret-key"
        )

    def close(self) -> None:
        """Stop watching; the watched socket may be closed already (a case that restarts
        the suite's channel closes it)."""
        if self._monitor is not None:
            if not self._sock.closed:
                self._sock.disable_monitor()
            self._monitor.close(0)
            self._monitor = None
