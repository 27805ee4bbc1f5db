"""The NFP edge's broker services (mmi, sid, fss) as spec and NorFab clients see them
(docs/protocols/norfab-wire.md)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest
import zmq

from nfgate.codecs import nfp
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Disconnect, Keepalive, Mmi, Response

from .conftest import Running, beats, finish, recv, start_gateway, until
from .nfp_helpers import get, mmi_call, new_uuid, norfab_worker, post, send, spec_worker

pytestmark = pytest.mark.timeout(30)


def test_mmi_show_workers_answered_twice_for_norfab(gw: Running) -> None:
    norfab_worker(gw, "svc", b"mw1")
    client = gw.dealer("nfp", b"mc")
    job = new_uuid()
    body = b'{"task":"show_workers","kwargs":{},"args":[]}'
    send(
        client,
        Mmi(header=CLIENT, service="mmi.service.broker", target="all", uuid=job, body=(body,)),
        "norfab",
    )
    first, second = get(client, "norfab"), get(client, "norfab")
    assert isinstance(first, Response) and isinstance(second, Mmi) and second.status == 200
    rows = json.loads(second.body[0])
    assert [row["name"] for row in rows] == ["mw1"]


@pytest.mark.parametrize("service", ["walk", "echo", "nosvc"])
def test_mmi_for_a_service_the_broker_does_not_have_is_404(tmp_path: Path, service: str) -> None:
    # Even with a files root configured: an MMI to another name must not be answered
    # as fss.service.broker (it listed the broker's files).
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "secret.txt").write_text("x")
    gw = start_gateway(tmp_path, f"[edges.nfp]\nfiles_root = '{tmp_path / 'files'}'\n")
    try:
        client = gw.dealer("nfp", b"mc")
        body = json.dumps({"task": "list_files", "kwargs": {"url": "nf://"}, "args": []}).encode()
        send(
            client, Mmi(header=CLIENT, service=service, target="any", uuid=new_uuid(), body=(body,)), "norfab"
        )
        first, second = get(client, "norfab"), get(client, "norfab")
        assert isinstance(first, Response) and first.status == 404
        assert isinstance(second, Mmi) and second.status == 404
        assert b"secret" not in second.body[0] and service.encode() in second.body[0]
        assert gw.gateway.edges["nfp"].counters["unknown_broker_service"] == 1
    finally:
        finish(gw)


def test_show_workers_counts_keepalives_both_ways(tmp_path: Path) -> None:
    # NorFab's show_workers column "keepalives tx/rx": KEEPALIVEs the broker sent to the
    # worker / KEEPALIVEs it heard from the worker.
    gw = start_gateway(tmp_path, "[edges.nfp]\nheartbeat_ms = 100\nliveness = 50\n")
    try:
        w = spec_worker(gw, "svc", b"kw1")
        for _ in range(3):
            send(w, Keepalive(header=WORKER, service="svc"))
        until(lambda: (beats(gw, "nfp") or (0, 0))[1] == 3)
        got = 0
        for _ in range(20):  # bounded: each recv gives up after RECV_MS
            got += isinstance(nfp.decode(recv(w)), Keepalive)
            if got == 2:
                break
        status, rows = mmi_call(gw.dealer("nfp"), "mmi.service.broker", "show_workers")
        assert status == 200 and isinstance(rows, list) and len(rows) == 1
        sent, heard = (int(n) for n in rows[0]["keepalives tx/rx"].split(" / "))
        assert heard == 3 and sent >= got == 2
    finally:
        finish(gw)


def test_get_stats_and_get_status_report_this_process(gw: Running, tmp_path: Path) -> None:
    # NorFab's nfcli and nfweb show these figures; nfgate reads them as NorFab's broker
    # does (psutil), for the process the gateway runs in (here: pytest's).
    me = psutil.Process()
    client = gw.dealer("nfp")
    status, stats = mmi_call(client, "mmi.service.broker", "get_stats")
    assert status == 200 and isinstance(stats, dict)
    process = stats["process"]
    rss_mb = me.memory_info().rss / 1024 / 1024
    assert 0.5 * rss_mb < process["memory_rss_mbyte"] < 2 * rss_mb
    assert process["threads"] >= 2  # at least the gateway's loop and libzmq's I/O thread
    assert process["open_file_descriptors"] >= 5  # the edges' sockets, the store, the wake-up pair
    # Every edge listens on TCP, and this client is connected to one of them.
    assert process["tcp_sockets"] >= len(
        [e for e in gw.gateway.edges.values() if e.endpoint.startswith("tcp://")]
    )
    assert process["cpu_percent"] >= 0.0
    status, info = mmi_call(client, "mmi.service.broker", "get_status")
    assert status == 200 and isinstance(info, dict)
    assert info["directories"]["base_dir"] == str(tmp_path / "data")
    assert info["security"] == {"zmq_auth": False}
    status, versions = mmi_call(client, "mmi.service.broker", "show_broker_version")
    assert status == 200 and isinstance(versions, dict)
    assert versions["pyzmq"] == zmq.__version__ and versions["libzmq"] == zmq.zmq_version()
    assert versions["psutil"] == psutil.__version__ and versions["nfgate"]


def test_get_status_says_zmq_auth_when_the_edge_runs_curve(tmp_path: Path) -> None:
    import zmq.auth

    _, secret_file = zmq.auth.create_certificates(tmp_path, "broker")
    server_public, _ = zmq.auth.load_certificate(secret_file)
    client_public, client_secret = zmq.auth.load_certificate(zmq.auth.create_certificates(tmp_path, "c")[1])
    gw = start_gateway(tmp_path, f'[edges.nfp]\ncurve_secret_key = "{secret_file}"\n')
    try:
        secured = gw.context.socket(zmq.DEALER)
        secured.setsockopt(zmq.LINGER, 0)
        secured.setsockopt(zmq.RCVTIMEO, 3000)
        secured.curve_serverkey = server_public
        secured.curve_publickey, secured.curve_secretkey = client_public, client_secret
        secured.connect(gw.endpoint("nfp"))
        try:
            status, info = mmi_call(secured, "mmi.service.broker", "get_status")
        finally:
            secured.close(0)
        assert status == 200 and info["security"] == {"zmq_auth": True}  # type: ignore[index]
    finally:
        finish(gw)


def test_mmi_show_clients_counts_open_jobs(gw: Running) -> None:
    client = gw.dealer("nfp", b"busy-client")
    post(client, "nobody", b"x")
    assert get(client).status == 202  # type: ignore[attr-defined]
    status, rows = mmi_call(client, "mmi.service.broker", "show_clients")
    assert status == 200
    mine = [row for row in rows if row["name"] == "busy-client"]  # type: ignore[union-attr]
    assert mine and mine[0]["jobs"] == 1, rows


def test_mmi_get_logs_returns_recent_gateway_records(gw: Running) -> None:
    client = gw.dealer("nfp")
    mmi_call(client, "mmi.service.broker", "restart")  # logged as a warning by the edge
    until(
        lambda: any("mmi.service.broker restart asked for by id-" in line for line in gw.gateway.logs.lines)
    )
    status, records = mmi_call(client, "mmi.service.broker", "get_logs", last=0, level="warning")
    assert status == 200
    assert any("restart asked for by" in r["message"] for r in records), records  # type: ignore[union-attr]
    assert all(r["level"] == "WARNING" for r in records)  # type: ignore[union-attr]
    # The fields of NorFab's own JSON log records (nfcli's "show logs" prints them).
    fields = {"ts", "pid", "processName", "threadName", "module", "function", "line", "filename"}
    assert all(fields <= set(r) for r in records)  # type: ignore[union-attr]
    assert records[-1]["pid"] == os.getpid()  # type: ignore[index]


def test_mmi_disconnect_without_name_disconnects_every_worker(gw: Running) -> None:
    workers = [spec_worker(gw, "svc", name) for name in (b"d1", b"d2")]
    client = gw.dealer("nfp")
    status, _ = mmi_call(client, "mmi.service.broker", "disconnect")
    assert status == 200
    for w in workers:
        assert isinstance(get(w), Disconnect)
    until(lambda: not gw.gateway.router.workers())


def test_sid_and_fss_answer_from_the_configured_inventory_and_root(tmp_path: object) -> None:
    from pathlib import Path

    root = Path(str(tmp_path))
    (root / "files").mkdir()
    (root / "files" / "hello.txt").write_text("hi there")
    (root / "inventory.yaml").write_text("workers:\n  lab-*:\n    site: lab\n")
    toml = f'[edges.nfp]\ninventory = "{root / "inventory.yaml"}"\nfiles_root = "{root / "files"}"\n'
    running = start_gateway(root, toml)
    try:
        client = running.dealer("nfp")
        status, inventory = mmi_call(client, "sid.service.broker", "get_inventory", name="lab-1")
        assert (status, inventory) == (200, {"site": "lab"})
        assert mmi_call(client, "sid.service.broker", "get_inventory", name="core-1") == (200, None)
        status, listing = mmi_call(client, "fss.service.broker", "list_files", url="nf://")
        assert status == 200 and "hello.txt" in listing, listing  # type: ignore[operator]
        status, _ = mmi_call(client, "fss.service.broker", "list_files", url="nf://../")
        assert status == 400
    finally:
        finish(running)


def test_only_get_stats_reads_the_process_figures(gw: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    # psutil's TCP scan costs about 10 ms on the loop, which routes nothing meanwhile;
    # NorFab's tools ask show_workers for every completion and page. Only get_stats
    # reports the figures, so only get_stats pays for them (as in NorFab's broker).
    scans: list[int] = []
    real = psutil.Process.net_connections

    def counting(self: psutil.Process, kind: str = "inet") -> list[object]:
        scans.append(1)
        return real(self, kind)  # type: ignore[return-value]

    monkeypatch.setattr(psutil.Process, "net_connections", counting)
    client = gw.dealer("nfp")
    for task in ("show_workers", "show_broker", "get_status", "show_broker_version", "no_such_task"):
        assert mmi_call(client, "mmi.service.broker", task)[0] == 200
    assert scans == []
    status, stats = mmi_call(client, "mmi.service.broker", "get_stats")
    assert status == 200 and isinstance(stats, dict) and stats["process"]["tcp_sockets"] >= 1
    assert scans == [1]


@pytest.mark.parametrize("task", [None, 5])
def test_a_task_that_is_not_a_string_is_norfabs_unsupported_task(gw: Running, task: object) -> None:
    # NorFab's broker answers 200 "Unsupported task 'None'"; a 400 would be shown by
    # nfcli as if its text were the result.
    client = gw.dealer("nfp")
    body = json.dumps({"task": task, "kwargs": {}, "args": []}).encode()
    post(client, "mmi.service.broker", body)
    reply = get(client)
    assert isinstance(reply, Response) and reply.status == 200
    assert json.loads(reply.body[0]) == f"Unsupported task '{task}'"


def test_show_broker_reports_the_loops_stalls_and_a_monotonic_uptime(
    gw: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = gw.dealer("nfp")
    # The wall clock stepped back an hour (NTP, a VM resumed): the uptime does not care.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600)
    status, shown = mmi_call(client, "mmi.service.broker", "show_broker")
    assert status == 200 and isinstance(shown, dict)
    assert 0 <= shown["uptime (s)"] < 600
    assert shown["stats"]["stalls"] == 0 and shown["stats"]["stalled_ms"] == 0
