"""CURVE for the ZeroMQ edges: the server key pair, and an optional client-key allow-list
enforced by a ZAP handler (design.md "Durability, security, limits").

NorFab runs CURVE by default: its broker is a CURVE server that accepts any client key
(``CURVE_ALLOW_ANY``; the point is encryption), and its clients and workers trust the
broker key found in ``<base_dir>/__norfab__/files/broker/public_keys/broker.key`` or in
the inventory's ``broker.shared_key``. nfgate reads the same ZeroMQ certificate files
(``zmq.auth.create_certificates``' format, NorFab's ``private_keys/broker.key_secret``
among them), so a NorFab deployment keeps its keys when its broker becomes nfgate.

Without an allow-list no ZAP handler runs and libzmq accepts any client key, as NorFab
does. With one (a folder of ``*.key`` public certificates), a ZAP handler thread checks
each handshake against the folder; it is started once per ZeroMQ context, one ZAP domain
per edge, and must be stopped (:func:`stop_authenticators`) before the context ends.
"""

from __future__ import annotations

import threading
from pathlib import Path

import attrs
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from nfgate.errors import ConfigError

__all__ = ["Curve", "enable_server", "load_server_keys", "stop_authenticators"]


@attrs.frozen(kw_only=True)
class Curve:
    """A CURVE server's key pair (Z85 text as bytes) and its optional client allow-list."""

    public_key: bytes
    secret_key: bytes = attrs.field(repr=False)
    allow: Path | None = None


def load_server_keys(secret_file: Path, allow: Path | None = None) -> Curve:
    """The key pair in a ZeroMQ secret certificate file.

    Raises:
        ConfigError: the file is missing, unreadable or holds no secret key, or ``allow``
            is not a folder.
    """
    try:
        public, secret = zmq.auth.load_certificate(secret_file)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"config: curve_secret_key: cannot read {secret_file}: {exc}") from None
    if not secret:
        raise ConfigError(
            f"config: curve_secret_key: {secret_file} holds no secret key (use the .key_secret file)"
        )
    for which, key in (("public", public), ("secret", secret)):
        if not _is_z85_key(key):
            # libzmq refuses such a key only at setsockopt, once other edges have bound.
            raise ConfigError(
                f"config: curve_secret_key: the {which} key in {secret_file} is not a CURVE key "
                "(40 Z85 characters)"
            )
    if allow is not None and not allow.is_dir():
        raise ConfigError(f"config: curve_allow: {allow} is not a folder of public .key files")
    return Curve(public_key=public, secret_key=secret, allow=allow)


def _is_z85_key(key: bytes | None) -> bool:
    if key is None or len(key) != 40:
        return False
    try:
        return len(z85.decode(key)) == 32
    except (ValueError, KeyError, TypeError):  # a character outside Z85's alphabet
        return False


_lock = threading.Lock()
_authenticators: dict[int, ThreadAuthenticator] = {}


def enable_server(sock: zmq.Socket[bytes], curve: Curve, domain: str) -> None:
    """Make ``sock`` a CURVE server (call before bind); with an allow-list, register
    ``domain`` with the context's ZAP handler, started on first use."""
    sock.curve_secretkey = curve.secret_key
    sock.curve_publickey = curve.public_key
    sock.curve_server = True
    if curve.allow is None:
        return
    sock.zap_domain = domain.encode()
    context = sock.context
    with _lock:
        auth = _authenticators.get(id(context))
        if auth is None:
            auth = _authenticators[id(context)] = ThreadAuthenticator(context)
            auth.start()
    auth.configure_curve(domain=domain, location=str(curve.allow))


def stop_authenticators(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    """Stop the ZAP handler of ``context`` if one was started (before ``context.term()``)."""
    with _lock:
        auth = _authenticators.pop(id(context), None)
    if auth is not None:
        auth.stop()
