"""Fixtures for the NorFab interop tests: the broker under test and real NorFab peers.

``broker`` starts the broker as a subprocess and yields its endpoints:

* default: the product, ``python -m nfgate serve --bind nfp=tcp://127.0.0.1:0 --bind
  dcp=tcp://127.0.0.1:0 --data-dir <tmp>``;
* ``NFGATE_INTEROP_BROKER=norfab``: the real NorFab 0.25 broker (``norfab_broker.py``),
  to validate the harness against the reference. It has no DCP edge.

Both announce their edges on stderr (``nfgate: <edge> edge (<protocol>) listening on
tcp://127.0.0.1:<port>``, then ``nfgate: ready``); the fixture parses those lines, stops
the broker with SIGTERM and asserts exit status 0 (SIGKILL after a bounded wait).

``peers`` starts NorFab workers and clients (``norfab_peer.py``) as subprocesses with
their output in ``tmp_path/logs``; it kills whatever is left at teardown.
``peers.logs()`` renders every log file, for assertion messages.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.ports import random_bind_args

HERE = Path(__file__).resolve().parent
PEER = HERE / "norfab_peer.py"
NORFAB_BROKER = HERE / "norfab_broker.py"

ENV_VAR = "NFGATE_INTEROP_BROKER"
READY_TIMEOUT = 20.0  # broker start-up: edges + "ready"
STOP_TIMEOUT = 10.0  # SIGTERM -> exit before SIGKILL
WORKER_START_TIMEOUT = 20.0
LISTENING = re.compile(r"nfgate: (?P<edge>\S+) edge \((?P<protocol>[^)]+)\) listening on (?P<url>tcp://\S+)")
READY = re.compile(r"nfgate: ready\b")  # "nfgate: ready" (nfgate adds " (job store <dir>)")
RESULT_PREFIX = "NORFAB_PEER_RESULT "  # norfab_peer.RESULT_PREFIX


def broker_kind() -> str:
    kind = os.environ.get(ENV_VAR, "").strip().lower() or "nfgate"
    if kind not in ("nfgate", "norfab"):
        raise pytest.UsageError(f"{ENV_VAR} must be 'nfgate' (default) or 'norfab', not {kind!r}")
    return kind


def _tail(path: Path, limit: int = 6000) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return f"<unreadable: {e}>"
    return text if len(text) <= limit else "...\n" + text[-limit:]


def render_logs(log_dir: Path, limit: int = 6000) -> str:
    if not log_dir.is_dir():
        return "(no logs)"
    parts = []
    for path in sorted(log_dir.iterdir()):
        if path.is_file():
            parts.append(f"----- {path.name} -----\n{_tail(path, limit)}")
    return "\n".join(parts) or "(no logs)"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def stop_process(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> int | None:
    """SIGTERM, bounded wait, then SIGKILL. Returns the exit status after SIGTERM, or None if killed."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
        return None


# ------------------------------------------------------------------------------ broker


@dataclass
class Broker:
    kind: str  # "nfgate" or "norfab"
    nfp: str  # tcp://127.0.0.1:<port>
    dcp: str | None  # None for the NorFab broker
    proc: subprocess.Popen[bytes]
    stderr_path: Path
    edges: dict[str, str] = field(default_factory=dict)
    curve_key: str = ""  # the NFP edge's CURVE public key (Z85) when it runs CURVE
    shared: Path | None = None  # the filesharing workers' base_dir, when the broker serves their inventory


def _wait_ready(proc: subprocess.Popen[bytes], stderr_path: Path, timeout: float) -> dict[str, str]:
    edges: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.05) + 1):
        text = stderr_path.read_text(encoding="utf-8", errors="replace") if stderr_path.exists() else ""
        for line in text.splitlines():
            m = LISTENING.search(line)
            if m:
                edges[m["edge"]] = m["url"]
        if any(READY.search(line) for line in text.splitlines()):
            return edges
        if proc.poll() is not None:
            raise RuntimeError(
                f"broker exited with status {proc.returncode} before 'ready':\n{_tail(stderr_path)}"
            )
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise RuntimeError(f"broker not ready within {timeout} s:\n{_tail(stderr_path)}")


@pytest.fixture
def interop_dir(tmp_path: Path) -> Path:
    (tmp_path / "logs").mkdir(exist_ok=True)
    return tmp_path


def _curve_config(root: Path) -> tuple[Path, str]:
    """A config putting the NFP edge under CURVE with a fresh key pair; (file, public key)."""
    import zmq.auth

    keys = root / "keys"
    keys.mkdir()
    public_file, secret_file = zmq.auth.create_certificates(keys, "broker")
    public, _ = zmq.auth.load_certificate(public_file)
    config = root / "curve.toml"
    config.write_text(f'[edges.nfp]\ncurve_secret_key = "{secret_file}"\n')
    return config, public.decode()


def _files_config(root: Path) -> tuple[Path, Path]:
    """A config whose inventory (sid.service.broker) points NorFab's filesharing workers at
    a folder of shared files: a template and 3 MB of random bytes; (file, folder)."""
    shared = root / "shared"
    (shared / "templates").mkdir(parents=True)
    (shared / "templates" / "intf.j2").write_text("interface {{ name }}\n description {{ text }}\n")
    (shared / "big.bin").write_bytes(os.urandom(3_000_000))  # several of NorFab's 256 kB chunks
    inventory = root / "inventory.yaml"
    inventory.write_text(
        f"workers:\n  filesharing-*:\n    - service: filesharing\n      base_dir: {shared}\n"
    )
    config = root / "files.toml"
    config.write_text(f'[edges.nfp]\ninventory = "{inventory}"\n')
    return config, shared


def launch(cmd: list[str], root: Path, label: str) -> subprocess.Popen[bytes]:
    """Start a broker process logging to ``root/logs/<label>.out`` and ``.err``."""
    log_dir = root / "logs"
    with open(log_dir / f"{label}.out", "wb") as out, open(log_dir / f"{label}.err", "wb") as err:
        # cwd outside the repo: `python -m` puts the cwd first on sys.path, and the source
        # tree's nfgate/ would hide the editable install's nfgate.codecs mapping.
        return subprocess.Popen(cmd, stdout=out, stderr=err, cwd=root, env=_env())


def start_nfgate(root: Path, args: list[str], label: str) -> Broker:
    """``nfgate serve ARGS`` started and ready (its NFP edge is the Broker's ``nfp``)."""
    proc = launch([sys.executable, "-m", "nfgate", "serve", *args], root, label)
    stderr_path = root / "logs" / f"{label}.err"
    try:
        edges = _wait_ready(proc, stderr_path, READY_TIMEOUT)
    except RuntimeError as e:
        stop_process(proc)
        pytest.fail(f"nfgate did not start: {e}", pytrace=False)
    return Broker(kind="nfgate", nfp=edges["nfp"], dcp=edges.get("dcp"), proc=proc, stderr_path=stderr_path)


@pytest.fixture
def broker(interop_dir: Path, request: pytest.FixtureRequest) -> Iterator[Broker]:
    """The broker under test; ``indirect`` param "curve" runs nfgate's NFP edge with CURVE,
    "files" gives it an inventory for NorFab's filesharing workers."""
    kind = broker_kind()
    curve = getattr(request, "param", None) == "curve"
    files = getattr(request, "param", None) == "files"
    curve_key = ""
    shared: Path | None = None
    log_dir = interop_dir / "logs"
    stderr_path = log_dir / f"broker-{kind}.err"
    if curve and kind != "nfgate":
        pytest.skip("the CURVE test runs nfgate with keys it is given; NorFab's broker makes its own")
    if files and kind != "nfgate":
        pytest.skip("NorFab's broker reads its inventory from its own base_dir, not from a file given")
    if kind == "nfgate":
        data_dir = interop_dir / "nfgate-data"
        data_dir.mkdir()
        cmd = [
            sys.executable,
            "-m",
            "nfgate",
            "serve",
            *random_bind_args(),
            "--data-dir",
            str(data_dir),
        ]
        if curve:
            config, curve_key = _curve_config(interop_dir)
            cmd += ["--config", str(config)]
        if files:
            config, shared = _files_config(interop_dir)
            cmd += ["--config", str(config)]
    else:
        cmd = [sys.executable, str(NORFAB_BROKER), "--base-dir", str(interop_dir / "norfab-broker")]
    proc = launch(cmd, interop_dir, f"broker-{kind}")
    try:
        try:
            edges = _wait_ready(proc, stderr_path, READY_TIMEOUT)
        except RuntimeError as e:
            pytest.fail(f"{kind} broker did not start: {e}", pytrace=False)
        if "nfp" not in edges:
            pytest.fail(f"{kind} broker announced no nfp edge: {edges}\n{_tail(stderr_path)}", pytrace=False)
        if kind == "nfgate" and "dcp" not in edges:
            pytest.fail(f"nfgate announced no dcp edge: {edges}\n{_tail(stderr_path)}", pytrace=False)
        yield Broker(
            kind=kind,
            nfp=edges["nfp"],
            dcp=edges.get("dcp"),
            proc=proc,
            stderr_path=stderr_path,
            edges=edges,
            curve_key=curve_key,
            shared=shared,
        )
    finally:
        died = proc.poll()  # not None: it exited by itself during the test
        status = stop_process(proc)
    if died is not None:
        pytest.fail(
            f"{kind} broker died during the test (status {died}):\n{_tail(stderr_path)}", pytrace=False
        )
    if status != 0:
        pytest.fail(
            f"{kind} broker did not exit 0 on SIGTERM (status {status}; None = needed SIGKILL):\n"
            f"{_tail(stderr_path)}",
            pytrace=False,
        )


# ------------------------------------------------------------------------------ peers


@dataclass
class ClientRun:
    proc: subprocess.Popen[bytes]
    name: str
    stdout_path: Path


class Peers:
    """NorFab workers and clients, each in its own process, logging to ``<tmp>/logs``."""

    def __init__(self, broker: Broker, root: Path) -> None:
        self.broker = broker
        self.root = root
        self.base_dir = root / "norfab"  # the NorFab inventory base_dir shared by all peers
        self.log_dir = root / "logs"
        self.marker_dir = self.base_dir / "markers"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.clients: list[subprocess.Popen[bytes]] = []
        self.python = sys.executable  # the interpreter (and so the NorFab) the peers run on

    def logs(self) -> str:
        return render_logs(self.log_dir)

    def _spawn(self, args: list[str], label: str) -> tuple[subprocess.Popen[bytes], Path]:
        if self.broker.curve_key:  # NorFab's zmq_auth on, trusting the key in its inventory
            args = [*args, f"--shared-key={self.broker.curve_key}"]  # a Z85 key may start with "-"
        stdout_path = self.log_dir / f"{label}.out"
        with open(stdout_path, "wb") as out, open(self.log_dir / f"{label}.err", "wb") as err:
            proc = subprocess.Popen(
                [self.python, str(PEER), *args],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                env=_env(),
            )
        return proc, stdout_path

    def start_worker(
        self, name: str, service: str = "echo", kind: str = "interop"
    ) -> subprocess.Popen[bytes]:
        """Start a NorFab worker (``kind`` "filesharing": NorFab's FileSharingWorker) and
        wait (bounded) until it is about to register."""
        proc, stdout_path = self._spawn(
            [
                "worker",
                "--kind",
                kind,
                "--name",
                name,
                "--service",
                service,
                "--endpoint",
                self.broker.nfp,
                "--base-dir",
                str(self.base_dir),
            ],
            f"worker-{name}",
        )
        self.workers[name] = proc
        want = f"norfab_peer: worker {name} working"
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        for _ in range(int(WORKER_START_TIMEOUT / 0.05) + 1):
            if want in stdout_path.read_text(encoding="utf-8", errors="replace"):
                return proc
            if proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        pytest.fail(
            f"NorFab worker {name} did not start (status {proc.poll()}):\n{self.logs()}", pytrace=False
        )

    def start_client(
        self,
        name: str,
        *,
        service: str | None = None,
        services: list[str] | None = None,
        task: str | None = None,
        workers: Any = "all",
        kwargs: dict[str, Any] | None = None,
        timeout: int = 20,
        wait_workers: list[str] | None = None,
        mmi: str | None = None,
        fetch: list[str] | None = None,
        submit: bool = False,
        answer_job: str | None = None,
    ) -> ClientRun:
        """Start a NorFab client process; collect its answer with :meth:`finish`.
        ``services``: a job for each, in turn, by the same client (the answer's ``jobs``);
        ``submit``: submit the job and leave (the answer has its ``uuid``);
        ``answer_job``: answer that job's input request, then wait for its result."""
        args = ["client", "--name", name, "--endpoint", self.broker.nfp, "--base-dir", str(self.base_dir)]
        if answer_job:
            args += ["--answer-job", answer_job, "--timeout", str(timeout)]
        if wait_workers:
            args += ["--wait-workers", json.dumps(wait_workers)]
        if mmi:
            args += ["--mmi", mmi]
        if fetch:
            args += ["--fetch", json.dumps(fetch), "--timeout", str(timeout)]
        if service:
            args += [
                "--submit" if submit else "--service",
                service,
                "--task",
                task or "",
                "--workers",
                json.dumps(workers),
                "--kwargs",
                json.dumps(kwargs or {}),
                "--timeout",
                str(timeout),
            ]
        if services:
            args += [
                "--services",
                json.dumps(services),
                "--task",
                task or "",
                "--workers",
                json.dumps(workers),
            ]
            args += ["--kwargs", json.dumps(kwargs or {}), "--timeout", str(timeout)]
        proc, stdout_path = self._spawn(args, f"client-{name}")
        self.clients.append(proc)
        return ClientRun(proc=proc, name=name, stdout_path=stdout_path)

    def finish(self, run: ClientRun, timeout: float) -> dict[str, Any]:
        """Wait (bounded) for a client process and return its JSON answer."""
        try:
            run.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            run.proc.communicate(timeout=10)
            pytest.fail(
                f"NorFab client {run.name} still running after {timeout} s:\n{self.logs()}", pytrace=False
            )
        lines = run.stdout_path.read_text(encoding="utf-8", errors="replace").splitlines()
        answers = [line[len(RESULT_PREFIX) :] for line in lines if line.startswith(RESULT_PREFIX)]
        if run.proc.returncode != 0 or not answers:
            pytest.fail(
                f"NorFab client {run.name} exited {run.proc.returncode} without an answer:\n{self.logs()}",
                pytrace=False,
            )
        answer: dict[str, Any] = json.loads(answers[-1])
        return answer

    def run_client(self, name: str, *, process_timeout: float | None = None, **kw: Any) -> dict[str, Any]:
        run = self.start_client(name, **kw)
        budget = process_timeout or (kw.get("timeout", 20) + 25.0)  # + start-up, worker wait, MMI
        return self.finish(run, budget)

    def kill_worker(self, name: str) -> None:
        proc = self.workers[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def close(self) -> None:
        for proc in self.clients:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        running = [proc for proc in self.workers.values() if proc.poll() is None]
        for proc in running:  # SIGTERM them all first: each takes ~1 s to wind down
            proc.send_signal(signal.SIGTERM)
        for proc in running:
            stop_process(proc)


@pytest.fixture
def peers(broker: Broker, interop_dir: Path) -> Iterator[Peers]:
    p = Peers(broker, interop_dir)
    try:
        yield p
    finally:
        p.close()
