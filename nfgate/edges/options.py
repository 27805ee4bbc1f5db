"""Config value parsers every edge kind shares (and ``nfgate.config`` for its own keys).

A parser takes the TOML value, the key's dotted name for the error and the config
file's folder, and returns the value or raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nfgate.errors import ConfigError

__all__ = ["INT_MAX", "checked_int", "curve_key_option", "int_option", "path_option"]

INT_MAX = 2**31 - 1
"""The largest integer a key takes unless it says otherwise: the values end up in C ints
(socket options, NNG's timeouts) or in milliseconds beside the clock, where a larger one
raised OverflowError after the edges had bound. 2**31 ms is 24 days, 2**31 s 68 years."""


def checked_int(value: object, where: str, minimum: int = 0, maximum: int = INT_MAX) -> int:
    """``value`` if it is an integer from ``minimum`` to ``maximum``; raises ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ConfigError(f"config: {where} must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


def int_option(minimum: int, maximum: int = INT_MAX) -> Callable[[object, str, Path], int]:
    """A parser accepting an integer from ``minimum`` to ``maximum``."""

    def parse(value: object, where: str, base: Path) -> int:
        return checked_int(value, where, minimum, maximum)

    return parse


def path_option(value: object, where: str, base: Path) -> Path | None:
    """A file or folder path, relative to the config file's folder; ``~`` is the home
    folder (expanded first: joined to the folder, it would name a folder called ``~``)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"config: {where} must be a non-empty path string")
    return base / Path(value).expanduser()


def curve_key_option(value: object, where: str, base: Path) -> str | None:
    """A CURVE public key: its 40 Z85 characters, or the path of a ZeroMQ certificate
    file holding one (relative to the config file's folder), read when the edge is
    built (a disabled edge's file need not exist)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"config: {where} must be a CURVE key (40 Z85 characters) or a certificate file")
    from nfgate.transports.curve import is_z85_key  # pyzmq: only for CURVE configs

    if is_z85_key(value.encode("ascii", "replace")):
        return value
    return str(base / Path(value).expanduser())
