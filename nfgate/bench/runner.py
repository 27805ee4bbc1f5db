"""The bench's scenarios: start the brokers and the load as child processes, collect
the figures, compute the ratios. The ``nfgate bench`` command (:mod:`nfgate.bench.cli`)
only parses options and prints what these return.

- ``relay``: N clients -> broker -> M workers echoing a body, once with one request
  outstanding per client (``sync``) and once with ``window`` (``pipelined``). The
  brokers: the raw relay (the ceiling), the lean DCP broker (the floor of any Python
  broker that keeps DCP's one request per worker), nfgate in three dialects, and the
  NorFab broker; on demand also nfgate's NorFab dialect without the job store's fsync.
  Every broker is measured in the same run, one after the other, each fresh (its own
  process, a new ``--data-dir`` for nfgate), with its own worker process started before
  and its clients in another process.
- ``idle``: the gateway's RSS with no worker, then with 1,000 registered idle NFP
  workers.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
import psutil

from nfgate.bench.procs import Child, ChildError, children
from nfgate.edges.kinds import KINDS

__all__ = ["BROKERS", "DEFAULT_BROKERS", "DIALECT_OF", "BenchError", "Settings", "idle", "relay"]

DIALECT_OF = {
    "raw": "raw",
    # The raw relay with nfgate's own I/O calls (nfgate.bench.relay --fast): a tuned
    # ceiling beside the plain one the issue names; not in the default run.
    "raw-fast": "raw",
    "lean-dcp": "dcp",
    "nfgate-nfp": "nfp",
    "nfgate-norfab": "norfab",
    "nfgate-dcp": "dcp",
    "norfab": "norfab",
    # nfgate-norfab with [gateway] fsync = false: a 202'd job survives a kill -9 of the
    # gateway but not a crash of the machine. What the per-job fsync costs against NorFab's
    # broker, which keeps no job at all; not in the default run.
    "nfgate-norfab-nofsync": "norfab",
    # nfgate-dcp and nfgate-norfab with --capture: what capturing every frame costs the
    # loop (a tuple per message for the writer thread, and that thread's Parquet work).
    "nfgate-dcp-capture": "dcp",
    "nfgate-norfab-capture": "norfab",
}
BROKERS = tuple(DIALECT_OF)
# The variants run only when named in --brokers.
DEFAULT_BROKERS = tuple(name for name in BROKERS if not name.endswith(("-nofsync", "-capture", "-fast")))
NO_FSYNC = "[gateway]\nfsync = false\n"
START_TIMEOUT_S = 30.0
SETTLE_S = 0.3  # after the workers said ready: their READYs are in the broker's queue by then


class BenchError(RuntimeError):
    """A broker or load process failed; the message is one line."""


@attrs.frozen(kw_only=True)
class Settings:
    duration: float = 3.0
    warmup: float = 1.0
    clients: int = 4
    workers: int = 16
    window: int = 100
    size: int = 100
    idle_workers: int = 1000
    repeat: int = 1


def _python_module(module: str, *args: str) -> list[str]:
    return ["-m", module, *args]


def start_broker(name: str, kids: list[Child], workdir: str, extra_toml: str = "") -> tuple[Child, str]:
    """Start broker ``name`` (one of :data:`BROKERS`); return it and its client/worker
    endpoint. ``extra_toml`` goes into nfgate's configuration file (the reference
    brokers have none). Raises :class:`ChildError` if it does not come up."""
    # The reference brokers each print "... listening on URL" on stderr.
    reference = {
        "raw": ("raw relay", _python_module("nfgate.bench.relay")),
        "raw-fast": ("raw relay", _python_module("nfgate.bench.relay", "--fast")),
        "lean-dcp": ("lean DCP relay", _python_module("nfgate.bench.lean")),
        "norfab": ("norfab broker", _python_module("nfgate.bench.norfab_broker", "--base-dir", workdir)),
    }
    if name in reference:
        child = Child(*reference[name])
        kids.append(child)
        return child, child.expect(r"listening on (\S+)", START_TIMEOUT_S).group(1)
    # nfgate serve with its NFP and DCP edges only, on free ports, a fresh job store.
    others = [f"--no-{kind}" for kind in KINDS if kind not in ("nfp", "dcp")]
    nofsync = name.endswith("-nofsync")
    if nofsync or extra_toml:
        config = Path(workdir) / "nfgate.toml"
        config.write_text((NO_FSYNC if nofsync else "") + extra_toml)
        others += ["--config", str(config)]
    capture = name.endswith("-capture")
    if capture:
        others += ["--capture", str(Path(workdir) / "capture")]
    argv = _python_module(
        "nfgate",
        "serve",
        "--data-dir",
        workdir,
        "--bind",
        "nfp=tcp://127.0.0.1:0",
        "--bind",
        "dcp=tcp://127.0.0.1:0",
        "--log-level",
        "info",
        "--no-metrics",
        *others,
    )
    child = Child(name, argv)
    kids.append(child)
    edge = "dcp" if DIALECT_OF[name] == "dcp" else "nfp"
    endpoint = child.expect(rf"{edge} edge \({edge}\) listening on (\S+)", START_TIMEOUT_S).group(1)
    # The ready line says "fsync off" when it is: proof that the variant measured is the one named.
    if capture:
        child.expect(r"capturing to ", START_TIMEOUT_S)
    child.expect(r"\bready\b.*fsync off" if nofsync else r"\bready\b", START_TIMEOUT_S)
    return child, endpoint


def _workers(kids: list[Child], dialect: str, endpoint: str, count: int, *, confirm: bool = False) -> Child:
    args = ["workers", "--dialect", dialect, "--endpoint", endpoint, "--count", str(count)]
    child = Child(
        f"{dialect} workers", _python_module("nfgate.bench.load", *args, *(["--confirm"] if confirm else []))
    )
    kids.append(child)
    child.expect(r"^ready$", START_TIMEOUT_S, stream="out")
    return child


def _clients(dialect: str, endpoint: str, window: int, broker_pid: int, s: Settings) -> dict[str, Any]:
    args = [
        "clients",
        "--dialect",
        dialect,
        "--endpoint",
        endpoint,
        "--clients",
        str(s.clients),
        "--window",
        str(window),
        "--warmup",
        str(s.warmup),
        "--duration",
        str(s.duration),
        "--size",
        str(s.size),
        "--broker-pid",
        str(broker_pid),
    ]
    with children() as kids:
        child = Child(f"{dialect} clients", _python_module("nfgate.bench.load", *args))
        kids.append(child)
        line = child.expect(r"^\{.*\}$", s.warmup + s.duration + 30.0, stream="out").group(0)
    figures: dict[str, Any] = json.loads(line)
    return figures


MODES = ("sync", "pipelined")


def measure(name: str, s: Settings) -> dict[str, dict[str, Any]]:
    """``{mode: figures}`` for broker ``name``; raises :class:`BenchError`."""
    dialect = DIALECT_OF[name]
    with tempfile.TemporaryDirectory(prefix="nfgate-bench-") as workdir, children() as kids:
        try:
            broker, endpoint = start_broker(name, kids, workdir)
            _workers(kids, dialect, endpoint, s.workers)
            time.sleep(SETTLE_S)
            out = {}
            for mode in MODES:
                window = 1 if mode == "sync" else s.window
                out[mode] = _clients(dialect, endpoint, window, broker.pid, s)
                if broker.proc.poll() is not None:
                    raise ChildError(f"{broker.name} exited during the {mode} run")
            return out
        except ChildError as exc:
            raise BenchError(f"{name}: {exc}") from None


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if not a or not b or not b.get("req_per_s"):
        return None
    return round(float(a["req_per_s"]) / float(b["req_per_s"]), 3)


def _ratios(figures: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    ratios: dict[str, float | None] = {}
    for name in figures:
        if name.startswith("nfgate-"):
            for base in ("raw", "raw-fast", "norfab"):
                if base in figures:
                    ratios[f"{name}/{base}"] = _ratio(figures[name], figures[base])
    if "norfab" in figures and "raw" in figures:
        ratios["norfab/raw"] = _ratio(figures["norfab"], figures["raw"])
    # lean-dcp: what any Python DCP broker with nfgate's I/O and one request per worker
    # reaches (nfgate.bench.lean); nfgate-dcp's ratio to it is the price of what nfgate adds.
    if "lean-dcp" in figures and "nfgate-dcp" in figures:
        ratios["nfgate-dcp/lean-dcp"] = _ratio(figures["nfgate-dcp"], figures["lean-dcp"])
    if "lean-dcp" in figures and "raw" in figures:
        ratios["lean-dcp/raw"] = _ratio(figures["lean-dcp"], figures["raw"])
    if "raw-fast" in figures and "raw" in figures:
        ratios["raw-fast/raw"] = _ratio(figures["raw-fast"], figures["raw"])
    # A variant against the broker it varies: what capturing (or not fsyncing) costs.
    for name in figures:
        plain = name.rsplit("-", 1)[0]
        if name.endswith(("-capture", "-nofsync")) and plain in figures:
            ratios[f"{name}/{plain}"] = _ratio(figures[name], figures[plain])
    return ratios


def _median(values: list[float]) -> float:
    """The median, to 3 places: of an even count, the mean of the middle two (not the
    upper one, which would report the better of two rounds)."""
    return round(statistics.median(values), 3)


def median_round(runs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One broker's figures over the rounds: its median round by req/s; of two middle
    rounds, the slower, so that no figure is better than the median."""
    ordered = sorted(runs, key=lambda f: float(f["req_per_s"]))
    return ordered[(len(ordered) - 1) // 2]


# Correctness counts of a run (bench/load.py): every one must be 0 in every round.
CHECKS = ("mismatches", "errors", "unknown", "unanswered", "unacknowledged")


def invalid(objects: Sequence[dict[str, Any]]) -> list[str]:
    """What the brokers got wrong in a run, one phrase per scenario, mode and broker: a
    count of :data:`CHECKS` in any round (``all_rounds``), or a churn client that failed.
    A broker with any has no valid figures, however fast it was."""
    found = []
    for obj in objects:
        where = " ".join(str(obj[k]) for k in ("scenario", "mode") if k in obj)
        for name, counts in obj.get("all_rounds", {}).items():
            if bad := ", ".join(f"{v} {k}" for k, v in counts.items() if v):
                found.append(f"{where}: {name}: {bad}")
        for name, fig in obj.get("brokers", {}).items():
            if isinstance(fig, dict) and fig.get("failed"):
                found.append(f"{where}: {name}: {fig['failed']} failed")
    return found


def all_rounds(names: Sequence[str], per_round: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Each of :data:`CHECKS` summed over every round, per broker or path: the figures
    are the median round's, and a round that lost replies must not hide behind it."""
    return {name: {k: sum(int(r[name][k]) for r in per_round) for k in CHECKS} for name in names}


def relay(
    s: Settings, brokers: Sequence[str], progress: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """One JSON-ready object per mode (sync, pipelined) with every broker's figures and
    the ratios ``<nfgate variant>/raw``, ``<nfgate variant>/norfab``, ``norfab/raw``,
    ``nfgate-dcp/lean-dcp`` and ``lean-dcp/raw`` (req/s; each where both were measured). With ``s.repeat`` rounds, every broker is measured once per round (round
    robin, so slow drift of a shared machine hits them alike); each broker's figures are
    its median round by req/s (of two, the slower), each ratio is the median of the
    same-round ratios,
    ``all_rounds`` sums the correctness counts over every round and ``rounds`` lists
    every round's req/s and ratios. Raises :class:`BenchError`."""
    rounds: list[dict[str, dict[str, dict[str, Any]]]] = []
    for r in range(s.repeat):
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for name in brokers:
            progress(f"bench: round {r + 1}/{s.repeat}: measuring {name}")
            results[name] = measure(name, s)
        rounds.append(results)
    objects = []
    for mode in MODES:
        per_round = [{name: results[name][mode] for name in brokers} for results in rounds]
        figures = {}
        for name in brokers:
            figures[name] = median_round(f[name] for f in per_round)
        round_ratios = [_ratios(f) for f in per_round]
        ratios = {
            key: _median([r[key] for r in round_ratios if r[key] is not None])  # type: ignore[misc]
            if any(r[key] is not None for r in round_ratios)
            else None
            for key in round_ratios[0]
        }
        objects.append(
            {
                "scenario": "relay",
                "mode": mode,
                "window": 1 if mode == "sync" else s.window,
                "clients": s.clients,
                "workers": s.workers,
                "duration_s": s.duration,
                "warmup_s": s.warmup,
                "body_bytes": s.size,
                "repeat": s.repeat,
                "brokers": figures,
                "ratios": ratios,
                "all_rounds": all_rounds(brokers, per_round),
                "rounds": [
                    {"req_per_s": {n: f[n]["req_per_s"] for n in brokers}, "ratios": rr}
                    for f, rr in zip(per_round, round_ratios, strict=True)
                ],
            }
        )
    return objects


def _rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def idle(s: Settings, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The gateway's RSS with 0 and with ``s.idle_workers`` registered NFP workers.
    Raises :class:`BenchError`."""
    progress(f"bench: idle gateway, then {s.idle_workers} NFP workers")
    with tempfile.TemporaryDirectory(prefix="nfgate-bench-") as workdir, children() as kids:
        try:
            broker, endpoint = start_broker("nfgate-nfp", kids, workdir)
            time.sleep(1.0)
            rss0 = _rss(broker.pid)
            started = time.monotonic()
            workers = _workers(kids, "nfp", endpoint, s.idle_workers, confirm=True)
            # Every worker heard a KEEPALIVE after its READY: all are registered.
            workers.expect(r"^registered$", 30.0, stream="out")
            registered_s = time.monotonic() - started
            time.sleep(0.5)
            rss1 = _rss(broker.pid)
        except ChildError as exc:
            raise BenchError(f"idle: {exc}") from None
    per_worker = (rss1 - rss0) / s.idle_workers if s.idle_workers else 0.0
    return {
        "scenario": "idle",
        "broker": "nfgate",
        "workers": s.idle_workers,
        "rss_0_workers_bytes": rss0,
        "rss_workers_bytes": rss1,
        "rss_ratio": round(rss1 / rss0, 3) if rss0 else None,
        "bytes_per_worker": round(per_worker),
        "registration_s": round(registered_s, 2),
    }
