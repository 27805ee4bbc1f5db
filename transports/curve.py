"""CURVE for the ZeroMQ edges: the server key pair, and an optional client-key allow-list
enforced by a ZAP handler (design.md "Durability, security, limits").

NorFab runs CURVE by default: its broker is a CURVE server that accepts any client key
(``CURVE_ALLOW_ANY``; the point is encryption), and its clients and workers trust the
broker key found in ``<base_dir>/__norfab__/files/broker/public_keys/broker.key`` or in
the inventory's ``broker.shared_key``. nfgate reads the same ZeroMQ certificate files
(``zmq.auth.create_certificates``' format, NorFab's ``private_keys/broker.key_secret``
among them), so a NorFab deployment keeps its keys when its broker becomes nfgate.

Without an allow-list no ZAP handler runs and libzmq accepts any client key, as NorFab
does. With one (a folder of ``*.key`` public certificates, read once, at start), a ZAP
handler thread checks each handshake. There is one per ZeroMQ context, and once it runs
libzmq asks it about every CURVE socket of that context: so each CURVE socket has its
own ZAP domain (its edge's name) and each domain its own policy (:class:`Guard`), "any
key" or "these keys", registered whichever of the edges comes first. The handler must
be stopped (:func:`stop_authenticators`) before the context ends.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from pathlib import Path

import attrs
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from nfgate.errors import ConfigError

__all__ = [
    "ClientCurve",
    "Curve",
    "HANDSHAKE_EVENTS",
    "Guard",
    "client_keys",
    "enable_client",
    "enable_server",
    "handshake_failure",
    "is_z85_key",
    "load_server_keys",
    "read_public_key",
    "stop_authenticators",
]

log = logging.getLogger("nfgate.transports.curve")

MAX_KEYS_LOGGED = 256  # refused client keys an edge logs (once each) before it summarises
SUMMARY_EVERY_S = 60.0  # beyond those: one line with a count, at most this often


@attrs.frozen(kw_only=True)
class Curve:
    """A CURVE server's key pair (Z85 text as bytes) and its optional client allow-list:
    the folder and the Z85 public keys read from it (``allowed``; None: any key)."""

    public_key: bytes
    secret_key: bytes = attrs.field(repr=False)
    allow: Path | None = None
    allowed: frozenset[bytes] | None = None


def load_server_keys(secret_file: Path, allow: Path | None = None) -> Curve:
    """The key pair in a ZeroMQ secret certificate file, and the client public keys in
    the ``*.key`` files of the folder ``allow``.

    Raises:
        ConfigError: the file is missing, unreadable or holds no secret key; or ``allow``
            is not a readable folder, one of its ``*.key`` files cannot be read or holds
            no CURVE public key, or it has no ``*.key`` file at all.
    """
    try:
        public, secret = zmq.auth.load_certificate(secret_file)
    except (OSError, ValueError, IndexError) as exc:
        raise ConfigError(f"config: curve_secret_key: cannot read {secret_file}: {exc}") from None
    if not secret:
        raise ConfigError(
            f"config: curve_secret_key: {secret_file} holds no secret key (use the .key_secret file)"
        )
    for which, key in (("public", public), ("secret", secret)):
        if not is_z85_key(key):
            # libzmq refuses such a key only at setsockopt, once other edges have bound.
            raise ConfigError(
                f"config: curve_secret_key: the {which} key in {secret_file} is not a CURVE key "
                "(40 Z85 characters)"
            )
    allowed = None if allow is None else _load_allow(allow)
    return Curve(public_key=public, secret_key=secret, allow=allow, allowed=allowed)


@attrs.frozen(kw_only=True)
class ClientCurve:
    """A CURVE client's keys: the server's public key (whom it trusts) and its own pair
    (Z85 text as bytes)."""

    server_key: bytes
    public_key: bytes
    secret_key: bytes = attrs.field(repr=False)


def read_public_key(value: str, what: str) -> bytes:
    """A CURVE public key given as its 40 Z85 characters or as a ZeroMQ certificate file
    (a public ``.key`` or a ``.key_secret``: NorFab's clients read the broker's
    ``public_keys/broker.key``).

    Raises:
        ConfigError: starting with ``what`` (the option's name), when ``value`` is neither
            a Z85 key nor a readable certificate file with a CURVE public key.
    """
    if is_z85_key(value.encode("ascii", "replace")):
        return value.encode("ascii")
    try:
        public, _ = zmq.auth.load_certificate(Path(value))
    except OSError as exc:
        raise ConfigError(
            f"{what}: {value!r} is neither a CURVE key (40 Z85 characters) nor a readable certificate file ({_why(exc)})"
        ) from None
    except (
        ValueError,
        IndexError,
    ):  # no public-key line (or one pyzmq cannot split), or no file at all (pyzmq says "Invalid certificate file")
        public = None
    if public is None or not is_z85_key(public):
        raise ConfigError(
            f"{what}: {value!r} is neither a CURVE key (40 Z85 characters) nor a certificate file holding one"
        )
    return public


def client_keys(server_key: str, secret_file: Path | None, what: tuple[str, str]) -> ClientCurve:
    """A :class:`ClientCurve` trusting ``server_key`` (see :func:`read_public_key`), with
    the key pair of the secret certificate ``secret_file``, or one made now (enough for a
    server that takes any client key, as NorFab's does). ``what``: the two options' names,
    for the messages.

    Raises:
        ConfigError: a key that cannot be read (naming the option).
    """
    trusted = read_public_key(server_key, what[0])
    if secret_file is None:
        public, secret = zmq.curve_keypair()
        return ClientCurve(server_key=trusted, public_key=public, secret_key=secret)
    try:
        mine, own_secret = zmq.auth.load_certificate(secret_file)
    except (OSError, ValueError, IndexError) as exc:
        why = _why(exc) if isinstance(exc, OSError) else str(exc)
        raise ConfigError(f"{what[1]}: cannot read {secret_file}: {why}") from None
    if mine is None or own_secret is None or not (is_z85_key(mine) and is_z85_key(own_secret)):
        raise ConfigError(
            f"{what[1]}: {secret_file} holds no CURVE key pair (a ZeroMQ secret certificate, "
            "the .key_secret file, is needed)"
        )
    return ClientCurve(server_key=trusted, public_key=mine, secret_key=own_secret)


HANDSHAKE_EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
"""The socket-monitor events of a ZeroMQ handshake, for telling a CURVE set-up that
cannot work (:func:`handshake_failure`) from a peer that is only not there yet."""


def handshake_failure(kind: int, value: int) -> str:
    """What a failed-handshake monitor event (``kind``, ``value``) says: "mechanism" (one
    side runs CURVE and the other does not: libzmq never retries it), "refused" (the
    server's ZAP handler refused the client key) or "failed" (anything else: another
    server key, a peer that closed before its error arrived). Never raises."""
    if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
        return "mechanism"
    if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return "refused"
    return "failed"


def enable_client(sock: zmq.Socket[bytes], curve: ClientCurve) -> None:
    """Make ``sock``'s next connections CURVE clients (call before connect: libzmq takes
    the security options of each connection as they are when it is made)."""
    sock.curve_serverkey = curve.server_key
    sock.curve_publickey = curve.public_key
    sock.curve_secretkey = curve.secret_key


def _load_allow(folder: Path) -> frozenset[bytes]:
    # pyzmq's own loader (Authenticator.configure_curve) logs a file it cannot read and
    # goes on with no key at all: a gateway that starts and refuses every client.
    if not folder.is_dir():
        raise ConfigError(f"config: curve_allow: {folder} is not a folder of public .key files")
    try:
        # czmq's and pyzmq's pattern: the *.key files, not the hidden ones (glob's "*").
        files = sorted(p for p in folder.iterdir() if p.suffix == ".key" and not p.name.startswith("."))
    except OSError as exc:
        raise ConfigError(f"config: curve_allow: cannot read the folder {folder}: {_why(exc)}") from None
    keys: set[bytes] = set()
    for path in files:
        try:
            public, _ = zmq.auth.load_certificate(path)
        except OSError as exc:
            raise ConfigError(f"config: curve_allow: cannot read {path}: {_why(exc)}") from None
        except (ValueError, IndexError):  # no (readable) public-key line
            public = None
        if public is None or not is_z85_key(public):
            raise ConfigError(
                f"config: curve_allow: {path} holds no CURVE public key (a public-key line of "
                "40 Z85 characters)"
            )
        keys.add(public)
    if not keys:
        raise ConfigError(
            f"config: curve_allow: {folder} holds no public .key files: every client would be refused"
        )
    return frozenset(keys)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)  # strerror: without the file name, already in the message


def is_z85_key(key: bytes | None) -> bool:
    """True when ``key`` is a CURVE key as Z85 text: 40 characters that decode to 32 bytes."""
    if key is None or len(key) != 40:
        return False
    try:
        return len(z85.decode(key)) == 32
    except (ValueError, KeyError, TypeError):  # a character outside Z85's alphabet
        return False


class Guard:
    """The ZAP policy of one CURVE socket (one edge, one ZAP domain): any client key, or
    only the ``allowed`` ones. Counts refused handshakes (:attr:`refused`) and logs each
    refused key once, up to :data:`MAX_KEYS_LOGGED` keys, then a count at most every
    :data:`SUMMARY_EVERY_S`: a client retrying, or a flood of keys, cannot fill the log.

    :meth:`admits` runs in the ZAP thread; the edge reads :attr:`refused` from the loop
    thread. One writer, a plain int: under the GIL the reader sees an old or new value,
    never a torn one, so there is no lock.
    """

    def __init__(self, domain: str, allowed: frozenset[bytes] | None) -> None:
        self.domain = domain
        self.allowed = allowed
        self.refused = 0
        self._logged: set[bytes] = set()
        self._unlogged = 0  # refusals of keys not logged since the last summary
        self._summary_at = -SUMMARY_EVERY_S

    def admits(self, key: bytes, address: str) -> bool:
        """Whether the client with the Z85 public ``key``, from ``address``, may connect."""
        if self.allowed is None or key in self.allowed:
            return True
        self.refused += 1
        if key in self._logged:
            return False
        text = key.decode("ascii", "replace")
        if len(self._logged) < MAX_KEYS_LOGGED:
            self._logged.add(key)
            log.warning(
                "%s edge: refused a CURVE client not in curve_allow: key %s from %s (logged once per key)",
                self.domain,
                text,
                address or "an unknown address",
            )
            return False
        self._unlogged += 1
        now = time.monotonic()
        if now - self._summary_at >= SUMMARY_EVERY_S:
            log.warning(
                "%s edge: refused %d more CURVE handshakes of keys not logged (the first %d "
                "refused keys are); last: key %s from %s",
                self.domain,
                self._unlogged,
                MAX_KEYS_LOGGED,
                text,
                address or "an unknown address",
            )
            self._unlogged = 0
            self._summary_at = now
        return False


class _Authenticator(ThreadAuthenticator):
    """pyzmq's ZAP thread, noting each request's client address for the :class:`Guard`
    (its credentials callback gets only the domain and the key)."""

    address = ""

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        # ZAP (RFC 27): version, request id, domain, address, identity, mechanism, ...
        self.address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else ""
        await super().handle_zap_message(msg)


@attrs.frozen
class _Provider:
    """What pyzmq's ``configure_curve_callback`` calls for one domain."""

    guard: Guard
    auth: _Authenticator

    def callback(self, domain: str, key: bytes) -> bool:
        return self.guard.admits(key, self.auth.address)


@attrs.define
class _Zap:
    """The CURVE domains of one context, and its ZAP handler once an allow-list needs it."""

    guards: dict[str, Guard] = attrs.Factory(dict)
    auth: _Authenticator | None = None


_lock = threading.Lock()
# Weak: a context whose handler never started leaves no entry (nor its id to a new one).
_zaps: weakref.WeakKeyDictionary[zmq.Context[zmq.Socket[bytes]], _Zap] = weakref.WeakKeyDictionary()


def enable_server(sock: zmq.Socket[bytes], curve: Curve, domain: str) -> Guard:
    """Make ``sock`` a CURVE server (call before bind) under the ZAP domain ``domain``
    (unique per context) and return its :class:`Guard`. With an allow-list, start the
    context's ZAP handler if it is not running; the handler knows every domain
    registered in the context, before it started or after.

    Raises :class:`RuntimeError` (pyzmq) if the ZAP thread does not start."""
    sock.curve_secretkey = curve.secret_key
    sock.curve_publickey = curve.public_key
    sock.curve_server = True
    # Always a domain of its own: a CURVE socket without one would be checked under "*"
    # once another edge's allow-list has started the handler, and refused.
    sock.zap_domain = domain.encode()
    guard = Guard(domain, curve.allowed)
    context = sock.context
    with _lock:
        zap = _zaps.setdefault(context, _Zap())
        zap.guards[domain] = guard
        if zap.auth is not None:
            zap.auth.configure_curve_callback(domain, _Provider(guard, zap.auth))
        elif curve.allowed is not None:
            auth = _Authenticator(context)
            for name, each in zap.guards.items():  # before start: no handshake sees a gap
                auth.configure_curve_callback(name, _Provider(each, auth))
            auth.start()
            zap.auth = auth
    return guard


def stop_authenticators(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    """Stop the ZAP handler of ``context`` if one was started (before ``context.term()``)
    and forget its domains."""
    with _lock:
        zap = _zaps.pop(context, None)
    if zap is not None and zap.auth is not None:
        zap.auth.stop()
