"""The services an NFP broker answers itself: ``mmi.service.broker`` (management),
``sid.service.broker`` (worker inventory) and ``fss.service.broker`` (files).

The logic is in :mod:`nfgate.brokersvc` (pure); this module parses the request body,
fills in the broker's view of itself, sends the reply in the client's dialect and carries
out management actions (shutdown, restart, disconnect) after replying.

A request reaches these services as NorFab's MMI command (answered twice, as NorFab's
broker does: a RESPONSE, then an MMI copy, which is the one NorFab's ``mmi()`` reads) or
as a plain POST (answered with one RESPONSE: the spec's way, "mmi.service.broker" being
an ordinary service name there).
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import psutil
import zmq

from nfgate import __version__
from nfgate.brokersvc import BrokerInfo, BrokerView, ClientInfo, ProcessInfo, WorkerInfo, fss, mmi, sid
from nfgate.brokersvc.mmi import Action, ActionKind
from nfgate.codecs._base import load_json
from nfgate.codecs.nfp import session as nfpjson
from nfgate.codecs.nfp.messages import BROKER, Mmi, Post, Response
from nfgate.edges import peer_label
from nfgate.errors import ConfigError
from nfgate.model import Peer, Status

if TYPE_CHECKING:
    from nfgate.edges.nfp import NfpEdge

__all__ = ["BROKER_SERVICES", "NfpOptions", "NfpServices"]

log = logging.getLogger("nfgate.edge.nfp")

MMI, SID, FSS = "mmi.service.broker", "sid.service.broker", "fss.service.broker"
BROKER_SERVICES = frozenset({MMI, SID, FSS})
# What show_broker_version lists besides nfgate, Python and the platform, as NorFab's
# broker lists its own dependencies.
PACKAGES = ("pyzmq", "pynng", "cbor2", "msgpack", "attrs", "click", "psutil", "pyyaml")


@functools.cache
@functools.cache
def package_versions() -> dict[str, str]:
    """The installed version of each of :data:`PACKAGES` ("" if missing) and libzmq's,
    read once: what this process imported does not change (a package upgraded on disk
    is not running until a restart), and the metadata lookups cost milliseconds."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = ""
    versions["libzmq"] = zmq.zmq_version()
    return versions


@attrs.frozen(kw_only=True)
class NfpOptions:
    inventory: sid.Inventory | None = None
    inventory_path: Path | None = None
    files: fss.FileRoot | None = None

    @classmethod
    def load(cls, inventory: Path | None, files_root: Path | None) -> NfpOptions:
        """Read the inventory and check the files root; raises :class:`ConfigError`
        naming the key (``edges.nfp.inventory``, ``edges.nfp.files_root``)."""
        try:
            loaded = sid.load_inventory(inventory) if inventory is not None else None
        except ConfigError as exc:
            raise ConfigError(f"config: edges.nfp.inventory: {exc}") from None
        try:
            files = fss.FileRoot(files_root) if files_root is not None else None
        except ConfigError as exc:
            raise ConfigError(f"config: edges.nfp.files_root: {exc}") from None
        return cls(inventory=loaded, inventory_path=inventory, files=files)


class NfpServices:
    def __init__(self, edge: NfpEdge, options: NfpOptions) -> None:
        self._edge = edge
        self._options = options
        self._started = time.time()  # shown as the start's date
        # Uptime from the monotonic clock: the wall clock steps (NTP, a VM resumed).
        self._started_mono = time.monotonic()
        self._process = psutil.Process()
        self._process.cpu_percent(interval=None)  # primes it: each call reports since the last

    @staticmethod
    def owns(service: str) -> bool:
        return service in BROKER_SERVICES

    def mmi(self, peer: Peer, dialect: str, msg: Mmi) -> None:
        self._answer(peer, dialect, msg.service or "", msg.uuid, msg.body, twice=True)

    def post(self, peer: Peer, dialect: str, msg: Post) -> None:
        self._answer(peer, dialect, msg.service or "", msg.uuid, msg.body, twice=False)

    def _answer(
        self, peer: Peer, dialect: str, service: str, uuid: str, body: tuple[bytes, ...], *, twice: bool
    ) -> None:
        self._edge.counters["mmi_requests"] += 1
        action: Action | None = None
        status: int
        value: Any
        try:
            task, kwargs, args = _parse(body)
        except ValueError as exc:
            status, value = Status.UNKNOWN, f"bad request body: {exc}"
        else:
            if service == MMI:
                # The process figures (psutil scans the system's TCP table: about 10 ms,
                # on the loop) only for the one task that reports them, as NorFab does.
                result = mmi.handle(task, kwargs, args, self.view(process=task == "get_stats"))
                status, value, action = result.status, result.value, result.action
            elif service == SID:
                status, value = sid.handle(task, kwargs, args, self._options.inventory)
            elif service != FSS:
                # NorFab's broker drops an MMI for any other service, and its client waits
                # out its timeout; an answer at once is kinder, and no other service may
                # be answered as if it were one of these.
                self._edge.bad_input(peer, "unknown_broker_service", f"MMI for service {service!r}")
                status, value = (
                    Status.NOT_FOUND,
                    f"no broker service {service!r}: {', '.join(sorted(BROKER_SERVICES))}",
                )
            elif self._options.files is None:
                status, value = Status.NOT_FOUND, "no files_root is configured for fss.service.broker"
            else:
                status, value = fss.handle(task, kwargs, args, self._options.files)
        reply = (nfpjson.dumps(value),)
        messages: list[Response | Mmi] = [
            Response(header=BROKER, service=service, uuid=uuid, status=status, body=reply)
        ]
        if twice and dialect == "norfab":
            messages.append(Mmi(header=BROKER, service=service, uuid=uuid, status=status, body=reply))
        for message in messages:
            frames = self._edge.encode(message, dialect)
            if frames is not None:
                self._edge.send(peer.address, frames)
        if action is not None:
            self._carry_out(action, peer)

    def _carry_out(self, action: Action, peer: Peer) -> None:
        gateway = self._edge.gateway
        if gateway is None:
            return
        what = action.kind.value
        if action.kind is ActionKind.DISCONNECT:
            what += f" of worker {action.worker}" if action.worker else " of every worker"
        log.warning("%s: %s %s asked for by %s", self._edge.name, MMI, what, peer_label(peer.address))
        gateway.request(action)

    def _clients(self, now_ms: int) -> tuple[ClientInfo, ...]:
        jobs = self._edge.jobs.open_by_client()
        return tuple(
            ClientInfo(
                name=self._edge.peer_name(address),
                protocol=f"nfp/{dialect}",
                edge=self._edge.name,
                last_seen_s=max(0.0, idle_ms / 1000),
                jobs=jobs.get(address, 0),
            )
            for address, dialect, idle_ms in self._edge.clients(now_ms)
        )

    def view(self, *, process: bool = True) -> BrokerView:
        """What the MMI tasks read; ``process`` False leaves out the process figures
        (:class:`ProcessInfo`'s zeros), which cost milliseconds to read."""
        gateway = self._edge.gateway
        # The loop's time, which the workers' last beats are on (a stall, a paused
        # process, is taken out of it: nfgate.loopclock).
        now_mono = gateway.now() if gateway is not None else time.monotonic_ns() // 1_000_000
        workers = []
        stats: Mapping[str, int] = {}
        endpoints: tuple[tuple[str, str, str], ...] = ()
        if gateway is not None:
            # NorFab's "messaging" counters are its one socket's; nfgate's are every edge's.
            events = sum(e.counters["events_received"] for e in gateway.edges.values())
            stats = {**gateway.router.stats(), **attrs.asdict(gateway.traffic()), "events_received": events}
            if gateway.loop_clock is not None:  # the loop's stalls: a paused process
                stats.update(gateway.loop_clock.stats())
            endpoints = tuple((e.name, e.protocol, e.endpoint) for e in gateway.edges.values())
            for w in gateway.router.workers():
                edge = gateway.edges.get(w.peer.edge)
                sent, heard = (edge.heartbeats(w.peer) if edge is not None else None) or (0, 0)
                workers.append(
                    WorkerInfo(
                        name=w.name or peer_label(w.peer.address),
                        service=",".join(s.name for s in w.services),
                        protocol=w.peer.protocol,
                        edge=w.peer.edge,
                        status="alive",
                        holdtime_s=max(0.0, (w.last_seen_ms + w.timeout_ms - now_mono) / 1000),
                        keepalives_tx=sent,
                        keepalives_rx=heard,
                        alive_s=max(0.0, (now_mono - w.since_ms) / 1000),
                        in_flight=w.in_flight - w.late,
                        late=w.late,
                    )
                )
        return BrokerView(
            broker=BrokerInfo(
                version=__version__,
                started=self._started,
                uptime_s=time.monotonic() - self._started_mono,
                endpoints=endpoints,
                inventory=str(self._options.inventory_path or ""),
                files_root=str(self._options.files.path) if self._options.files is not None else "",
                keepalive_ms=self._edge.heartbeat[0],
                keepalive_multiplier=self._edge.heartbeat[1],
                base_dir=self._edge.jobs.data_dir,
                zmq_auth=bool(self._edge.curve_public_key),
                process=self._process_info() if process else ProcessInfo(),
                versions=dict(package_versions()),
            ),
            workers=tuple(workers),
            clients=self._clients(now_mono),
            stats=stats,
            logs=tuple(gateway.logs.lines) if gateway is not None else (),
            inventory=self._options.inventory.as_dict() if self._options.inventory is not None else None,
        )

    def _process_info(self) -> ProcessInfo:
        # The figures NorFab's broker reports, read the way it reads them (psutil).
        p = self._process
        try:
            tcp: int | None = len(p.net_connections(kind="tcp"))
        except (psutil.AccessDenied, NotImplementedError):
            tcp = None
        return ProcessInfo(
            cpu_percent=p.cpu_percent(interval=None),
            memory_rss_mbyte=p.memory_info().rss / 1024 / 1024,
            open_file_descriptors=p.num_fds() if hasattr(p, "num_fds") else None,
            tcp_sockets=tcp,
            threads=p.num_threads(),
        )


def _parse(body: Sequence[bytes]) -> tuple[str, dict[str, Any], list[Any]]:
    """NorFab's request body ``{"task", "kwargs", "args"}``; raises ValueError."""
    try:
        value = load_json(body[0]) if body and body[0] else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object with task, kwargs, args")
    task, kwargs, args = value.get("task", ""), value.get("kwargs") or {}, value.get("args") or []
    if not isinstance(kwargs, dict) or not isinstance(args, list):
        raise ValueError("kwargs must be an object, args a list")
    # A task that is not a string is a task no service has: NorFab's broker answers 200
    # "Unsupported task 'None'" (its text, Python's str of the value), as for any other.
    return task if isinstance(task, str) else str(task), kwargs, args
