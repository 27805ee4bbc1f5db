"""Config keys of the two SADA edge kinds (``[edges.sada]``, ``[edges.sada-server]``).

Kept apart from the edges so that loading the config (``nfgate.edges.kinds``) imports
only these parsers. Each parser takes the TOML value, the key's dotted name and the
config file's folder, and raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nfgate.errors import ConfigError

__all__ = [
    "DIALECT_CHOICES",
    "IDENTITY_FORMS",
    "choice_option",
    "text_option",
]

IDENTITY_FORMS = ("spec", "piran")  # tcp://ip:port, or PIRAN's ip:port
DIALECT_CHOICES = ("auto", "spec", "piran")  # auto: per peer, from its first message


def choice_option(choices: tuple[str, ...]) -> Callable[[object, str, Path], str]:
    """A parser accepting one of ``choices``."""

    def parse(value: object, where: str, base: Path) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(f"config: {where} must be one of {', '.join(choices)}, got {value!r}")
        return value

    return parse


def text_option(value: object, where: str, base: Path) -> str:
    """Any string (``""`` meaning "not set")."""
    if not isinstance(value, str):
        raise ConfigError(f"config: {where} must be a string, got {value!r}")
    return value
