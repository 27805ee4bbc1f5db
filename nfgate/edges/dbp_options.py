"""The ``dbp`` edge kind's extra config keys (``[edges.dbp]``), parsed when the config
is loaded. Kept apart from :mod:`nfgate.edges.dbp` so loading the config imports no
edge: each parser takes the TOML value, the key's dotted name and the config folder,
and returns the value or raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from nfgate.errors import ConfigError
from nfgate.transports.udp import Address, parse_address

__all__ = ["BEACON_DEFAULT", "UDP_DEFAULT", "address_option", "check_dbp", "option_address", "target_option"]

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


def target_option(value: object, where: str, base: Path) -> Address | None:
    """As :func:`address_option`, for an address sent to: port 0 is refused (a bind's
    "any free port" names no destination; every send to it fails with EINVAL)."""
    address = address_option(value, where, base)
    if address is not None and address[1] == 0:
        raise ConfigError(
            f'config: {where}: port 0 is not a destination; give 1..65535, or "" to switch it off'
        )
    return address


def check_dbp(options: Mapping[str, object], bind: tuple[str, ...], where: str) -> None:
    """Raise :class:`ConfigError` for a ``udp`` address with a fixed port beside several
    binds: each bind is an edge with a UDP socket of its own, and the second one's bind
    failed as "address already in use", as if another program held the port."""
    udp = options.get("udp")
    if len(bind) > 1 and isinstance(udp, tuple) and udp != UDP_DEFAULT and udp[1] != 0:
        raise ConfigError(
            f"config: {where}.udp: one UDP port for {len(bind)} binds (one edge each, each with its own "
            "UDP socket): leave udp unset (each bind's own host and port) or give port 0"
        )


def option_address(value: object, default: Address | None) -> Address | None:
    """An address as :func:`address_option` left it in the edge's options (None: off);
    ``default`` for anything else (options built by hand, not by the config loader)."""
    if value is None:
        return None
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
    ):
        return (value[0], value[1])
    return default
