"""``serve --capture`` then ``nfgate analyze``: a real gateway's capture through the
PySpark job (local master), checked against the capture itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from nfgate.analysis.job import analyze, gateway_label, segments
from nfgate.capture import Capture, CaptureConfig
from nfgate.codecs import dcp, nfp
from nfgate.errors import ConfigError, DecodeError
from tests.analysis.conftest import JUNK, analyze_cli, table

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def test_every_captured_message_is_one_row_of_the_commands_table(run: dict[str, Any]) -> None:
    commands = table(run, "commands")
    assert len(commands) == len(run["raw"]) == run["summary"]["messages"]
    key = ("ts_ns", "edge", "peer", "direction")
    assert sorted(tuple(r[k] for k in key) for r in commands) == sorted(
        tuple(r[k] for k in key) for r in run["raw"]
    )
    types = Counter((r["protocol"], r["direction"], r["type"]) for r in commands)
    assert types[("dcp", "in", "REQUEST")] == 4 and types[("dcp", "out", "REPLY")] == 3
    assert types[("nfp", "out", "POST")] == 5 and types[("nfp", "in", "RESPONSE")] == 5
    assert types[("memodb", "in", "JOB")] == 1 and types[("memodb", "out", "RESULT")] == 1
    by_protocol = {r["protocol"]: r for r in run["summary"]["protocols"]}
    # DBP sent its beacons and served no client: no requests is 0, not null.
    dbp = by_protocol["dbp"]
    assert dbp["messages_out"] > 0 and (dbp["requests"], dbp["answered"]) == (0, 0)
    for name, t in run["traffic"].items():
        assert (by_protocol[name]["messages_in"], by_protocol[name]["messages_out"]) == (t.received, t.sent)


def test_malformed_messages_are_listed_with_the_decoders_reason(run: dict[str, Any]) -> None:
    malformed = table(run, "malformed")
    assert sorted(r["peer"] for r in malformed) == ["junk-dcp", "junk-nfp"]
    for row in malformed:
        with pytest.raises(DecodeError) as caught:
            (nfp if row["protocol"] == "nfp" else dcp).decode(JUNK[row["protocol"]])
        assert row["error"] == str(caught.value)
        assert row["preview"] == " ".join(f.hex() or "-" for f in JUNK[row["protocol"]])
        # What `nfgate decode` takes: the preview of a short message pastes into it.
        frames = [b"" if part == "-" else bytes.fromhex(part) for part in row["preview"].split(" ")]
        assert frames == JUNK[row["protocol"]]
    assert run["summary"]["malformed"] == 2
    assert {(r["protocol"], r["count"]) for r in run["summary"]["malformed_reasons"]} == {
        ("nfp", 1),
        ("dcp", 1),
    }


def test_exchanges_pair_requests_with_replies_and_time_them(run: dict[str, Any]) -> None:
    exchanges = table(run, "exchanges")
    clients = [e for e in exchanges if e["side"] == "client"]
    workers = [e for e in exchanges if e["side"] == "worker"]
    # Client side: 4 DCP requests (one for nobody, unanswered), the MemoDB JOB, the NFP POST.
    assert Counter((e["protocol"], e["reply_ts_ns"] is not None) for e in clients) == {
        ("dcp", True): 3,
        ("dcp", False): 1,
        ("memodb", True): 1,
        ("nfp", True): 1,
    }
    # Worker side: the five POSTs the NFP worker was given, each answered.
    assert len(workers) == 5 and all(e["peer"] == "echo-worker" and e["status"] == 200 for e in workers)
    # The latency is the capture's own timestamps: the DCP request m1 in, its REPLY out.
    raw = run["raw"]
    sent = next(r["ts_ns"] for r in raw if r["direction"] == "in" and r["frames"][-3:-2] == [b"m1"])
    m1 = next(e for e in clients if e["key"] == b"m1".hex())
    assert m1["request_ts_ns"] == sent
    replied = next(
        r["ts_ns"] for r in raw if r["direction"] == "out" and r["edge"] == "dcp" and b"m1" in r["frames"]
    )
    assert m1["latency_us"] == pytest.approx((replied - sent) / 1000)
    # The NFP POST's reply is the 200, not the 202 before it.
    post = next(e for e in clients if e["protocol"] == "nfp")
    assert post["status"] == 200 and post["key"] == "a" * 32
    assert run["summary"]["unanswered"] == 1


def test_service_aggregates_and_summary(run: dict[str, Any]) -> None:
    services = {(r["service"], r["side"]): r for r in table(run, "aggregates/service")}
    echo = services[("echo", "client")]
    assert (echo["requests"], echo["answered"], sorted(echo["protocols"])) == (5, 5, ["dcp", "memodb", "nfp"])
    assert 0 < echo["p50_us"] <= echo["p99_us"]
    assert services[("nobody", "client")]["answered"] == 0
    on_disk = json.loads((run["out"] / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(run["summary"]))
    peers = {r["peer"]: r for r in table(run, "aggregates/peer")}
    assert peers["junk-nfp"]["malformed"] == 1 and peers["echo-worker"]["dialects"] == ["spec"]


def test_the_report_is_one_self_contained_page_with_its_plots(run: dict[str, Any]) -> None:
    page = (run["out"] / "report.html").read_text()
    assert page.count("<svg") == 2
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert "<script" not in page
    for text in ("echo", "nobody", "junk-dcp", "memodb"):
        assert text in page


def test_analyze_without_segments_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "only.parquet.partial").write_bytes(b"PAR1")
    for source in (tmp_path, tmp_path / "missing"):
        proc = analyze_cli(str(source), "--out", str(tmp_path / "out"))
        assert proc.returncode == 2
        assert len(proc.stderr.strip().splitlines()) == 1 and "analyze:" in proc.stderr


def test_a_bad_master_or_no_java_is_one_line_exit_2(tmp_path: Path) -> None:
    cap = Capture(CaptureConfig(dir=tmp_path / "cap"))
    cap.tap_for("dcp", "dcp", "zmq")("in", "p", [b"x"])
    cap.close()
    proc = analyze_cli(str(tmp_path / "cap"), "--out", str(tmp_path / "out"), "--master", "bogus://x")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "nfgate: analyze: --master must be local[*], local[N], yarn, spark://HOST:PORT or k8s://URL, got 'bogus://x'"
    ]
    # No JVM: Spark's launcher runs $JAVA_HOME/bin/java, which is not there.
    env = {
        **os.environ,
        "JAVA_HOME": str(tmp_path / "no-java"),
        "TMPDIR": str(tmp_path),
    }  # the log kept there
    proc = analyze_cli(str(tmp_path / "cap"), "--out", str(tmp_path / "out"), "--master", "local[1]", env=env)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("nfgate: analyze: cannot start Spark on local[1] (") and "Java 17" in last, (
        proc.stderr
    )


def test_only_capture_segments_are_read(tmp_path: Path) -> None:
    (tmp_path / "gw1").mkdir()
    (tmp_path / "gw1" / "capture-20261125T120000-1-00001.parquet").write_bytes(b"")
    (tmp_path / "capture-20261125T120000-2-00001.parquet.partial").write_bytes(b"")
    (tmp_path / "out" / "commands").mkdir(parents=True)
    (tmp_path / "out" / "commands" / "part-00000.parquet").write_bytes(b"")  # an earlier --out
    assert segments(tmp_path) == [tmp_path / "gw1" / "capture-20261125T120000-1-00001.parquet"]


def test_the_cli_runs_the_job(run: dict[str, Any], tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nfgate",
            "analyze",
            str(run["capture"]),
            "--out",
            str(tmp_path),
            "--master",
            "local[1]",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"{run['summary']['messages']} messages (2 malformed)")
    assert json.loads((tmp_path / "summary.json").read_text())["messages"] == run["summary"]["messages"]


def test_a_time_window_reads_only_the_messages_inside_it(run: dict[str, Any], tmp_path: Path) -> None:
    stamps = sorted(r["ts_ns"] for r in run["raw"])
    since, until = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    inside = [r for r in run["raw"] if since <= r["ts_ns"] < until]
    assert 0 < len(inside) < len(run["raw"])
    summary = analyze(run["capture"], tmp_path, "local[1]", window=(since, until))
    commands = table({"out": tmp_path}, "commands")
    key = ("ts_ns", "edge", "peer", "direction")
    assert sorted(tuple(r[k] for k in key) for r in commands) == sorted(
        tuple(r[k] for k in key) for r in inside
    )
    assert summary["messages"] == len(inside)
    assert summary["window"] == {"since_ns": since, "until_ns": until}
    assert "window from" in (tmp_path / "report.html").read_text()
    with pytest.raises(ConfigError, match=r"^analyze: no captured message in the window"):
        analyze(run["capture"], tmp_path / "none", "local[1]", window=(stamps[-1] + 1, None))


def test_bad_window_times_are_one_line_exit_2(tmp_path: Path) -> None:
    for args, message in (
        (
            ["--since", "yesterday"],
            "nfgate: --since: expected an ISO 8601 time like 2026-11-25T14:00:00Z, got 'yesterday'",
        ),
        (
            ["--since", "2026-11-25T15:00:00Z", "--until", "2026-11-25T14:00"],
            "nfgate: analyze: --since must be before --until",
        ),
    ):
        proc = analyze_cli(str(tmp_path), "--out", str(tmp_path / "out"), *args)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [message]


def test_two_gateways_with_the_same_edge_peer_and_key_names_are_paired_apart(tmp_path: Path) -> None:
    """gw1's request is answered after gw2's: paired across gateways by order, each
    would get the other's reply. Times are the capture's clock, in ns."""
    request = dcp.encode(dcp.messages.Request(service=b"echo", metadata=(b"k",), data=(b"x",)))
    reply = dcp.encode(dcp.messages.Reply(metadata=(b"k",), data=(b"x",)))
    timeline = {
        "gw1": [(1_000, "in", request), (9_000, "out", reply)],
        "gw2": [(2_000, "in", request), (3_000, "out", reply)],
    }
    for gateway, events in timeline.items():
        stamps = iter([t for t, _, _ in events])
        cap = Capture(CaptureConfig(dir=tmp_path / "source" / gateway), clock=stamps.__next__)
        tap = cap.tap_for("dcp", "dcp", "zmq")
        for _, direction, frames in events:
            tap(direction, "client-1", frames)
        cap.close()
    summary = analyze(tmp_path / "source", tmp_path / "out", "local[1]")
    exchanges = table({"out": tmp_path / "out"}, "exchanges")
    pid = os.getpid()
    assert sorted((e["gateway"], e["latency_us"]) for e in exchanges) == [
        (f"gw1:{pid}", 8.0),
        (f"gw2:{pid}", 1.0),
    ]
    assert sorted(p["gateway"] for p in summary["peers"]) == [f"gw1:{pid}", f"gw2:{pid}"]
    assert {r["gateway"] for r in table({"out": tmp_path / "out"}, "commands")} == {
        f"gw1:{pid}",
        f"gw2:{pid}",
    }


def test_a_reply_answers_the_latest_open_request_of_its_key(tmp_path: Path) -> None:
    """Where keys repeat (DCP metadata; the gateway sends a DCP worker none), a reply
    pairs with the latest request before it still open: a window that starts between a
    request and its reply shifts nothing and makes no negative latency, and a client's
    retry with the same metadata (the first one dropped, DCP has no error reply) gets
    the reply, the first none. Times in ns."""
    ms = 1_000_000
    req = dcp.encode(dcp.messages.Request(service=b"echo", metadata=(b"k",), data=(b"x",)))
    rep = dcp.encode(dcp.messages.Reply(metadata=(b"k",), data=(b"x",)))
    to_worker = dcp.encode(dcp.messages.Request(service=b"echo", client=b"nfgate:1", data=(b"x",)))
    from_worker = dcp.encode(dcp.messages.Reply(client=b"nfgate:1", data=(b"x",)))
    events = [
        (1 * ms, "worker", "out", to_worker),  # before the window: its reply closes nothing
        (3 * ms, "worker", "in", from_worker),
        (4 * ms, "worker", "out", to_worker),
        (6 * ms, "worker", "in", from_worker),
        (7 * ms, "worker", "out", to_worker),
        (9 * ms, "worker", "in", from_worker),
        (10 * ms, "retrying", "in", req),  # dropped by the gateway: never answered
        (12 * ms, "retrying", "in", req),
        (13 * ms, "retrying", "out", rep),
        (20 * ms, "pipelining", "in", req),  # three at once under one key: all answered
        (21 * ms, "pipelining", "in", req),
        (22 * ms, "pipelining", "in", req),
        (23 * ms, "pipelining", "out", rep),
        (24 * ms, "pipelining", "out", rep),
        (25 * ms, "pipelining", "out", rep),
    ]
    stamps = iter([t for t, _, _, _ in events])
    cap = Capture(CaptureConfig(dir=tmp_path / "source"), clock=stamps.__next__)
    tap = cap.tap_for("dcp", "dcp", "zmq")
    for _, peer, direction, frames in events:
        tap(direction, peer, frames)
    cap.close()
    analyze(tmp_path / "source", tmp_path / "out", "local[1]", window=(2 * ms, None))
    found: dict[str, list[tuple[int, int | None]]] = {}
    for e in table({"out": tmp_path / "out"}, "exchanges"):
        found.setdefault(e["peer"], []).append(
            (e["request_ts_ns"] // ms, e["reply_ts_ns"] and e["reply_ts_ns"] // ms)
        )
    assert sorted(found["worker"]) == [(4, 6), (7, 9)]
    assert sorted(found["retrying"]) == [(10, None), (12, 13)]
    pipelined = found["pipelining"]
    assert len(pipelined) == 3 and all(reply is not None and reply > request for request, reply in pipelined)
    assert {reply for _, reply in pipelined} == {23, 24, 25}


def test_the_gateway_label_is_the_segments_directory_and_pid() -> None:
    assert gateway_label("file:///data/caps/gw%201/capture-20261125T120000-4242-00003.parquet") == "gw 1:4242"
    assert gateway_label("hdfs://nn/caps/capture-20261125T120000-7-00001.parquet") == "caps:7"
    assert gateway_label("file:///data/caps/gw2/capture-old.parquet") == "gw2"  # renamed: the directory
