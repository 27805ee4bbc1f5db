"""The Prometheus text rendering and the metrics URL check (nfgate/metrics.py)."""

from __future__ import annotations

import time
import types
import urllib.error
import urllib.request

import pytest

from nfgate.config import load
from nfgate.errors import ConfigError
from nfgate.metrics import parse_url, render
from nfgate.serve import _metrics


def test_counters_gauges_and_edge_events_render_as_prometheus_text() -> None:
    snapshot = {
        "core": {"accepted": 3, "workers": 2, "queued": 1},
        "edge:nfp": {"undecodable": 4},
        "edge:dcp-2": {'odd"name': 1},
    }
    page = render(snapshot, {"nfp": "nfp", "dcp-2": "dcp"}, 12.5)
    lines = page.splitlines()
    assert "nfgate_uptime_seconds 12.500" in lines
    assert "# TYPE nfgate_core_accepted_total counter" in lines and "nfgate_core_accepted_total 3" in lines
    assert "# TYPE nfgate_core_workers gauge" in lines and "nfgate_core_workers 2" in lines
    assert 'nfgate_edge_events_total{edge="nfp",protocol="nfp",event="undecodable"} 4' in lines
    assert 'nfgate_edge_events_total{edge="dcp-2",protocol="dcp",event="odd\\"name"} 1' in lines
    assert page.endswith("\n")


def test_what_an_edge_holds_renders_as_a_gauge_not_as_an_event_count() -> None:
    # workers, peers ... go down as well as up: as counters, Prometheus's rate() would
    # read every fall as a restart.
    snapshot = {
        "edge:nfp": {"workers": 2, "peers": 7, "jobs_live": 1, "undecodable": 4},
        "edge:dcp": {"peers": 3},
    }
    lines = render(snapshot, {"nfp": "nfp", "dcp": "dcp"}, 1.0).splitlines()
    assert "# TYPE nfgate_edge_peers gauge" in lines
    assert lines.count("# TYPE nfgate_edge_peers gauge") == 1  # one family, both edges' samples under it
    start = lines.index("# TYPE nfgate_edge_peers gauge")
    assert lines[start + 1 : start + 3] == [
        'nfgate_edge_peers{edge="dcp",protocol="dcp"} 3',
        'nfgate_edge_peers{edge="nfp",protocol="nfp"} 7',
    ]
    assert 'nfgate_edge_workers{edge="nfp",protocol="nfp"} 2' in lines
    assert 'nfgate_edge_jobs_live{edge="nfp",protocol="nfp"} 1' in lines
    assert not [line for line in lines if "event=" in line and "undecodable" not in line]


def test_an_empty_snapshot_still_renders() -> None:
    assert render({}, {}, 0.0).startswith("# HELP nfgate_uptime_seconds")


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [("http://127.0.0.1:9464", "127.0.0.1", 9464), ("http://localhost:0/metrics", "localhost", 0)],
)
def test_metrics_urls(url: str, host: str, port: int) -> None:
    assert parse_url(url) == (host, port)


@pytest.mark.parametrize(
    "url", ["tcp://127.0.0.1:9464", "http://127.0.0.1", "http://:80", "http://h:x", "http://h:1/x"]
)
def test_bad_metrics_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError, match=r"metrics\.bind"):
        parse_url(url)


def test_metrics_config_keys(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "c.toml"
    path.write_text('[metrics]\nbind = "http://127.0.0.1:9999"\n')
    assert load(path).metrics == "http://127.0.0.1:9999"
    assert load(path, no_metrics=True).metrics is None
    assert load(path, metrics_bind="http://127.0.0.1:1").metrics == "http://127.0.0.1:1"
    path.write_text("[metrics]\nenabled = false\n")
    assert load(path).metrics is None
    path.write_text('[metrics]\nenabled = "yes"\n')
    with pytest.raises(ConfigError, match=r"metrics\.enabled"):
        load(path)
    path.write_text("[metrics]\nport = 1\n")
    with pytest.raises(ConfigError, match=r"metrics\.port"):
        load(path)


def test_traffic_families_each_come_as_one_group() -> None:
    # The text format: every sample of a metric family right after its TYPE line.
    traffic = {"received": 5, "sent": 4, "receive_failures": 1, "send_failures": 0}
    page = render({"traffic:nfp": traffic, "traffic:dcp": traffic}, {"nfp": "nfp", "dcp": "dcp"}, 1.0)
    lines = page.splitlines()
    for family in ("nfgate_edge_messages_total", "nfgate_edge_message_failures_total"):
        at = lines.index(f"# TYPE {family} counter")
        samples = [i for i, line in enumerate(lines) if line.startswith(family + "{")]
        assert samples == list(range(at + 1, at + 5)), family
    assert 'nfgate_edge_messages_total{edge="dcp",protocol="dcp",direction="in"} 5' in lines
    assert 'nfgate_edge_message_failures_total{edge="nfp",protocol="nfp",direction="in"} 1' in lines


@pytest.mark.timeout(30)
def test_health_probes_say_starting_running_and_a_stalled_loop() -> None:
    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(server.url.replace("/metrics", path), timeout=5) as response:
                return response.status, response.read().decode().strip()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode().strip()

    holder: list[object] = []  # the gateway, once built (a stand-in here: what the probes read)
    server = _metrics(holder, "http://127.0.0.1:0")  # type: ignore[arg-type]
    try:
        assert get("/healthz") == (200, "starting") and get("/readyz") == (503, "starting")
        gateway = types.SimpleNamespace(state="running", published_at=time.monotonic(), snapshot={}, edges={})
        holder.append(gateway)
        assert get("/healthz") == (200, "ok") and get("/readyz") == (200, "ready")
        gateway.published_at -= 60  # the loop stuck (a bug, a disk that does not answer)
        status, text = get("/healthz")
        assert status == 503 and "has not come round for 60 s" in text
        gateway.state = "stopped"
        assert get("/readyz") == (503, "stopped")
    finally:
        server.close()
