"""The ``dbp`` edge kind's extra config keys (``[edges.dbp]``), parsed when the config
is loaded. Kept apart from :mod:`nfgate.edges.dbp` so loading the config imports no
edge: each parser takes the TOML value, the key's dotted name and the config folder,
and returns the value or raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

from pathlib import Path

from nfgate.errors import ConfigError
from nfgate.transports.udp import Address, parse_address

__all__ = ["BEACON_DEFAULT", "UDP_DEFAULT", "address_option", "interval_option"]

BEACON_DEFAULT = ("127.0.0.1", 5245)  # design.md, DBP notes: Hermes listens on UDP port 5245
# The heartbeat socket's default: the ROUTER's own host and port number, over UDP (so
# tcp://127.0.0.1:5246 gets udp 127.0.0.1:5246, and a random TCP port its UDP twin).
UDP_DEFAULT = ("", 0)


def address_option(value: object, where: str, base: Path) -> Address | None:
    """``"host:port"`` (IPv4); ``""`` or ``false`` switches the feature off (None)."""
    if value is False or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f'config: {where} must be a "host:port" string, or "" to switch it off')
    try:
        return parse_address(value)
    except ValueError as exc:
        raise ConfigError(f"config: {where}: {exc}") from None


def interval_option(value: object, where: str, base: Path) -> int:
    """A positive whole number of milliseconds."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"config: {where} must be an integer >= 1 (milliseconds), got {value!r}")
    return value
