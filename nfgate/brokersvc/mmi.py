"""``mmi.service.broker``: the broker's management interface, as a pure function of a
snapshot (:class:`BrokerView`, defined with its parts in :mod:`nfgate.brokersvc` and
re-exported here) that the gateway fills in.

Tasks, NorFab 0.25's first (same names, kwargs and reply shapes, since NorFab's nfcli
prints them), then the NFP spec's BMMI tasks NorFab lacks:

- ``show_workers`` (kwargs ``service``, ``status``; nfgate adds ``details``)
- ``get_stats``, ``get_status``, ``show_broker_version``, ``show_broker_inventory``
- ``get_logs`` (kwargs ``last``, ``level``, ``logger``, ``since``, ``until``)
- ``show_broker``, ``show_clients``, ``show_services``
- ``restart``, ``shutdown``, ``disconnect`` (kwarg ``name``): these answer at once and
  hand back an :class:`Action` for the gateway to carry out after the reply is sent.

An unknown task gets 200 and ``"Unsupported task '<task>'"`` (NorFab's answer); a bad
argument gets 400 and a message naming it. Unknown kwargs are ignored, as NorFab does.
"""

from __future__ import annotations

import copy
import datetime
import enum
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from nfgate.brokersvc import (
    BrokerInfo,
    BrokerView,
    ClientInfo,
    ProcessInfo,
    RequestError,
    WorkerInfo,
    param,
    unsupported,
)
from nfgate.codecs._base import load_json
from nfgate.model import Status

__all__ = [
    "Action",
    "ActionKind",
    "BrokerInfo",
    "BrokerView",
    "ClientInfo",
    "MmiResult",
    "ProcessInfo",
    "WorkerInfo",
    "handle",
]

_NO_WORKERS = {"name": "", "service": "", "status": ""}
"""NorFab's ``show_workers`` row when no worker matches; nfcli's table needs a row."""

_MESSAGING = ("sent", "received", "events_received", "send_failures", "receive_failures")
"""NorFab's ``get_stats`` "messaging" counters, read from :attr:`BrokerView.stats`."""


class ActionKind(enum.Enum):
    RESTART = "restart"
    SHUTDOWN = "shutdown"
    DISCONNECT = "disconnect"


@attrs.frozen(kw_only=True)
class Action:
    """What the gateway does after the reply: ``worker`` names the worker to disconnect;
    None with DISCONNECT means every worker (the spec's "disconnect all workers")."""

    kind: ActionKind
    worker: str | None = None


@attrs.frozen(kw_only=True)
class MmiResult:
    """The reply ``(status, value)`` and what to do once it is sent."""

    status: int
    value: Any
    action: Action | None = None


def handle(task: str, kwargs: Mapping[str, Any], args: Sequence[Any], view: BrokerView) -> MmiResult:
    """Answer one ``mmi.service.broker`` request from ``view``; never raises for a bad
    request: an unknown task is 200 with NorFab's text, a bad argument is 400."""
    run = _TASKS.get(task)
    if run is None:
        status, text = unsupported(task)
        return MmiResult(status=status, value=text)
    if not isinstance(kwargs, Mapping) or isinstance(args, str | bytes) or not isinstance(args, Sequence):
        return MmiResult(status=Status.UNKNOWN, value=f"{task}: kwargs must be an object and args a list")
    try:
        out = run(_Req(task, kwargs, args), view)
    except RequestError as exc:
        return MmiResult(status=exc.status, value=exc.message)
    return out if isinstance(out, MmiResult) else MmiResult(status=Status.OK, value=out)


@attrs.frozen
class _Req:
    task: str
    kwargs: Mapping[str, Any]
    args: Sequence[Any]

    def get(
        self, name: str, kinds: type | tuple[type, ...], default: Any, position: int | None = None
    ) -> Any:
        return param(self.task, self.kwargs, self.args, name, kinds, position=position, default=default)


_Task = Callable[[_Req, BrokerView], Any]
_TASKS: dict[str, _Task] = {}


def _task(run: _Task) -> _Task:
    _TASKS[run.__name__.lstrip("_")] = run
    return run


# ------------------------------------------------------------------ NorFab's tasks


@_task
def _show_workers(req: _Req, view: BrokerView) -> Any:
    service = req.get("service", str, "all")
    status = req.get("status", str, "any")
    details = req.get("details", bool, False)
    # NorFab filters only on "alive"/"dead" and takes any other value for no filter
    # (nfcli sends "any"). A 400 here would not reach nfcli's user as an error: NorFab's
    # client reports an MMI's status apart from its errors, and nfcli reads only the
    # errors, so it would take the 400's text for the list of workers.
    rows: list[dict[str, Any]] = []
    for w in view.workers:
        if service not in ("all", "") and service not in w.services():
            continue
        if status in ("alive", "dead") and w.status != status:
            continue
        row: dict[str, Any] = {
            "name": w.name,
            "service": w.service,
            "status": w.status,
            # NorFab's strings: str(round(holdtime, 1)) and str(int(alive)).
            "holdtime": str(round(w.holdtime_s, 1)),
            "keepalives tx/rx": f"{w.keepalives_tx} / {w.keepalives_rx}",
            "alive (s)": str(int(w.alive_s)),
        }
        if details:
            row.update({"protocol": w.protocol, "edge": w.edge, "in flight": w.in_flight, "late": w.late})
        rows.append(row)
    return rows or [dict(_NO_WORKERS)]


@_task
def _get_stats(req: _Req, view: BrokerView) -> Any:
    # NorFab's BrokerMonitoringStats: strict and without extra keys, as nfweb validates it.
    b, p = view.broker, view.broker.process
    workers = [
        {
            "name": w.name,
            "service": w.service,
            "status": w.status,
            "holdtime_seconds": round(float(w.holdtime_s), 1),
            "uptime_seconds": int(w.alive_s),
            "keepalives_sent": w.keepalives_tx,
            "keepalives_received": w.keepalives_rx,
        }
        for w in view.workers
    ]
    return {
        "schema_version": "1.0",
        "collected_at": _iso(b.started, b.uptime_s),
        "name": b.name,
        "role": "broker",
        "status": b.status,
        "process": {
            "cpu_percent": float(p.cpu_percent),
            "memory_rss_mbyte": float(p.memory_rss_mbyte),
            "uptime_seconds": int(b.uptime_s),
            "open_file_descriptors": p.open_file_descriptors,
            "tcp_sockets": p.tcp_sockets,
            "threads": p.threads,
        },
        "messaging": {key: int(view.stats.get(key, 0)) for key in _MESSAGING},
        "endpoint": b.main_endpoint(),
        "worker_count": len(view.workers),
        "service_count": len(view.services()),
        "keepalive_interval_ms": b.keepalive_ms,
        "keepalive_multiplier": b.keepalive_multiplier,
        "workers": workers,
    }


@_task
def _get_status(req: _Req, view: BrokerView) -> Any:
    # NorFab's keys; there are no key files here, so "directories" names nfgate's paths.
    b = view.broker
    return {
        "name": b.name,
        "role": "broker",
        "status": b.status,
        "endpoint": b.main_endpoint(),
        "directories": {"base_dir": b.base_dir, "inventory": b.inventory, "files_root": b.files_root},
        "security": {"zmq_auth": b.zmq_auth},
        "version": b.version,
        "endpoints": _endpoints(b),
    }


@_task
def _show_broker_version(req: _Req, view: BrokerView) -> Any:
    versions = {"nfgate": view.broker.version, **view.broker.versions}
    versions.update(python=sys.version.split(" ")[0], platform=sys.platform)
    return versions


@_task
def _show_broker_inventory(req: _Req, view: BrokerView) -> Any:
    if view.inventory is None:
        return {s: {} for s in ("broker", "workers", "topology", "logging", "client", "hooks", "plugins")}
    return copy.deepcopy(dict(view.inventory))  # the reply must not share the view's dicts


@_task
def _get_logs(req: _Req, view: BrokerView) -> Any:
    last = req.get("last", int, 100)
    if last < 0:
        raise RequestError(Status.UNKNOWN, f"{req.task}: 'last' must be 0 (all) or more, not {last}")
    level, logger = req.get("level", str, ""), req.get("logger", str, "")
    # Compared as text, as NorFab's broker does: "yesterday" matches nothing. A 400
    # would be kinder to a caller of our own, but nfcli (`show norfab logging since
    # ...`) takes any answer's value for the records and fails on a 400's text, where
    # NorFab's broker gives it 200 and an empty list (see _show_workers).
    since, until = req.get("since", str, ""), req.get("until", str, "")
    records = []
    for line in view.logs:
        record = _record(line, view.broker.name)
        ts = str(record.get("ts", ""))
        # NorFab's read_jsonl_logs filters: exact logger, level case-insensitively,
        # since/until as plain string comparisons of the ISO "ts".
        if (
            (logger and record.get("logger") != logger)
            or (level and str(record.get("level", "")).upper() != level.upper())
            or (since and ts < since)
            or (until and ts > until)
        ):
            continue
        records.append(record)
    return records[-last:] if last else records


# ------------------------------------------------------------ the spec's BMMI tasks


@_task
def _show_broker(req: _Req, view: BrokerView) -> Any:
    b = view.broker
    return {
        "name": b.name,
        "version": b.version,
        "status": b.status,
        "started": _iso(b.started, 0.0),
        "uptime (s)": round(float(b.uptime_s), 1),
        "endpoints": _endpoints(b),
        "inventory": b.inventory,
        "files root": b.files_root,
        "workers": len(view.workers),
        "services": len(view.services()),
        "clients": len(view.clients),
        "stats": {key: view.stats[key] for key in sorted(view.stats)},
    }


@_task
def _show_clients(req: _Req, view: BrokerView) -> Any:
    return [
        {
            "name": c.name,
            "protocol": c.protocol,
            "edge": c.edge,
            "last seen (s)": round(float(c.last_seen_s), 1),
            "jobs": c.jobs,
        }
        for c in view.clients
    ]


@_task
def _show_services(req: _Req, view: BrokerView) -> Any:
    return [
        {
            "service": name,
            "workers": len(members),
            "alive": sum(w.status == "alive" for w in members),
            "protocols": sorted({w.protocol for w in members}),
            "edges": sorted({w.edge for w in members}),
            "in flight": sum(w.in_flight for w in members),
            "late": sum(w.late for w in members),
        }
        for name, members in view.services().items()
    ]


@_task
def _restart(req: _Req, view: BrokerView) -> Any:
    text = f"Broker restarting: {len(view.workers)} worker(s) will be disconnected"
    return MmiResult(status=Status.OK, value=text, action=Action(kind=ActionKind.RESTART))


@_task
def _shutdown(req: _Req, view: BrokerView) -> Any:
    return MmiResult(status=Status.OK, value="Broker shutting down", action=Action(kind=ActionKind.SHUTDOWN))


@_task
def _disconnect(req: _Req, view: BrokerView) -> Any:
    name = req.get("name", str, "", position=0)
    if not name:
        text = f"Disconnecting all {len(view.workers)} worker(s)"
        return MmiResult(status=Status.OK, value=text, action=Action(kind=ActionKind.DISCONNECT))
    if not any(w.name == name for w in view.workers):
        raise RequestError(Status.UNKNOWN, f"{req.task}: no worker named {name!r}")
    action = Action(kind=ActionKind.DISCONNECT, worker=name)
    return MmiResult(status=Status.OK, value=f"Disconnecting worker '{name}'", action=action)


# ------------------------------------------------------------------------ helpers


def _endpoints(b: BrokerInfo) -> list[dict[str, str]]:
    return [{"edge": edge, "protocol": protocol, "url": url} for edge, protocol, url in b.endpoints]


def _iso(started: str | float, plus_s: float) -> str:
    """``started`` + ``plus_s`` seconds as ISO 8601 UTC. Formatting a time the view
    carries, not reading a clock: get_stats' "collected_at" is start + uptime."""
    if isinstance(started, str):
        try:
            at = datetime.datetime.fromisoformat(started)
        except ValueError:
            return started  # not ours to reject: show what the gateway gave
        if at.tzinfo is None:
            at = at.replace(tzinfo=datetime.UTC)
    else:
        at = datetime.datetime.fromtimestamp(float(started), tz=datetime.UTC)
    return (at + datetime.timedelta(seconds=plus_s)).isoformat()


def _record(line: str, broker: str) -> dict[str, Any]:
    """A log line as NorFab's record: a JSON object line as is, other text as its message."""
    record: dict[str, Any]
    try:
        parsed = load_json(line)
    except ValueError:
        parsed = None
    record = dict(parsed) if isinstance(parsed, dict) else {"ts": "", "level": "", "message": line}
    # NorFab tags broker records so nfcli can tell them from workers' records.
    record.setdefault("role", "broker")
    record.setdefault("name", broker)
    return record
