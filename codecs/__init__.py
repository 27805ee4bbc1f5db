"""The codec registry: ``nfgate.codecs.get(name)`` and ``nfgate.codecs.names()``.

Built-in codecs live in the subpackages of this package (``nfgate.codecs.nfp`` ...).
Third-party codecs register a :class:`Codec` object in the ``nfgate.codecs``
entry-point group::

    [project.entry-points."nfgate.codecs"]
    myproto = "myproto.codec:CODEC"

A plugin may not replace a built-in name: the built-in wins and the plugin is
reported by :func:`plugin_errors` instead of silently changing behaviour.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from nfgate.errors import ConfigError

from ._base import Codec, Message

__all__ = ["Codec", "Message", "get", "names", "plugin_errors"]

ENTRY_POINT_GROUP = "nfgate.codecs"

# name -> module that defines CODEC; imported lazily so `import nfgate.codecs` is cheap.
_BUILTIN = {
    "nfp": "nfgate.codecs.nfp",
    "dbp": "nfgate.codecs.dbp",
    "memodb": "nfgate.codecs.memodb",
    "dcp": "nfgate.codecs.dcp",
    "sada": "nfgate.codecs.sada",
}

_cache: dict[str, Codec] = {}
_plugins: dict[str, Codec] | None = None
_plugin_errors: list[str] = []


def _load_plugins() -> dict[str, Codec]:
    global _plugins
    if _plugins is None:
        found: dict[str, Codec] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in _BUILTIN:
                if ep.value.split(":")[0] != _BUILTIN[ep.name]:
                    _plugin_errors.append(f"{ep.name}: shadows a built-in codec; ignored")
                continue
            try:
                obj = ep.load()
            except Exception as exc:  # a broken plugin must not break the built-ins
                _plugin_errors.append(f"{ep.name}: failed to load ({exc})")
                continue
            if not isinstance(obj, Codec) or obj.name != ep.name:
                _plugin_errors.append(f"{ep.name}: entry point is not a Codec named {ep.name!r}")
                continue
            found[ep.name] = obj
        _plugins = found
    return _plugins


def names() -> list[str]:
    """Names of every available codec: the five built-ins first, then plugins sorted.

    Never raises: a plugin that fails to load is left out and reported by
    :func:`plugin_errors`.
    """
    return list(_BUILTIN) + sorted(set(_load_plugins()) - set(_BUILTIN))


def get(name: str) -> Codec:
    """The codec registered as ``name``; raises :class:`ConfigError` if there is none."""
    if not isinstance(name, str):  # a list would be a TypeError from the dict lookups
        raise ConfigError(
            f"unknown protocol {name!r}: a protocol name is a string, not {type(name).__name__}"
        )
    if name in _cache:
        return _cache[name]
    if name in _BUILTIN:
        builtin = importlib.import_module(_BUILTIN[name]).CODEC
        if not isinstance(builtin, Codec):
            raise ConfigError(f"{name}: built-in module has no Codec")
        codec = builtin
    else:
        plugin = _load_plugins().get(name)
        if plugin is None:
            raise ConfigError(f"unknown protocol {name!r} (known: {', '.join(names())})")
        codec = plugin
    _cache[name] = codec
    return codec


def plugin_errors() -> list[str]:
    """Problems met while loading third-party codecs (empty when all loaded). Never raises."""
    _load_plugins()
    return list(_plugin_errors)
