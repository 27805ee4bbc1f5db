"""The ``nfgate bench`` command: prints one JSON object per scenario (and mode).

See :mod:`nfgate.bench.runner` for what is measured and docs/performance.md for the
figures and how to read them.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from types import FrameType
from typing import Any

import click

from nfgate.bench.cross import BASELINE, CROSS_PATHS
from nfgate.bench.runner import BROKERS, DEFAULT_BROKERS, BenchError, Settings
from nfgate.cliparams import FiniteRange, NonEmptyPath
from nfgate.errors import NfgateError

__all__ = ["bench"]


def _brokers(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in BROKERS]
    if unknown or not names:
        raise click.BadParameter(f"choose from {', '.join(BROKERS)} (comma-separated), got {value!r}")
    return names


def _paths(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in (*CROSS_PATHS, BASELINE)]
    if unknown or not names:
        raise click.BadParameter(f"choose from {', '.join(CROSS_PATHS)} (comma-separated), got {value!r}")
    return names


@click.command()
@click.option(
    "--scenario",
    type=click.Choice(["relay", "cross", "idle", "path", "churn", "analyze", "all"]),
    default="all",
    show_default=True,
    help="all = relay, cross, idle and path; churn (memory while clients come and go) and analyze "
    "(the capture pipeline, needs the spark extra and Java) run only when named.",
)
@click.option(
    "--duration",
    type=FiniteRange(min=0.1, max=600),
    default=3.0,
    show_default=True,
    help="Seconds measured per broker and mode (warm-up excluded).",
)
@click.option(
    "--warmup",
    type=FiniteRange(min=0.0, max=60),
    default=1.0,
    show_default=True,
    help="Seconds before measuring.",
)
@click.option(
    "--clients", type=click.IntRange(1, 256), default=4, show_default=True, help="Client DEALER sockets."
)
@click.option(
    "--workers",
    type=click.IntRange(1, 256),
    default=16,
    show_default=True,
    help="Worker DEALER sockets (nfgate gives each one request at a time).",
)
@click.option(
    "--repeat",
    type=click.IntRange(1, 20),
    default=1,
    show_default=True,
    help="Rounds over all brokers; figures and ratios are the medians.",
)
@click.option(
    "--window",
    type=click.IntRange(1, 10_000),
    default=100,
    show_default=True,
    help="Requests outstanding per client in the pipelined mode.",
)
@click.option(
    "--size", type=click.IntRange(80, 1 << 20), default=100, show_default=True, help="Request body bytes."
)
@click.option(
    "--brokers",
    default=",".join(DEFAULT_BROKERS),
    show_default=True,
    callback=_brokers,
    help=f"Brokers to measure in this run, comma-separated, from {', '.join(BROKERS)}.",
)
@click.option(
    "--paths",
    default=",".join(CROSS_PATHS),
    show_default=True,
    callback=_paths,
    help=f"Cross-protocol paths (client-worker) for the cross scenario; {BASELINE} is always measured.",
)
@click.option(
    "--idle-workers",
    type=click.IntRange(0, 5000),
    default=1000,
    show_default=True,
    help="Workers in the idle scenario.",
)
@click.option(
    "--churn-clients",
    type=click.IntRange(100, 10_000_000),
    default=20_000,
    show_default=True,
    help="Clients in the churn scenario, each a new DEALER with one request.",
)
@click.option(
    "--max-peers",
    type=click.IntRange(1, 10_000_000),
    default=5_000,
    show_default=True,
    help="nfgate's [limits] max_peers in the churn scenario (below --churn-clients: the run passes the bound).",
)
@click.option(
    "--records",
    type=click.IntRange(8, 100_000_000),
    default=1_000_000,
    show_default=True,
    help="Records in the analyze scenario's capture.",
)
@click.option(
    "--master", default="local[*]", show_default=True, help="Spark master for the analyze scenario."
)
@click.option(
    "--out", type=NonEmptyPath(path_type=Path, dir_okay=False), default=None, help="Also write the JSON here."
)
def bench(
    scenario: str,
    duration: float,
    warmup: float,
    clients: int,
    workers: int,
    repeat: int,
    window: int,
    size: int,
    brokers: tuple[str, ...],
    paths: tuple[str, ...],
    idle_workers: int,
    churn_clients: int,
    max_peers: int,
    records: int,
    master: str,
    out: Path | None,
) -> None:
    """Benchmark the gateway against a raw pyzmq relay, a lean DCP broker and the NorFab
    broker, and its cross-protocol paths against its own NFP relay.

    Brokers, workers and clients run as separate processes on 127.0.0.1; every child
    is killed on exit. Progress goes to stderr, results to stdout (one JSON object per
    line).
    """
    from nfgate.bench import churn, cross, path, runner

    # What can be told wrong now is told now, not after minutes of measuring.
    if out is not None and not os.access(out.parent, os.W_OK | os.X_OK):
        raise click.BadParameter(f"cannot write in {out.parent}", param_hint="'--out'")
    if scenario == "analyze":
        from nfgate.analysis.job import MASTER

        if not MASTER.fullmatch(master):
            raise click.BadParameter(
                f"must be local[*], local[N], yarn, spark://HOST:PORT or k8s://URL, got {master!r}",
                param_hint="'--master'",
            )

    settings = Settings(
        duration=duration,
        warmup=warmup,
        clients=clients,
        workers=workers,
        window=window,
        size=size,
        idle_workers=idle_workers,
        repeat=repeat,
    )

    def progress(line: str) -> None:
        click.echo(line, err=True)

    # SIGTERM unwinds as Ctrl-C does: every child stopped, every temporary data dir removed.
    signal.signal(signal.SIGTERM, _terminated)
    objects: list[dict[str, Any]] = []
    lines: list[str] = []
    try:
        if scenario in ("relay", "all"):
            objects += runner.relay(settings, brokers, progress)
        if scenario in ("cross", "all"):
            objects += cross.cross(settings, paths, progress)
        if scenario in ("idle", "all"):
            objects.append(runner.idle(settings, progress))
        if scenario in ("path", "all"):
            progress("bench: measuring the dcp, nfp and norfab paths in process (no sockets)")
            objects.append(path.path(size=size))
        if scenario == "churn":
            # Brokers named with --brokers, else the four that matter here (churn.CHURN_BROKERS).
            named = click.get_current_context().get_parameter_source("brokers")
            chosen = brokers if named is not click.core.ParameterSource.DEFAULT else churn.CHURN_BROKERS
            objects.append(churn.churn(chosen, churn_clients, max_peers, size, progress))
        if scenario == "analyze":
            from nfgate.bench.analysis import analysis

            objects.append(analysis(records, size, master, progress))
    except (BenchError, NfgateError) as exc:
        raise click.ClickException(str(exc)) from None
    for obj in objects:
        line = json.dumps(obj)
        lines.append(line)
        click.echo(line)
    if out is not None:
        try:
            out.write_text("".join(f"{line}\n" for line in lines))
        except OSError as exc:
            raise click.ClickException(f"cannot write {out}: {exc.strerror}") from None
    # The JSON is out (it says what happened); the exit status says the run is not valid.
    if wrong := runner.invalid(objects):
        raise click.ClickException("wrong answers, so no valid figures: " + "; ".join(wrong))


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
