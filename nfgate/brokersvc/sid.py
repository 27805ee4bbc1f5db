"""``sid.service.broker``: the broker's Simple Inventory Datastore.

A worker asks for its own configuration with task ``get_inventory``, kwargs
``{"name": <worker name>}`` (NorFab's ``NFPWorker.load_inventory`` does this at start)
and gets the merged dict, or ``null`` when the inventory has nothing for it.

Inventory file (``.yaml``/``.yml`` or ``.toml``), NorFab's ``inventory.yaml`` shape::

    broker: {...}          # other top-level sections are kept only for the MMI task
    topology: {...}        # show_broker_inventory (see Inventory.as_dict)
    workers:
      # simple form: a worker name (or glob) -> its inventory dict
      w1:
        service: echosvc
        foo: bar
      # NorFab form: a glob -> list of files and/or dicts, merged in order
      "nornir-*":
        - nornir/common.yaml             # relative to the inventory file's folder
        - {runner: {plugin: RetryRunner}}
      nornir-worker-1:
        - nornir/nornir-worker-1.yaml

Keys are ``fnmatch`` globs, matched case-sensitively against the worker name. For a
worker, every matching key contributes its items in file order (an item that an earlier
key already gave is not merged twice) and they are merged as NorFab merges them: dicts
recursively, lists by appending missing elements, anything else replaced. An empty
result is "no inventory" (``null``), as in NorFab.

Differences from NorFab: referenced files are read once, by :func:`load_inventory`
(NorFab re-reads them on every request), so a missing or broken file is a start-up
:class:`~nfgate.errors.ConfigError` rather than a failed request; files may be TOML as
well as YAML. YAML files are Jinja2 templates, as NorFab renders them, with the
environment as ``env`` (``home: '{{ env.HOME }}'``, ``{% for %}`` loops), rendered once
at start-up; TOML files are not templates. As in NFAPI, ``env`` includes the ``.env``
file beside the inventory file, whose values win over the process environment
(read with python-dotenv). Dates and times from YAML/TOML become ISO 8601 strings so
every answer is plain JSON, and number keys strings; a null or boolean
key (YAML's ``~:``, ``yes:``, ``on:``: NorFab would send them as ``"null"``, ``"true"``)
and two keys that are one JSON key (``1:`` and ``"1":``) are start-up errors.
"""

from __future__ import annotations

import copy
import datetime
import fnmatch
import io
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import jinja2
import yaml  # type: ignore[import-untyped]
from dotenv import dotenv_values
from dotenv import parser as dotenv_parser

from nfgate.brokersvc import RequestError, param, unsupported
from nfgate.errors import ConfigError
from nfgate.model import Status

__all__ = ["Inventory", "get_inventory", "handle", "load_inventory", "merge"]

# libyaml's safe loader where PyYAML was built with it (the wheels are): about 7 times
# faster than the pure-Python one on a large inventory, which is read at start-up.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# What NorFab's show_broker_inventory always has, so an nfgate inventory without some
# of them still answers in the shape NorFab's clients print.
_NORFAB_SECTIONS = ("broker", "workers", "topology", "logging", "client", "hooks", "plugins")


@attrs.frozen(kw_only=True)
class Inventory:
    """A loaded inventory: ``entries`` pairs each ``workers`` key (a glob) with its items,
    already read from their files, each as ``(source, data)`` where ``source`` is the
    file's path, or ``""`` for a dict written inline. ``sections`` is the file's top
    level as loaded.

    Nothing inside is handed out: every answer is a deep copy, so a caller that edits
    a reply cannot change what the next worker gets.
    """

    path: Path
    entries: tuple[tuple[str, tuple[tuple[str, Mapping[str, Any]], ...]], ...] = ()
    sections: Mapping[str, Any] = attrs.field(factory=dict)

    def patterns(self) -> tuple[str, ...]:
        """The ``workers`` keys, in file order."""
        return tuple(pattern for pattern, _ in self.entries)

    def lookup(self, name: str) -> dict[str, Any] | None:
        """The merged inventory of worker ``name``, or None when nothing matches or the
        merge is empty (NorFab's ``KeyError``, answered as ``null``)."""
        merged: dict[str, Any] = {}
        seen: list[object] = []
        for pattern, items in self.entries:
            if not fnmatch.fnmatchcase(name, pattern):
                continue
            for source, data in items:
                # NorFab collects the items of all matching keys first and skips
                # repeats (by path for files, by equality for inline dicts), so a
                # common file listed under two globs is merged once.
                key: object = source or data
                if key in seen:
                    continue
                seen.append(key)
                merge(merged, copy.deepcopy(dict(data)))
        return merged or None

    def as_dict(self) -> dict[str, Any]:
        """The inventory as NorFab's ``show_broker_inventory`` returns it: the file's
        sections (``workers`` as written, files unread), every NorFab section present."""
        out: dict[str, Any] = {section: {} for section in _NORFAB_SECTIONS}
        out.update(copy.deepcopy(dict(self.sections)))
        return out


def merge(data: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Merge ``extra`` into ``data`` in place, as NorFab's ``merge_recursively``: nested
    dicts merge, lists gain the elements they lack, any other value is replaced."""
    for key, value in extra.items():
        old = data.get(key)
        if key not in data:
            data[key] = value
        elif isinstance(old, list) and isinstance(value, list):
            for item in value:  # one at a time: repeats within `value` are skipped too
                if item not in old:
                    old.append(item)
        elif isinstance(old, dict) and isinstance(value, dict):
            merge(old, value)
        else:
            data[key] = value


def load_inventory(path: Path | str) -> Inventory:
    """Read the inventory file at ``path`` and every file its ``workers`` section names.

    Raises:
        ConfigError: one line naming the file and the problem: missing or unreadable
            file, invalid YAML/TOML, unknown extension, a shape other than the one in
            the module docstring, or a ``.env`` beside it that cannot be read or parsed.
    """
    path = Path(path)
    env = _environment(path.parent / ".env")
    top = _read_mapping(path, what="inventory", env=env)
    workers = top.get("workers")
    if workers is None:
        workers = {}
    if not isinstance(workers, dict):
        raise ConfigError(f"{path}: 'workers' must be a mapping of worker names to inventories")
    loaded: dict[Path, Mapping[str, Any]] = {}  # a file named under several globs is read once
    entries = []
    for pattern, value in workers.items():
        if not pattern:  # a string: _read_mapping made every key one, or refused it
            raise ConfigError(f"{path}: workers key {pattern!r} must be a non-empty string")
        where = f"workers.{pattern}"
        if isinstance(value, dict):
            items = [value]
        elif isinstance(value, list):
            items = value
        else:
            raise ConfigError(
                f"{path}: {where} must be a mapping or a list of files and mappings, "
                f"not {type(value).__name__}"
            )
        resolved: list[tuple[str, Mapping[str, Any]]] = []
        for index, item in enumerate(items):
            if isinstance(item, dict):
                resolved.append(("", item))
            elif isinstance(item, str) and item:
                file = path.parent / item
                if file not in loaded:
                    loaded[file] = _read_mapping(file, what=f"{path}: {where}[{index}]", env=env)
                resolved.append((str(file), loaded[file]))
            else:
                raise ConfigError(
                    f"{path}: {where}[{index}] must be a file path or a mapping, not {type(item).__name__}"
                )
        entries.append((pattern, tuple(resolved)))
    return Inventory(path=path, entries=tuple(entries), sections=top)


def get_inventory(inv: Inventory, name: object) -> tuple[int, Any]:
    """``(200, merged dict)`` for worker ``name``; ``(200, None)`` when the inventory has
    nothing for it (NorFab answers ``null``, its workers then start with ``{}``); ``(400,
    message)`` when ``name`` is not a non-empty string."""
    if not isinstance(name, str) or not name:
        return Status.UNKNOWN, "get_inventory: 'name' must be a non-empty string"
    return Status.OK, inv.lookup(name)


def handle(
    task: str, kwargs: Mapping[str, Any], args: Sequence[Any], inv: Inventory | None
) -> tuple[int, Any]:
    """Answer a ``sid.service.broker`` request: task ``get_inventory`` (kwarg ``name``, or
    the first positional argument; ``null`` for every worker when no inventory is
    configured). Unknown task: 200 ``"Unsupported task '<task>'"``, as NorFab. A missing
    or non-string ``name``: 400 (NorFab sends no reply at all)."""
    if task != "get_inventory":
        return unsupported(task)
    try:
        name = param(task, kwargs, args, "name", str, position=0)
    except RequestError as exc:
        return exc.status, exc.message
    return (200, None) if inv is None else get_inventory(inv, name)


# ---------------------------------------------------------------------------- reading


def _render(text: str, prefix: str, env: Mapping[str, str]) -> str:
    """``text`` rendered as NorFab renders an inventory file: a Jinja2 template whose
    context is ``env`` (:func:`_environment`). Raises ConfigError (one line, with the
    template's line number) when it does not render."""
    try:
        return jinja2.Environment(autoescape=False).from_string(text).render(env=dict(env))
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        raise ConfigError(f"{prefix}: invalid Jinja2 template{where}: {exc.message or exc}") from None
    except Exception as exc:  # an expression that fails as it runs: {{ 1/0 }}, {{ 'a' + 1 }}
        line = _template_line(exc)
        where = f" (line {line})" if line else ""
        raise ConfigError(
            f"{prefix}: the Jinja2 template does not render{where}: {type(exc).__name__}: {exc}"
        ) from None


def _template_line(exc: BaseException) -> int | None:
    """The template's line an exception was raised from (Jinja2 puts the template's own
    frame in the traceback, under the file name ``<template>``)."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _read_mapping(path: Path, *, what: str, env: Mapping[str, str]) -> dict[str, Any]:
    """One YAML or TOML file whose top level is a mapping, made JSON-able; a YAML file
    is rendered with ``env`` first.

    ``what`` says who asked for it, so an error in a referenced file names both files.
    Raises ConfigError.
    """
    prefix = f"{path}" if what == "inventory" else f"{what}: {path}"
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise ConfigError(
            f"{prefix}: unknown inventory format {suffix or '(no extension)'!r}; use .yaml, .yml or .toml"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{prefix}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{prefix}: cannot read: {_reason(exc)}") from None
    data: Any
    if suffix != ".toml":
        text = _render(text, prefix, env)
    if suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{prefix}: invalid TOML: {exc}") from None
    else:
        try:
            data = yaml.load(text, Loader=_SAFE_LOADER)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{prefix}: invalid YAML: {_yaml_reason(exc)}") from None
    if data is None and what != "inventory":
        data = {}  # an empty included file adds nothing; an empty inventory is a mistake
    if not isinstance(data, dict):
        shape = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{prefix}: the top level must be a mapping, the file is {shape}")
    try:
        clean: dict[str, Any] = _jsonable(data, "")
    except ValueError as exc:
        raise ConfigError(f"{prefix}: {exc}") from None
    except RecursionError:  # `a: &x [*x]`: a YAML alias inside its own anchor
        raise ConfigError(f"{prefix}: a value contains itself (a YAML alias inside its own anchor)") from None
    return clean


def _environment(dotenv: Path) -> dict[str, str]:
    """What templates see as ``env``: the process environment and, over it, the ``.env``
    file beside the inventory. NFAPI loads that file (``load_dotenv(<inventory folder>/
    .env, override=True)``) before it renders the inventory, so the NorFab broker it
    starts renders with it: deployments keep their tokens and passwords there. Without
    it here, they would reach the workers as empty strings. The file is read with
    python-dotenv, as NFAPI reads it (``${NAME}`` from the file first, then the
    environment); a ``.env`` that is not a file is ignored, as python-dotenv ignores it.

    Raises:
        ConfigError: the file cannot be read, or has a line python-dotenv cannot parse
            (python-dotenv skips it with a warning; a gateway stops instead, rather than
            render a value the user thinks is set as empty).
    """
    env = dict(os.environ)
    if not dotenv.is_file():
        return env
    try:
        text = dotenv.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{dotenv}: cannot read: {_reason(exc)}") from None
    for binding in dotenv_parser.parse_stream(io.StringIO(text)):
        if binding.error:
            raise ConfigError(f"{dotenv}: line {binding.original.line}: not a NAME=value binding")
    # A bare NAME (value None) sets nothing, as with load_dotenv.
    values = dotenv_values(stream=io.StringIO(text))
    env.update((name, value) for name, value in values.items() if value is not None)
    return env


def _jsonable(value: Any, where: str) -> Any:
    """``value`` with dates as ISO strings and mapping keys as strings; raises ValueError
    for anything JSON cannot carry (YAML ``!!binary``, ``!!set``...)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = _key(k, where)
            if key in out:  # `1:` and `"1":` are one JSON key: one value would go unseen
                raise ValueError(
                    f"{where or 'top level'}: keys {k!r} and {key!r} are one JSON key: rename one"
                )
            out[key] = _jsonable(v, f"{where}.{key}" if where else key)
        return out
    if isinstance(value, list | tuple):
        return [_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise ValueError(f"{where or 'value'}: a {type(value).__name__} cannot be sent as JSON")


def _key(key: Any, where: str) -> str:
    # YAML allows `1: x`; JSON keys are strings, and json.dumps would turn them into
    # strings anyway, so do it once here where an odd key can be reported. A null or
    # boolean key is refused: YAML reads an empty key or `~` as null and an unquoted
    # yes/no/on/off as a boolean, so `yes:` would silently be the worker pattern "true".
    if isinstance(key, str):
        return key
    if key is None:
        raise ValueError(f"{where or 'top level'}: a key is YAML's null (an empty key, ~ or null): quote it")
    if isinstance(key, bool):
        raise ValueError(
            f"{where or 'top level'}: key {key} is a YAML boolean (yes/no/on/off/true/false unquoted): quote it"
        )
    if isinstance(key, int | float):
        return str(key)
    raise ValueError(f"{where or 'top level'}: key {key!r} cannot be a JSON object key")


def _yaml_reason(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(problem)


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)
