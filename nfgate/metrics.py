"""Prometheus metrics for ``nfgate serve`` (text exposition format 0.0.4).

The event loop owns every counter and is single-threaded, so the HTTP server never reads
them directly: once a second the loop publishes a snapshot (:meth:`Gateway.publish`, a
plain dict swapped by reference), and each scrape renders the latest one. A scrape is
therefore at most a second old and costs the loop nothing.

Names: ``nfgate_core_<counter>_total`` for the routing core's counters,
``nfgate_core_<gauge>`` for its gauges (workers, jobs, queued, in_flight, late), and
``nfgate_edge_events_total{edge, protocol, event}`` for what each edge counts (bad input,
unroutable sends, ...), ``nfgate_edge_<gauge>{edge, protocol}`` for what an edge holds
now (:data:`EDGE_GAUGES`), and ``nfgate_edge_messages_total{edge, protocol, direction}``
and ``nfgate_edge_message_failures_total{...}`` for the messages each edge moved.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from nfgate.errors import ConfigError, TransportError

__all__ = ["EDGE_GAUGES", "GAUGES", "MetricsServer", "Probe", "parse_url", "render"]

log = logging.getLogger("nfgate.metrics")

GAUGES = frozenset({"workers", "jobs", "queued", "in_flight", "late", "draining"})
# What an edge's stats() holds that goes down as well as up: a gauge, not an event count
# (a counter that falls reads as a restart to Prometheus's rate()).
EDGE_GAUGES = {
    "workers": "Workers registered on the edge.",
    "servers": "SADA servers known to the channel.",
    "services": "DBP services registered.",
    "channels": "SADA channels the server edge knows.",
    "jobs_live": "NFP jobs accepted and not yet finished.",
    "peers": "Peers whose dialect or session the edge remembers (bounded; the oldest clients are forgotten).",
}
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
POLL_S = 0.05  # how often the HTTP thread looks for close(): bounds what a stop waits for it
# A connection that sends no complete request within this is closed. Each connection has a
# thread of its own, which waited for ever without it: idle connections (a scraper that
# hung, a port scan) each kept one, past close() too.
IDLE_S = 10.0
# An accept that fails for want of descriptors (or kernel memory) is tried again after
# this pause; its WARNING comes at most this often.
ACCEPT_BACKOFF_S = 0.25
ACCEPT_WARN_EVERY_S = 60.0
_SCARCE = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

Snapshot = Mapping[str, Mapping[str, int]]
"""``{"core": {...}, "edge:<name>": {...}, "traffic:<name>": {...}}`` as
:meth:`nfgate.gateway.Gateway.stats`."""


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _name(text: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text)


def render(snapshot: Snapshot, protocols: Mapping[str, str], uptime_s: float) -> str:
    """The exposition text for one snapshot; ``protocols`` maps edge name -> protocol."""
    lines = [
        "# HELP nfgate_uptime_seconds Seconds since the gateway started.",
        "# TYPE nfgate_uptime_seconds gauge",
        f"nfgate_uptime_seconds {uptime_s:.3f}",
    ]
    for key, value in sorted(snapshot.get("core", {}).items()):
        metric = f"nfgate_core_{_name(key)}"
        if key in GAUGES:
            lines += [f"# TYPE {metric} gauge", f"{metric} {value}"]
        else:
            lines += [f"# TYPE {metric}_total counter", f"{metric}_total {value}"]
    lines += [
        "# HELP nfgate_edge_events_total Events counted by each edge (bad input, unroutable sends, ...).",
        "# TYPE nfgate_edge_events_total counter",
    ]
    held: dict[str, list[str]] = {}
    for labels, event, value in _per_edge(snapshot, "edge:", protocols):
        if event in EDGE_GAUGES:
            held.setdefault(event, []).append(f"nfgate_edge_{event}{{{labels}}} {value}")
        else:
            lines.append(f'nfgate_edge_events_total{{{labels},event="{_label(event)}"}} {value}')
    for gauge, samples in sorted(held.items()):
        metric = f"nfgate_edge_{gauge}"
        lines += [f"# HELP {metric} {EDGE_GAUGES[gauge]}", f"# TYPE {metric} gauge", *samples]
    # One family after the other: the text format wants each family's samples together.
    for metric, help_text, keys in _TRAFFIC:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"]
        for labels, key, value in _per_edge(snapshot, "traffic:", protocols):
            if key in keys:
                lines.append(f'{metric}{{{labels},direction="{keys[key]}"}} {value}')
    # --capture: records taken, dropped, written; "pending" is the writer's backlog.
    for key, value in sorted(snapshot.get("capture", {}).items()):
        metric = f"nfgate_capture_{_name(key)}"
        if key == "pending":
            lines += [f"# TYPE {metric} gauge", f"{metric} {value}"]
        else:
            lines += [f"# TYPE {metric}_total counter", f"{metric}_total {value}"]
    # The process (nfgate.fdlimit): its open-file limit and the looks that found it used up.
    process = snapshot.get("process", {})
    if "fd_limit" in process:
        lines += [
            "# HELP nfgate_process_fd_limit The open-file limit (soft RLIMIT_NOFILE) of the gateway.",
            "# TYPE nfgate_process_fd_limit gauge",
            f"nfgate_process_fd_limit {process['fd_limit']}",
        ]
    if "fd_exhausted" in process:
        lines += [
            "# HELP nfgate_process_fd_exhausted_total Looks (one a second) that found no file descriptor free.",
            "# TYPE nfgate_process_fd_exhausted_total counter",
            f"nfgate_process_fd_exhausted_total {process['fd_exhausted']}",
        ]
    return "\n".join(lines) + "\n"


# The traffic:<edge> snapshot keys: (metric, help, {key: direction}).
_TRAFFIC = (
    (
        "nfgate_edge_messages_total",
        "Messages each edge read (in) and sent (out).",
        {"received": "in", "sent": "out"},
    ),
    (
        "nfgate_edge_message_failures_total",
        "Messages read and refused (in), or not sent (out).",
        {"receive_failures": "in", "send_failures": "out"},
    ),
)


def _per_edge(
    snapshot: Snapshot, prefix: str, protocols: Mapping[str, str]
) -> Iterator[tuple[str, str, int]]:
    """(edge and protocol labels, key, value) of every ``<prefix><edge>`` section, sorted."""
    for section in sorted(snapshot):
        if section.startswith(prefix):
            edge = section.removeprefix(prefix)
            labels = f'edge="{_label(edge)}",protocol="{_label(protocols.get(edge, ""))}"'
            for key, value in sorted(snapshot[section].items()):
                yield labels, key, value


def parse_url(url: str) -> tuple[str, int]:
    """``http://host:port[/metrics]`` -> (host, port); port 0 picks a free one.

    Raises:
        ConfigError: not an http URL with a host and a port.
    """
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if (
        parts.scheme != "http"
        or not parts.hostname
        or port is None
        or parts.path not in ("", "/", "/metrics")
    ):
        raise ConfigError(f"config: metrics.bind must look like http://127.0.0.1:9464, got {url!r}")
    return parts.hostname, port


Probe = Callable[[], tuple[int, str]]
"""A health probe: (HTTP status, one line saying why)."""


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that pauses after an accept that failed for want of
    descriptors or memory. Why: the listening socket stays readable while the
    connection waits in the backlog, so socketserver's loop (which drops the error and
    polls again) took a whole core for as long as the process was out of descriptors.
    The connection is accepted once descriptors are free again."""

    daemon_threads = True
    stopping: threading.Event  # set by MetricsServer.close: a pause ends at once
    accept_failures = 0
    _warned_at = -ACCEPT_WARN_EVERY_S

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in _SCARCE:
                self.accept_failures += 1
                now = time.monotonic()
                if now - self._warned_at >= ACCEPT_WARN_EVERY_S:
                    self._warned_at = now
                    log.warning(
                        "metrics: cannot accept a connection (%s): pausing %.2f s between tries"
                        " (%d failed accept(s) so far)",
                        exc.strerror or exc,
                        ACCEPT_BACKOFF_S,
                        self.accept_failures,
                    )
                self.stopping.wait(ACCEPT_BACKOFF_S)
            raise


class _Server6(_Server):
    address_family = socket.AF_INET6


def _server_for(host: str) -> type[_Server]:
    """The server class for ``host``: IPv6 for an IPv6 address (``http://[::1]:9464``;
    urlsplit hands it over without brackets), IPv4 otherwise. Raises nothing."""
    return _Server6 if ":" in host else _Server


class MetricsServer:
    """``GET /metrics`` on a daemon thread, rendering ``page()`` per scrape, and each of
    ``probes`` (path -> :data:`Probe`, e.g. ``/healthz``) as a status and a line of text.

    Raises:
        TransportError: the address cannot be bound (in use, not local).
    """

    def __init__(self, url: str, page: Callable[[], str], probes: Mapping[str, Probe] | None = None) -> None:
        host, port = parse_url(url)
        checks = dict(probes or {})

        class Handler(BaseHTTPRequestHandler):
            timeout = IDLE_S  # StreamRequestHandler sets it on the socket

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in checks:
                    status, text = checks[path]()
                    self._send(status, "text/plain; charset=utf-8", (text + "\n").encode())
                elif path in ("/metrics", "/"):
                    self._send(200, CONTENT_TYPE, page().encode())
                else:
                    self.send_error(404, f"only /metrics{''.join(', ' + p for p in checks)} are served here")

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("metrics: " + format, *args)  # scrapes are not INFO news

        try:
            self._httpd = _server_for(host)((host, port), Handler)
        except OSError as exc:
            raise TransportError(f"cannot bind metrics on {url}: {exc.strerror or exc}") from None
        self._httpd.stopping = threading.Event()
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self._httpd.server_address[1]}/metrics"
        # shutdown() waits for serve_forever to look at its flag, once per poll_interval
        # (0.5 s by default): every stop of the gateway waited that long for it.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": POLL_S}, name="metrics", daemon=True
        )
        self._thread.start()

    @property
    def accept_failures(self) -> int:
        """Accepts that failed for want of descriptors or memory (each followed by a pause)."""
        return self._httpd.accept_failures

    def close(self) -> None:
        self._httpd.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
