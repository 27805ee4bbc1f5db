"""``nfgate analyze``: the PySpark job over a capture directory (docs/pipeline.md).

Reads the closed segments (``capture-*.parquet``, subdirectories included) that pass
:mod:`nfgate.analysis.inputs`'s check; the others (a ``.partial`` segment, still open
or left by a gateway that did not stop cleanly, an empty or damaged file, a file of
another schema) are skipped and reported. It decodes every frame list with the codecs
inside Spark's Python workers, one Arrow batch at a time (``mapInArrow``), and writes
under ``--out``:

- ``commands/``: one row per captured message (:mod:`nfgate.analysis.classify`);
- ``exchanges/``: each request paired with its final reply on the same edge, peer and
  key, with the latency between them; ``side`` is ``client`` (a request read from a
  peer, its reply sent back: what the gateway's client waited) or ``worker`` (a
  request sent to a peer, its reply read: the worker's turnaround). A request without
  a reply in the capture has null reply columns;
- ``malformed/``: the messages that did not decode, with the decoder's reason;
- ``aggregates/protocol``, ``aggregates/service``, ``aggregates/peer``;
- ``summary.json`` and ``report.html`` (:mod:`nfgate.analysis.report`).

Pairing. On the same (gateway, edge, peer, side, key), a reply answers the latest request
before it that has no reply yet (:func:`nfgate.analysis.queries.tables`). Where keys are
unique (NFP uuids, MemoDB and SADA ids) that is exact; DCP keys are the metadata parts,
which a client may reuse (a retry after the gateway dropped the first), and DBP has no
id at all, its workers one request at a time.

Failures. Everything found before Spark starts, and Spark failing to start, is a
:class:`ConfigError` (exit status 2 on the command line); a failure once the job runs
is a :class:`JobError` (exit status 1). Both are one line (:mod:`nfgate.analysis.session`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from nfgate.analysis import inputs, session, storage
from nfgate.analysis.classify import classify, malformed
from nfgate.analysis.storage import Skipped, gateway_label, segments
from nfgate.errors import ConfigError, NfgateError
from nfgate.frames import hex_frames

__all__ = ["COMMANDS_SCHEMA", "JobError", "analyze", "decode_batches", "gateway_label", "segments"]

COMMANDS_SCHEMA = (
    "ts_ns long, gateway string, edge string, protocol string, transport string, direction string, peer string, "
    "frame_count int, bytes long, dialect string, type string, role string, service string, "
    "key string, status int, error string, preview string"
)
MASTER = re.compile(r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|yarn|(spark|k8s)://\S+")
"""The master URLs Spark accepts (its own check comes only after a JVM has started):
``local[0]`` has no thread to run on."""
PREVIEW_BYTES = 64  # of each frame of a malformed message, as hex, in `preview`
TOP_PEERS = 100  # peers listed in summary.json (all are in aggregates/peer)
MAX_SKIPPED = 1000  # skipped segments listed in summary.json (all are counted)
TRUNCATED = {
    "frames": "more frames than max_frames",
    "bytes": "more bytes than max_message_bytes",
}
"""The capture's ``truncated`` marks: why the gateway dropped the message."""


class JobError(NfgateError):
    """The Spark job failed once it had started (exit status 1): one line, the cause."""


def decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: capture record batches in, commands batches out. A batch's
    ``segment`` column (the file it came from) gives ``gateway``; without it, null.
    Never raises for a record's values: a null frame list or frame, and a message the
    gateway cut (``truncated``), are malformed rows with the reason."""
    import pyarrow as pa

    for batch in batches:
        cols = batch.to_pydict()
        out: dict[str, list[Any]] = {name: [] for name in _OUT_NAMES}
        files = cols.get("segment")
        out["gateway"] = [gateway_label(f) for f in files] if files is not None else [None] * batch.num_rows
        cuts = cols.get("truncated") or [None] * batch.num_rows
        for i, listed in enumerate(cols["frames"]):
            # Nulls where a writer other than nfgate's put them: a row, never a crash.
            frames = [f for f in listed or () if f is not None]
            if listed is None or len(frames) != len(listed):
                row = malformed("capture: a null frame list or frame in the record")
            elif cuts[i] is not None:
                why = TRUNCATED.get(cuts[i], cuts[i])
                row = malformed(
                    f"capture: the gateway dropped this message ({why}); only its first "
                    f"{len(frames)} frame(s) were captured"
                )
            else:
                row = classify(cols["protocol"][i], cols["transport"][i], frames)
            for name in ("ts_ns", "edge", "protocol", "transport", "direction", "peer"):
                out[name].append(cols[name][i])
            out["frame_count"].append(len(frames))
            out["bytes"].append(sum(len(f) for f in frames))
            for name, value in row.items():
                out[name].append(value)
            # In the form `nfgate decode` takes: a preview of frames no longer than
            # PREVIEW_BYTES pastes into `nfgate decode --protocol P`.
            out["preview"].append(hex_frames(frames, PREVIEW_BYTES) if row["error"] is not None else None)
        yield pa.RecordBatch.from_pydict(out, schema=_arrow_schema(pa))


_OUT_NAMES = [part.split()[0] for part in COMMANDS_SCHEMA.split(", ")]
_ARROW_TYPES = {"long": "int64", "int": "int32", "string": "string"}


def _arrow_schema(pa: Any) -> Any:
    return pa.schema(
        [(p.split()[0], getattr(pa, _ARROW_TYPES[p.split()[1]])()) for p in COMMANDS_SCHEMA.split(", ")]
    )


def _check_installed() -> None:
    """Raises :class:`ConfigError` (one line) when the spark extra is not installed:
    pyarrow reads the segments' footers before Spark starts, pyspark runs the job."""
    try:
        import pyarrow.parquet  # noqa: F401
        import pyspark.sql  # noqa: F401
    except ImportError as exc:  # a plain install, or nfgate[capture] (pyarrow only)
        missing = (exc.name or "pyspark").partition(".")[0]
        raise ConfigError(f"analyze needs {missing}: pip install 'nfgate[spark]'") from None


def analyze(
    source: str | Path,
    out: str | Path,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    window: tuple[int | None, int | None] = (None, None),
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the job; returns the summary it wrote to ``out/summary.json``.

    ``source`` and ``out`` are local paths or filesystem URIs (:mod:`nfgate.analysis.storage`);
    ``conf`` are Spark properties, applied after the job's own so that they win;
    ``window`` is ``(since_ns, until_ns)``: only messages with ``since_ns <= ts_ns <
    until_ns`` are read (None: unbounded on that side); ``warn`` is given a line for
    each segment skipped (:func:`nfgate.analysis.inputs.skip_lines`), as soon as known.

    Raises :class:`ConfigError` (one line) for a source without a usable segment, a bad
    master, an empty window or one with no message in it, an ``out`` that cannot be
    written, no pyspark or pyarrow, and a Spark that cannot start; :class:`JobError` (one line)
    when the job fails once Spark runs.
    """
    since, until = window
    if since is not None and until is not None and since >= until:
        raise ConfigError("analyze: --since must be before --until")
    conf = dict(conf or {})
    if not MASTER.fullmatch(master):
        raise ConfigError(
            f"analyze: --master must be local[*], local[N], yarn, spark://HOST:PORT or k8s://URL, got {master!r}"
        )
    session.check_conf(conf)
    _check_installed()
    src, dst = storage.location(source), storage.location(out)
    # A local source is listed and checked before a JVM starts; a URI only Spark can reach.
    checked = inputs.check_local(storage.listing(src.local)) if src.local is not None else None
    if checked is not None and not checked.usable:
        raise inputs.no_usable_segment(str(src.local), checked)
    session.precheck(master)
    storage.prepare_out(dst)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("nfgate analyze")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "8")
        # A segment the gateway's max_bytes budget deletes while the job reads: skipped, not fatal.
        .config("spark.sql.files.ignoreMissingFiles", "true")
    )
    if master.startswith("local"):
        # Everything runs in this process: its driver's ports need not face the network.
        for key in ("spark.driver.bindAddress", "spark.driver.host"):
            builder = builder.config(key, "127.0.0.1")
    for key, value in conf.items():
        builder = builder.config(key, value)
    say = warn if warn is not None else (lambda line: None)
    if checked is not None:  # once the command line is known to be right: a run follows
        for line in inputs.skip_lines(checked.skipped):
            say(line)
    descriptor, name = tempfile.mkstemp(prefix="nfgate-analyze-", suffix=".log")
    os.close(descriptor)
    log = Path(name)
    keep_log = False  # kept, and named in the error, when Spark fails and wrote something there
    try:
        with session.python_env(conf, local=master.startswith("local")):
            spark = session.start(builder, master, log)
    except ConfigError:
        if not session.log_note(log):
            log.unlink(missing_ok=True)
        raise
    try:
        summary = _run(spark, src, dst, window, checked, say)
    except NfgateError:
        raise
    except Exception as exc:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException

        if not isinstance(exc, Py4JError | PySparkException | OSError):
            raise  # a bug of nfgate's own: its traceback is what to report
        keep_log = bool(session.log_note(log))
        raise JobError(
            f"analyze: the Spark job failed: {session.reason(exc)}{session.log_note(log)}"
        ) from None
    finally:
        with contextlib.suppress(Exception):  # a JVM that died has nothing left to stop
            spark.stop()
        if not keep_log:
            log.unlink(missing_ok=True)
    return summary


def _run(
    spark: Any,
    src: storage.Location,
    dst: storage.Location,
    window: tuple[int | None, int | None],
    checked: inputs.Inputs | None,
    warn: Callable[[str], None],
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from nfgate.analysis import queries, report

    since, until = window
    spark.sparkContext.setLogLevel("ERROR")  # what is left of the log: the job's errors
    with tempfile.TemporaryDirectory(prefix="nfgate-analyze-") as shipped:
        storage.ship_package(spark, Path(shipped))
        storage.create_out(spark, dst)
        if checked is None:
            checked = inputs.check_uri(spark, storage.uri_listing(spark, src.uri))
            if not checked.usable:
                raise inputs.no_usable_segment(src.uri, checked)
            for line in inputs.skip_lines(checked.skipped):
                warn(line)
        captured = _read(spark, src.uri, checked, warn)
        # Each row's file: which gateway wrote it (gateway_label).
        captured = captured.select("*", F.col("_metadata.file_path").alias("segment"))
        # Filtered before decoding: Parquet's ts_ns statistics skip whole row groups.
        if since is not None:
            captured = captured.where(captured.ts_ns >= since)
        if until is not None:
            captured = captured.where(captured.ts_ns < until)
        commands = captured.mapInArrow(decode_batches, COMMANDS_SCHEMA).cache()
        if window != (None, None) and commands.count() == 0:  # fills the cache the tables read
            raise ConfigError("analyze: no captured message in the window (--since/--until)")
        tables = queries.tables(commands)
        for name, frame in tables.items():
            frame.write.mode("overwrite").parquet(f"{dst.uri}/{name}")
        gone = storage.missing(spark, checked.usable)
        if gone:
            late = [
                Skipped(uri, "deleted while the job ran: rows Spark had not read yet are missing")
                for uri in gone
            ]
            for line in inputs.skip_lines(late):
                warn(line)
            checked = inputs.Inputs([u for u in checked.usable if u not in gone], [*checked.skipped, *late])
        summary = queries.summary(commands, tables, files=len(checked.usable), top_peers=TOP_PEERS)
        summary["window"] = {"since_ns": since, "until_ns": until}
        summary["segments_skipped"] = len(checked.skipped)
        summary["skipped"] = [
            {"segment": s.segment, "reason": s.reason} for s in checked.skipped[:MAX_SKIPPED]
        ]
        plots = queries.plot_data(commands, tables["exchanges"])
        storage.write_text(spark, dst, "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
        storage.write_text(spark, dst, "report.html", report.render(summary, plots))
    return summary


def _read(spark: Any, source: str, checked: inputs.Inputs, warn: Callable[[str], None]) -> Any:
    """The usable segments as one DataFrame, with the capture's schema. Spark checks
    that each file exists when it is given the list: one deleted since the check (the
    gateway's max_bytes budget) is dropped and reported, and the list given again."""
    from pyspark.errors import AnalysisException

    for _ in range(5):
        try:
            return spark.read.schema(inputs.CAPTURE_DDL).parquet(*checked.usable)
        except AnalysisException:
            gone = storage.missing(spark, checked.usable)
            if not gone:
                raise
            late = [Skipped(uri, "deleted before it was read") for uri in gone]
            for line in inputs.skip_lines(late):
                warn(line)
            checked.usable = [u for u in checked.usable if u not in gone]
            checked.skipped.extend(late)
            if not checked.usable:
                raise inputs.no_usable_segment(source, checked) from None
    raise JobError("analyze: segments kept being deleted while the job started; try again")
