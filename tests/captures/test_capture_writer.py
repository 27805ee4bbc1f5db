"""The capture writer when the disk fails it (nfgate/capture.py, "Write failures"): a
segment that had a failed write is never given a closed name, its records are counted
lost, the log says it once (then once a minute) and once more when writing works
again, no empty file is left per attempt, and a removed directory is made again.

The full disk is real in the first test: a child process with a file-size limit
(RLIMIT_FSIZE), so that the writes fail in the kernel as on a full disk (EFBIG
rather than ENOSPC) and pyarrow's own error path runs."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from nfgate.capture import Capture, CaptureConfig

pytestmark = [pytest.mark.timeout(120)]

FULL_DISK = r"""
import json, logging, os, resource, signal, sys
from pathlib import Path

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
from nfgate.capture import Capture, CaptureConfig

lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append([record.levelname, record.getMessage()])
logging.getLogger("nfgate.capture").addHandler(Keep())
logging.getLogger("nfgate.capture").setLevel(logging.INFO)

directory = Path(sys.argv[1])
now = [0.0]
cap = Capture(CaptureConfig(dir=directory), flush_s=3600, monotonic=lambda: now[0])
tap = cap.tap_for("dcp", "dcp", "zmq")
for i in range(10):
    tap("in", "p", [b"before-%d" % i])
cap._drain(final=False)  # an open segment holding 10 records
(partial,) = directory.glob("*.partial")
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (partial.stat().st_size + 100, hard))  # the disk is full
for burst in range(20):  # 20 flushes of 5 records, a minute passing after the 10th
    for i in range(5):
        tap("in", "p", [os.urandom(1000)])
    cap._drain(final=False)
    now[0] += 61 if burst == 9 else 0.2
    assert not list(directory.glob("*.parquet")), "a segment with a failed write got a closed name"
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # room again
for i in range(7):
    tap("in", "p", [b"after-%d" % i])
cap.close()
print(json.dumps({"stats": cap.stats(), "files": sorted(os.listdir(directory)), "log": lines}))
"""


def test_a_full_disk_loses_the_segment_not_its_name_and_logs_once(tmp_path: Path) -> None:
    directory = tmp_path / "cap"
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(directory)], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    # The open segment's 10 records went with it; each burst's 5 were lost too.
    assert result["stats"] | {"pending": 0} == {
        "records": 117,
        "dropped": 0,
        "written": 7,
        "lost": 110,
        "segments": 1,
        "deleted": 0,
        "write_errors": 20,
        "pending": 0,
    }
    # No empty .partial left per attempt, no closed segment without its footer.
    (closed,) = result["files"]
    assert closed.endswith(".parquet")
    assert [r["frames"] for r in pq.read_table(directory / closed).to_pylist()] == [
        [b"after-%d" % i] for i in range(7)
    ]
    log = result["log"]
    errors = [message for level, message in log if level == "ERROR"]
    assert len(errors) == 2, log  # when it started, and once after a minute
    assert errors[0].startswith(f"capture: cannot write to {directory} (") and "(15 so far;" in errors[0]
    assert errors[1].startswith(f"capture: still cannot write to {directory} (")
    assert "10 failures in the last 63 s" in errors[1]
    assert [m for level, m in log if level == "INFO"] == [
        f"capture: writing to {directory} again after 65 s of failures; 110 records were lost"
    ]


def test_a_removed_directory_is_made_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "cap"
    cap = Capture(CaptureConfig(dir=directory, segment_rows=5), flush_s=3600)
    tap = cap.tap_for("dcp", "dcp", "zmq")
    for i in range(3):
        tap("in", "p", [b"%d" % i])
    cap._drain(final=False)
    shutil.rmtree(directory)  # an operator's cleanup, with the open segment in it
    for i in range(3, 9):
        tap("in", "p", [b"%d" % i])
    with caplog.at_level(logging.INFO, logger="nfgate.capture"):
        cap.close()
    assert directory.is_dir() and directory.stat().st_mode & 0o777 == 0o700
    (closed,) = directory.iterdir()
    assert [r["frames"] for r in pq.read_table(closed).to_pylist()] == [[b"%d" % i] for i in range(5, 9)]
    assert (cap.written, cap.lost, cap.segments) == (4, 5, 1)  # the removed segment's 5 records
    assert f"capture: {directory} was removed; created it again" in caplog.messages


def test_a_segment_the_directory_will_not_rename_is_renamed_when_it_can_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory made read-only under a running gateway (emulated: root may rename in
    a read-only directory): the finished segment waits as .partial, complete, and is
    renamed once the directory allows it; at shutdown it stays .partial, counted lost."""
    refuse = [True]
    real = os.replace

    def replace(src: Any, dst: Any) -> None:
        if refuse[0]:
            raise PermissionError(13, "Permission denied", str(src))
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    now = [0.0]
    cap = Capture(CaptureConfig(dir=tmp_path, segment_rows=3), flush_s=3600, monotonic=lambda: now[0])
    tap = cap.tap_for("dcp", "dcp", "zmq")
    for i in range(3):
        tap("in", "p", [b"%d" % i])
    with caplog.at_level(logging.INFO, logger="nfgate.capture"):
        cap._drain(final=False)
        (waiting,) = tmp_path.glob("*.partial")
        assert pq.read_metadata(waiting).num_rows == 3  # complete, footer and all
        refuse[0] = False
        now[0] += 2
        cap._drain(final=False)
        assert not waiting.exists() and (cap.segments, cap.written, cap.lost) == (1, 3, 0)
        refuse[0] = True
        for i in range(3):
            tap("in", "p", [b"%d" % i])
        cap.close()
    (stuck,) = tmp_path.glob("*.partial")
    assert (cap.segments, cap.written, cap.lost, cap.errors) == (1, 3, 3, 2)
    assert any("again" in m for m in caplog.messages)
    assert any(
        m.startswith(f"capture: {stuck} is complete but could not be renamed") for m in caplog.messages
    )


def test_a_message_the_transport_cut_is_marked(tmp_path: Path) -> None:
    cap = Capture(CaptureConfig(dir=tmp_path), flush_s=3600)
    tap = cap.tap_for("dcp", "dcp", "zmq")
    tap("in", "p", [b"whole"])
    tap("in", "p", [b"kept"], truncated="bytes")
    cap.close()
    (segment,) = tmp_path.glob("*.parquet")
    assert [(r["frames"], r["truncated"]) for r in pq.read_table(segment).to_pylist()] == [
        ([b"whole"], None),
        ([b"kept"], "bytes"),
    ]
