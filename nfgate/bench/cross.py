"""The bench's ``cross`` scenario: requests that cross protocols inside the gateway,
each measured against the same-protocol NFP relay (``nfgate-nfp``) of the same run.

A path is "client protocol -> nfgate -> worker protocol". For every path and round the
gateway is started fresh with every edge the paths need (NFP, DCP, MemoDB, SADA channel
on free ports; no DBP, SADA server or metrics), its edges' endpoints read from its log
lines (``nfgate: <edge> edge (<kind>) listening on <url>``); then one process runs the
workers (on the worker protocol's edge) and another the clients (on the client
protocol's edge), as in the ``relay`` scenario (:mod:`nfgate.bench.runner`). The
baseline ``nfgate-nfp`` runs on the same gateway configuration, round robin with the
other paths, so each round gives one same-round ratio per path and mode.

Paths (client -> worker):

- ``nfgate-nfp``: NFP spec -> NFP spec (the baseline);
- ``memodb-dcp``: MemoDB simple clients (NNG req0, one context per outstanding request,
  :mod:`nfgate.bench.nng_load`) -> DCP workers;
- ``sada-nfp``: SADA peers sending REQ to the gateway's SADA channel -> NFP spec workers;
- ``dcp-nfp``: DCP clients -> NFP spec workers;
- ``nfp-dcp``: NFP spec clients -> DCP workers.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from nfgate.bench.procs import Child, ChildError, children
from nfgate.bench.runner import (
    MODES,
    SETTLE_S,
    START_TIMEOUT_S,
    BenchError,
    Settings,
    _clients,
    _median,
    _python_module,
    _workers,
    all_rounds,
    median_round,
)

__all__ = ["BASELINE", "CROSS_PATHS", "PATHS", "TARGET", "Path", "cross", "start_gateway"]

EDGES = ("nfp", "dcp", "memodb", "sada")
TARGET = 0.70  # every cross path >= 0.70x the baseline's req/s, same run


@attrs.frozen
class Path:
    """Clients of ``client`` (a bench dialect) on edge ``client_edge``, workers of
    ``worker`` on edge ``worker_edge``."""

    client: str
    client_edge: str
    worker: str
    worker_edge: str


PATHS = {
    "nfgate-nfp": Path("nfp", "nfp", "nfp", "nfp"),
    "memodb-dcp": Path("memodb", "memodb", "dcp", "dcp"),
    "sada-nfp": Path("sada", "sada", "nfp", "nfp"),
    "dcp-nfp": Path("dcp", "dcp", "nfp", "nfp"),
    "nfp-dcp": Path("nfp", "nfp", "dcp", "dcp"),
}
BASELINE = "nfgate-nfp"
CROSS_PATHS = tuple(name for name in PATHS if name != BASELINE)
RATIO = f"ratio_to_{BASELINE.replace('-', '_')}"


def start_gateway(kids: list[Child], workdir: str) -> tuple[Child, dict[str, str]]:
    """``nfgate serve`` with the NFP, DCP, MemoDB and SADA channel edges on free ports;
    returns it and ``{edge: url}``. Raises :class:`ChildError` if it does not come up."""
    binds = [arg for edge in EDGES for arg in ("--bind", f"{edge}=tcp://127.0.0.1:0")]
    argv = _python_module(
        "nfgate",
        "serve",
        "--data-dir",
        workdir,
        *binds,
        "--no-dbp",
        "--no-sada-server",
        "--no-metrics",
        "--log-level",
        "info",
    )
    child = Child("nfgate (cross)", argv)
    kids.append(child)
    urls: dict[str, str] = {}
    while set(urls) != set(EDGES):
        found = child.expect(r"nfgate: (\S+) edge \((\S+)\) listening on (\S+)", START_TIMEOUT_S)
        urls[found.group(1)] = found.group(3)
    child.expect(r"\bready\b", START_TIMEOUT_S)
    return child, urls


def measure_path(name: str, s: Settings) -> dict[str, dict[str, Any]]:
    """``{mode: figures}`` for path ``name`` on a fresh gateway; raises :class:`BenchError`."""
    path = PATHS[name]
    with tempfile.TemporaryDirectory(prefix="nfgate-bench-") as workdir, children() as kids:
        try:
            gateway, urls = start_gateway(kids, workdir)
            _workers(kids, path.worker, urls[path.worker_edge], s.workers)
            time.sleep(SETTLE_S)
            out = {}
            for mode in MODES:
                window = 1 if mode == "sync" else s.window
                out[mode] = _clients(path.client, urls[path.client_edge], window, gateway.pid, s)
                if gateway.proc.poll() is not None:
                    raise ChildError(f"{gateway.name} exited during the {mode} run")
            return out
        except ChildError as exc:
            raise BenchError(f"{name}: {exc}") from None


def _ratio(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    base = float(b.get("req_per_s") or 0.0)
    return round(float(a["req_per_s"]) / base, 3) if base else None


def _mode_object(
    mode: str, s: Settings, names: Sequence[str], per_round: list[dict[str, dict[str, Any]]]
) -> dict[str, Any]:
    figures: dict[str, dict[str, Any]] = {}
    for name in names:
        figures[name] = dict(median_round(r[name] for r in per_round))
    round_ratios = [
        {name: _ratio(r[name], r[BASELINE]) for name in names if name != BASELINE} for r in per_round
    ]
    ratios: dict[str, float | None] = {}
    spread: dict[str, list[float]] = {}
    for name in names:
        if name == BASELINE:
            continue
        values = [v for r in round_ratios if (v := r[name]) is not None]
        ratios[name] = _median(values) if values else None
        spread[name] = [min(values), max(values)] if values else []
        figures[name][RATIO] = ratios[name]
    figures[BASELINE][RATIO] = 1.0
    checks = all_rounds(names, per_round)  # every round, not only the median one: all 0
    return {
        "scenario": "cross",
        "mode": mode,
        "window": 1 if mode == "sync" else s.window,
        "clients": s.clients,
        "workers": s.workers,
        "duration_s": s.duration,
        "warmup_s": s.warmup,
        "body_bytes": s.size,
        "repeat": s.repeat,
        "baseline": BASELINE,
        "paths": figures,
        RATIO: ratios,
        f"{RATIO}_spread": spread,
        "target": TARGET,
        "target_met": {name: r is not None and r >= TARGET for name, r in ratios.items()},
        "all_rounds": checks,
        "rounds": [
            {"req_per_s": {n: r[n]["req_per_s"] for n in names}, RATIO: rr}
            for r, rr in zip(per_round, round_ratios, strict=True)
        ],
    }


def cross(
    s: Settings, paths: Sequence[str], progress: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """One JSON-ready object per mode (sync, pipelined): every path's figures (its median
    round by req/s), the median of its same-round ratios to :data:`BASELINE` with their
    spread (min, max), whether each meets :data:`TARGET`, and every round's req/s and
    ratios. The baseline is always measured, first in each round. Raises
    :class:`BenchError`."""
    names = [BASELINE, *(p for p in paths if p != BASELINE)]
    rounds: list[dict[str, dict[str, dict[str, Any]]]] = []
    for r in range(s.repeat):
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for name in names:
            progress(f"bench: cross round {r + 1}/{s.repeat}: measuring {name}")
            results[name] = measure_path(name, s)
        rounds.append(results)
    return [
        _mode_object(mode, s, names, [{n: results[n][mode] for n in names} for results in rounds])
        for mode in MODES
    ]
