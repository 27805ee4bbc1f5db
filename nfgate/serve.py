"""``nfgate serve``: assemble the configured edges, the routing core and the job store,
and run the gateway until SIGINT/SIGTERM.

Start-up problems a user can fix (bad config, a port in use, an unusable data dir) are
one line on stderr and exit status 2; a clean stop is exit status 0.
"""

from __future__ import annotations

import logging
import signal
import socket
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import zmq

from nfgate import fdlimit
from nfgate.capture import Capture, check_edges
from nfgate.config import ServeConfig, load
from nfgate.edges import Edge, EdgeSettings
from nfgate.edges.kinds import KINDS
from nfgate.errors import ConfigError, TransportError
from nfgate.gateway import Gateway, LogRing
from nfgate.logtext import OneLineFormatter
from nfgate.metrics import MetricsServer, render
from nfgate.routing import Router
from nfgate.store import STORE_FILE, JobStore
from nfgate.store_lock import check_unlocked, lock_path
from nfgate.transports.curve import stop_authenticators

__all__ = ["build", "serve"]

log = logging.getLogger("nfgate")

STALLED_S = 10.0  # /healthz fails when the loop has not published its counters for this long


def build(
    cfg: ServeConfig,
    context: zmq.Context[zmq.Socket[bytes]],
    wake_fd: int | None = None,
    logs: LogRing | None = None,
) -> Gateway:
    """Bind every enabled edge and return a gateway ready to run (``logs``: what its
    ``get_logs`` serves, see :class:`Gateway`).

    Raises :class:`nfgate.errors.TransportError` (a port in use) or
    :class:`nfgate.errors.ConfigError` (data dir, inventory); edges bound before the
    failure are closed.
    """
    planned = [
        (ec, ec.kind if i == 0 else f"{ec.kind}-{i + 1}", url)
        for ec in cfg.edges
        if ec.enabled
        for i, url in enumerate(ec.bind or ("",))  # an edge that only connects out is one edge
    ]
    # The capture's mistakes (its folder, an edge name) before any edge binds: one line.
    capture = _capture(cfg, [(name, ec.kind) for ec, name, _ in planned])
    try:
        store = JobStore(cfg.data_dir / STORE_FILE, fsync=cfg.fsync, retention_ms=cfg.job_retention_s * 1000)
    except BaseException:
        if capture is not None:
            capture.close()
        raise
    edges: list[Edge] = []
    bound: list[str] = []  # logged once every edge is up: no "listening" line before a failure
    try:
        for ec, name, url in planned:
            make = KINDS[ec.kind].make()
            settings = EdgeSettings(
                name=name,
                protocol=ec.kind,
                url=url,
                context=context,
                limits=cfg.limits,
                options=ec.edge_options(),
            )
            try:
                edge = make(settings, store=store)
            except TransportError as exc:  # name the edge: the URL alone may not say which
                raise TransportError(f"{name} edge: {exc}") from None
            edges.append(edge)
            if edge.endpoint:
                key = getattr(edge, "curve_public_key", "")
                secured = f" (CURVE, server public key {key})" if key else ""
                bound.append(f"{name} edge ({ec.kind}) listening on {edge.endpoint}{secured}")
            else:
                key = getattr(edge, "curve_client_key", "")
                secured = f" (CURVE client, public key {key})" if key else ""
                bound.append(f"{name} edge ({ec.kind}) started{secured}")
        # Inside the try: the gateway takes descriptors too (a socket monitor per ZeroMQ
        # edge), and a start that runs out of them there must close what it bound.
        gateway = Gateway(
            Router(cfg.routing),
            edges,
            wake_fd=wake_fd,
            logs=logs,
            drain_ms=cfg.drain_ms,
            stall_ms=cfg.stall_ms,
        )
        for edge in edges:
            edge.attach(gateway)
    except BaseException:  # a bug too: the edges bound so far must not hold the exit
        for edge in edges:
            edge.close()
        stop_authenticators(context)
        store.close()
        if capture is not None:
            capture.close()
        raise
    for line in bound:
        log.info("%s", line)
    _warn_open_edges(edges)
    gateway.on_close(store.close)
    gateway.on_close(lambda: stop_authenticators(context))
    if capture is not None and cfg.capture is not None:
        capture.attach(edges)
        # Closed after the edges (the closers run after them): their last sends are in it.
        gateway.on_close(capture.close)
        gateway.extra_stats["capture"] = capture.stats
        which = f" (edges {', '.join(cfg.capture.edges)})" if cfg.capture.edges else ""
        log.info("capturing to %s%s", cfg.capture.dir, which)
    return gateway


def _warn_open_edges(edges: Sequence[Edge]) -> None:
    """One WARNING when some edges check who registers workers (a CURVE allow-list,
    memodb's client certificates) and others let any peer: the service namespace is
    shared, so any peer of an open edge can serve a name the checked edges' clients
    call (docs/broker.md, CURVE)."""
    checked = [edge.name for edge in edges if edge.worker_access() == "checked"]
    open_ = [edge.name for edge in edges if edge.worker_access() == "any"]
    if checked and open_:
        log.warning(
            "%s %s who may serve, but any peer of %s can register any service "
            "(lock those edges down too, or switch them off with --no-EDGE: docs/broker.md, CURVE)",
            ", ".join(checked),
            "checks" if len(checked) == 1 else "check",
            ", ".join(open_),
        )


def _capture(cfg: ServeConfig, planned: list[tuple[str, str]]) -> Capture | None:
    """The capture ``cfg`` asks for, its folder made; raises :class:`ConfigError` for a
    folder it cannot write or a ``capture.edges`` name no planned (name, kind) edge has."""
    if cfg.capture is None:
        return None
    check_edges(cfg.capture, planned)
    return Capture(cfg.capture)


def _signals(stop: Callable[[], None]) -> tuple[socket.socket, socket.socket]:
    """SIGINT/SIGTERM stop the loop; a socketpair wakes its poll at once."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno())

    def handler(signum: int, frame: FrameType | None) -> None:
        stop()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return reader, writer


def serve(
    config: Path | None,
    data_dir: Path | None,
    binds: Sequence[tuple[str, str]],
    disabled: Sequence[str],
    log_level: str | None,
    metrics: str | None = None,
    no_metrics: bool = False,
    capture: Path | None = None,
) -> None:
    """Run the gateway until a signal; raises :class:`NfgateError` for start-up problems."""
    cfg = load(
        config,
        data_dir=data_dir,
        binds=binds,
        disabled=disabled,
        log_level=log_level,
        metrics_bind=metrics,
        no_metrics=no_metrics,
        capture_dir=capture,
    )
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter("nfgate: %(message)s"))  # peers' names cannot forge lines
    logging.basicConfig(level=cfg.log_level.upper(), handlers=[handler])
    # get_logs (mmi.service.broker) serves the start-up lines too: edges bound, ready.
    logs = LogRing()
    log.addHandler(logs)
    # Every connected peer is a descriptor: 1,000 workers exceed the usual soft 1024.
    limit = fdlimit.raise_soft_limit()
    edge_count = sum(len(ec.bind or ("",)) for ec in cfg.edges if ec.enabled)
    fdlimit.check_start(limit, edge_count, cfg.metrics is not None)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    holder: list[Gateway] = []
    exporter: MetricsServer | None = None
    asked: list[bool] = []  # a signal came, maybe while the gateway was being built

    def stop() -> None:
        asked.append(True)
        if holder:
            holder[0].stop()

    reader, writer = _signals(stop)
    try:
        # Metrics first: a port in use is then the only line printed. But a data dir in
        # use is the likelier cause (the same config started twice): said first.
        check_unlocked(lock_path(cfg.data_dir / STORE_FILE))  # the store's, opened in build()
        try:
            exporter = _metrics(holder, cfg.metrics) if cfg.metrics is not None else None
            gateway = build(cfg, context, wake_fd=reader.fileno(), logs=logs)
        except Exception as exc:
            # Out of descriptors while binding (libzmq, NNG, SQLite or an import each say
            # it their own way, some with a traceback): the limit is the user's to raise.
            if fdlimit.is_exhaustion(exc):
                raise fdlimit.exhausted_at_start(limit, edge_count, cfg.metrics is not None) from None
            raise
        holder.append(gateway)
        if (warning := fdlimit.room_warning(limit, edge_count, cfg.metrics is not None)) is not None:
            log.warning("%s", warning)
        gateway.extra_stats["process"] = fdlimit.FdWatch(limit).stats
        if asked:  # a stop asked for during start-up (a slow inventory, say) is not lost
            gateway.stop()
        if exporter is not None:
            gateway.on_close(exporter.close)
            log.info("metrics on %s", exporter.url)
        try:
            gateway.recover()
        except sqlite3.DatabaseError as exc:  # a damaged page or row: not a traceback
            raise ConfigError(
                f"cannot read the jobs stored in {cfg.data_dir} ({exc}): restore them, or move "
                "jobs.sqlite3* aside to start with an empty job store"
            ) from None
        log.info("ready (job store %s%s)", cfg.data_dir, "" if cfg.fsync else ", fsync off")
        gateway.run()
        log.info("stopped: %s", _summary(gateway))
    finally:
        log.removeHandler(logs)
        if holder:
            holder[0].close()
        elif exporter is not None:
            exporter.close()
        signal.set_wakeup_fd(-1)
        reader.close()
        writer.close()
        # Every edge closed its sockets, with its own linger; one an edge left open when
        # its start failed part-way is closed here, or term() would wait for it for ever.
        context.destroy(linger=0)


def _metrics(holder: list[Gateway], url: str) -> MetricsServer:
    """The metrics endpoint, serving whichever gateway ``holder`` holds once it is built,
    and its health probes (docs/broker.md, Metrics): ``/healthz`` 503 when the loop has
    not come round for ``STALLED_S``; ``/readyz`` 200 only while it runs, not starting,
    draining or stopped (a load balancer takes a draining gateway out of rotation)."""
    started = time.monotonic()

    def page() -> str:
        if not holder:
            return render({}, {}, time.monotonic() - started)
        gateway = holder[0]
        protocols = {name: edge.protocol for name, edge in gateway.edges.items()}
        return render(gateway.snapshot, protocols, time.monotonic() - started)

    def alive() -> tuple[int, str]:
        state = holder[0].state if holder else "starting"
        if state not in ("running", "draining"):
            return 200, state
        # An idle loop still comes round twice a second (gateway.MAX_SLEEP_MS) and publishes.
        quiet = time.monotonic() - holder[0].published_at
        if quiet > STALLED_S:
            return 503, f"the loop has not come round for {quiet:.0f} s"
        return 200, "ok" if state == "running" else state

    def ready() -> tuple[int, str]:
        state = holder[0].state if holder else "starting"
        return (200, "ready") if state == "running" else (503, state)

    return MetricsServer(url, page, {"/healthz": alive, "/readyz": ready})


def _summary(gateway: Gateway) -> str:
    core = gateway.router.stats()
    keys = ("accepted", "replied", "failed", "expired", "workers_registered", "workers_lost")
    return ", ".join(f"{k}={core[k]}" for k in keys)
