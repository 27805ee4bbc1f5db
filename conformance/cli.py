"""``nfgate conformance``: run a role's cases against a peer and report per spec clause.

Exit status: 0 when no case FAILs (with ``--strict``: and none is NON-STRICT), 1 when
one does, 2 for bad usage (unknown protocol/role/dialect, an endpoint that cannot be
bound or connected to, a report directory that cannot be made), found before any case.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from nfgate.cliparams import FiniteRange, NonEmptyPath
from nfgate.conformance.curve import load_curve
from nfgate.conformance.model import Case, CaseResult, RunOptions
from nfgate.conformance.registry import find_role, select
from nfgate.conformance.report import write_reports
from nfgate.conformance.report.console import case_line, summary
from nfgate.conformance.runner import run
from nfgate.conformance.tls import load_tls
from nfgate.errors import NfgateError

__all__ = ["conformance"]

EPILOG = """\b
Roles: the suite plays the counterpart of the peer under test.
  broker, catalog, channel roles: the suite CONNECTS to --endpoint (the
                peer's address) as its clients, workers or servers.
  worker, server roles: the suite BINDS --endpoint (as a broker or a
                channel); start the peer under test pointing at that address.
\b
Examples:
  nfgate conformance --protocol nfp --role broker --endpoint tcp://127.0.0.1:5555
  nfgate conformance -p dcp -r worker -e tcp://127.0.0.1:6000 --report out/
  nfgate conformance -p nfp -r broker --list
"""


def _usage(message: str) -> None:
    click.echo(f"nfgate: {message}", err=True)
    sys.exit(2)


@click.command("conformance", epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--protocol", "-p", required=True, help="Protocol of the peer under test (nfp, dcp, ...).")
@click.option(
    "--role",
    "-r",
    required=True,
    help="Role of the peer under test: broker, worker, catalog, server or channel.",
)
@click.option(
    "--endpoint",
    "-e",
    default=None,
    metavar="URL",
    help="Broker roles: the peer's address, which the suite connects to. Worker roles: the "
    "address the suite BINDS, which the worker under test connects to. Port 0 picks a free port.",
)
@click.option(
    "--cases",
    "include",
    multiple=True,
    metavar="GLOB",
    help="Run only cases whose id matches (repeatable), e.g. 'NFP-BROKER-7.*'.",
)
@click.option(
    "--exclude", multiple=True, metavar="GLOB", help="Leave out cases whose id matches (repeatable)."
)
@click.option("--strict", is_flag=True, help="Count NON-STRICT (a SHOULD broken) as failure.")
@click.option(
    "--timeout",
    type=FiniteRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Each case's deadline in seconds, for all its exchanges together (raise it for a slow peer).",
)
@click.option(
    "--heartbeat-ms",
    type=click.IntRange(min=10),
    default=2500,
    show_default=True,
    help="The heartbeat interval agreed with the peer (NorFab's default is 2500); liveness cases wait 6 intervals.",
)
@click.option(
    "--dialect",
    "-d",
    default="auto",
    show_default=True,
    help="spec, a deployed dialect (nfp: norfab; dcp: dagbox; memodb: bcdb; dbp: hermes; sada: piran), or auto.",
)
@click.option(
    "--curve-server-key",
    default=None,
    metavar="KEY|FILE",
    help="The peer's CURVE public key (40 Z85 characters, or a ZeroMQ certificate file such as "
    "NorFab's __norfab__/files/broker/public_keys/broker.key): the suite connects as a CURVE client.",
)
@click.option(
    "--curve-secret-key",
    type=NonEmptyPath(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="The suite's own ZeroMQ secret certificate: its CURVE server keys where it binds (worker, "
    "server roles), its client keys where it connects (default: a pair made for the run).",
)
@click.option(
    "--tls-ca",
    type=NonEmptyPath(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="MemoDB over tls+tcp://: the CA (PEM) the broker's certificate must be signed by; where the "
    "suite listens, the CA a worker's certificate must be signed by.",
)
@click.option(
    "--tls-cert-key",
    type=NonEmptyPath(path_type=Path, dir_okay=False),
    default=None,
    metavar="FILE",
    help="MemoDB over tls+tcp://: the suite's certificate and key in one PEM file (needed where it listens).",
)
@click.option(
    "--tls-server-name",
    default=None,
    metavar="NAME",
    help="MemoDB over tls+tcp://: the name the broker's certificate must carry (default: the endpoint's host).",
)
@click.option("--list", "list_only", is_flag=True, help="List the cases and exit without running them.")
@click.option(
    "--report",
    "report_dir",
    type=NonEmptyPath(path_type=Path, file_okay=False),
    default=None,
    help="Write report.json, junit.xml and index.html into this directory.",
)
def conformance(
    protocol: str,
    role: str,
    endpoint: str | None,
    include: tuple[str, ...],
    exclude: tuple[str, ...],
    strict: bool,
    timeout: float,
    heartbeat_ms: int,
    dialect: str,
    curve_server_key: str | None,
    curve_secret_key: Path | None,
    tls_ca: Path | None,
    tls_cert_key: Path | None,
    tls_server_name: str | None,
    list_only: bool,
    report_dir: Path | None,
) -> None:
    """Check a third-party broker or worker against its protocol spec, case by case,
    with a verdict per spec clause: PASS, FAIL (a MUST broken), NON-STRICT (a SHOULD
    broken), INFO (a choice the spec allows, recorded) or SKIP."""
    try:
        found = find_role(protocol.lower(), role.lower())
    except NfgateError as exc:
        _usage(str(exc))
        return
    if dialect != "auto" and dialect not in found.dialects:
        _usage(f"{protocol}/{role}: unknown dialect {dialect!r} (known: auto, {', '.join(found.dialects)})")
    cases = select(found, include, exclude)
    if list_only:
        for case in cases:
            only = f"  ({', '.join(case.dialects)} only)" if case.dialects else ""
            click.echo(f"{case.id:18} [{case.clause.keyword}] {case.title}{only}")
        click.echo(f"{len(cases)} case(s) for {found.protocol}/{found.role}: {found.summary}")
        return
    if not endpoint:
        _usage("--endpoint is required (or use --list)")
        return
    if not cases:
        _usage("no case matches --cases/--exclude")
    if report_dir is not None:
        # Found now, not after a run that can take minutes: the report's directory.
        try:
            report_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            _usage(f"cannot write the report to {report_dir}: {exc.strerror or exc}")
        if not os.access(report_dir, os.W_OK):
            _usage(f"cannot write the report to {report_dir}: not writable")
    try:
        curve = load_curve(curve_server_key, curve_secret_key, binds=found.binds, codec=found.codec)
        tls = load_tls(
            tls_ca, tls_cert_key, tls_server_name, binds=found.binds, codec=found.codec, endpoint=endpoint
        )
    except NfgateError as exc:
        _usage(str(exc))
        return
    options = RunOptions(
        protocol=found.protocol,
        role=found.role,
        endpoint=endpoint,
        dialect=dialect,
        timeout_s=timeout,
        heartbeat_ms=heartbeat_ms,
        strict=strict,
        curve=curve,
        tls=tls,
    )
    colour = sys.stdout.isatty()
    done = 0

    def show(case: Case, result: CaseResult) -> None:
        nonlocal done
        done += 1
        click.echo(case_line(done, len(cases), case, result, colour))

    where = "binding" if found.binds else "connecting to"
    click.echo(f"nfgate conformance: {found.protocol}/{found.role}, {len(cases)} case(s), {where} {endpoint}")
    if curve is not None:
        if curve.client is None:
            secured = f"as a CURVE server, public key {curve.public_key.decode()} (for the peer under test)"
        else:
            secured = f"as a CURVE client of {curve.client.server_key.decode()}"
        click.echo(f"nfgate conformance: CURVE on: {secured}")
    try:
        report = run(
            found, options, cases, show, announce=lambda text: click.echo(f"nfgate conformance: {text}")
        )
    except NfgateError as exc:
        _usage(str(exc))
        return
    click.echo(summary(report, colour))
    if report_dir is not None:
        try:
            paths = write_reports(report, report_dir)
        except OSError as exc:
            _usage(f"cannot write the report to {report_dir}: {exc.strerror or exc}")
            return
        click.echo("report: " + ", ".join(str(p) for p in paths))
    sys.exit(1 if report.failed() else 0)
