"""Where ``nfgate analyze`` reads a capture and writes its results, and the code its
executors run.

A location is a local path or a URI of any filesystem Spark's Hadoop layer has a driver
for (``hdfs://``, ``s3a://``, ``file://``...). A local path is handed to Spark as a
``file://`` URI, so that a cluster whose default filesystem is HDFS does not read it as
an HDFS path. On a cluster the executors read the segments and write the tables
themselves: both must be on storage every node sees (a URI, or a mount at the same path
everywhere). Local paths are checked before any JVM starts; URIs can only be checked
through Spark, after it started.

Listing a source finds the closed segments and the ``.partial`` ones (reported as
skipped, never read); :mod:`nfgate.analysis.inputs` then checks each closed one.

The executors decode with nfgate's codecs. :func:`ship_package` sends them the driver's
own copy of nfgate, every package directory of it (``nfgate.codecs`` and
``nfgate.transports`` live outside ``nfgate/`` in a checkout), so they never run
another version of it and do not need it installed (its dependencies they do: attrs,
cbor2, msgpack, pyarrow, pandas).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import importlib.util
import os
import re
import sys
import tomllib
import urllib.parse
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

import nfgate
from nfgate.errors import ConfigError

__all__ = [
    "Listing",
    "Location",
    "Skipped",
    "create_out",
    "gateway_label",
    "listing",
    "location",
    "missing",
    "package_dirs",
    "prepare_out",
    "segments",
    "ship_package",
    "uri_listing",
    "uri_segments",
    "write_text",
]

URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
SEGMENT = "capture-*.parquet"
"""The closed segments' names (nfgate.capture); ``.partial`` segments have no footer
yet, and Spark's own ``part-*.parquet`` (an ``--out`` inside the source) are not captures."""
PARTIAL = SEGMENT + ".partial"
PARTIAL_REASON = "still being written, or left by a gateway that did not stop cleanly (.partial, no footer)"

_SEGMENT_PATH = re.compile(r"([^/]*)/capture-\d{8}T\d{6}-(\d+)-\d+\.parquet$")


@functools.lru_cache(maxsize=4096)  # one segment's rows share its label
def gateway_label(segment: str) -> str:
    """Which gateway run wrote a segment, from its path: ``<directory>:<pid>``
    (``gw1:4242``). Two gateways' edges share names (``nfp``) and may see peers of the
    same name, so their messages are told apart by this, never paired together."""
    found = _SEGMENT_PATH.search(segment)
    if found is None:  # a renamed segment: its directory is all there is to go by
        parts = segment.rsplit("/", 2)
        return urllib.parse.unquote(parts[-2] if len(parts) > 1 else "")
    return f"{urllib.parse.unquote(found.group(1))}:{found.group(2)}"


@attrs.frozen
class Skipped:
    """A file (or directory) under the source that is not read, and why, as the
    command line and summary.json say it."""

    segment: str
    reason: str


@attrs.frozen
class Listing:
    """What a source holds: ``closed`` segments to check and read, and ``skipped``
    (``.partial`` segments, subdirectories that cannot be listed)."""

    closed: tuple[str, ...]
    skipped: tuple[Skipped, ...] = ()


@attrs.frozen
class Location:
    """``uri``: what Spark reads or writes. ``local``: the same place as a path on this
    machine, or None for a URI (reached only through Spark's filesystem layer)."""

    uri: str
    local: Path | None


def location(text: str | Path) -> Location:
    """A command-line argument as a location: a URI as given, else an absolute path."""
    if isinstance(text, str) and URI.match(text):
        return Location(uri=text.rstrip("/"), local=None)
    path = Path(text).absolute()
    return Location(uri=path.as_uri(), local=path)


def listing(source: Path) -> Listing:
    """The capture segments under the local directory ``source``, subdirectories
    included, as paths. Raises :class:`ConfigError` when ``source`` is not a directory
    or cannot be listed, with the system's reason (permission denied...); a
    subdirectory that cannot be listed is reported as skipped."""
    if not source.is_dir():
        raise ConfigError(f"analyze: {source} is not a directory")
    closed: list[str] = []
    skipped: list[Skipped] = []
    failures: list[OSError] = []
    # os.walk rather than Path.rglob: rglob says nothing of a directory it cannot read.
    for folder, dirs, files in os.walk(source, onerror=failures.append):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            if fnmatch.fnmatchcase(name, SEGMENT) and os.path.isfile(path):
                closed.append(path)
            elif fnmatch.fnmatchcase(name, PARTIAL):
                skipped.append(Skipped(path, PARTIAL_REASON))
    for exc in failures:
        where = exc.filename or str(source)
        if Path(where) == source:
            raise ConfigError(f"analyze: cannot read {source}: {exc.strerror}")
        skipped.append(Skipped(str(where), f"cannot list this directory: {exc.strerror}"))
    return Listing(tuple(sorted(closed)), tuple(skipped))


def segments(source: Path) -> list[Path]:
    """The closed capture segments under the local directory ``source``, subdirectories
    included; raises :class:`ConfigError` when there are none or ``source`` cannot be
    read (a one-line error for the command line)."""
    found = [Path(p) for p in listing(source).closed]
    if not found:
        raise ConfigError(f"analyze: no capture segments ({SEGMENT}) in {source}")
    return found


def prepare_out(out: Location) -> None:
    """Create a local ``out`` and check it is writable; raises :class:`ConfigError`.
    A URI ``out`` is created by :func:`create_out`, once Spark runs."""
    if out.local is None:
        return
    try:
        out.local.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"analyze: cannot create {out.local}: {exc.strerror}") from None
    if not os.access(out.local, os.W_OK):
        raise ConfigError(f"analyze: {out.local} is not writable")


def create_out(spark: Any, out: Location) -> None:
    """Create a URI ``out`` through Spark's filesystem layer (a local one is made by
    :func:`prepare_out`); raises :class:`ConfigError` (one line) when it cannot be."""
    if out.local is not None:
        return
    with _hadoop(out.uri, "create"):
        fs, path = _fs(spark, out.uri)
        fs.mkdirs(path)


def uri_listing(spark: Any, source: str) -> Listing:
    """The capture segments under the URI ``source``, listed through Spark's filesystem
    layer, subdirectories included; raises :class:`ConfigError` (one line) for a
    source that cannot be listed."""
    closed: list[str] = []
    skipped: list[Skipped] = []
    with _hadoop(source, "read"):
        fs, root = _fs(spark, source)
        if not fs.getFileStatus(root).isDirectory():
            raise ConfigError(f"analyze: {source} is not a directory")
        files = fs.listFiles(root, True)  # recursive, files only
        while files.hasNext():
            path = files.next().getPath()
            if fnmatch.fnmatchcase(path.getName(), SEGMENT):
                closed.append(path.toString())
            elif fnmatch.fnmatchcase(path.getName(), PARTIAL):
                skipped.append(Skipped(path.toString(), PARTIAL_REASON))
    return Listing(tuple(sorted(closed)), tuple(sorted(skipped, key=lambda s: s.segment)))


def uri_segments(spark: Any, source: str) -> list[str]:
    """The closed capture segments under the URI ``source`` (:func:`uri_listing`);
    raises :class:`ConfigError` (one line) for a source that cannot be listed or holds
    no segment."""
    found = list(uri_listing(spark, source).closed)
    if not found:
        raise ConfigError(f"analyze: no capture segments ({SEGMENT}) in {source}")
    return found


def missing(spark: Any, uris: Sequence[str]) -> list[str]:
    """Those of ``uris`` (files Spark was given) that no longer exist: the gateway's
    ``max_bytes`` budget deletes its oldest segments while it runs."""
    gone = []
    for uri in uris:
        with _hadoop(uri, "read"):
            fs, path = _fs(spark, uri)
            if not fs.exists(path):
                gone.append(uri)
    return gone


def write_text(spark: Any, out: Location, name: str, text: str) -> None:
    """Write one small file (summary.json, report.html) under ``out``; raises
    :class:`ConfigError` when a URI ``out`` refuses it."""
    if out.local is not None:
        (out.local / name).write_text(text, encoding="utf-8")
        return
    uri = f"{out.uri}/{name}"
    with _hadoop(uri, "write"):
        fs, path = _fs(spark, uri)
        stream = fs.create(path, True)  # overwrite, as the tables are
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()


def package_dirs() -> dict[str, Path]:
    """``{package: directory}`` for ``nfgate`` and each of its subpackages that lives
    outside ``nfgate/``: in a checkout (an editable install) pyproject.toml's
    ``[tool.setuptools.package-dir]`` maps ``nfgate.codecs`` to ``codecs/`` and so on,
    and their directories are what the import system found (``__path__``). In a wheel
    they are all under ``nfgate/``."""
    root = Path(nfgate.__file__).parent
    found = {"nfgate": root}
    names = {
        name
        for name, module in sys.modules.items()
        if name.startswith("nfgate.") and hasattr(module, "__path__")
    }
    pyproject = root.parent / "pyproject.toml"
    if pyproject.is_file():
        with contextlib.suppress(OSError, tomllib.TOMLDecodeError):
            setuptools = (
                tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("setuptools", {})
            )
            names |= {name for name in setuptools.get("package-dir", {}) if name.startswith("nfgate.")}
    for name in sorted(names):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for place in (spec.submodule_search_locations or []) if spec is not None else []:
            directory = Path(place)
            if directory.is_dir() and not directory.resolve().is_relative_to(root.resolve()):
                found[name] = directory
    return found


def ship_package(spark: Any, directory: Path) -> Path:
    """Zip this process's nfgate, every package directory of it (:func:`package_dirs`),
    into ``directory`` and add it to the job's Python path (``SparkContext.addPyFile``).
    Spark puts it ahead of the executors' installed packages, so the executors decode
    with the driver's codecs."""
    archive = directory / f"nfgate-{nfgate.__version__}.zip"
    written: set[str] = set()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, folder in sorted(package_dirs().items()):
            prefix = Path(*name.split("."))
            for path in sorted(folder.rglob("*.py")):
                inside = (prefix / path.relative_to(folder)).as_posix()
                if inside not in written:
                    written.add(inside)
                    zf.write(path, inside)
    spark.sparkContext.addPyFile(str(archive))
    return archive


def _fs(spark: Any, uri: str) -> tuple[Any, Any]:
    """The Hadoop FileSystem for ``uri`` (through Py4J) and the URI as a Hadoop Path."""
    path = spark._jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark._jsc.hadoopConfiguration()), path


@contextlib.contextmanager
def _hadoop(uri: str, verb: str) -> Iterator[None]:
    """Turn a Java exception from the filesystem layer into one :class:`ConfigError`
    line: ``analyze: cannot <verb> <uri> (<the exception's message>)``."""
    from py4j.protocol import Py4JJavaError

    try:
        yield
    except Py4JJavaError as exc:
        java = exc.java_exception
        reason = str(java.getMessage() or java.getClass().getSimpleName()).strip().splitlines()[0]
        raise ConfigError(f"analyze: cannot {verb} {uri} ({reason})") from None
