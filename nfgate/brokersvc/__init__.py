"""Services the broker itself answers: NFP ``mmi.service.broker``, ``sid.service.broker``
and ``fss.service.broker``.

Each module has a ``handle(task, kwargs, args, ...)`` that the NFP edge calls with the
parsed request body ``{"task", "kwargs", "args"}`` and whose ``(status, value)`` it
JSON-encodes into the reply. The modules are pure: no sockets, no clock, no logging;
only :mod:`~nfgate.brokersvc.fss` reads files, and only under its root.

Shared here: the broker's snapshot of itself that the gateway fills in for the MMI
tasks (:class:`BrokerView` and its parts; :mod:`~nfgate.brokersvc.mmi` re-exports
them), the error a handler turns into a non-200 reply, NorFab's answer to a task it
does not know, and the argument reader that gives every task the same checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
from attrs import validators as v

from nfgate.errors import NfgateError
from nfgate.model import Status

__all__ = [
    "BrokerInfo",
    "BrokerView",
    "ClientInfo",
    "ProcessInfo",
    "RequestError",
    "WorkerInfo",
    "param",
    "unsupported",
]


@attrs.frozen(kw_only=True)
class WorkerInfo:
    """One registered worker. ``service`` may join several services with ``","``;
    ``holdtime_s``: seconds left before it expires; ``alive_s``: seconds since it registered."""

    name: str
    service: str
    protocol: str
    edge: str
    # NorFab's get_stats schema allows only these two, and its clients filter on them.
    status: str = attrs.field(default="alive", validator=v.in_(("alive", "dead")))
    holdtime_s: float = 0.0
    keepalives_tx: int = 0
    keepalives_rx: int = 0
    alive_s: float = 0.0
    in_flight: int = 0  # requests it works on for a client that waits
    late: int = 0  # requests that timed out or were cancelled there, still holding a slot

    def services(self) -> tuple[str, ...]:
        return tuple(s for s in self.service.split(",") if s)


@attrs.frozen(kw_only=True)
class ClientInfo:
    """One client; ``last_seen_s``: seconds since it was last heard; ``jobs``: its open jobs."""

    name: str
    protocol: str
    edge: str
    last_seen_s: float = 0.0
    jobs: int = 0


@attrs.frozen(kw_only=True)
class ProcessInfo:
    """The process figures of NorFab's ``get_stats`` (psutil's, where the gateway has them)."""

    cpu_percent: float = 0.0
    memory_rss_mbyte: float = 0.0
    open_file_descriptors: int | None = None
    tcp_sockets: int | None = None
    threads: int = 1


@attrs.frozen(kw_only=True)
class BrokerInfo:
    """The broker itself. ``started``: ISO 8601 text or a Unix epoch; ``endpoints``:
    ``(edge, protocol, url)`` per listening edge; ``inventory``/``files_root``: paths, or ""."""

    version: str
    started: str | float
    uptime_s: float
    endpoints: tuple[tuple[str, str, str], ...] = ()
    inventory: str = ""
    files_root: str = ""
    base_dir: str = ""
    name: str = "NFPBroker"  # NorFab clients know the broker by this name
    status: str = "active"  # NorFab: "active", or "stopping" once shutdown is under way
    keepalive_ms: int = 2500
    keepalive_multiplier: int = 6
    zmq_auth: bool = False
    process: ProcessInfo = attrs.field(factory=ProcessInfo)
    versions: Mapping[str, str] = attrs.field(factory=dict)  # package -> version, for show_broker_version

    def main_endpoint(self) -> str:
        """NorFab has one endpoint; this is the first NFP one (what NorFab clients use)."""
        for _edge, protocol, url in self.endpoints:
            if protocol == "nfp":
                return url
        return self.endpoints[0][2] if self.endpoints else ""


@attrs.frozen(kw_only=True)
class BrokerView:
    """Everything the MMI tasks answer from. ``stats``: counters by name (NorFab's
    messaging counters among them, if the gateway keeps them); ``logs``: recent log
    records, oldest first, each a JSON object line (NorFab's JSONL record) or plain
    text; ``inventory``: :meth:`nfgate.brokersvc.sid.Inventory.as_dict`, if loaded."""

    broker: BrokerInfo
    workers: tuple[WorkerInfo, ...] = ()
    clients: tuple[ClientInfo, ...] = ()
    stats: Mapping[str, int] = attrs.field(factory=dict)
    logs: tuple[str, ...] = ()
    inventory: Mapping[str, Any] | None = None

    def services(self) -> dict[str, list[WorkerInfo]]:
        """Service name -> its workers, in registration order."""
        out: dict[str, list[WorkerInfo]] = {}
        for w in self.workers:
            for name in w.services():
                out.setdefault(name, []).append(w)
        return out


class RequestError(NfgateError):
    """A request a broker service refuses; ``status`` (400, 404...) and ``message`` make
    the reply."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def unsupported(task: object) -> tuple[int, str]:
    """NorFab's broker answers an unknown task with 200 and this text (broker.py), and
    NorFab clients show it as the result: keep both the status and the wording."""
    return Status.OK, f"Unsupported task '{task}'"


_REQUIRED: Final = object()

_TYPE_NAMES: Final = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def param(
    task: str,
    kwargs: Mapping[str, Any],
    args: Sequence[Any],
    name: str,
    kinds: type | tuple[type, ...],
    *,
    position: int | None = None,
    default: Any = _REQUIRED,
) -> Any:
    """The argument ``name`` from ``kwargs``, else from ``args[position]``, else ``default``.

    A JSON ``null`` counts as absent (NorFab's nfcli sends unset options as null).
    ``bool`` is only accepted where ``kinds`` names it: JSON ``true`` is not the integer 1.

    Raises:
        RequestError: 400 when the argument is missing and has no default, or is of
            the wrong type.
    """
    value = kwargs.get(name)
    if value is None and position is not None and position < len(args):
        value = args[position]
    if value is None:
        if default is _REQUIRED:
            raise RequestError(Status.UNKNOWN, f"{task}: missing argument '{name}'")
        return default
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
        wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in allowed)
        raise RequestError(Status.UNKNOWN, f"{task}: '{name}' must be {wanted}, not {type(value).__name__}")
    return value
