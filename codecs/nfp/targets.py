"""NFP target frames: ``all`` (the spec's default), ``any``, comma-separated worker
names (spec), or a JSON list of names (NorFab); and the workers NorFab's pseudo-service
``all`` stands for."""

from __future__ import annotations

import json
from collections.abc import Iterable

from nfgate.errors import DecodeError

from .._base import load_json

ALL = "all"
ANY = "any"
PSEUDO_SERVICE = "all"
"""NorFab's service name for "workers of every service" (docs/protocols/norfab-wire.md)."""


def parse_target(text: str) -> str | tuple[str, ...]:
    """``"all"``, ``"any"`` or the tuple of worker names a target frame names.

    An empty target is the spec's default, ``all``. Raises :class:`DecodeError` for a
    JSON list that is not a list of non-empty strings, an empty name, or a ``text``
    that is not a string.
    """
    if not isinstance(text, str):
        raise DecodeError("nfp", f"target must be a string, not {type(text).__name__}")
    text = text.strip()
    if text in ("", ALL):
        return ALL
    if text == ANY:
        return ANY
    if text.startswith("["):
        try:
            names = load_json(text)
        except ValueError:
            raise DecodeError("nfp", f"target is not a valid JSON list: {text[:40]!r}") from None
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise DecodeError("nfp", f"target JSON must be a non-empty list of worker names: {text[:40]!r}")
        return tuple(names)
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise DecodeError("nfp", f"target has an empty worker name: {text[:40]!r}")
    return tuple(names)


def format_target(target: str | tuple[str, ...], dialect: str) -> str:
    """The target frame text for ``target`` in ``dialect`` (NorFab: JSON list).

    Never raises for a ``str`` or a tuple of ``str`` (what :func:`parse_target` gives).
    """
    if isinstance(target, str):
        return target
    return json.dumps(list(target), separators=(",", ":")) if dialect == "norfab" else ",".join(target)


def pseudo_targets(target: str | tuple[str, ...], workers: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The workers a job for NorFab's pseudo-service ``all`` goes to, as NorFab's broker
    picks them (``filter_workers``): ``workers`` are the registered ``(name, service)``
    pairs in registration order. ``all``: every worker; ``any``: one worker of each
    service (NorFab picks at random; here the first registered); names: those that are
    registered, in the order given, unknown ones dropped as NorFab drops them. May be
    empty (NorFab then answers 400). Never raises."""
    known = dict(workers)
    if target == ALL:
        return tuple(known)
    if target == ANY:
        first: dict[str, str] = {}
        for name, service in known.items():
            first.setdefault(service, name)
        return tuple(first.values())
    return tuple(name for name in dict.fromkeys(target) if name in known)
