"""Config keys of the two SADA edge kinds (``[edges.sada]``, ``[edges.sada-server]``).

Kept apart from the edges so that loading the config (``nfgate.edges.kinds``) imports
only these parsers. Each parser takes the TOML value, the key's dotted name and the
config file's folder, and raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nfgate.errors import ConfigError

__all__ = [
    "DIALECT_CHOICES",
    "IDENTITY_FORMS",
    "channels_option",
    "check_sada",
    "check_sada_server",
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


def channels_option(value: object, where: str, base: Path) -> tuple[str, ...]:
    """Channel URLs to connect to: a string or a list of ``tcp://host:port`` (or
    ``host:port``), each checked now, so a bad one stops the start before any edge binds."""
    from nfgate.codecs.sada.codec import channel_identity  # pure: no sockets

    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"config: {where} must be a string or a list of non-empty strings")
    for url in value:
        try:
            channel_identity(url, "spec")
        except ValueError as exc:
            raise ConfigError(f"config: {where}: {url!r}: {exc}") from None
    return tuple(value)


def check_sada_server(options: Mapping[str, Any], bind: tuple[str, ...], where: str) -> None:
    """Raise :class:`ConfigError` for an own CURVE key pair without the channels' key."""
    if options.get("curve_secret_key") is not None and options.get("curve_server_key") is None:
        raise ConfigError(
            f"config: {where}.curve_secret_key needs {where}.curve_server_key (the channels' public key)"
        )


def check_sada(options: Mapping[str, Any], bind: tuple[str, ...], where: str) -> None:
    """Raise :class:`ConfigError` when a bind gives the channel no public endpoint for
    its identity (a wildcard host or a non-TCP URL without ``public_endpoint``, say), as
    the config loads; the edge would refuse it only when built, after others had bound."""
    from nfgate.codecs.sada.codec import channel_identity  # pure: no sockets

    for url in bind:
        public = str(options.get("public_endpoint") or "") or url
        head, _, port = public.rpartition(":")
        # A wildcard port is the one bound, known only then: any port stands for it here.
        candidate = f"{head}:1" if port in ("*", "0") else public
        try:
            channel_identity(candidate, str(options.get("identity_form", "spec")))
        except ValueError as exc:
            reason = str(exc).replace(repr(candidate), repr(public))
            raise ConfigError(
                f"config: {where}: the channel identity is its public endpoint, and {public!r} is not one "
                f"({reason}); set {where}.public_endpoint"
            ) from None
