"""``nfgate serve`` configuration: embedded defaults, a TOML file, command-line overrides.

Every problem is a :class:`ConfigError` whose message names the key (``edges.nfp.bind``)
so the CLI can print one line and exit 2. Unknown keys are errors too: a typo must not
silently fall back to a default.

The file (every table and key optional)::

    [gateway]
    data_dir = "/var/lib/nfgate"     # job store; default: $XDG_DATA_HOME/nfgate
    log_level = "info"
    fsync = true                     # a 202 waits for its job record's fsync (false: the
                                     # record survives a gateway crash, not a machine crash)
    job_retention_s = 86400          # finished NFP jobs are forgotten this long after their
                                     # POST (GET then gives 400); 0 keeps them for ever
    drain_ms = 5000                  # on SIGTERM/SIGINT: refuse new requests, wait this long at
                                     # most for those at workers; 0 stops at once
    stall_ms = 1000                  # a gap in the loop over this is a stall (a paused process):
                                     # taken out of its clock, so nothing expires for it; 0: off

    [routing]
    queue_expiry_ms = 300000         # a request with no worker waits this long, then 408 (behind busy workers: no limit)
    max_redispatch = 3               # retries after a worker dies (500), times out (504), or its edge cannot send it
    max_queue_per_service = 10000    # beyond it: 503 (NFP clients: 500)
    max_queued = 50000               # over all services; beyond it: 503 (NFP clients: 500)
    max_in_flight_per_worker = 64    # requests one worker holds at once, whatever it registered

    [limits]
    max_message_bytes = 67108864     # ZMQ_MAXMSGSIZE
    max_frames = 64
    high_water_mark = 100000
    max_peers = 100000               # peers an edge remembers; the oldest clients are forgotten

    [edges.nfp]                      # one table per edge kind (KINDS): nfp, dcp, memodb, dbp, sada, sada-server
    enabled = true
    bind = ["tcp://127.0.0.1:5555"]  # several URLs: one edge each (nfp, nfp-2, ...)
    heartbeat_ms = 2500              # worker liveness: heartbeat_ms * liveness of silence
    liveness = 6                     # (not for sada-server, which has no heartbeat)
    inventory = "inventory.yaml"     # NFP only: sid.service.broker get_inventory
    files_root = "/srv/files"        # NFP only: fss.service.broker serves nf:// paths here

    [metrics]                        # Prometheus text at <bind>/metrics
    enabled = true
    bind = "http://127.0.0.1:9464"

    [capture]                        # every frame in and out, as Parquet (docs/pipeline.md)
    dir = "captures"                 # no dir (the default): no capture; --capture DIR sets it
    segment_s = 60                   # a segment is closed after this long,
    segment_rows = 1000000           # or this many records
    max_pending = 1000000            # records the writer may fall behind before they are dropped
    max_bytes = 10_000_000_000       # oldest closed segments deleted beyond this; 0 (default): keep all
    edges = ["nfp", "dcp"]           # only these edges (names or kinds); unset (default): every edge
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from nfgate.capture import CaptureConfig
from nfgate.edges.kinds import KINDS
from nfgate.edges.options import INT_MAX, checked_int, path_option
from nfgate.errors import ConfigError
from nfgate.loopclock import STALL_MS
from nfgate.metrics import parse_url as parse_metrics_url
from nfgate.routing_types import RouterConfig
from nfgate.transports import port_problem
from nfgate.transports.curve import load_server_keys
from nfgate.transports.zmq import Limits

__all__ = ["DEFAULT_BINDS", "EdgeConfig", "ServeConfig", "default_data_dir", "load"]

DEFAULT_BINDS: Mapping[str, tuple[str, ...]] = {k.kind: k.binds for k in KINDS.values()}
"""design.md "Default endpoints" for the edges this version serves."""

JOB_RETENTION_S = 86_400  # a day: a client GETs its result long before that
# A stop's drain: within the grace period of the usual supervisors (docker stop's 10 s,
# Kubernetes' 30 s, systemd's 90 s) with room left to close, so the drain ends it, not a
# SIGKILL; long enough for a typical request to come back.
DRAIN_MS = 5_000
DEFAULT_METRICS = "http://127.0.0.1:9464"
_EDGE_KEYS = {"enabled", "bind", "heartbeat_ms", "liveness"}
_ROUTING_KEYS = {
    "queue_expiry_ms",
    "max_redispatch",
    "max_queue_per_service",
    "max_queued",
    "max_in_flight_per_worker",
}
_LIMIT_KEYS = {"max_message_bytes", "max_frames", "high_water_mark", "max_peers"}
_LOG_LEVELS = ("debug", "info", "warning", "error")


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/nfgate``, else ``~/.local/share/nfgate``. A relative
    ``XDG_DATA_HOME`` is ignored: the XDG Base Directory spec calls it invalid (it would
    name a different folder from every working directory)."""
    base = os.environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(base):
        base = str(Path.home() / ".local" / "share")
    return Path(base) / "nfgate"


@attrs.frozen(kw_only=True)
class EdgeConfig:
    kind: str
    enabled: bool = True
    bind: tuple[str, ...] = ()
    # None for a kind without heartbeats (EdgeKind.heartbeat None: sada-server).
    heartbeat_ms: int | None = 2500
    liveness: int | None = 3
    options: Mapping[str, Any] = attrs.field(factory=dict)  # the kind's extra keys, parsed

    def edge_options(self) -> dict[str, object]:
        """What the edge's factory is given as ``EdgeSettings.options``: the kind's keys,
        and ``heartbeat`` as ``(interval ms, liveness)`` for a kind that has one."""
        beat = {} if self.heartbeat_ms is None else {"heartbeat": (self.heartbeat_ms, self.liveness)}
        return {**beat, **self.options}


@attrs.frozen(kw_only=True)
class ServeConfig:
    data_dir: Path
    log_level: str = "info"
    fsync: bool = True  # job records fsynced before their 202 (false: written to the OS only)
    job_retention_s: int = JOB_RETENTION_S  # finished jobs kept this long after their POST; 0: for ever
    drain_ms: int = DRAIN_MS  # how long a stop waits for the requests at workers; 0: not at all
    stall_ms: int = STALL_MS  # the loop clock's stall threshold (nfgate.loopclock); 0: off
    routing: RouterConfig
    limits: Limits
    edges: tuple[EdgeConfig, ...]
    metrics: str | None = DEFAULT_METRICS  # None: no metrics endpoint
    capture: CaptureConfig | None = None  # None: no capture

    def edge(self, kind: str) -> EdgeConfig:
        return next(e for e in self.edges if e.kind == kind)


def _int(
    table: Mapping[str, Any], key: str, where: str, default: int, minimum: int = 0, maximum: int = INT_MAX
) -> int:
    return checked_int(table.get(key, default), f"{where}.{key}", minimum, maximum)


def _table(doc: Mapping[str, Any], key: str, allowed: set[str], where: str = "") -> Mapping[str, Any]:
    path = f"{where}.{key}" if where else key
    table = doc.get(key, {})
    if not isinstance(table, dict):
        raise ConfigError(f"config: {path} must be a table")
    for name in table:
        if name not in allowed:
            raise ConfigError(f"config: unknown key {path}.{name}")
    return table


def _binds(value: object, key: str) -> tuple[str, ...]:
    """``value`` as a tuple of bind URLs; ``key`` names where it came from in errors
    (``config: edges.nfp.bind``, or ``--bind nfp`` for the command line's)."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and not value:
        return ()  # an edge that only connects out (the caller refuses it for one that binds)
    if not isinstance(value, (list, tuple)) or not all(isinstance(u, str) and u for u in value):
        raise ConfigError(f"{key} must be a URL or a non-empty list of URLs")
    for url in value:
        if "://" not in url:
            raise ConfigError(f"{key}: {url!r} is not a URL like tcp://127.0.0.1:5555")
        problem = port_problem(url, connect=False)
        if problem is not None:
            raise ConfigError(f"{key}: {problem}")
    return tuple(value)


def _edge(kind: str, table: Mapping[str, Any], base: Path) -> EdgeConfig:
    where = f"edges.{kind}"
    spec = KINDS[kind]
    enabled = table.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ConfigError(f"config: {where}.enabled must be true or false")
    options = {
        key: parse(table[key], f"{where}.{key}", base) if key in table else default
        for key, (parse, default) in spec.options.items()
    }
    bind = _binds(table.get("bind", list(spec.binds)), f"config: {where}.bind")
    if bind and not spec.binds:
        raise ConfigError(f"config: {where}.bind: the {kind} edge binds nothing, it connects out")
    if enabled and spec.binds and not bind:
        raise ConfigError(
            f"config: {where}.bind is empty: give a URL, or switch the edge off with enabled = false"
        )
    if enabled and spec.check is not None:
        spec.check(options, bind, where)
    if options.get("curve_allow") is not None and options.get("curve_secret_key") is None:
        raise ConfigError(f"config: {where}.curve_allow needs {where}.curve_secret_key")
    if enabled and options.get("curve_secret_key") is not None:
        try:  # fail at start, in one line naming the key
            load_server_keys(options["curve_secret_key"], options.get("curve_allow"))
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("config: curve_", f"config: {where}.curve_", 1)) from None
    if spec.heartbeat is None:
        return EdgeConfig(
            kind=kind, enabled=enabled, bind=bind, heartbeat_ms=None, liveness=None, options=options
        )
    interval, liveness = spec.heartbeat
    return EdgeConfig(
        kind=kind,
        enabled=enabled,
        bind=bind,
        heartbeat_ms=_int(table, "heartbeat_ms", where, interval),
        liveness=_int(table, "liveness", where, liveness, minimum=1),
        options=options,
    )


def _edge_keys(kind: str) -> set[str]:
    """The keys ``[edges.<kind>]`` takes: heartbeat keys only for a kind with heartbeats."""
    spec = KINDS[kind]
    common = _EDGE_KEYS if spec.heartbeat is not None else _EDGE_KEYS - {"heartbeat_ms", "liveness"}
    return common | set(spec.options)


def load(
    path: Path | None = None,
    *,
    data_dir: Path | None = None,
    binds: Sequence[tuple[str, str]] = (),
    disabled: Sequence[str] = (),
    log_level: str | None = None,
    metrics_bind: str | None = None,
    no_metrics: bool = False,
    capture_dir: Path | None = None,
) -> ServeConfig:
    """Build the configuration: defaults, then the TOML file, then the command line.

    ``binds`` are ``(edge kind, url)`` pairs from ``--bind``; the URLs given for a kind
    replace that kind's configured list and switch the edge on, whatever the file's
    ``enabled`` says (``--metrics URL`` the same for ``[metrics]``): an option typed on
    the command line is meant. ``disabled`` (``--no-EDGE``) and ``no_metrics`` win over
    both. Raises :class:`ConfigError` naming the key.
    """
    doc: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config: {path} is not valid TOML: {exc}") from None
        base = path.parent.absolute()
    for key in doc:
        if key not in ("gateway", "routing", "limits", "edges", "metrics", "capture"):
            raise ConfigError(f"config: unknown key {key}")
    gateway = _table(
        doc, "gateway", {"data_dir", "log_level", "fsync", "job_retention_s", "drain_ms", "stall_ms"}
    )
    fsync = gateway.get("fsync", True)
    if not isinstance(fsync, bool):
        raise ConfigError("config: gateway.fsync must be true or false")
    routing = _table(doc, "routing", _ROUTING_KEYS)
    limits = _table(doc, "limits", _LIMIT_KEYS)
    edges = _table(doc, "edges", set(DEFAULT_BINDS))
    metrics = _table(doc, "metrics", {"enabled", "bind"})
    metrics_on = metrics.get("enabled", True)
    if not isinstance(metrics_on, bool):
        raise ConfigError("config: metrics.enabled must be true or false")
    metrics_on = (metrics_on or metrics_bind is not None) and not no_metrics
    metrics_url = metrics_bind or metrics.get("bind", DEFAULT_METRICS)
    if not isinstance(metrics_url, str):
        raise ConfigError("config: metrics.bind must be a URL like http://127.0.0.1:9464")
    try:
        parse_metrics_url(metrics_url)
    except ConfigError as exc:  # name the option the URL came from
        if metrics_bind is None:
            raise
        raise ConfigError(str(exc).replace("config: metrics.bind", "--metrics", 1)) from None
    level = log_level or gateway.get("log_level", "info")
    if level not in _LOG_LEVELS:
        raise ConfigError(f"config: gateway.log_level must be one of {', '.join(_LOG_LEVELS)}, got {level!r}")
    kinds = []
    for kind in DEFAULT_BINDS:
        table = dict(_table(edges, kind, _edge_keys(kind), "edges"))
        given = [url for k, url in binds if k == kind]
        if given:
            if not KINDS[kind].binds:
                raise ConfigError(f"--bind {kind}: the {kind} edge binds nothing, it connects out")
            table["bind"] = list(_binds(given, f"--bind {kind}"))  # errors name the option
            table["enabled"] = True
        if kind in disabled:
            table["enabled"] = False
        kinds.append(_edge(kind, table, base))
    for kind, _ in binds:
        if kind not in DEFAULT_BINDS:
            raise ConfigError(f"--bind: unknown edge {kind!r} (known: {', '.join(DEFAULT_BINDS)})")
    liveness = {
        e.kind: (e.heartbeat_ms, e.liveness)
        for e in kinds
        if e.heartbeat_ms is not None and e.liveness is not None
    }
    rc = RouterConfig()
    router = RouterConfig(
        queue_expiry_ms=_int(routing, "queue_expiry_ms", "routing", rc.queue_expiry_ms),
        max_redispatch=_int(routing, "max_redispatch", "routing", rc.max_redispatch),
        max_queue_per_service=_int(routing, "max_queue_per_service", "routing", rc.max_queue_per_service, 1),
        max_queued=_int(routing, "max_queued", "routing", rc.max_queued, 1),
        max_in_flight_per_worker=_int(
            routing, "max_in_flight_per_worker", "routing", rc.max_in_flight_per_worker, 1
        ),
        liveness={**dict(rc.liveness), **liveness},
    )
    lim = Limits()
    limit = Limits(
        max_message_bytes=_int(limits, "max_message_bytes", "limits", lim.max_message_bytes, 1),
        max_frames=_int(limits, "max_frames", "limits", lim.max_frames, 1),
        high_water_mark=_int(limits, "high_water_mark", "limits", lim.high_water_mark, 1),
        max_peers=_int(limits, "max_peers", "limits", lim.max_peers, 1),
    )
    configured = path_option(gateway.get("data_dir"), "gateway.data_dir", base)
    capture = _capture(
        _table(doc, "capture", {"dir", "segment_s", "segment_rows", "max_pending", "max_bytes", "edges"}),
        base,
        capture_dir,
    )
    return ServeConfig(
        # Absolute: get_status reports them (NorFab's broker shows absolute paths) and logs name them.
        data_dir=(data_dir or configured or default_data_dir()).absolute(),
        log_level=level,
        fsync=fsync,
        job_retention_s=_int(gateway, "job_retention_s", "gateway", JOB_RETENTION_S),
        drain_ms=_int(gateway, "drain_ms", "gateway", DRAIN_MS),
        stall_ms=_int(gateway, "stall_ms", "gateway", STALL_MS),
        routing=router,
        limits=limit,
        edges=tuple(kinds),
        metrics=metrics_url if metrics_on else None,
        capture=capture,
    )


def _capture(table: Mapping[str, Any], base: Path, given: Path | None) -> CaptureConfig | None:
    directory = given or path_option(table.get("dir"), "capture.dir", base)
    defaults = CaptureConfig(dir=Path())
    sizes = {
        key: _int(table, key, "capture", getattr(defaults, key), 1)
        for key in ("segment_s", "segment_rows", "max_pending")
    }
    # A disk budget in bytes: past 2 GiB is a real size, up to SQLite's and Python's int64.
    sizes["max_bytes"] = _int(table, "max_bytes", "capture", defaults.max_bytes, 0, 2**63 - 1)
    edges = table.get("edges", [])
    if not isinstance(edges, list) or not all(isinstance(e, str) and e for e in edges):
        raise ConfigError('config: capture.edges must be a list of edge names, like ["nfp", "dcp"]')
    if directory is None:
        return None
    return CaptureConfig(dir=directory.absolute(), edges=tuple(edges), **sizes)
