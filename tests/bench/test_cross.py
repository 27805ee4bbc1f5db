"""`nfgate bench --scenario cross`: a tiny run through the CLI per cross-protocol path,
checked for correctness only (never for speed: the machines are shared and noisy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nfgate.bench.cli import bench
from nfgate.bench.cross import BASELINE, CROSS_PATHS, RATIO
from nfgate.bench.dialects import FINAL, Dialect, make_body, make_key
from nfgate.bench.nng_load import job_prefix, result_prefix
from nfgate.codecs import memodb, sada
from nfgate.codecs.memodb.messages import Job, Result
from nfgate.codecs.sada.messages import Rep, Req


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_tiny_cross_run_echoes_every_request_on_every_path(tmp_path: Path) -> None:
    out = tmp_path / "cross.json"
    args = [
        *("--scenario", "cross", "--duration", "0.3", "--warmup", "0.2"),
        *("--clients", "2", "--workers", "2", "--window", "5"),
        *("--paths", ",".join(CROSS_PATHS), "--out", str(out)),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "nfgate", "bench", *args], capture_output=True, text=True, timeout=140
    )
    assert done.returncode == 0, done.stderr
    objects = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(o["scenario"], o["mode"]) for o in objects] == [("cross", "sync"), ("cross", "pipelined")]
    assert out.read_text().splitlines() == done.stdout.splitlines()
    for obj in objects:
        assert obj["baseline"] == BASELINE
        assert set(obj["paths"]) == {BASELINE, *CROSS_PATHS}
        for name, figures in obj["paths"].items():
            where = f"{obj['mode']} {name}"
            assert figures["req_per_s"] > 0, where
            assert figures["requests"] > 0, where
            assert figures["mismatches"] == 0, where
            assert figures["errors"] == 0, where
            assert figures["unknown"] == 0, where
            assert figures["unanswered"] == 0, where
            assert figures["unacknowledged"] == 0, where
            assert figures["done"] == figures["sent"], where
            assert figures["cpu_us_per_req"] > 0, where
            assert figures["broker_rss_bytes"] > 0, where
            assert figures[RATIO] > 0, where
        assert set(obj[RATIO]) == set(CROSS_PATHS)
        assert set(obj["target_met"]) == set(CROSS_PATHS)
        assert len(obj["rounds"]) == 1
        assert obj["all_rounds"] == {
            name: dict.fromkeys(("mismatches", "errors", "unknown", "unanswered", "unacknowledged"), 0)
            for name in (BASELINE, *CROSS_PATHS)
        }


def test_unknown_path_is_one_line_and_non_zero() -> None:
    result = CliRunner().invoke(bench, ["--scenario", "cross", "--paths", "memodb-dcp,zmtp-nfp"])
    assert result.exit_code != 0
    assert "Error" in result.output and "zmtp-nfp" in result.output
    assert "Traceback" not in result.output


def test_sada_request_and_reply_are_the_codec_s() -> None:
    # The bench's pre-built SADA frames decode as the REQ the edge expects, and a REP
    # as the edge encodes it parses as the final reply to that request.
    dialect = Dialect("sada")
    key = make_key(1, 2)
    body = make_body(key, 100)
    req = sada.decode(dialect.request(key, body), "spec")
    assert isinstance(req, Req)
    assert (req.request_id, req.service, req.version, req.payload) == (key.decode(), "echo", "", body)
    rep = sada.encode(Rep(request_id=key.decode(), status=200, payload=body), "spec")
    assert dialect.parse(rep) == (FINAL, key, True, body)
    failed = sada.encode(Rep(request_id=key.decode(), status=503, payload=b""), "spec")
    assert dialect.parse(failed)[:3] == (FINAL, key, False)


def test_memodb_job_and_result_are_the_codec_s() -> None:
    body = make_body(make_key(1, 2), 100)
    job = memodb.decode([job_prefix() + body])
    assert isinstance(job, Job) and job.id == b"" and job.service == "echo" and job.payload == body
    [result] = memodb.encode(Result(id=b"", payload=body))
    assert result == result_prefix() + body
