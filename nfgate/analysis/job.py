"""``nfgate analyze``: the PySpark job over a capture directory (docs/pipeline.md).

Reads the closed segments (``capture-*.parquet``, subdirectories included; a ``.partial`` segment, left by a gateway that
did not stop cleanly, has no footer and is skipped), decodes every frame list with the
codecs inside Spark's Python workers, one Arrow batch at a time (``mapInArrow``), and
writes under ``--out``:

- ``commands/``: one row per captured message (:mod:`nfgate.analysis.classify`);
- ``exchanges/``: each request paired with its final reply on the same edge, peer and
  key, with the latency between them; ``side`` is ``client`` (a request read from a
  peer, its reply sent back: what the gateway's client waited) or ``worker`` (a
  request sent to a peer, its reply read: the worker's turnaround). A request without
  a reply in the capture has null reply columns;
- ``malformed/``: the messages that did not decode, with the decoder's reason;
- ``aggregates/protocol``, ``aggregates/service``, ``aggregates/peer``;
- ``summary.json`` and ``report.html`` (:mod:`nfgate.analysis.report`).

Pairing. Requests and replies with the same (gateway, edge, peer, side, key) are paired in
order: the n-th request with the n-th reply. Where keys are unique (NFP uuids, MemoDB
and SADA ids) that is exact; DCP keys are the metadata parts, which a client may reuse,
and DBP has no id at all, so those pair first-come first-served, as their brokers answer.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nfgate.analysis import storage
from nfgate.analysis.classify import classify
from nfgate.analysis.storage import gateway_label, segments
from nfgate.errors import ConfigError
from nfgate.frames import hex_frames

__all__ = ["COMMANDS_SCHEMA", "analyze", "decode_batches", "gateway_label", "segments"]

COMMANDS_SCHEMA = (
    "ts_ns long, gateway string, edge string, protocol string, transport string, direction string, peer string, "
    "frame_count int, bytes long, dialect string, type string, role string, service string, "
    "key string, status int, error string, preview string"
)
MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|yarn|(spark|k8s)://\S+")
"""The master URLs Spark accepts (its own check comes only after a JVM has started)."""
PREVIEW_BYTES = 64  # of each frame of a malformed message, as hex, in `preview`
TOP_PEERS = 100  # peers listed in summary.json (all are in aggregates/peer)


def decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: capture record batches in, commands batches out. A batch's
    ``segment`` column (the file it came from) gives ``gateway``; without it, null."""
    import pyarrow as pa

    for batch in batches:
        cols = batch.to_pydict()
        out: dict[str, list[Any]] = {name: [] for name in _OUT_NAMES}
        files = cols.get("segment")
        out["gateway"] = [gateway_label(f) for f in files] if files is not None else [None] * batch.num_rows
        for i, frames in enumerate(cols["frames"]):
            frames = frames or []
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


def analyze(
    source: str | Path,
    out: str | Path,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    window: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    """Run the job; returns the summary it wrote to ``out/summary.json``.

    ``source`` and ``out`` are local paths or filesystem URIs (:mod:`nfgate.analysis.storage`);
    ``conf`` are Spark properties, applied after the job's own so that they win;
    ``window`` is ``(since_ns, until_ns)``: only messages with ``since_ns <= ts_ns <
    until_ns`` are read (None: unbounded on that side).

    Raises :class:`ConfigError` (one line) for a source without segments, a bad master,
    an empty window or one with no message in it, an ``out`` that cannot be written, no
    pyspark, and a Spark that cannot start.
    """
    since, until = window
    if since is not None and until is not None and since >= until:
        raise ConfigError("analyze: --since must be before --until")
    src, dst = storage.location(source), storage.location(out)
    # A local source is listed before a JVM starts; a URI only Spark can reach.
    local = segments(src.local) if src.local is not None else None
    if not MASTER.fullmatch(master):
        raise ConfigError(
            f"analyze: --master must be local[*], local[N], yarn, spark://HOST:PORT or k8s://URL, got {master!r}"
        )
    storage.prepare_out(dst)
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F
    except ImportError:
        raise ConfigError("analyze needs pyspark: pip install 'nfgate[spark]'") from None
    from nfgate.analysis import queries, report

    builder = (
        SparkSession.builder.master(master)
        .appName("nfgate analyze")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "8")
    )
    if master.startswith("local"):
        # Everything runs in this process: its driver's ports need not face the network.
        for key in ("spark.driver.bindAddress", "spark.driver.host"):
            builder = builder.config(key, "127.0.0.1")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # pyspark raises its own types, and Py4J's, for a JVM that will not start
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"analyze: cannot start Spark on {master} ({reason}); it needs Java 17 (java on PATH or JAVA_HOME)"
        ) from None
    spark.sparkContext.setLogLevel(
        "ERROR"
    )  # the job's own line is the output; Spark's INFO/WARN is noise here
    try:
        with tempfile.TemporaryDirectory(prefix="nfgate-analyze-") as shipped:
            storage.ship_package(spark, Path(shipped))
            storage.create_out(spark, dst)
            files = [p.as_uri() for p in local] if local is not None else storage.uri_segments(spark, src.uri)
            # Each row's file: which gateway wrote it (gateway_label).
            captured = spark.read.parquet(*files).select("*", F.col("_metadata.file_path").alias("segment"))
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
            summary = queries.summary(commands, tables, files=len(files), top_peers=TOP_PEERS)
            summary["window"] = {"since_ns": since, "until_ns": until}
            plots = queries.plot_data(commands, tables["exchanges"])
            storage.write_text(
                spark, dst, "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n"
            )
            storage.write_text(spark, dst, "report.html", report.render(summary, plots))
    finally:
        spark.stop()
    return summary
