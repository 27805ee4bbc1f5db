"""NFP target frames: ``all`` (the spec's default), ``any``, comma-separated worker
names (spec), or a JSON list of names (NorFab)."""

from __future__ import annotations

import json

from nfgate.errors import DecodeError

ALL = "all"
ANY = "any"


def parse_target(text: str) -> str | tuple[str, ...]:
    """``"all"``, ``"any"`` or the tuple of worker names a target frame names.

    An empty target is the spec's default, ``all``. Raises :class:`DecodeError` for a
    JSON list that is not a list of non-empty strings, or an empty name.
    """
    text = text.strip()
    if text in ("", ALL):
        return ALL
    if text == ANY:
        return ANY
    if text.startswith("["):
        try:
            names = json.loads(text)
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
    """The target frame text for ``target`` in ``dialect`` (NorFab: JSON list)."""
    if isinstance(target, str):
        return target
    return json.dumps(list(target), separators=(",", ":")) if dialect == "norfab" else ",".join(target)
