"""Config keys of the ``memodb`` edge kind (``[edges.memodb]``).

Kept apart from the edge so that loading the config (:mod:`nfgate.edges.kinds`) imports
neither pynng nor the edge. Each parser takes the TOML value, the key's dotted name and
the config file's folder, and raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nfgate.edges.options import int_option, path_option
from nfgate.errors import ConfigError

__all__ = ["MEMODB_OPTIONS", "check_memodb"]


MEMODB_OPTIONS: Mapping[str, tuple[Callable[[object, str, Path], Any], Any]] = {
    # Requests held at once (idle workers' long-polls + clients waiting for a RESULT);
    # beyond it a request is dropped unanswered and counted (``refused``).
    "max_contexts": (int_option(1), 4096),
    # Of those, what one connection's clients may hold: one connection opening contexts
    # for JOBs no worker takes must not lock every other peer out.
    "max_contexts_per_peer": (int_option(1), 1024),
    # The JOB timeout given to a MemoDB worker for a request that carries none (from
    # an NFP, DCP or SADA client).
    "job_timeout_ms": (int_option(1), 300_000),
    # How long one reply may take to go out before it is given up (a peer not reading).
    "send_timeout_ms": (int_option(1), 30_000),
    # tls+tcp:// binds: one PEM file with the certificate and its private key, and
    # optionally a CA file that client certificates must be signed by.
    "tls_cert_key_file": (path_option, None),
    "tls_ca_file": (path_option, None),
}


def check_memodb(options: Mapping[str, Any], bind: tuple[str, ...], where: str) -> None:
    """Raise :class:`ConfigError` for TLS keys that cannot work, when the config is loaded
    (before any edge binds): a CA file without a certificate, or a ``tls+tcp://`` bind
    without one. Whether the files load is found when the edge is built (pynng)."""
    if options.get("tls_cert_key_file") is not None:
        return
    if options.get("tls_ca_file") is not None:
        raise ConfigError(f"config: {where}.tls_ca_file needs {where}.tls_cert_key_file")
    for url in bind:
        if url.startswith("tls+"):
            raise ConfigError(f"config: {where}.bind: {url} needs {where}.tls_cert_key_file")
