"""The cross-protocol matrix: every client protocol against every worker protocol through
one ``nfgate serve``, bodies checked byte for byte; and a worker killed mid-request in
each worker protocol, its request finished by a worker of another protocol."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator

import pytest
import zmq

from nfgate.edges.kinds import KINDS
from tests.ports import random_bind_args
from tests.serving import Server, start, stop

from .peers import CLIENTS, WORKERS, Client, EchoWorker, NfpClient, Unanswered

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

CALL_S = 10.0  # longest one request may take (re-dispatch after a kill included)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One gateway for the module, every edge on a random port, 100 ms x 3 liveness."""
    root = tmp_path_factory.mktemp("matrix")
    config = root / "nfgate.toml"
    # sada-server has no heartbeat (the channels PING it): its config refuses the keys.
    tables = [
        f"[edges.{kind}]\nheartbeat_ms = 100\nliveness = 3\n"
        for kind, spec in KINDS.items()
        if spec.heartbeat
    ]
    config.write_text("[routing]\nqueue_expiry_ms = 5000\n" + "\n".join(tables))
    server = start("--config", str(config), "--data-dir", str(root / "data"), *random_bind_args())
    yield server
    assert stop(server) == 0, "".join(server.lines[-20:])


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


def endpoint(server: Server, edge: str) -> str:
    return server.endpoints[edge]


def client_for(server: Server, ctx: zmq.Context[zmq.Socket[bytes]], name: str) -> Client:
    cls = CLIENTS[name]
    return cls(ctx, endpoint(server, cls.edge))


def worker_for(server: Server, ctx: zmq.Context[zmq.Socket[bytes]], name: str, service: str) -> EchoWorker:
    cls = WORKERS[name]
    return cls(ctx, endpoint(server, cls.edge), service).start()


def registered(server: Server, ctx: zmq.Context[zmq.Socket[bytes]], service: str) -> int:
    """How many workers the gateway lists for ``service`` (mmi.service.broker show_workers)."""
    body = json.dumps({"task": "show_workers", "kwargs": {"service": service}, "args": []}).encode()
    rows = json.loads(NfpClient(ctx, endpoint(server, "nfp")).call("mmi.service.broker", body, 3.0))
    return sum(1 for row in rows if row.get("service") == service)


def wait_for(predicate: object, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def body_for(client: str, worker: str) -> bytes:
    # JSON text (NorFab clients see the worker's bytes parsed) with non-ASCII inside.
    return json.dumps({"from": client, "to": worker, "blob": os.urandom(16).hex(), "é": "ü"}).encode()


def expected(client: Client, body: bytes) -> bytes:
    return body if client.exact else json.dumps(json.loads(body), sort_keys=True).encode()


@pytest.mark.parametrize(("client_name", "worker_name"), list(itertools.product(CLIENTS, WORKERS)))
def test_request_crosses_protocols_byte_for_byte(
    gateway: Server, ctx: zmq.Context[zmq.Socket[bytes]], client_name: str, worker_name: str
) -> None:
    service = f"echo-{client_name}-{worker_name}"
    worker = worker_for(gateway, ctx, worker_name, service)
    try:
        wait_for(lambda: registered(gateway, ctx, service) == 1, f"{worker_name} worker to register")
        client = client_for(gateway, ctx, client_name)
        for _ in range(3):
            body = body_for(client_name, worker_name)
            assert client.call(service, body, CALL_S) == expected(client, body)
        assert worker.received == 3 and worker.error is None
    finally:
        worker.stop()


def _other(worker_name: str) -> str:
    return next(name for name in WORKERS if name != worker_name)


@pytest.mark.parametrize("worker_name", list(WORKERS))
def test_worker_killed_mid_request_is_replaced_by_another_protocol(
    gateway: Server, ctx: zmq.Context[zmq.Socket[bytes]], worker_name: str
) -> None:
    service = f"failover-{worker_name}-{uuidlib.uuid4().hex[:6]}"
    doomed = worker_for(gateway, ctx, worker_name, service)
    doomed.hang = True
    rescuer: EchoWorker | None = None
    try:
        wait_for(lambda: registered(gateway, ctx, service) == 1, "the first worker to register")
        client = client_for(gateway, ctx, "nfp")
        body = body_for("nfp", worker_name)
        outcome: dict[str, bytes | BaseException] = {}

        def call() -> None:
            try:
                outcome["reply"] = client.call(service, body, CALL_S)
            except (Unanswered, AssertionError) as exc:
                outcome["reply"] = exc

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        wait_for(lambda: doomed.received == 1, "the request to reach the first worker")
        rescuer = worker_for(gateway, ctx, _other(worker_name), service)
        wait_for(lambda: registered(gateway, ctx, service) == 2, "the second worker to register")
        doomed.kill()  # no goodbye: the gateway notices by the missed heartbeats
        caller.join(timeout=CALL_S + 2)
        assert outcome.get("reply") == body, outcome
        assert rescuer.received == 1
    finally:
        doomed.kill()
        if rescuer is not None:
            rescuer.stop()


def test_matrix_covers_every_listening_edge() -> None:
    """A new edge kind must join the matrix (a client or worker adapter in peers.py)."""
    covered = {cls.edge for cls in CLIENTS.values()} | {cls.edge for cls in WORKERS.values()}
    listening = {kind for kind, spec in KINDS.items() if spec.binds}
    assert listening <= covered, f"no matrix peers for {sorted(listening - covered)}"
