"""Which capture segments ``nfgate analyze`` reads, and which it skips and why.

Spark gives up the whole job, with pages of stack traces, at the first file it cannot
read, and reads a file of another schema as rows of nulls. So before Spark reads
anything each closed segment is checked, cheaply: its footer is read (a few KB at the
end of the file, where Parquet keeps the schema) and its columns compared with the
capture's (:func:`nfgate.capture.capture_schema`). A segment fails the check when it
is empty, unreadable (permissions), has no footer (cut short by a full disk, bytes
appended, not Parquet at all) or is not a capture (a column missing or of another
type). Such a segment is skipped and reported, not fatal; only when no segment is
left is the run refused.

A local source is checked with pyarrow before any JVM starts. A URI source can only be
reached through Spark's filesystem layer, so its footers are read there, through Py4J
(parquet-hadoop's ``ParquetFileReader``), once Spark runs.

A column beyond the capture's is ignored (Spark is given the capture's schema). The
``truncated`` column is optional: segments written before it existed lack it, and
read as null there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nfgate.analysis.storage import Listing, Skipped
from nfgate.errors import ConfigError

__all__ = [
    "CAPTURE_DDL",
    "MAX_LISTED",
    "Inputs",
    "arrow_columns",
    "check_local",
    "check_uri",
    "java_columns",
    "no_usable_segment",
    "schema_problem",
    "skip_lines",
]

CAPTURE_DDL = (
    "ts_ns long, edge string, protocol string, transport string, direction string, peer string, "
    "frames array<binary>, truncated string"
)
"""The schema Spark reads the segments with: not inferred from one of them."""
OPTIONAL = frozenset({"truncated"})  # added after the first captures were written
MAX_LISTED = 20  # skipped segments named on stderr, one line each; summary.json has them all


class Inputs:
    """``usable``: the segments to read, as URIs; ``skipped``: the others and why."""

    def __init__(self, usable: Sequence[str], skipped: Sequence[Skipped]) -> None:
        self.usable = list(usable)
        self.skipped = list(skipped)


def _expected() -> dict[str, str]:
    import pyarrow as pa

    from nfgate.capture import capture_schema

    return arrow_columns(capture_schema(pa))


def _describe_arrow(kind: Any) -> str:
    import pyarrow as pa

    if pa.types.is_list(kind):
        return f"list<{_describe_arrow(kind.value_type)}>"
    return str(kind)


def arrow_columns(schema: Any) -> dict[str, str]:
    """``{column: type}`` of a pyarrow schema, in the words :func:`schema_problem` compares."""
    return {field.name: _describe_arrow(field.type) for field in schema}


def java_columns(message: Any) -> dict[str, str]:
    """``{column: type}`` of a parquet-hadoop ``MessageType`` (through Py4J), in the
    same words as :func:`arrow_columns`."""
    return {str(field.getName()): _describe_java(field) for field in message.getFields()}


def _describe_java(kind: Any) -> str:
    annotation = kind.getLogicalTypeAnnotation()
    note = str(annotation.toString()) if annotation is not None else ""
    if kind.isPrimitive():
        primitive = str(kind.asPrimitiveType().getPrimitiveTypeName().name())
        if primitive == "BINARY" and note.startswith("STRING"):
            return "string"
        if (primitive == "BINARY" and not note) or (
            primitive == "INT64" and note in ("", "INTEGER(64,true)")
        ):
            return primitive.lower()
        return f"{primitive.lower()} ({note})" if note else primitive.lower()
    group = kind.asGroupType()
    if note == "LIST" and group.getFieldCount() == 1:
        inner = group.getType(0)  # the repeated level; the element is inside it (3-level lists)
        if not inner.isPrimitive() and inner.asGroupType().getFieldCount() == 1:
            inner = inner.asGroupType().getType(0)
        return f"list<{_describe_java(inner)}>"
    return f"group ({note})" if note else "group"


def schema_problem(columns: Mapping[str, str]) -> str | None:
    """Why a file with these ``{column: type}`` is not a capture segment, or None."""
    for name, kind in _expected().items():
        if name not in columns:
            if name in OPTIONAL:
                continue
            return f"not a capture segment: no column {name}"
        if columns[name] != kind:
            return f"not a capture segment: column {name} is {columns[name]}, not {kind}"
    return None


def _first_line(text: object) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


def check_local(listed: Listing) -> Inputs:
    """Check each closed segment of a local listing (pyarrow reads its footer); never
    raises for a bad file."""
    import pyarrow.parquet as pq

    usable: list[str] = []
    skipped = list(listed.skipped)
    for name in listed.closed:
        path = Path(name)
        try:
            # Opened here, not by pyarrow: an OSError then carries the system's reason.
            with path.open("rb") as file:
                if os.fstat(file.fileno()).st_size == 0:
                    skipped.append(Skipped(name, "empty file (0 bytes)"))
                    continue
                try:
                    columns = arrow_columns(pq.read_schema(file))
                except Exception as exc:  # pyarrow's ArrowInvalid and kin: a bad footer costs this file only
                    skipped.append(Skipped(name, _unreadable(_first_line(exc))))
                    continue
        except FileNotFoundError:
            skipped.append(Skipped(name, "deleted before it was read"))
            continue
        except OSError as exc:  # permissions, an I/O error
            skipped.append(Skipped(name, f"cannot read: {exc.strerror or _first_line(exc)}"))
            continue
        problem = schema_problem(columns)
        if problem is not None:
            skipped.append(Skipped(name, problem))
        else:
            usable.append(path.as_uri())
    return Inputs(usable, sorted(skipped, key=lambda s: s.segment))


def check_uri(spark: Any, listed: Listing) -> Inputs:
    """Check each closed segment of a URI listing: its footer read through Spark's
    filesystem layer on the driver; never raises for a bad file."""
    from py4j.protocol import Py4JError

    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    usable: list[str] = []
    skipped = list(listed.skipped)
    for uri in listed.closed:
        try:
            path = jvm.org.apache.hadoop.fs.Path(uri)
            status = path.getFileSystem(conf).getFileStatus(path)
            if status.getLen() == 0:
                skipped.append(Skipped(uri, "empty file (0 bytes)"))
                continue
            source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromStatus(status, conf)
            reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
            try:
                columns = java_columns(reader.getFooter().getFileMetaData().getSchema())
            finally:
                reader.close()
        except Py4JError as exc:
            skipped.append(Skipped(uri, _java_reason(exc)))
            continue
        problem = schema_problem(columns)
        if problem is not None:
            skipped.append(Skipped(uri, problem))
        else:
            usable.append(uri)
    return Inputs(usable, sorted(skipped, key=lambda s: s.segment))


def _java_reason(exc: Any) -> str:
    java = getattr(exc, "java_exception", None)
    if java is None:
        return f"cannot read: {_first_line(exc)}"
    name = str(java.getClass().getName())
    message = _first_line(java.getMessage() or "")
    if name == "java.io.FileNotFoundException":
        return "deleted before it was read"
    if name == "org.apache.hadoop.security.AccessControlException" or "Permission denied" in message:
        return f"cannot read: {message or 'Permission denied'}"
    return _unreadable(message or name)


def _unreadable(reason: str) -> str:
    # pyarrow's and parquet-hadoop's words for a file that does not end in a footer:
    # "magic bytes not found", "is not a Parquet file", "footer is too large" (the
    # length read where a footer's would be is garbage).
    if any(word in reason.lower() for word in ("magic", "not a parquet file", "footer")):
        return "no Parquet footer (cut short, bytes appended after it, or not Parquet at all)"
    return f"not a readable Parquet file: {reason}"


def no_usable_segment(source: str, inputs: Inputs) -> ConfigError:
    """The one-line error for a source none of whose segments can be read."""
    if not inputs.skipped:
        return ConfigError(f"analyze: no capture segments (capture-*.parquet) in {source}")
    first = inputs.skipped[0]
    more = f" and {len(inputs.skipped) - 1} more" if len(inputs.skipped) > 1 else ""
    return ConfigError(
        f"analyze: no usable capture segment in {source}: {len(inputs.skipped)} skipped "
        f"({first.segment}: {first.reason}{more})"
    )


def skip_lines(skipped: Iterable[Skipped]) -> list[str]:
    """What the command line prints on stderr for the skipped segments: one line each
    for the first MAX_LISTED, then one line for the rest."""
    skipped = list(skipped)
    lines = [f"analyze: skipped {s.segment}: {s.reason}" for s in skipped[:MAX_LISTED]]
    if len(skipped) > MAX_LISTED:
        lines.append(f"analyze: skipped {len(skipped) - MAX_LISTED} more segments (summary.json lists them)")
    return lines
