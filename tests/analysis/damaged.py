"""Capture directories with damaged segments, as a reviewer made them by hand: a
segment cut in half, one with bytes appended, random bytes, a file of another schema
or other column types, an empty file, a ``.partial`` one; and a segment of the
capture's schema with nulls where nfgate never writes them."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nfgate.capture import Capture, CaptureConfig
from nfgate.codecs import dcp
from nfgate.codecs.dcp.messages import Reply, Request

REQUEST = dcp.encode(Request(service=b"echo", metadata=(b"k",), data=(b"x",)))
REPLY = dcp.encode(Reply(metadata=(b"k",), data=(b"x",)))

# name -> (bytes of the file, the reason nfgate analyze gives for skipping it)
NO_FOOTER = "no Parquet footer (cut short, bytes appended after it, or not Parquet at all)"


def good_segment(directory: Path, pid: int = 1) -> Path:
    """A real segment (nfgate's writer): a DCP request, its reply, one truncated
    message, and a rename to the pid the file name carries."""
    stamps = iter(range(1_000, 100_000, 1_000))
    cap = Capture(CaptureConfig(dir=directory), clock=stamps.__next__, flush_s=3600)
    tap = cap.tap_for("dcp", "dcp", "zmq")
    tap("in", "client", REQUEST)
    tap("out", "client", REPLY)
    tap("in", "greedy", REQUEST[:2], truncated="frames")  # what the gateway kept of a dropped one
    cap.close()
    (written,) = directory.glob("capture-*.parquet")
    return written.rename(directory / f"capture-20261125T120000-{pid}-00001.parquet")


def odd_segment(path: Path) -> None:
    """The capture's schema with nulls in it: a null frame list, a null frame, no time,
    no protocol."""
    from nfgate.capture import capture_schema

    rows = [
        {"ts_ns": 5, "edge": "dcp", "protocol": "dcp", "transport": "zmq", "direction": "in", "peer": "p",
         "frames": None, "truncated": None},
        {"ts_ns": 6, "edge": "dcp", "protocol": "dcp", "transport": "zmq", "direction": "in", "peer": "p",
         "frames": [b"", None], "truncated": None},
        {"ts_ns": None, "edge": "dcp", "protocol": None, "transport": None, "direction": None, "peer": None,
         "frames": [b"x"], "truncated": None},
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=capture_schema(pa)), path)


def damaged_source(directory: Path) -> dict[str, str | None]:
    """Fill ``directory``; returns {file name: why it is skipped, or None when read}."""
    directory.mkdir(parents=True)
    good = good_segment(directory)
    data = good.read_bytes()
    expected: dict[str, str | None] = {good.name: None}

    def put(name: str, content: bytes, reason: str | None) -> None:
        (directory / name).write_bytes(content)
        expected[name] = reason

    put("capture-20261125T120000-2-00001.parquet", data[: len(data) // 2], NO_FOOTER)
    noise = random.Random(0)
    put("capture-20261125T120000-3-00001.parquet", data + noise.randbytes(500), NO_FOOTER)
    put("capture-20261125T120000-4-00001.parquet", noise.randbytes(2000), NO_FOOTER)
    put("capture-20261125T120000-5-00001.parquet", b"", "empty file (0 bytes)")
    other = directory / "capture-20261125T120000-6-00001.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), other)
    expected[other.name] = "not a capture segment: no column ts_ns"
    types = directory / "capture-20261125T120000-7-00001.parquet"
    strings = {name: ["1"] for name in ("ts_ns", "edge", "protocol", "transport", "direction", "peer")}
    pq.write_table(pa.table({**strings, "frames": [b"x"]}), types)
    expected[types.name] = "not a capture segment: column ts_ns is string, not int64"
    nested = directory / "gw2"
    nested.mkdir()
    shutil.copy(good, nested / "capture-20261125T120000-8-00001.parquet.partial")
    expected["gw2/capture-20261125T120000-8-00001.parquet.partial"] = (
        "still being written, or left by a gateway that did not stop cleanly (.partial, no footer)"
    )
    odd_segment(directory / "capture-20261125T120000-9-00001.parquet")
    expected["capture-20261125T120000-9-00001.parquet"] = None
    return expected
