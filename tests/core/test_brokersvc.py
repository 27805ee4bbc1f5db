"""The services an NFP broker answers itself (nfgate.brokersvc): mmi, the management
interface (sid and fss: test_brokersvc_sid_fss.py).

NorFab's own code is the reference where NorFab has the task: get_stats is validated
with NorFab's monitoring model.
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from nfgate.brokersvc import mmi, sid

# ----------------------------------------------------------------------------- mmi


def worker(name: str, service: str = "echosvc", **kw: Any) -> mmi.WorkerInfo:
    defaults: dict[str, Any] = {
        "protocol": "nfp",
        "edge": "nfp",
        "holdtime_s": 14.345,
        "keepalives_tx": 2,
        "keepalives_rx": 3,
        "alive_s": 5.9,
    }
    return mmi.WorkerInfo(name=name, service=service, **{**defaults, **kw})


def view(*workers: mmi.WorkerInfo, **kw: Any) -> mmi.BrokerView:
    broker = mmi.BrokerInfo(
        version="0.1.0",
        started=1_700_000_000.0,
        uptime_s=61.25,
        endpoints=(("dcp", "dcp", "tcp://127.0.0.1:5556"), ("nfp", "nfp", "tcp://127.0.0.1:5555")),
        inventory="/etc/nfgate/inventory.yaml",
    )
    return mmi.BrokerView(broker=broker, workers=workers, **kw)


def run(task: str, v: mmi.BrokerView, **kwargs: Any) -> mmi.MmiResult:
    result = mmi.handle(task, kwargs, [], v)
    json.dumps(result.value)  # the edge JSON-encodes every answer
    return result


def test_show_workers_rows_are_norfabs() -> None:
    result = run("show_workers", view(worker("w1"), worker("w2", status="dead")))
    assert result.status == 200 and result.action is None
    assert result.value == [
        {
            "name": "w1",
            "service": "echosvc",
            "status": "alive",
            "holdtime": "14.3",
            "keepalives tx/rx": "2 / 3",
            "alive (s)": "5",
        },
        {
            "name": "w2",
            "service": "echosvc",
            "status": "dead",
            "holdtime": "14.3",
            "keepalives tx/rx": "2 / 3",
            "alive (s)": "5",
        },
    ]


def test_show_workers_filters() -> None:
    v = view(worker("w1"), worker("w2", service="nornir", status="dead"), worker("w3", service="a,nornir"))

    def names(**kw: Any) -> list[str]:
        return [row["name"] for row in run("show_workers", v, **kw).value]

    assert names(service="all") == ["w1", "w2", "w3"]
    assert names(service="nornir") == ["w2", "w3"]  # w3 serves two services
    assert names(status="dead") == ["w2"]
    assert names(status="alive", service="nornir") == ["w3"]
    assert names(status="any") == ["w1", "w2", "w3"]  # what nfcli sends for "no filter"
    assert names(service=None, status=None) == ["w1", "w2", "w3"]  # JSON nulls: not given


def test_show_workers_empty_is_norfabs_placeholder_row() -> None:
    placeholder = [{"name": "", "service": "", "status": ""}]
    assert run("show_workers", view()).value == placeholder
    assert run("show_workers", view(worker("w1")), service="nope").value == placeholder


def test_show_workers_details_adds_gateway_columns() -> None:
    (row,) = run(
        "show_workers", view(worker("w1", edge="dcp", protocol="dcp", in_flight=4, late=1)), details=True
    ).value
    assert (row["protocol"], row["edge"], row["in flight"], row["late"]) == ("dcp", "dcp", 4, 1)


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [({"service": 5}, "'service'"), ({"details": 1}, "'details'")],
)
def test_show_workers_bad_kwargs_are_400(kwargs: dict[str, Any], word: str) -> None:
    result = run("show_workers", view(worker("w1")), **kwargs)
    assert result.status == 400 and word in result.value and result.action is None


@pytest.mark.parametrize("status", ["busy", "ALIVE", "any", ""])
def test_show_workers_takes_a_status_other_than_alive_or_dead_for_no_filter(status: str) -> None:
    # NorFab's broker does, and nfcli cannot show a 400 (it reads the text as rows).
    result = run("show_workers", view(worker("w1"), worker("w2", status="dead")), status=status)
    assert result.status == 200 and [row["name"] for row in result.value] == ["w1", "w2"]
    assert [
        r["name"]
        for r in run("show_workers", view(worker("w1"), worker("w2", status="dead")), status="dead").value
    ] == ["w2"]


def test_unknown_task_is_norfabs_200_text() -> None:
    assert run("frobnicate", view()) == mmi.MmiResult(status=200, value="Unsupported task 'frobnicate'")


def test_kwargs_must_be_a_mapping() -> None:
    result = mmi.handle("show_workers", [], [], view())  # type: ignore[arg-type]
    assert result.status == 400


def test_restart_and_shutdown_hand_back_actions() -> None:
    v = view(worker("w1"))
    restart, shutdown = run("restart", v), run("shutdown", v)
    assert restart.status == shutdown.status == 200
    assert restart.action == mmi.Action(kind=mmi.ActionKind.RESTART)
    assert shutdown.action == mmi.Action(kind=mmi.ActionKind.SHUTDOWN)


def test_disconnect_one_all_and_unknown() -> None:
    v = view(worker("w1"), worker("w2"))
    one = run("disconnect", v, name="w2")
    assert one.status == 200 and one.action == mmi.Action(kind=mmi.ActionKind.DISCONNECT, worker="w2")
    by_arg = mmi.handle("disconnect", {}, ["w1"], v)
    assert by_arg.action == mmi.Action(kind=mmi.ActionKind.DISCONNECT, worker="w1")
    every = run("disconnect", v)  # the spec: "disconnect all workers"
    assert every.action == mmi.Action(kind=mmi.ActionKind.DISCONNECT, worker=None)
    unknown = run("disconnect", v, name="ghost")
    assert unknown.status == 400 and "ghost" in unknown.value and unknown.action is None
    assert run("disconnect", v, name=["w1"]).status == 400


def test_get_stats_is_valid_norfab_broker_monitoring_stats() -> None:
    monitoring = importlib.import_module("norfab.core.monitoring")
    stats = {"sent": 10, "received": 12, "accepted": 3}
    v = view(worker("w1"), worker("w2", service="nornir", status="dead"), stats=stats)
    value = run("get_stats", v).value
    parsed = monitoring.BrokerMonitoringStats.model_validate_json(json.dumps(value))
    assert parsed.endpoint == "tcp://127.0.0.1:5555"  # the NFP edge, not the first edge
    assert (parsed.worker_count, parsed.service_count) == (2, 2)
    assert (
        parsed.messaging.sent == 10
        and parsed.messaging.received == 12
        and parsed.messaging.send_failures == 0
    )
    assert parsed.process.uptime_seconds == 61
    assert parsed.collected_at.timestamp() == pytest.approx(1_700_000_061.25)
    assert [w.keepalives_received for w in parsed.workers] == [3, 3]
    assert parsed.workers[1].status == "dead" and parsed.workers[0].holdtime_seconds == 14.3


def test_worker_status_is_alive_or_dead() -> None:
    with pytest.raises(ValueError):
        worker("w1", status="busy")


def test_get_status_and_versions() -> None:
    status = run("get_status", view()).value
    assert status["name"] == "NFPBroker" and status["role"] == "broker" and status["status"] == "active"
    assert status["endpoint"] == "tcp://127.0.0.1:5555"
    assert status["directories"]["inventory"] == "/etc/nfgate/inventory.yaml"
    assert {"edge": "dcp", "protocol": "dcp", "url": "tcp://127.0.0.1:5556"} in status["endpoints"]
    versions = run("show_broker_version", view()).value
    assert versions["nfgate"] == "0.1.0" and versions["python"].count(".") == 2 and versions["platform"]


def test_show_broker_inventory(tmp_path: Path) -> None:
    skeleton = run("show_broker_inventory", view()).value
    assert skeleton == {
        k: {} for k in ("broker", "workers", "topology", "logging", "client", "hooks", "plugins")
    }
    path = tmp_path / "inventory.yaml"
    path.write_text("broker: {endpoint: 'tcp://127.0.0.1:5555'}\nworkers: {w1: {service: echosvc}}\n")
    v = view(inventory=sid.load_inventory(path).as_dict())
    value = run("show_broker_inventory", v).value
    assert value["broker"] == {"endpoint": "tcp://127.0.0.1:5555"}
    assert value["workers"] == {"w1": {"service": "echosvc"}} and value["topology"] == {}
    value["workers"]["w1"]["service"] = "changed"  # a reply is a copy
    assert run("show_broker_inventory", v).value["workers"]["w1"]["service"] == "echosvc"


LOGS = (
    json.dumps({"ts": "2026-01-01T10:00:00", "level": "INFO", "logger": "nfgate.edge.nfp", "message": "a"}),
    json.dumps({"ts": "2026-01-01T10:00:05", "level": "WARNING", "logger": "nfgate.core", "message": "b"}),
    "plain text line",
    json.dumps({"ts": "2026-01-01T10:00:09", "level": "info", "logger": "nfgate.core", "message": "c"}),
)


def test_get_logs_records_and_filters() -> None:
    v = view(logs=LOGS)

    def messages(**kw: Any) -> list[str]:
        return [r["message"] for r in run("get_logs", v, **kw).value]

    records = run("get_logs", v).value
    assert [r["message"] for r in records] == ["a", "b", "plain text line", "c"]
    assert all(r["role"] == "broker" and r["name"] == "NFPBroker" for r in records)
    assert messages(level="info") == ["a", "c"]  # case-insensitive, as NorFab
    assert messages(logger="nfgate.core") == ["b", "c"]
    assert messages(since="2026-01-01T10:00:05", until="2026-01-01T10:00:08") == ["b"]
    assert messages(last=2) == ["plain text line", "c"]
    assert messages(last=0) == ["a", "b", "plain text line", "c"]  # 0: all, as NorFab
    assert run("get_logs", v, last=-1).status == 400
    assert run("get_logs", v, last="5").status == 400
    assert run("get_logs", v, last=True).status == 400  # JSON true is not a count
    assert messages(since="2026-01-01") == ["a", "b", "c"]  # a date alone is a time too
    # Not a time: compared as text, as NorFab's broker does (200 and nothing, which
    # nfcli shows; it cannot show a 400). "yesterday" sorts after every ISO time.
    assert run("get_logs", v, since="yesterday") == mmi.MmiResult(status=200, value=[])
    assert messages(until="13:00") == ["plain text line"]  # "2026-..." > "13:00"; no ts, "" is not


def test_spec_show_tasks() -> None:
    clients = (mmi.ClientInfo(name="c1", protocol="nfp", edge="nfp", last_seen_s=1.26, jobs=2),)
    w = (
        worker("w1"),
        worker("w2", service="nornir", protocol="dcp", edge="dcp", in_flight=3, late=2, status="dead"),
    )
    v = view(*w, clients=clients, stats={"accepted": 5, "replied": 4})
    broker = run("show_broker", v).value
    assert (broker["workers"], broker["services"], broker["clients"]) == (2, 2, 1)
    assert broker["stats"] == {"accepted": 5, "replied": 4} and broker["uptime (s)"] == 61.2
    assert broker["started"].startswith("2023-11-14T22:13:20")
    assert run("show_clients", v).value == [
        {"name": "c1", "protocol": "nfp", "edge": "nfp", "last seen (s)": 1.3, "jobs": 2}
    ]
    assert run("show_clients", view()).value == []
    services = {row["service"]: row for row in run("show_services", v).value}
    assert services["nornir"] == {
        "service": "nornir",
        "workers": 1,
        "alive": 0,
        "protocols": ["dcp"],
        "edges": ["dcp"],
        "in flight": 3,
        "late": 2,
    }
    assert services["echosvc"]["alive"] == 1


def test_pure_modules_import_no_io() -> None:
    forbidden = {"zmq", "pynng", "socket", "time", "random", "threading", "asyncio", "logging", "selectors"}
    folder = Path(mmi.__file__).parent
    for path in sorted(folder.glob("*.py")):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module.split(".")[0])
        assert not imported & forbidden, f"{path.name} imports {sorted(imported & forbidden)}"
