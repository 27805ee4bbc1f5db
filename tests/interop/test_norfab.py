"""The real NorFab 0.25 ``NFPClient`` and ``NFPWorker`` against the broker under test.

The broker is nfgate (``python -m nfgate serve``) unless ``NFGATE_INTEROP_BROKER=norfab``
selects the real NorFab broker (see conftest.py). NorFab peers run in subprocesses
(norfab_peer.py); the DCP worker of ``test_nfp_job_served_by_dcp_worker`` is a raw DEALER
in a thread of this process, speaking nfgate's own DCP codec.

Expected against the real NorFab broker: ``test_worker_killed_mid_job_is_redispatched``
fails (NorFab does not redispatch the job of a dead worker: the client's GET poll gets
400 once the worker has expired, and ``run_job`` returns None) and
``test_nfp_job_served_by_dcp_worker`` is skipped (no DCP edge). Both are requirements on
nfgate.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
import zmq

from nfgate.codecs import dcp, nfp
from nfgate.codecs.dcp.messages import Ping, Pong, Reconnect, Registration, Reply, Request
from nfgate.codecs.nfp.messages import WORKER, Keepalive
from tests.ports import random_bind_args

from .conftest import Broker, ClientRun, Peers, broker_kind, start_nfgate, stop_process
from .thread_peer import ThreadPeer


def _entry(job: Any, worker: str, logs: str) -> dict[str, Any]:
    assert isinstance(job, dict), f"run_job returned {job!r}, expected a dict keyed by worker\n{logs}"
    assert worker in job, f"no result from {worker}: {job!r}\n{logs}"
    entry = job[worker]
    assert isinstance(entry, dict), f"{worker}: {entry!r}\n{logs}"
    return entry


def _assert_ok(entry: dict[str, Any], expected: Any, logs: str) -> None:
    assert entry.get("failed") is False, f"job failed: {entry!r}\n{logs}"
    assert entry.get("errors") == [], f"job has errors: {entry!r}\n{logs}"
    assert entry.get("result") == expected, f"result {entry.get('result')!r} != {expected!r}\n{logs}"


# ------------------------------------------------------------------------------ 1


@pytest.mark.interop
@pytest.mark.timeout(45)
def test_run_job_round_trip(peers: Peers) -> None:
    peers.start_worker("w1", service="echo")
    kwargs = {"msg": "hello", "n": 1, "nested": {"a": [1, 2, None], "u": "\u00e9\u4e2d"}}
    answer = peers.run_client(
        "c-roundtrip",
        service="echo",
        task="echo",
        workers="any",
        kwargs=kwargs,
        timeout=20,
        wait_workers=["w1"],
    )
    job = answer.get("job")
    logs = f"client answer: {answer!r}\n{peers.logs()}"
    _assert_ok(_entry(job, "w1", logs), kwargs, logs)
    assert set(job) == {"w1"}, logs


@pytest.mark.interop
@pytest.mark.timeout(60)
def test_a_job_its_client_gave_up_on_never_runs_on_a_worker_that_comes_later(peers: Peers) -> None:
    """NorFab's run_job(timeout=3) with no worker of the service gives up at 3 s and
    sends no DELETE; a worker that registers after that must not run the job (nfgate
    ends it 408 at the job's timeout; NorFab's broker refuses it at once)."""
    gave_up = peers.run_client(
        "c-gave-up",
        service="late",
        task="slow",
        workers="any",
        kwargs={"seconds": 0, "tag": "gave-up"},
        timeout=3,
    )
    entries = gave_up.get("job") or {}
    logs = f"client answer: {gave_up!r}\n{peers.logs()}"
    assert not any(isinstance(e, dict) and e.get("failed") is False for e in entries.values()), logs
    peers.start_worker("wl", service="late")
    # A job after it, on the same worker: once its result is back, the worker has been
    # registered long enough to have been given the first job if it was still queued.
    after = peers.run_client(
        "c-after",
        service="late",
        task="slow",
        workers="any",
        kwargs={"seconds": 0, "tag": "after"},
        timeout=20,
        wait_workers=["wl"],
    )
    logs = f"answers: {gave_up!r}, {after!r}\n{peers.logs()}"
    entry = _entry(after.get("job"), "wl", logs)
    _assert_ok(entry, {"worker": "wl", "seconds": 0, "kwargs": {"tag": "after"}}, logs)
    time.sleep(0.5)  # the worker runs jobs side by side: room for a first job's marker
    assert len(list(peers.marker_dir.glob("wl.*.started"))) == 1, logs


# ------------------------------------------------------------------------------ 2


@pytest.mark.interop
@pytest.mark.timeout(60)
def test_targets_all_list_and_bare_name(peers: Peers) -> None:
    peers.start_worker("w1", service="echo")
    peers.start_worker("w2", service="echo")

    cases: list[tuple[str, Any, set[str]]] = [
        ("c-all", "all", {"w1", "w2"}),
        ("c-list", ["w2"], {"w2"}),
        ("c-name", "w1", {"w1"}),
    ]
    for i, (client, target, expected) in enumerate(cases):
        kwargs = {"case": client, "i": i}
        answer = peers.run_client(
            client,
            service="echo",
            task="echo",
            workers=target,
            kwargs=kwargs,
            timeout=15,
            wait_workers=["w1", "w2"] if i == 0 else None,
        )
        job = answer.get("job")
        logs = f"target {target!r}, client answer: {answer!r}\n{peers.logs()}"
        assert isinstance(job, dict) and set(job) == expected, logs
        for worker in expected:
            _assert_ok(_entry(job, worker, logs), kwargs, logs)


# ------------------------------------------------------------------------------ 3


def _wait_for_marker(marker_dir: Path, timeout: float, worker: str = "*") -> Path | None:
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.05) + 1):
        found = sorted(marker_dir.glob(f"{worker}.*started")) if marker_dir.is_dir() else []
        if found:
            return found[0]
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return None


def _slow_job_running(
    peers: Peers, name: str, tag: str, seconds: int, timeout: int
) -> tuple[ClientRun, Path]:
    """A client running task ``slow`` on service echo (target any), once a worker has
    started it: the client run and the worker's start marker."""
    workers = sorted(peers.workers)
    run = peers.start_client(
        name,
        service="echo",
        task="slow",
        workers="any",
        kwargs={"seconds": seconds, "tag": tag},
        timeout=timeout,
        wait_workers=workers,
    )
    marker = _wait_for_marker(peers.marker_dir, timeout=20)
    assert marker is not None, f"no worker started the slow task\n{peers.logs()}"
    return run, marker


@pytest.mark.interop
@pytest.mark.timeout(60)
def test_worker_killed_mid_job_is_redispatched(peers: Peers) -> None:
    """SIGKILL the worker running a job: run_job must still succeed, served by the other.

    The broker learns of the death only by missed keepalives (NorFab: 2.5 s x 6 = 15 s),
    so the job may take ~20 s. Fails against the real NorFab broker (no redispatch).
    """
    peers.start_worker("w1", service="echo")
    peers.start_worker("w2", service="echo")
    run, marker = _slow_job_running(peers, "c-slow", "killed", seconds=3, timeout=35)
    victim = marker.name.split(".")[0]
    survivor = {"w1": "w2", "w2": "w1"}[victim]
    peers.kill_worker(victim)
    killed_at = time.monotonic()

    answer = peers.finish(run, timeout=45)
    elapsed = time.monotonic() - killed_at
    job = answer.get("job")
    logs = f"killed {victim} mid-job; client answer after {elapsed:.1f} s: {answer!r}\n{peers.logs()}"
    assert isinstance(job, dict) and job, f"run_job did not return a result\n{logs}"
    for name, entry in job.items():
        assert isinstance(entry, dict) and entry.get("failed") is False, f"{name} failed\n{logs}"
    served = [e["result"] for e in job.values() if isinstance(e.get("result"), dict)]
    assert {"worker": survivor, "seconds": 3, "kwargs": {"tag": "killed"}} in served, logs
    assert list(peers.marker_dir.glob(f"{survivor}.*.started")), f"{survivor} never started the job\n{logs}"


@pytest.mark.interop
@pytest.mark.timeout(60)
def test_worker_killed_mid_job_and_restarted_under_its_name_runs_it_again(peers: Peers) -> None:
    """SIGKILL the only worker mid-job and start it again at once, same name and
    base_dir (a service manager's restart). NorFab's worker keeps its jobs in a database
    under base_dir and drops a POST for a uuid it has, so the job must go out again
    under a uuid of its own. (NorFab's own broker loses the job.)"""
    peers.start_worker("w1", service="echo")
    run, _ = _slow_job_running(peers, "c-restart", "restarted", seconds=2, timeout=30)
    peers.kill_worker("w1")
    peers.start_worker("w1", service="echo")
    answer = peers.finish(run, timeout=45)
    logs = f"client answer: {answer!r}\n{peers.logs()}"
    _assert_ok(
        _entry(answer.get("job"), "w1", logs),
        {"worker": "w1", "seconds": 2, "kwargs": {"tag": "restarted"}},
        logs,
    )


@pytest.mark.interop
@pytest.mark.timeout(75)
def test_all_job_whose_worker_is_killed_and_restarted_gets_every_workers_result(peers: Peers) -> None:
    """Target ``all`` on two workers; one is SIGKILLed mid-job and started again under
    its name. The 202 named both, so the client's result must hold both: the killed
    worker's part waits for its name and runs again on the restarted worker."""
    peers.start_worker("w1", service="echo")
    peers.start_worker("w2", service="echo")
    run = peers.start_client(
        "c-all-restart",
        service="echo",
        task="slow",
        workers="all",
        kwargs={"seconds": 3, "tag": "all-restarted"},
        timeout=45,
        wait_workers=["w1", "w2"],
    )
    assert _wait_for_marker(peers.marker_dir, timeout=20, worker="w1"), f"w1 never started\n{peers.logs()}"
    peers.kill_worker("w1")
    peers.start_worker("w1", service="echo")
    answer = peers.finish(run, timeout=55)
    logs = f"client answer: {answer!r}\n{peers.logs()}"
    for name in ("w1", "w2"):
        expected = {"worker": name, "seconds": 3, "kwargs": {"tag": "all-restarted"}}
        _assert_ok(_entry(answer.get("job"), name, logs), expected, logs)


# ------------------------------------------------------------------------------ 4


class DcpEchoWorker(ThreadPeer):
    """A raw DCP worker (specs/dcp.md) on a DEALER, answering every REQUEST with its data.

    Runs in a thread that owns the socket; stops on ``stop`` or after ``lifetime`` seconds.
    """

    thread_name = "dcp-echo-worker"

    def __init__(self, endpoint: str, service: bytes, identity: bytes, lifetime: float = 55.0) -> None:
        super().__init__(endpoint, lifetime)
        self.service = service
        self.identity = identity
        self.registered = threading.Event()
        self.requests: list[Request] = []

    def _send(self, sock: zmq.Socket[bytes], message: Any) -> None:
        sock.send_multipart(dcp.encode(message))

    def _run(self) -> None:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, self.identity)
        try:
            sock.connect(self.endpoint)
            self._send(sock, Registration(service=self.service))
            last_sent = time.monotonic()
            deadline = last_sent + self.lifetime
            for _ in range(int(self.lifetime / 0.1) + 10):
                if self.stop.is_set() or time.monotonic() > deadline:
                    break
                if sock.poll(100):
                    message = dcp.decode(sock.recv_multipart())
                    if isinstance(message, Registration):
                        if message.service == self.service:
                            self.registered.set()  # "the broker will confirm it by responding with the same message"
                    elif isinstance(message, Request):
                        self.requests.append(message)
                        self._send(
                            sock, Reply(client=message.client, metadata=message.metadata, data=message.data)
                        )
                        last_sent = time.monotonic()
                    elif isinstance(message, Reconnect):
                        self._send(sock, Registration(service=self.service))
                        last_sent = time.monotonic()
                    elif not isinstance(message, Pong):
                        self.errors.append(f"unexpected message {message!r}")
                if time.monotonic() - last_sent >= 1.0:  # idle: heartbeat
                    self._send(sock, Ping())
                    last_sent = time.monotonic()
        except Exception:
            self.errors.append(traceback.format_exc())
        finally:
            sock.close(linger=0)


@pytest.mark.interop
@pytest.mark.timeout(45)
def test_nfp_job_served_by_dcp_worker(broker: Broker, peers: Peers) -> None:
    if broker.kind == "norfab":
        pytest.skip("the real NorFab broker has no DCP edge")
    assert broker.dcp, f"nfgate announced no dcp edge: {broker.edges}"
    with DcpEchoWorker(broker.dcp, b"dcpecho", b"dcp-echo-1") as worker:
        assert worker.registered.wait(10), (
            f"no REGISTRATION echo from nfgate: {worker.errors}\n{peers.logs()}"
        )
        answer = peers.run_client(
            "c-dcp", service="dcpecho", task="anything", workers="any", kwargs={"x": 1}, timeout=20
        )
    job = answer.get("job")
    logs = f"client answer: {answer!r}\nDCP requests seen: {worker.requests!r}\n{peers.logs()}"
    assert not worker.errors, f"DCP worker errors: {worker.errors}\n{logs}"
    assert worker.requests, f"the DCP worker got no REQUEST\n{logs}"
    assert isinstance(job, dict) and len(job) == 1, f"expected one worker's result\n{logs}"
    (entry,) = job.values()
    assert isinstance(entry, dict) and entry.get("failed") is False, logs
    assert entry.get("errors") == [], logs
    result = entry.get("result")
    # The DCP worker echoed NorFab's POST body, {"task","kwargs","args","timeout"}, as JSON.
    assert isinstance(result, dict), f"result is not the JSON body: {result!r}\n{logs}"
    assert result.get("task") == "anything", logs
    assert result.get("kwargs") == {"x": 1}, logs


# ------------------------------------------------------------------------------ 5


@pytest.mark.interop
@pytest.mark.timeout(45)
def test_mmi_show_workers_lists_connected_workers(peers: Peers) -> None:
    peers.start_worker("w1", service="echo")
    peers.start_worker("w2", service="echo")
    answer = peers.run_client("c-mmi", wait_workers=["w1", "w2"], mmi="show_workers", process_timeout=40)
    mmi = answer.get("mmi")
    logs = f"client answer: {answer!r}\n{peers.logs()}"
    assert isinstance(mmi, dict) and mmi.get("status") == "200", logs
    listed = mmi.get("results")
    assert isinstance(listed, list) and all(isinstance(w, dict) for w in listed), logs
    assert {w.get("name") for w in listed} == {"w1", "w2"}, logs
    assert {w.get("service") for w in listed} == {"echo"}, logs


@pytest.mark.interop
@pytest.mark.timeout(60)
def test_pseudo_service_all_asks_the_workers_of_every_service(peers: Peers) -> None:
    """What nfcli's ``show norfab workers`` and nfweb's monitoring send: NorFab's
    pseudo-service ``all`` with task ``get_stats``, to every worker, any service."""
    peers.start_worker("w1", service="echo")
    peers.start_worker("w2", service="other")
    for client, target in (("c-pseudo-all", "all"), ("c-pseudo-any", "any"), ("c-pseudo-list", ["w2"])):
        answer = peers.run_client(
            client, service="all", task="get_stats", workers=target, timeout=15, wait_workers=["w1", "w2"]
        )
        job = answer.get("job")
        logs = f"target {target!r}, client answer: {answer!r}\n{peers.logs()}"
        expected = {"w2"} if isinstance(target, list) else {"w1", "w2"}  # any: one per service
        assert isinstance(job, dict) and set(job) == expected, logs
        for worker in expected:
            entry = _entry(job, worker, logs)
            assert entry.get("failed") is False and "process" in entry.get("result", {}), logs


# ------------------------------------------------------------------------------ CURVE


@pytest.mark.interop
@pytest.mark.timeout(90)
@pytest.mark.parametrize("broker", ["curve"], indirect=True)
def test_run_job_over_curve_with_norfabs_default_zmq_auth(broker: Broker, peers: Peers) -> None:
    """NorFab's default (zmq_auth on) against nfgate's NFP edge running CURVE with a key
    the peers know from their inventory's broker.shared_key; a plain peer gets nowhere."""
    assert broker.curve_key
    peers.start_worker("cw1", service="echo")
    kwargs = {"secret": "over curve"}
    answer = peers.run_client(
        "c-curve", service="echo", task="echo", workers="any", kwargs=kwargs, timeout=20, wait_workers=["cw1"]
    )
    logs = f"client answer: {answer!r}\n{peers.logs()}"
    _assert_ok(_entry(answer.get("job"), "cw1", logs), kwargs, logs)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        plain = ctx.socket(zmq.DEALER)
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(broker.nfp)
        plain.send_multipart(nfp.encode(Keepalive(header=WORKER, service="echo"), "spec"))
        assert plain.poll(500) == 0, "a peer without CURVE must not be answered"
    finally:
        ctx.destroy(linger=0)


# ------------------------------------------------------------------------------ 6


@pytest.mark.interop
@pytest.mark.timeout(60)
@pytest.mark.parametrize("broker", ["files"], indirect=True)
def test_fetch_file_from_norfabs_filesharing_worker(broker: Broker, peers: Peers) -> None:
    """NorFab's own FileSharingWorker, its inventory served by sid.service.broker, and
    the real client's fetch_file: file_details to every worker (target all), then the
    file in chunks, a 3 MB binary byte for byte, a missing file 404."""
    assert broker.shared is not None
    peers.start_worker("filesharing-1", kind="filesharing")
    urls = ["nf://templates/intf.j2", "nf://big.bin", "nf://missing.txt"]
    answer = peers.run_client("c-fetch", fetch=urls, wait_workers=["filesharing-1"], timeout=20)
    logs = f"client answer: {answer!r}\n{peers.logs()}"
    fetched = answer.get("fetch")
    assert isinstance(fetched, list) and len(fetched) == 3, logs
    template, big, missing = fetched
    for result, name in ((template, "templates/intf.j2"), (big, "big.bin")):
        assert result.get("status") == "200" and result.get("error") is None, logs
        assert Path(result["content"]).read_bytes() == (broker.shared / name).read_bytes(), logs
    assert missing.get("status") == "404", logs


# ------------------------------------------------------------------------------ 7


@pytest.mark.interop
@pytest.mark.timeout(90)
def test_gateway_killed_mid_job_the_norfab_client_still_gets_its_result(interop_dir: Path) -> None:
    """kill -9 of nfgate while a NorFab worker runs a job; the worker finishes while no
    gateway runs; a new nfgate on the same data dir and port. The job was acknowledged
    (202), so it is dispatched again, to a worker that already holds it: NorFab's worker
    drops a POST for a uuid it knows, and its result_ready EVENT went to the dead
    gateway. The client's run_job must still return the result (the job goes out again
    under a uuid of its own)."""
    if broker_kind() != "nfgate":
        pytest.skip("kill -9 and restart test nfgate's job store; NorFab's broker keeps no jobs")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [
        "--bind",
        f"nfp=tcp://127.0.0.1:{port}",
        *random_bind_args(but="nfp"),
        "--data-dir",
        str(interop_dir / "nfgate-data"),
    ]
    first = start_nfgate(interop_dir, args, "nfgate-first")
    peers = Peers(first, interop_dir)
    try:
        peers.start_worker("w1", service="echo")
        run, _ = _slow_job_running(peers, "c-durable", "kill-9", seconds=2, timeout=40)
        first.proc.kill()
        first.proc.wait(timeout=10)
        time.sleep(3)  # the 2 s job ends while no gateway runs
        second = start_nfgate(interop_dir, args, "nfgate-second")
        try:
            answer = peers.finish(run, timeout=60)
        finally:
            status = stop_process(second.proc)
        logs = f"client answer: {answer!r}\n{peers.logs()}"
        _assert_ok(
            _entry(answer.get("job"), "w1", logs),
            {"worker": "w1", "seconds": 2, "kwargs": {"tag": "kill-9"}},
            logs,
        )
        assert status == 0, f"the restarted nfgate did not exit 0 on SIGTERM\n{logs}"
    finally:
        peers.close()
        if first.proc.poll() is None:
            first.proc.kill()


@pytest.mark.interop
@pytest.mark.timeout(90)
def test_sigterm_mid_job_drains_and_the_norfab_client_gets_its_result(interop_dir: Path) -> None:
    """SIGTERM to nfgate while a NorFab worker runs a 2 s job that then asks another
    service through the worker's own client: the gateway drains (new requests refused,
    the job at the worker waited for), the worker's own request is still served, NorFab's
    client gets the whole result relayed during the drain, and then nfgate exits 0."""
    if broker_kind() != "nfgate":
        pytest.skip("the drain is nfgate's; NorFab's broker stops at once")
    args = [*random_bind_args(), "--data-dir", str(interop_dir / "nfgate-data")]
    gateway = start_nfgate(interop_dir, args, "nfgate-drain")
    peers = Peers(gateway, interop_dir)
    try:
        peers.start_worker("w1", service="chain")
        peers.start_worker("w2", service="lookup")
        run = peers.start_client(
            "c-drain",
            service="chain",
            task="chain",
            workers="any",
            kwargs={"seconds": 2, "then": "lookup"},
            timeout=30,
            wait_workers=["w1", "w2"],
        )
        assert _wait_for_marker(peers.marker_dir, timeout=20) is not None, peers.logs()
        gateway.proc.send_signal(signal.SIGTERM)
        try:
            status: int | None = gateway.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            status = None
        answer = peers.finish(run, timeout=30)
        log = gateway.stderr_path.read_text(encoding="utf-8", errors="replace")
        logs = f"client answer: {answer!r}\nnfgate exit {status}:\n{log}\n{peers.logs()}"
        entry = _entry(answer.get("job"), "w1", logs)
        assert entry.get("failed") is False, logs
        result = entry.get("result")
        assert isinstance(result, dict) and result.get("worker") == "w1", logs
        # Refused as a new client request, the worker's own request would be None here.
        _assert_ok(_entry(result.get("sub"), "w2", logs), {"asked_by": "w1"}, logs)
        assert status == 0, logs
        assert "for 1 request(s) at workers" in log and "drained in" in log, logs
    finally:
        peers.close()
        if gateway.proc.poll() is None:
            gateway.proc.kill()
            gateway.proc.wait(timeout=10)


# ------------------------------------------------------------------------------ 12


@pytest.mark.interop
@pytest.mark.timeout(90)
def test_a_client_away_when_its_job_asked_for_input_learns_it_by_polling(peers: Peers) -> None:
    # The worker's question (an EVENT) goes out while the client is gone. Back under the
    # same name, the client polls with GET; the broker passes the GET on to the worker,
    # which answers 102 with the question (NorFab's broker does the same). Before, nfgate
    # answered 300 from its store and the worker's question timed out.
    peers.start_worker("w1", service="echo")
    submitted = peers.run_client(
        "c-away",
        service="echo",
        task="ask",
        submit=True,
        workers="any",
        kwargs={"question": "go on?", "delay": 2, "wait": 30},
        timeout=60,
        wait_workers=["w1"],
    )
    logs = f"first client: {submitted!r}\n{peers.logs()}"
    assert submitted.get("uuid"), logs
    time.sleep(3)  # the question goes out while no client is there
    answer = peers.run_client("c-away", answer_job=submitted["uuid"], timeout=30)
    logs = f"client answer: {answer!r}\n{peers.logs()}"
    _assert_ok(_entry(answer.get("job"), "w1", logs), {"answer": "yes"}, logs)
