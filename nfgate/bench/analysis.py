"""Scenario ``analyze``: what the capture pipeline costs, both ends (docs/pipeline.md).

Builds a capture of ``records`` records through :class:`nfgate.capture.Capture` (the
gateway's own writer): DCP requests and replies, NorFab-style NFP jobs (POST, 202,
dispatch, the worker's 200, the relayed 200) and one undecodable message in eight.
Then it times three things:

- the writer, in records per second;
- the decoding that Spark's Python workers run (:func:`nfgate.analysis.job.decode_batches`),
  in process, in µs per record;
- the whole ``nfgate analyze`` job on ``master``, JVM start included.

Needs the ``spark`` extra and Java 17, so ``--scenario all`` does not run it.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nfgate.capture import Capture, CaptureConfig
from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp.messages import BROKER, CLIENT, WORKER, Post, Response

__all__ = ["analysis"]

PER_ROUND = 8  # records per round of the generator below


def _capture(directory: Path, records: int, size: int) -> tuple[int, float]:
    cap = Capture(CaptureConfig(dir=directory, segment_rows=250_000))
    d, n = cap.tap_for("dcp", "dcp", "zmq"), cap.tap_for("nfp", "nfp", "zmq")
    body = b"x" * size
    start = time.perf_counter()
    for i in range(-(-records // PER_ROUND)):
        client, worker, key = f"client-{i % 4}", f"worker-{i % 16}", (str(i).encode(),)
        d("in", client, dcp.encode(DcpRequest(service=b"echo", metadata=key, data=(body,))))
        d("out", client, dcp.encode(DcpReply(metadata=key, data=(body,))))
        job = uuid.uuid4().hex
        n("in", client, nfp.encode(Post(header=CLIENT, service="echo", target="any", uuid=job, body=(body,))))
        n(
            "out",
            client,
            nfp.encode(Response(header=BROKER, service="echo", uuid=job, status=202, body=(b"{}",))),
        )
        n(
            "out",
            worker,
            nfp.encode(Post(header=BROKER, service="echo", target="any", uuid=job, body=(body,))),
        )
        n(
            "in",
            worker,
            nfp.encode(Response(header=WORKER, service="echo", uuid=job, status=200, body=(body,))),
        )
        n(
            "out",
            client,
            nfp.encode(Response(header=BROKER, service="echo", uuid=job, status=200, body=(body,))),
        )
        d("in", "junk", [b"\0" * (i % 7)])
        while cap.pending > 200_000:  # a generator outruns any disk: let the writer keep up
            time.sleep(0.01)
    cap.close()
    return cap.written, time.perf_counter() - start


def _decode_us(directory: Path) -> float:
    import pyarrow.parquet as pq

    from nfgate.analysis.job import decode_batches, segments

    batches = pq.read_table(segments(directory)[0]).to_batches(max_chunksize=10_000)
    start = time.perf_counter()
    rows: int = sum(out.num_rows for out in decode_batches(iter(batches)))
    return float((time.perf_counter() - start) / rows * 1e6)


def analysis(records: int, size: int, master: str, progress: Callable[[str], None]) -> dict[str, Any]:
    """One JSON-ready object with the scenario's figures. Raises
    :class:`nfgate.errors.ConfigError` when Spark cannot run (no pyspark, no Java)."""
    from nfgate.analysis.job import analyze

    with tempfile.TemporaryDirectory(prefix="nfgate-analyze-") as tmp:
        source = Path(tmp) / "capture"
        progress(f"bench: writing a capture of {records} records")
        written, seconds = _capture(source, records, size)
        progress("bench: decoding in process, then nfgate analyze")
        decode = _decode_us(source)
        start = time.perf_counter()
        summary = analyze(source, Path(tmp) / "out", master)
        job_s = time.perf_counter() - start
        stored = sum(p.stat().st_size for p in source.glob("*.parquet"))
    return {
        "scenario": "analyze",
        "master": master,
        "records": written,
        "body_bytes": size,
        "capture_records_per_s": round(written / seconds),
        "capture_bytes_per_record": round(stored / written, 1),
        "decode_us_per_record": round(decode, 2),
        "analyze_seconds": round(job_s, 1),
        "analyze_records_per_s": round(written / job_s),
        "messages": summary["messages"],
        "malformed": summary["malformed"],
        "exchanges": summary["exchanges"],
        "unanswered": summary["unanswered"],
    }
