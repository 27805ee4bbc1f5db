"""The edge kinds ``nfgate serve`` knows: one entry each, naming its defaults, its extra
config keys and the factory that builds it.

Adding a protocol edge is a module in :mod:`nfgate.edges` with a ``make`` factory and
one entry here; config loading (:mod:`nfgate.config`), ``--bind``/``--no-EDGE`` and
:func:`nfgate.serve.build` read this table and need no edit. Factories are named as
``"module:function"`` text and imported only when an edge of that kind is built, so
loading the config never imports pynng or a protocol's edge.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from nfgate.edges.dbp_options import BEACON_DEFAULT, UDP_DEFAULT, address_option, check_dbp, target_option
from nfgate.edges.memodb_options import MEMODB_OPTIONS, check_memodb
from nfgate.edges.options import curve_key_option, int_option, path_option
from nfgate.edges.sada_options import (
    DIALECT_CHOICES,
    IDENTITY_FORMS,
    channels_option,
    check_sada,
    check_sada_server,
    choice_option,
    text_option,
)
from nfgate.errors import ConfigError

if TYPE_CHECKING:
    from nfgate.edges import Edge, EdgeSettings
    from nfgate.store import JobStore

__all__ = [
    "KINDS",
    "NORFAB_WORKER_CAPACITY",
    "EdgeKind",
    "Factory",
    "Option",
    "default_heartbeat",
    "path_option",
    "str_list_option",
]

NORFAB_WORKER_CAPACITY = 5  # NorFab 0.25's default max_concurrent_jobs

Option = tuple[Callable[[object, str, Path], Any], Any]
"""An extra config key: (parser, default). The parser takes the TOML value, the key's
dotted name for error messages and the config file's folder (relative paths), and
returns the parsed value or raises :class:`ConfigError` naming the key."""


class Factory(Protocol):
    def __call__(self, settings: EdgeSettings, *, store: JobStore) -> Edge: ...


def str_list_option(value: object, where: str, base: Path) -> tuple[str, ...]:
    """A string or a list of strings (e.g. channel URLs to connect to)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"config: {where} must be a string or a list of non-empty strings")
    return tuple(value)


CURVE_OPTIONS: Mapping[str, Option] = {
    # A ZeroMQ secret certificate file (NorFab's private_keys/broker.key_secret works).
    "curve_secret_key": (path_option, None),
    # A folder of client public .key files; absent: any client key (NorFab's rule).
    "curve_allow": (path_option, None),
}


@attrs.frozen(kw_only=True)
class EdgeKind:
    """One edge kind. ``binds``: design.md "Default endpoints" (empty for an edge that
    only connects out); ``heartbeat``: default (interval ms, liveness), or None for a
    kind that has no heartbeat, whose config then refuses ``heartbeat_ms`` and
    ``liveness`` as unknown keys (a key read and never used would look like a setting);
    ``check``: what the keys allow only together, given the parsed options, the bind
    URLs and the table's name (``edges.dbp``); it raises :class:`ConfigError`."""

    kind: str
    binds: tuple[str, ...]
    heartbeat: tuple[int, int] | None
    factory: str
    options: Mapping[str, Option] = attrs.field(factory=dict)
    summary: str = ""
    check: Callable[[Mapping[str, Any], tuple[str, ...], str], None] | None = None

    def make(self) -> Factory:
        """Import and return the factory (raises ImportError if the module is broken)."""
        module, _, name = self.factory.partition(":")
        factory: Factory = getattr(importlib.import_module(module), name)
        return factory


KINDS: dict[str, EdgeKind] = {
    kind.kind: kind
    for kind in (
        EdgeKind(
            kind="nfp",
            binds=("tcp://127.0.0.1:5555",),
            heartbeat=(2500, 6),  # NorFab's keepalive interval and multiplier
            factory="nfgate.edges.nfp:make",
            options={
                "inventory": (path_option, None),
                "files_root": (path_option, None),
                # Jobs a NorFab-dialect worker is given at once: NorFab 0.25 workers run
                # max_concurrent_jobs (default 5) in a thread pool and queue the rest.
                "norfab_worker_capacity": (int_option(1), NORFAB_WORKER_CAPACITY),
                **CURVE_OPTIONS,
            },
            summary="NFP broker (spec and NorFab 0.25 dialects)",
        ),
        EdgeKind(
            kind="dcp",
            binds=("tcp://127.0.0.1:5556",),
            heartbeat=(2500, 3),
            factory="nfgate.edges.dcp:make",
            options=CURVE_OPTIONS,
            summary="DCP broker (spec and DagBox dialects)",
        ),
        EdgeKind(
            kind="memodb",
            binds=("tcp://127.0.0.1:12703",),
            heartbeat=(10_000, 3),  # bcdb memodb-broker: an idle worker gets HEARTBEAT after 10 s
            factory="nfgate.edges.memodb:make",
            options=MEMODB_OPTIONS,
            summary="MemoDB broker over NNG (spec and bcdb dialects)",
            check=check_memodb,
        ),
        EdgeKind(
            kind="dbp",
            binds=("tcp://127.0.0.1:5246",),
            # The core's watchdog is off: the edge times each service at the interval it
            # registered, times ``liveness`` (docs/protocols/dbp.md, Heartbeats).
            heartbeat=(0, 3),
            factory="nfgate.edges.dbp:make",
            options={
                "udp": (address_option, UDP_DEFAULT),  # heartbeat datagrams; default: the ROUTER's host:port
                "beacon": (target_option, BEACON_DEFAULT),  # where SHALOM <port> goes; "" = off
                "beacon_interval_ms": (int_option(1), 1000),
                **CURVE_OPTIONS,  # the ROUTER only: UDP heartbeats and the beacon stay plain
            },
            summary="DBP catalog (spec and Hermes dialects): info, registration, UDP heartbeats, beacon",
            check=check_dbp,
        ),
        EdgeKind(
            kind="sada",
            binds=("tcp://127.0.0.1:5055",),
            heartbeat=(5000, 3),  # PIRAN's Darbaan channel: PING every 5 s, 3 retries
            factory="nfgate.edges.sada:make",
            options={
                "identity_form": (choice_option(IDENTITY_FORMS), "spec"),
                "public_endpoint": (text_option, ""),
                "dialect": (choice_option(DIALECT_CHOICES), "auto"),
                "request_timeout_ms": (int_option(0), 0),
                "server_capacity": (int_option(1), 8),
                **CURVE_OPTIONS,
            },
            summary="SADA channel (spec and PIRAN dialects)",
            check=check_sada,
        ),
        EdgeKind(
            kind="sada-server",
            binds=(),  # connects out to the configured channels
            # The spec gives the server role no heartbeat: channels PING servers, a
            # server only answers (PONG). The edge's peers are channels, not workers.
            heartbeat=None,
            factory="nfgate.edges.sada_server:make",
            options={
                "channels": (channels_option, ()),
                "dialect": (choice_option(DIALECT_CHOICES), "auto"),
                "request_timeout_ms": (int_option(0), 0),
                "refresh_ms": (int_option(1), 1000),
                # CURVE as a client: the channels' public key (Z85, or a certificate file)
                # and the edge's own secret certificate (default: a pair made at start).
                "curve_server_key": (curve_key_option, None),
                "curve_secret_key": (path_option, None),
            },
            summary="SADA server (connects to the configured channels)",
            check=check_sada_server,
        ),
    )
}


def default_heartbeat(kind: str) -> tuple[int, int]:
    """``kind``'s default (interval ms, liveness): what its edge uses when built without
    the config's (tests, the bench), so there is one default. Raises KeyError for a kind
    unknown or without heartbeats."""
    beat = KINDS[kind].heartbeat
    if beat is None:
        raise KeyError(f"the {kind} edge kind has no heartbeat")
    return beat
