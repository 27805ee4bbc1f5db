"""The ``nfgate`` command line.

Every user error (bad hex, bad JSON, unknown protocol, bad config) ends in one line on
stderr and exit status 2; nothing prints a traceback for input a person typed.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from nfgate import __version__
from nfgate import codecs as registry
from nfgate.cliparams import NONEMPTY, NonEmptyPath
from nfgate.codecs._base import load_json
from nfgate.edges.kinds import KINDS
from nfgate.errors import NfgateError
from nfgate.frames import EMPTY_FRAME, hex_frames  # "-": an empty frame (an empty argument works too)

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, status: int = 2) -> NoReturn:
    """Print one line to stderr and exit; the single exit path for user errors."""
    click.echo(f"nfgate: {message}", err=True)
    sys.exit(status)


class _OneLineGroup(click.Group):
    """The ``nfgate`` group, reporting a usage error in one line, as :func:`fail` does.

    click's own report is three lines (usage, hint, error); a mistyped option is a user
    error like any other, so it gets the house form: ``nfgate serve: No such option
    '--bogus'. Try 'nfgate serve --help'.`` and exit status 2.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        try:
            # Every command ends by sys.exit (SystemExit passes through click), so
            # what invoke returns here is None or the code of a ctx.exit().
            code = super().main(*args, **{**kwargs, "standalone_mode": False})
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "nfgate"
            # click 8.4+ ends its message with a period, older ones do not.
            message = exc.format_message().rstrip(".") + "."
            click.echo(f"{where}: {message} Try '{where} --help'.", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"nfgate: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("nfgate: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nfgate")
def main() -> None:
    """nfgate: a translating broker, conformance suite and codec library for the
    NFP, DBP, MemoDB, DCP and Safir-Darbaan service protocols."""


def _protocol_option(func: F) -> F:
    return click.option(
        "--protocol",
        "-p",
        required=True,
        help="Codec name: " + ", ".join(registry.names()),
    )(func)


@main.command()
@_protocol_option
@click.option("--dialect", "-d", default=None, help="Force a dialect instead of detecting it.")
@click.argument("frames", nargs=-1)
def decode(protocol: str, dialect: str | None, frames: tuple[str, ...]) -> None:
    """Decode one message given as hex FRAMES and print it as JSON.

    Write an empty frame as '-' (or an empty argument). MemoDB takes one frame: the
    whole NNG message.
    """
    try:
        codec = registry.get(protocol)
        raw = [_unhex(protocol, i, text) for i, text in enumerate(frames)]
        chosen = codec.detect(raw) if dialect is None else dialect
        message = codec.decode(raw, chosen)
        click.echo(json.dumps(codec.to_json(message, chosen), sort_keys=False))
    except NfgateError as exc:
        fail(str(exc))


@main.command()
@_protocol_option
@click.option(
    "--dialect", "-d", default=None, help="Dialect to write (default: the JSON's, else the spec's)."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of hex frames instead.")
def encode(protocol: str, dialect: str | None, as_json: bool) -> None:
    """Read one message as JSON on stdin (the form `decode` prints) and print its frames
    as hex, space-separated, with '-' for an empty frame."""
    try:
        codec = registry.get(protocol)
        text = sys.stdin.read()
        try:
            obj = load_json(text)
        except ValueError as exc:
            fail(f"{protocol}: stdin is not JSON: {exc}")
        message, json_dialect = codec.from_json(obj)
        frames = codec.encode(message, json_dialect if dialect is None else dialect)
    except NfgateError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps([f.hex() for f in frames]))
    else:
        click.echo(hex_frames(frames))


@main.command()
def protocols() -> None:
    """List the codecs available (built-in and plugins) with their dialects."""
    for name in registry.names():
        codec = registry.get(name)
        click.echo(f"{name:8} {codec.title}  dialects: {', '.join(codec.dialects)}")
    for problem in registry.plugin_errors():
        click.echo(f"warning: plugin {problem}", err=True)


def _unhex(protocol: str, index: int, text: str) -> bytes:
    if text in ("", EMPTY_FRAME):
        return b""
    try:
        return bytes.fromhex(text)
    except ValueError:
        fail(f"{protocol}: frame {index} is not hex: {text[:40]!r}")


def bind_pair(value: str) -> tuple[str, str]:
    """``EDGE=URL`` from ``--bind`` as (edge kind, URL), port 0 written ``*`` (a free
    port); exits with one line for anything else."""
    kind, sep, url = value.partition("=")
    if not sep or not kind or not url:
        fail(f"--bind: expected EDGE=URL, got {value!r}")
    # Only the port: an IPv6 address has ":0" inside it too (tcp://[2001:0db8::1]:0).
    return kind, url[: -len(":0")] + ":*" if url.endswith(":0") else url


def _switch(kind: str) -> str:
    return "no_" + kind.replace("-", "_")


def _edge_switches(command: Callable[..., None]) -> Callable[..., None]:
    """``--no-EDGE`` for every edge kind in :data:`nfgate.edges.kinds.KINDS`."""
    for kind in reversed(KINDS.values()):
        flag = click.option(
            f"--no-{kind.kind}",
            _switch(kind.kind),
            is_flag=True,
            help=f"Do not start the {kind.summary} edge (wins over --bind and the config).",
        )
        command = flag(command)
    return command


@main.command()
@click.option(
    "--config",
    "-c",
    "config",
    type=NonEmptyPath(path_type=Path, dir_okay=False),
    default=None,
    help="TOML configuration file (see docs/broker.md).",
)
@click.option(
    "--data-dir",
    type=NonEmptyPath(path_type=Path, file_okay=False),
    default=None,
    help="Where the job store lives (default: $XDG_DATA_HOME/nfgate, else ~/.local/share/nfgate).",
)
@click.option(
    "--bind",
    "binds",
    multiple=True,
    metavar="EDGE=URL",
    help="Bind an edge here instead (repeatable; port 0 picks a free port); switches the edge "
    "on even if the config says enabled = false.",
)
@_edge_switches
@click.option(
    "--metrics",
    "metrics",
    type=NONEMPTY,
    metavar="URL",
    default=None,
    help="Serve Prometheus metrics here (default http://127.0.0.1:9464), even if the config "
    "says enabled = false.",
)
@click.option("--no-metrics", "no_metrics", is_flag=True, help="Do not serve metrics (wins over --metrics).")
@click.option(
    "--capture",
    type=NonEmptyPath(file_okay=False, path_type=Path),
    default=None,
    help="Write every frame in and out here as Parquet segments (for `nfgate analyze`).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default=None,
    help="Log level (default: the config's gateway.log_level, else info).",
)
def serve(
    config: Path | None,
    data_dir: Path | None,
    binds: tuple[str, ...],
    metrics: str | None,
    no_metrics: bool,
    capture: Path | None,
    log_level: str | None,
    **switches: bool,
) -> None:
    """Run the translating broker until SIGINT/SIGTERM, then drain and exit 0: new
    requests are refused while those at workers finish, for up to gateway.drain_ms (5 s);
    a second signal stops at once."""
    from nfgate import serve as serving  # the gateway's imports are not needed by the other commands

    pairs = [bind_pair(value) for value in binds]
    disabled = [kind for kind in KINDS if switches.get(_switch(kind))]
    try:
        serving.serve(config, data_dir, pairs, disabled, log_level, metrics, no_metrics, capture)
    except NfgateError as exc:
        fail(str(exc))


@main.command()
@click.argument("source", type=NONEMPTY)
@click.option(
    "--out",
    "out",
    type=NONEMPTY,
    required=True,
    help="Where the tables, summary.json and report.html go: a directory or a URI (hdfs://, s3a://...).",
)
@click.option(
    "--master",
    type=NONEMPTY,
    default="local[*]",
    show_default=True,
    help="Spark master URL (spark://host:7077, yarn, local[N]).",
)
@click.option(
    "--conf",
    "conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark property, as spark-submit's --conf (repeatable).",
)
@click.option(
    "--since",
    metavar="TIME",
    help="Only messages at or after TIME (ISO 8601, e.g. 2026-11-25T14:00:00Z; no zone: UTC).",
)
@click.option("--until", metavar="TIME", help="Only messages before TIME (as --since).")
def analyze(
    source: str, out: str, master: str, conf: tuple[str, ...], since: str | None, until: str | None
) -> None:
    """Run the PySpark job over a capture directory (`nfgate serve --capture DIR`).

    SOURCE is a directory or a URI Spark can read (hdfs://, s3a://, file://...).
    """
    from nfgate.analysis.job import JobError  # pyspark is imported only by the run
    from nfgate.analysis.job import analyze as run

    properties: dict[str, str] = {}
    for value in conf:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            fail(f"--conf: expected KEY=VALUE, got {value!r}")
        properties[key.strip()] = setting
    window = (_instant(since, "--since"), _instant(until, "--until"))
    try:
        summary = run(
            source, out, master, properties, window, warn=lambda line: click.echo(f"nfgate: {line}", err=True)
        )
    except JobError as exc:  # the job failed once running: not the command line's fault
        fail(str(exc), 1)
    except NfgateError as exc:
        fail(str(exc))
    click.echo(
        f"{summary['messages']} messages ({summary['malformed']} malformed), {summary['exchanges']} exchanges "
        f"({summary['unanswered']} unanswered) -> {out.rstrip('/')}/report.html"
    )


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


_NS_RANGE = (-(2**63), 2**63 - 1)  # ts_ns is an int64 of nanoseconds


def _instant(text: str | None, option: str) -> int | None:
    """An ISO 8601 time as nanoseconds since the epoch (UTC when it names no zone).
    Exits with one line for text that is not such a time, or a time an int64 of
    nanoseconds cannot hold (Spark would fail on it with a traceback)."""
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        fail(f"{option}: expected an ISO 8601 time like 2026-11-25T14:00:00Z, got {text!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    ns = (when - _EPOCH) // datetime.timedelta(microseconds=1) * 1_000
    if not _NS_RANGE[0] <= ns <= _NS_RANGE[1]:
        fail(
            f"{option}: {text!r} is outside the times a capture holds "
            "(1677-09-21T00:12:44Z to 2262-04-11T23:47:16Z)"
        )
    return ns


from nfgate.bench.cli import bench  # noqa: E402  (subcommands register after the group exists)
from nfgate.conformance.cli import conformance  # noqa: E402
from nfgate.discover import discover  # noqa: E402

main.add_command(bench)
main.add_command(discover)
main.add_command(conformance)

if __name__ == "__main__":  # pragma: no cover
    main()
