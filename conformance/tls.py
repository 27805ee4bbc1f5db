"""TLS on the suite's NNG sockets (MemoDB roles): ``--tls-ca``, ``--tls-cert-key`` and
``--tls-server-name``, for peers on ``tls+tcp://`` as nfgate's MemoDB edge offers them
(docs/protocols/memodb.md). CURVE (:mod:`nfgate.conformance.curve`) is ZeroMQ's; this is
NNG's counterpart.

- Broker role (the suite dials): ``--tls-ca`` is the CA the broker's certificate must be
  signed by (a self-signed certificate is its own CA), checked against
  ``--tls-server-name`` (default: the endpoint's host); ``--tls-cert-key`` is the suite's
  own certificate, for a broker that asks clients for one.
- Worker role (the suite listens): ``--tls-cert-key`` is the suite's certificate and key
  (one PEM file, as nfgate's ``tls_cert_key_file``); with ``--tls-ca`` the worker must
  present a certificate signed by it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pynng

from nfgate.errors import ConfigError

__all__ = ["load_tls", "secure_nng"]


def load_tls(
    ca: Path | None,
    cert_key: Path | None,
    server_name: str | None,
    *,
    binds: bool,
    codec: str,
    endpoint: str,
) -> pynng.TLSConfig | None:
    """The run's NNG TLS config from the options (None: plain ``tcp://``).

    Raises:
        ConfigError: an option given for a ZeroMQ protocol, an endpoint that is not
        ``tls+tcp://`` (or a ``tls+tcp://`` one without the options it needs), a file
        NNG cannot load.
    """
    given = ca is not None or cert_key is not None or server_name is not None
    secured = endpoint.startswith("tls+tcp://")
    if not given and not secured:
        return None
    if codec != "memodb":
        if not given:
            raise ConfigError(
                f"{endpoint}: tls+tcp:// is NNG's (MemoDB); ZeroMQ peers are on tcp://, with CURVE (--curve-*)"
            )
        raise ConfigError("--tls-* options are for MemoDB (NNG); the ZeroMQ protocols have CURVE (--curve-*)")
    if not secured:
        raise ConfigError(f"--tls-* options need a tls+tcp:// endpoint, not {endpoint}")
    if binds and cert_key is None:
        raise ConfigError("a tls+tcp:// endpoint the suite listens on needs --tls-cert-key")
    if not binds and ca is None:
        raise ConfigError("a tls+tcp:// broker needs --tls-ca: the CA its certificate is checked against")
    try:
        if binds:
            config = pynng.TLSConfig(pynng.TLSConfig.MODE_SERVER, cert_key_file=str(cert_key))
            if ca is not None:
                config.add_ca_file(str(ca))
                config.set_auth_mode(pynng.TLSConfig.AUTH_MODE_REQUIRED)
            return config
        host = server_name or urlsplit(endpoint).hostname or "localhost"
        config = pynng.TLSConfig(pynng.TLSConfig.MODE_CLIENT, server_name=host, ca_files=[str(ca)])
        if cert_key is not None:
            config.set_cert_key_file(str(cert_key))
        return config
    except (pynng.NNGException, OSError, ValueError) as exc:
        raise ConfigError(f"--tls-*: cannot load the TLS files: {exc}") from None


def secure_nng(sock: pynng.Socket, tls: Any) -> None:
    """Give ``sock`` the run's TLS config (before dial or listen)."""
    if tls is not None:
        sock.tls_config = tls
