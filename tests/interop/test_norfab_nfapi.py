"""NorFab 0.25 run as its users run it, through NFAPI and nfcli, with nfgate as the broker.

The deployment is docs/broker.md's "NorFab's NFAPI and nfcli with nfgate": its
``inventory.yaml`` (``topology.broker: false``, NorFab's own filesharing and workflow
workers) and its ``gw.toml`` (nfgate serving that inventory), copied from the page with
only the endpoint and the files folder changed. NFAPI runs in children (nfapi_peer.py),
nfcli as the ``nfcli`` command; each child gets a session of its own, and its process
group (NFAPI's worker processes included) is killed at the end whatever happened.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zmq.auth

from tests.ports import random_bind_args

from .conftest import Broker, _env, render_logs, start_nfgate, stop_process

HERE = Path(__file__).resolve().parent
PEER = HERE / "nfapi_peer.py"
RESULT_PREFIX = "NFAPI_PEER_RESULT "  # nfapi_peer.RESULT_PREFIX
NFCLI = Path(sys.executable).parent / "nfcli"
DOC = HERE.parents[1] / "docs" / "broker.md"
SECTION = "### NorFab's NFAPI and nfcli with nfgate"
DOC_ENDPOINT = "tcp://127.0.0.1:5555"
DOC_FILES = "/srv/norfab/files"
WORKERS = {"filesharing-worker-1": "filesharing", "workflow-worker-1": "workflow"}  # the page's topology
WORKFLOW = """\
name: check
listing:
  service: filesharing
  task: list_files
  kwargs: {url: "nf://"}
ping:
  service: all
  task: echo
  workers: all
  kwargs: {ping: pong}
"""


def _doc() -> dict[str, str]:
    """The section's code blocks by language (yaml, toml, python) and its text ("text")."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ")]
    blocks = {lang: body for lang, body in re.findall(r"```(\w+)\n(.*?)```", section, re.S)}
    assert {"yaml", "toml", "python"} <= set(blocks), f"the section's blocks changed: {list(blocks)}"
    assert DOC_ENDPOINT in blocks["yaml"] and DOC_FILES in blocks["yaml"], (
        "the inventory changed: adapt this test"
    )
    return {**blocks, "text": section}


@dataclass
class Deployment:
    root: Path
    inventory: Path
    files: Path
    broker: Broker

    def logs(self) -> str:
        return render_logs(self.root / "logs")

    def gateway_log(self) -> str:
        return self.broker.stderr_path.read_text(encoding="utf-8", errors="replace")


@contextmanager
def deployment(root: Path, *, curve: bool = False, dotenv: str = "") -> Iterator[Deployment]:
    """The page's files under ``root`` and ``nfgate serve -c gw.toml`` on random loopback
    ports; ``curve``: the inventory without ``zmq_auth: false``, the gateway with NorFab's
    broker key (which must be under ``root/__norfab__`` already); ``dotenv``: a ``.env``
    beside the inventory, which gives the workflow worker a ``token`` from it."""
    doc = _doc()
    (root / "logs").mkdir(exist_ok=True)
    files = root / "files"
    (files / "workflows").mkdir(parents=True)
    (files / "hello.txt").write_text("hello from nfgate\n", encoding="utf-8")
    (files / "workflows" / "check.yaml").write_text(WORKFLOW, encoding="utf-8")
    inventory_text = doc["yaml"].replace(DOC_FILES, str(files))
    config = doc["toml"]
    if curve:
        inventory_text = re.sub(r"\n *zmq_auth: false[^\n]*", "", inventory_text)
        m = re.search(r'curve_secret_key = "[^"]+"', doc["text"])
        assert m, "the section no longer names curve_secret_key: adapt this test"
        config += m.group(0) + "\n"
    if dotenv:
        (root / ".env").write_text(dotenv, encoding="utf-8")
        token = '  "workflow-*":\n    - token: "{{ env.NFGATE_NFAPI_TOKEN }}"\n'
        inventory_text = inventory_text.replace("\ntopology:", "\n" + token + "topology:", 1)
    inventory = root / "inventory.yaml"
    inventory.write_text(inventory_text, encoding="utf-8")
    (root / "gw.toml").write_text(config, encoding="utf-8")
    data = root / "nfgate-data"
    data.mkdir()
    broker = start_nfgate(
        root, [*random_bind_args(), "--data-dir", str(data), "-c", str(root / "gw.toml")], "nfgate"
    )
    try:
        # nfgate has read the inventory; only now is its port known, for NorFab's side.
        inventory.write_text(inventory_text.replace(DOC_ENDPOINT, broker.nfp), encoding="utf-8")
        yield Deployment(root=root, inventory=inventory, files=files, broker=broker)
    finally:
        died = broker.proc.poll()
        status = stop_process(broker.proc)
    assert died is None, f"nfgate died during the test (status {died}):\n{render_logs(root / 'logs')}"
    assert status == 0, f"nfgate did not exit 0 on SIGTERM (status {status}):\n{render_logs(root / 'logs')}"


def _spawn(cmd: list[str], d: Deployment, label: str, **kw: Any) -> subprocess.Popen[bytes]:
    """A child in a session of its own (so :func:`_kill_group` reaches its children),
    logging to ``logs/<label>.out`` and ``.err``, in the inventory's folder."""
    with (
        open(d.root / "logs" / f"{label}.out", "wb") as out,
        open(d.root / "logs" / f"{label}.err", "wb") as err,
    ):
        env = {**_env(), "COLUMNS": "200"}  # nfcli's tables are not cut at 80 columns
        return subprocess.Popen(
            cmd, stdout=out, stderr=err, cwd=d.root, env=env, start_new_session=True, **kw
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL whatever is left of the child's session (NFAPI's worker processes too)."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _nfapi(d: Deployment, label: str, calls: list[list[Any]], *, workers: bool = True) -> dict[str, Any]:
    """Run nfapi_peer.py's NFAPI client (``workers``: with the topology's workers) and
    return its answer; it waits until both workers are alive in ``show_workers``."""
    cmd = [sys.executable, str(PEER), "client", "--inventory", str(d.inventory), "--calls", json.dumps(calls)]
    cmd += ["--wait", json.dumps(sorted(WORKERS))] + ([] if workers else ["--no-workers"])
    proc = _spawn(cmd, d, label)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"NFAPI peer {label} still running after 90 s:\n{d.logs()}", pytrace=False)
    finally:
        _kill_group(proc)
    text = (d.root / "logs" / f"{label}.out").read_text(encoding="utf-8", errors="replace")
    answers = [line[len(RESULT_PREFIX) :] for line in text.splitlines() if line.startswith(RESULT_PREFIX)]
    assert proc.returncode == 0 and answers, f"NFAPI peer {label} exited {proc.returncode}:\n{d.logs()}"
    answer: dict[str, Any] = json.loads(answers[-1])
    assert not answer.get("ready", {}).get("timeout"), f"workers not up: {answer['ready']}\n{d.logs()}"
    return answer


def _ok(job: Any, worker: str, why: str) -> Any:
    """The result of ``worker`` in a ``run_job`` answer, which must have succeeded."""
    assert isinstance(job, dict) and worker in job, f"no result from {worker}: {job!r}\n{why}"
    entry = job[worker]
    assert entry.get("failed") is False and entry.get("errors") == [], f"{worker} failed: {entry!r}\n{why}"
    return entry["result"]


def _wait_for_workers_gone(d: Deployment, timeout: float = 20.0) -> None:
    """Until nfgate has logged, for each worker, that it left after it last registered."""
    last: dict[str, str] = {}
    for _ in range(int(timeout / 0.1)):
        last = {}
        for line in d.gateway_log().splitlines():
            m = re.search(r"worker (\S+) (registered|left)", line)
            if m:
                last[m.group(1)] = m.group(2)
        if all(last.get(name) == "left" for name in WORKERS):
            return
        time.sleep(0.1)
    pytest.fail(f"nfgate did not see NorFab's workers go: {last}\n{d.gateway_log()}", pytrace=False)


def _job(label: str, service: str, task: str, **kw: Any) -> list[Any]:
    """A ``run_job`` call for nfapi_peer.py (target "any", 20 s unless ``kw`` says)."""
    return [label, "run_job", {"service": service, "task": task, "workers": "any", "timeout": 20, **kw}]


def _mmi(label: str, task: str) -> list[Any]:
    return [label, "mmi", {"service": "mmi.service.broker", "task": task}]


SHOW_WORKERS = _mmi("workers", "show_workers")
LIST_FILES = _job("list", "filesharing", "list_files", kwargs={"url": "nf://"})
FETCH = ["fetch", "fetch_file", {"url": "nf://hello.txt", "timeout": 20}]


def _check_common(out: dict[str, Any], why: str) -> None:
    """What every deployment must give: both workers alive under their services, a
    listing of the files folder and a fetched file's text."""
    calls = out["calls"]
    rows = calls["workers"]["results"]
    assert {r["name"]: (r["service"], r["status"]) for r in rows} == {
        name: (service, "alive") for name, service in WORKERS.items()
    }, why
    assert sorted(_ok(calls["list"], "filesharing-worker-1", why)) == ["hello.txt", "workflows"], why
    assert calls["fetch"]["reply"]["status"] == "200", why
    assert calls["fetch"]["text"] == "hello from nfgate\n", why


# ------------------------------------------------------------------------------ tests


@pytest.mark.interop
@pytest.mark.timeout(120)
def test_nfapi_deployment_with_broker_false_runs_on_nfgate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NFAPI starts the topology's workers and no broker; its client and the workflow
    worker's own client do their work through nfgate; the page's nfapi.py runs as is.
    A secret in the inventory's ``.env`` reaches the worker, over the environment's."""
    monkeypatch.setenv("NFGATE_NFAPI_TOKEN", "from the environment")  # nfgate's and NFAPI's
    with deployment(tmp_path, dotenv='NFGATE_NFAPI_TOKEN="from .env"  # NorFab\'s secrets\n') as d:
        calls = [
            SHOW_WORKERS,
            _mmi("inventory", "show_broker_inventory"),
            _job("fs_inventory", "filesharing", "get_inventory"),
            _job("wf_inventory", "workflow", "get_inventory"),
            LIST_FILES,
            FETCH,
            _job("ping", "all", "echo", workers="all", kwargs={"ping": "pong"}),  # nfcli's workers ping
            _job("workflow", "workflow", "run", kwargs={"workflow": "nf://workflows/check.yaml"}, timeout=30),
        ]
        out = _nfapi(d, "nfapi", calls)
        why = d.logs()  # the answer is in them (nfapi.out)
        _check_common(out, why)
        calls_out = out["calls"]
        served = calls_out["inventory"]["results"]
        assert served["topology"] == {"broker": False, "workers": sorted(WORKERS)}, why
        # Each worker's inventory is what nfgate served it from the file (sid.service.broker).
        fs = _ok(calls_out["fs_inventory"], "filesharing-worker-1", why)
        assert (fs["service"], fs["base_dir"]) == ("filesharing", str(d.files)), why
        # The .env beside the inventory, as NFAPI loads it (values over the environment's).
        wf = _ok(calls_out["wf_inventory"], "workflow-worker-1", why)
        assert wf == {"service": "workflow", "token": "from .env"}, why
        # nfcli's "norfab workers ping": service "all" reaches every worker.
        assert set(calls_out["ping"]) == set(WORKERS), why
        for name in WORKERS:
            assert _ok(calls_out["ping"], name, why)["kwargs"] == {"ping": "pong"}, why
        # The workflow came from nf:// and its steps ran from the workflow worker's client.
        steps = _ok(calls_out["workflow"], "workflow-worker-1", why)["check"]
        assert sorted(_ok(steps["listing"], "filesharing-worker-1", why)) == ["hello.txt", "workflows"], why
        assert set(steps["ping"]) == set(WORKERS), why
        for name in WORKERS:
            echoed = _ok(steps["ping"], name, why)
            assert echoed["client_address"] == "workflow-worker-1-NFPClient", why
            assert echoed["kwargs"] == {"ping": "pong"}, why
        _wait_for_workers_gone(d)  # nf.destroy() stopped them: nfgate must not keep them

        # The page's nfapi.py, unchanged, next to the inventory.
        (d.root / "nfapi.py").write_text(_doc()["python"], encoding="utf-8")
        snippet = _spawn([sys.executable, "nfapi.py"], d, "nfapi-py")
        try:
            snippet.wait(timeout=60)
        finally:
            _kill_group(snippet)
        printed = (d.root / "logs" / "nfapi-py.out").read_text(encoding="utf-8", errors="replace")
        why = d.logs()
        assert snippet.returncode == 0, why
        assert "{'filesharing-worker-1': {'result': [" in printed and "'hello.txt'" in printed, why
        assert "'failed': False" in printed, why
        _wait_for_workers_gone(d)


NFCLI_COMMANDS = [
    "show norfab broker workers",
    "show filesharing files url nf://",
    "norfab workers ping",
    "workflow run workflow nf://workflows/check.yaml",
    "exit",
]


def _answers(printed: str, why: str) -> list[str]:
    """What nfcli printed for each command but the last: from the command's last echo
    (the shell echoes a line twice when its stdin is not a terminal) to the next one."""
    out = []
    for command, following in itertools.pairwise(NFCLI_COMMANDS):
        assert command in printed, why
        start = printed.rindex(command) + len(command)
        end = printed.find(following, start)
        assert end != -1, why
        out.append(printed[start:end])
    return out


@pytest.mark.interop
@pytest.mark.timeout(120)
def test_nfcli_workers_host_and_shell_on_nfgate(tmp_path: Path) -> None:
    """Two hosts' worth of nfcli: ``nfcli -w`` runs the workers, ``nfcli -c`` the shell
    (fed its commands on stdin), and a client-only NFAPI works against those workers."""
    with deployment(tmp_path) as d:
        host = _spawn([str(NFCLI), "-w", "-i", str(d.inventory)], d, "nfcli-w")
        try:
            out = _nfapi(d, "nfapi-client", [SHOW_WORKERS, LIST_FILES, FETCH], workers=False)
            _check_common(out, d.logs())

            shell = _spawn([str(NFCLI), "-c", "-i", str(d.inventory)], d, "nfcli-c", stdin=subprocess.PIPE)
            try:
                shell.communicate("\n".join(NFCLI_COMMANDS).encode() + b"\n", timeout=60)
            finally:
                _kill_group(shell)
            printed = (d.root / "logs" / "nfcli-c.out").read_text(encoding="utf-8", errors="replace")
            why = d.logs()
            assert shell.returncode == 0 and "Exiting..." in printed, why
            assert "Incorrect command" not in printed and "Traceback" not in printed, why
            table, files, pings, flow = _answers(printed, why)
            for name, service in WORKERS.items():
                assert re.search(rf"{name}\s+{service}\s+alive", table), why
            assert "hello.txt" in files and "workflows" in files, why
            assert all(f"{name}:" in pings for name in WORKERS) and "pong" in pings, why
            assert "client_address:" in flow and "workflow-worker-1-NFPClient" in flow, why

            host.send_signal(signal.SIGINT)  # Ctrl-C: NFAPI stops its workers, then exits
            try:
                host.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"nfcli -w still running 30 s after Ctrl-C:\n{d.logs()}", pytrace=False)
        finally:
            _kill_group(host)
        _wait_for_workers_gone(d)


@pytest.mark.interop
@pytest.mark.timeout(120)
def test_nfapi_over_curve_with_norfabs_own_broker_key(tmp_path: Path) -> None:
    """NorFab's default ``zmq_auth``: nfgate serves the key pair NorFab's broker made under
    the base_dir, and NFAPI's workers and client trust it from there, as they did NorFab's."""
    (tmp_path / "logs").mkdir()
    cmd = [sys.executable, str(PEER), "keys", "--base-dir", str(tmp_path)]
    keys = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=_env())
    assert keys.returncode == 0, keys.stderr
    public, _ = zmq.auth.load_certificate(tmp_path / "__norfab__/files/broker/public_keys/broker.key")
    with deployment(tmp_path, curve=True) as d:
        assert "zmq_auth" not in d.inventory.read_text(), "the inventory must keep NorFab's default"
        assert f"(CURVE, server public key {public.decode()})" in d.gateway_log(), d.gateway_log()
        out = _nfapi(d, "nfapi-curve", [SHOW_WORKERS, LIST_FILES, FETCH])
        _check_common(out, d.logs())
        _wait_for_workers_gone(d)


@pytest.mark.interop
@pytest.mark.timeout(60)
def test_a_dotenv_line_python_dotenv_cannot_parse_stops_serve_naming_it(tmp_path: Path) -> None:
    """python-dotenv (NFAPI's reader) skips a line it cannot parse, with a warning; nfgate
    stops instead, naming the file and line, rather than render a secret as empty."""
    (tmp_path / ".env").write_text("TOKEN=1\nPASSWORD secret\n", encoding="utf-8")
    (tmp_path / "inventory.yaml").write_text("workers: {}\n", encoding="utf-8")
    (tmp_path / "gw.toml").write_text('[edges.nfp]\ninventory = "inventory.yaml"\n', encoding="utf-8")
    cmd = [sys.executable, "-m", "nfgate", "serve", *random_bind_args(), "--data-dir", str(tmp_path / "data")]
    cmd += ["-c", str(tmp_path / "gw.toml")]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=tmp_path, env=_env())
    assert run.returncode == 2, run.stderr
    assert f"{tmp_path / '.env'}: line 2: not a NAME=value binding" in run.stderr, run.stderr
