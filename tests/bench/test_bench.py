"""`nfgate bench` as a user runs it: a tiny run through the CLI, checked for
correctness only (never for speed: the machines are shared and noisy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nfgate.bench import churn
from nfgate.bench.cli import bench
from nfgate.bench.dialects import DIALECTS, FINAL, INTERIM, Dialect, make_body, make_key
from nfgate.bench.runner import CHECKS, all_rounds

# nfgate-norfab-nofsync starts only if its ready line says "fsync off", nfgate-dcp-capture
# only if it logs "capturing to" (runner.start_broker).
BROKERS = ("raw", "lean-dcp", "nfgate-dcp", "nfgate-nfp", "nfgate-norfab-nofsync", "nfgate-dcp-capture")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tiny_relay_run_echoes_every_request(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = [
        *("--scenario", "relay", "--duration", "0.3", "--warmup", "0.2"),
        *("--clients", "2", "--workers", "2", "--window", "5", "--repeat", "2"),
        *("--brokers", ",".join(BROKERS), "--out", str(out)),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "nfgate", "bench", *args], capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, done.stderr
    objects = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(o["scenario"], o["mode"]) for o in objects] == [("relay", "sync"), ("relay", "pipelined")]
    assert out.read_text().splitlines() == done.stdout.splitlines()
    for obj in objects:
        assert set(obj["brokers"]) == set(BROKERS)
        for name, figures in obj["brokers"].items():
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
        assert set(obj["ratios"]) == {
            "nfgate-dcp/raw",
            "nfgate-nfp/raw",
            "nfgate-norfab-nofsync/raw",
            "nfgate-dcp-capture/raw",
            "nfgate-dcp-capture/nfgate-dcp",
            "nfgate-dcp/lean-dcp",
            "lean-dcp/raw",
        }
        assert all(r is not None and r > 0 for r in obj["ratios"].values())
        assert len(obj["rounds"]) == 2
        assert all(set(r["req_per_s"]) == set(BROKERS) for r in obj["rounds"])
        # Both rounds, not only the median one the figures above come from.
        assert obj["all_rounds"] == {
            name: dict.fromkeys(("mismatches", "errors", "unknown", "unanswered", "unacknowledged"), 0)
            for name in BROKERS
        }
    # The NFP job flow: every request got its 202 before its result.
    sync = objects[0]["brokers"]["nfgate-nfp"]
    assert sync["interim"] >= sync["done"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tiny_churn_run_answers_every_client_and_samples_the_rss() -> None:
    args = [
        "--scenario",
        "churn",
        "--churn-clients",
        "200",
        "--max-peers",
        "50",
        "--brokers",
        "raw,nfgate-norfab",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "nfgate", "bench", *args], capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, done.stderr
    [obj] = [json.loads(line) for line in done.stdout.splitlines()]
    assert obj["scenario"] == "churn" and set(obj["brokers"]) == {"raw", "nfgate-norfab"}
    for name, figures in obj["brokers"].items():
        assert figures["clients"] == 200 and figures["failed"] == 0, name  # every client got its answer
        assert [n for n, _ in figures["rss_bytes"]] == [0, 50, 100, 150, 200], name
        assert all(rss > 0 for _, rss in figures["rss_bytes"]), name
        assert figures["bytes_per_client_first_half"] is not None, name
        assert figures["bytes_per_client_second_half"] is not None, name
    assert obj["brokers"]["nfgate-norfab"]["max_peers"] == 50 and "max_peers" not in obj["brokers"]["raw"]


def test_churn_bytes_per_client_are_the_slopes_of_each_half() -> None:
    samples = [[0, 1000], [50, 2000], [100, 3000], [150, 3000], [200, 3100]]
    assert churn._per_client(samples) == (20.0, 1.0)
    assert churn._per_client([[0, 1000], [100, 2000]]) == (None, None)  # too few to split


@pytest.mark.parametrize(
    "args",
    [
        ["--scenario", "nope"],
        ["--brokers", "raw,zeromq"],
        ["--brokers", ""],
        ["--duration", "-1"],
        ["--clients", "0"],
        ["--window", "x"],
        ["--churn-clients", "5"],
        ["--max-peers", "0"],
    ],
)
def test_bad_options_are_one_line_and_non_zero(args: list[str]) -> None:
    result = CliRunner().invoke(bench, args)
    assert result.exit_code != 0
    assert "Error" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("name", DIALECTS)
def test_a_worker_echo_is_what_the_client_expects(name: str) -> None:
    # The frames a bench worker answers with, as a broker would relay them, satisfy
    # the client's check; a body for another request does not.
    dialect = Dialect(name)
    key = make_key(3, 7)
    body = make_body(key, 100)
    assert len(body) == 100 and key in body
    other = make_body(make_key(3, 8), 100)
    request = dialect.request(key, body)
    assert request[0] == b""
    if name == "norfab":
        assert dialect.matches(b'{"w1":' + body + b"}", body)
        assert not dialect.matches(b'{"w1":' + other + b"}", body)
    else:
        assert dialect.matches(body, body)
        assert not dialect.matches(other, body)


def test_an_nfp_202_is_interim_and_the_200_final() -> None:
    dialect = Dialect("nfp")
    ack = [b"", b"NFPB01", b"\x05", b"echo", b"k" * 32, b"202", b"{}"]
    done = [b"", b"NFPB01", b"\x05", b"echo", b"k" * 32, b"200", b"body"]
    failed = [b"", b"NFPB01", b"\x05", b"echo", b"k" * 32, b"408", b"{}"]
    assert dialect.parse(ack)[0] == INTERIM
    assert dialect.parse(done) == (FINAL, b"k" * 32, True, b"body")
    assert dialect.parse(failed)[:3] == (FINAL, b"k" * 32, False)


def test_unknown_dialect_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown bench dialect"):
        Dialect("zmtp")


def test_path_scenario_measures_every_path() -> None:
    from nfgate.bench.path import path

    figures = path(requests=40, rounds=2)
    assert figures["scenario"] == "path"
    assert set(figures["paths"]) == {"dcp", "nfp", "nfp-nofsync", "norfab", "norfab-nofsync"}
    for name, one in figures["paths"].items():
        assert 0 < one["us_per_request"] <= one["us_per_request_median"], name
        assert one["python_calls_per_request"] > 10, name


@pytest.mark.parametrize(
    ("name", "where", "method"),
    [
        ("dcp", "nfgate.edges.dcp.DcpEdge", "_deliver"),
        ("norfab", "nfgate.edges.nfp_jobs.NfpJobs", "_respond"),
    ],
)
def test_path_scenario_fails_when_the_path_loses_replies(
    monkeypatch: pytest.MonkeyPatch, name: str, where: str, method: str
) -> None:
    # The scenario checks every reply it times: a path that drops them is an error,
    # not a fast result.
    from nfgate.bench.path import measure

    monkeypatch.setattr(f"{where}.{method}", lambda *args: None)
    with pytest.raises(RuntimeError, match="answered"):
        measure(name, requests=8, rounds=1)


def test_a_round_that_lost_replies_shows_even_when_it_is_not_the_median() -> None:
    good = dict.fromkeys(CHECKS, 0)
    bad = {**good, "unanswered": 3, "mismatches": 1}
    counts = all_rounds(
        ["nfgate-dcp", "raw"], [{"nfgate-dcp": good, "raw": good}, {"nfgate-dcp": bad, "raw": good}]
    )
    assert counts == {"nfgate-dcp": bad, "raw": good}


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_analyze_scenario_times_the_capture_pipeline_end_to_end(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nfgate",
            "bench",
            "--scenario",
            "analyze",
            "--records",
            "80",
            "--master",
            "local[1]",
        ],
        capture_output=True,
        text=True,
        timeout=170,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [obj] = [json.loads(line) for line in done.stdout.splitlines()]
    # 10 rounds of 8 records: a DCP request and reply, an NFP job's five messages, one junk.
    assert {k: obj[k] for k in ("records", "messages", "malformed", "exchanges", "unanswered")} == {
        "records": 80,
        "messages": 80,
        "malformed": 10,
        "exchanges": 30,
        "unanswered": 0,
    }
    assert obj["analyze_seconds"] > 0 and obj["decode_us_per_record"] > 0 and obj["capture_records_per_s"] > 0
