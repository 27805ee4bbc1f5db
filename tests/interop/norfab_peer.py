"""Real NorFab 0.25 peers for the interop tests, one per process.

Each peer runs in its own process so a test can SIGKILL a worker and so NorFab's
threads never run inside pytest. Everything is standalone NorFab API, no NFAPI:

* inventory: ``NorFabInventory(data={"broker": {"endpoint": URL, "zmq_auth": False}},
  base_dir=DIR)``; ``zmq_auth: false`` turns CURVE off for workers and clients.
* worker: a subclass of ``norfab.core.worker.NFPWorker`` constructed as
  ``NFPWorker(inventory, broker_url, service, name, exit_event, log_level)``; tasks are
  methods decorated with ``@Task()`` (registered by function name in the process-global
  ``NORFAB_WORKER_TASKS``), take ``job`` and return ``norfab.models.Result``.
  ``work()`` starts the socket threads (READY goes out then) and blocks until
  ``exit_event`` is set, then calls ``destroy()``.
* client: ``NFPClient(inventory, broker_url, name, exit_event)``;
  ``run_job(service, task, workers=..., kwargs=..., timeout=...)`` and
  ``mmi("mmi.service.broker", "show_workers", timeout=...)``; ``destroy()`` at the end.

Usage::

    python norfab_peer.py worker --name w1 --service echo --endpoint URL --base-dir DIR
    python norfab_peer.py worker --kind filesharing --name fs1 --endpoint URL --base-dir DIR
    python norfab_peer.py client --endpoint URL --base-dir DIR --name c1 \\
        [--wait-workers '["w1","w2"]'] [--mmi show_workers] \\
        [--service echo --task echo --workers '"any"' --kwargs '{"a":1}' --timeout 20] \\
        [--fetch '["nf://a.txt"]']

The worker prints ``norfab_peer: worker <name> working`` on stdout when it is about to
register, and exits 0 on SIGTERM. Its tasks:

* ``echo(**kwargs)`` returns ``kwargs``;
* ``slow(seconds=3, **kwargs)`` first writes ``<base-dir>/markers/<worker>.<job uuid>.started``,
  sleeps, then returns ``{"worker": <name>, "seconds": seconds, "kwargs": kwargs}``.

With ``--kind filesharing`` the worker is NorFab's own ``FileSharingWorker`` (service
``filesharing``), which loads its inventory from the broker's ``sid.service.broker``.

The client prints one line ``NORFAB_PEER_RESULT <json>`` on stdout, a JSON object with
``ready`` (the wait for workers), ``mmi`` (what ``client.mmi`` returned), ``job`` (what
``run_job`` returned), ``jobs`` (with ``--services``: ``{service, job, seconds}`` for
each service, its job run in turn by the same client) and ``fetch`` (what
``client.fetch_file`` returned for the URL list: local paths of the copies; NorFab 0.24's
takes one URL, so it is called for each), each present only if asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

RESULT_PREFIX = "NORFAB_PEER_RESULT "
WORKING = "norfab_peer: worker {name} working"


def _fetch(client: Any, urls: list[str], timeout: int) -> Any:
    """``client.fetch_file`` for a URL list: NorFab 0.25's takes the list, 0.24's one URL."""
    from importlib.metadata import version

    if version("norfab").startswith("0.24."):
        return [client.fetch_file(url, timeout=timeout) for url in urls]
    return client.fetch_file(urls, timeout=timeout)


def _inventory(endpoint: str, base_dir: str, shared_key: str | None = None) -> Any:
    """``zmq_auth: false``, or with ``shared_key`` NorFab's default CURVE trusting that
    broker public key (NorFab's ``broker.shared_key`` inventory option)."""
    from norfab.core.inventory import NorFabInventory

    os.makedirs(base_dir, exist_ok=True)
    broker: dict[str, Any] = {"endpoint": endpoint, "zmq_auth": False}
    if shared_key:
        broker = {"endpoint": endpoint, "zmq_auth": True, "shared_key": shared_key}
    return NorFabInventory(data={"broker": broker}, base_dir=base_dir)


def _json_arg(text: str | None) -> Any:
    """JSON if it parses, else the text itself (so ``--workers any`` works too)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


# ------------------------------------------------------------------------------ worker


def _make_worker(args: argparse.Namespace, exit_event: threading.Event) -> Any:
    from norfab.core.worker import Job, NFPWorker, Task
    from norfab.models import Result

    inventory = _inventory(args.endpoint, args.base_dir, args.shared_key)
    if args.kind == "filesharing":
        from norfab.workers.filesharing_worker.filesharing_worker import FileSharingWorker

        return FileSharingWorker(
            inventory, args.endpoint, args.name, exit_event, threading.Event(), args.log_level
        )

    marker_dir = os.path.join(args.base_dir, "markers")
    os.makedirs(marker_dir, exist_ok=True)

    class InteropWorker(NFPWorker):
        """A plain NFPWorker with its tasks (declared with NorFab's ``@Task``)."""

        @Task(fastapi=False, mcp=False)
        def echo(self, job: Job, **kwargs: Any) -> Result:
            """Return the keyword arguments unchanged."""
            return Result(result=kwargs)

        @Task(fastapi=False, mcp=False)
        def slow(self, job: Job, seconds: float = 3, **kwargs: Any) -> Result:
            """Mark the start in the marker dir, sleep, return who did it."""
            marker = os.path.join(marker_dir, f"{self.name}.{job.juuid}.started")
            with open(marker, "w", encoding="utf-8") as f:
                f.write(f"{time.time()}\n")
            time.sleep(float(seconds))
            return Result(result={"worker": self.name, "seconds": seconds, "kwargs": kwargs})

        @Task(fastapi=False, mcp=False)
        def chain(self, job: Job, seconds: float = 2, then: str = "lookup") -> Result:
            """Mark the start, sleep, then ask service ``then`` (task echo) through the
            worker's own NFPClient (``<name>-NFPClient``), as NorFab's workers ask each
            other (nornir asking netbox, fetch_file); return what it answered."""
            marker = os.path.join(marker_dir, f"{self.name}.{job.juuid}.started")
            with open(marker, "w", encoding="utf-8") as f:
                f.write(f"{time.time()}\n")
            time.sleep(float(seconds))
            kwargs = {"asked_by": self.name}
            sub = self.client.run_job(service=then, task="echo", workers="any", kwargs=kwargs, timeout=15)
            return Result(result={"worker": self.name, "sub": sub})

        @Task(fastapi=False, mcp=False)
        def ask(self, job: Job, question: str = "go on?", delay: float = 0, wait: int = 20) -> Result:
            """After ``delay`` s, ask the client a question (NorFab's input request)."""
            time.sleep(float(delay))
            return Result(result={"answer": job.request_input(question, default="no", timeout=wait)})

    return InteropWorker(inventory, args.endpoint, args.service, args.name, exit_event, args.log_level)


def run_worker(args: argparse.Namespace) -> int:
    exit_event = threading.Event()

    def stop(signum: int, frame: object) -> None:
        exit_event.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    worker = _make_worker(args, exit_event)
    print(WORKING.format(name=args.name), flush=True)
    worker.work()  # returns once exit_event is set, after worker.destroy()
    print(f"norfab_peer: worker {args.name} stopped", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no leftover NorFab thread may keep the process alive


# ------------------------------------------------------------------------------ client


def _worker_names(mmi_reply: dict[str, Any]) -> list[str] | None:
    results = mmi_reply.get("results")
    if mmi_reply.get("status") != "200" or not isinstance(results, list):
        return None
    return [str(w.get("name")) for w in results if isinstance(w, dict)]


def _wait_for_workers(client: Any, wanted: list[str], timeout: float) -> dict[str, Any]:
    """Poll ``show_workers`` until every wanted worker is listed (bounded).

    If the broker's MMI is unusable, fall back to a short fixed delay: the other tests
    must not depend on MMI (test_mmi_show_workers checks it on its own).
    """
    started = time.monotonic()
    deadline = started + timeout
    attempts = 0
    last: Any = None
    while time.monotonic() < deadline and attempts < 100:
        attempts += 1
        reply = client.mmi("mmi.service.broker", "show_workers", timeout=3)
        last = reply
        names = _worker_names(reply)
        if names is None:
            time.sleep(2.0)
            return {"how": "fallback-delay", "mmi": reply, "attempts": attempts}
        if set(wanted) <= set(names):
            return {
                "how": "show_workers",
                "names": names,
                "attempts": attempts,
                "seconds": round(time.monotonic() - started, 3),
            }
        time.sleep(0.2)
    return {"how": "timeout", "last": last, "attempts": attempts}


def _answer(client: Any, uuid: str, answer: str, timeout: float) -> Any:
    """Wait (bounded) for the input request of job ``uuid``, answer it, return the result."""
    future = client.job_futures[uuid]  # restored from the client's job database
    for event in future.events(timeout=timeout):
        if event.get("event_type") == "input_request":
            future.send_response(event["extras"]["input_request"]["id"], answer)
            break
    return future.result(timeout=timeout)


def run_client(args: argparse.Namespace) -> int:
    from norfab.core.client import NFPClient

    exit_event = threading.Event()
    client = NFPClient(
        _inventory(args.endpoint, args.base_dir, args.shared_key), args.endpoint, args.name, exit_event
    )
    out: dict[str, Any] = {}
    try:
        if args.wait_workers:
            out["ready"] = _wait_for_workers(client, _json_arg(args.wait_workers), args.wait_timeout)
        if args.mmi:
            out["mmi"] = client.mmi(
                args.mmi_service, args.mmi, kwargs=_json_arg(args.mmi_kwargs) or {}, timeout=args.mmi_timeout
            )
        if args.service:
            started = time.monotonic()
            out["job"] = client.run_job(
                service=args.service,
                task=args.task,
                workers=_json_arg(args.workers),
                kwargs=_json_arg(args.kwargs) or {},
                timeout=args.timeout,
            )
            out["job_seconds"] = round(time.monotonic() - started, 3)
        for service in _json_arg(args.services) or []:  # one client, one job after another
            started = time.monotonic()
            job = client.run_job(
                service=service,
                task=args.task,
                workers=_json_arg(args.workers),
                kwargs=_json_arg(args.kwargs) or {},
                timeout=args.timeout,
            )
            out.setdefault("jobs", []).append(
                {"service": service, "job": job, "seconds": round(time.monotonic() - started, 3)}
            )
        if args.fetch:
            out["fetch"] = _fetch(client, _json_arg(args.fetch), args.timeout)
        if args.submit:  # the job goes; the client leaves without waiting for it
            future = client.submit_job(
                service=args.submit,
                task=args.task,
                workers=_json_arg(args.workers),
                kwargs=_json_arg(args.kwargs) or {},
                timeout=args.timeout,
            )
            time.sleep(args.linger)
            out["uuid"] = future.uuid
        if args.answer_job:  # a client of the same name, back: answer the job's question
            out["job"] = _answer(client, args.answer_job, args.answer, args.timeout)
    finally:
        # destroy() joins the client's threads; never let it hang the process.
        stopper = threading.Thread(target=client.destroy, daemon=True)
        stopper.start()
        stopper.join(10)
        print(RESULT_PREFIX + json.dumps(out, default=str), flush=True)
        sys.stderr.flush()
        os._exit(0)


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="real NorFab 0.25 peers for nfgate's interop tests")
    sub = parser.add_subparsers(dest="role", required=True)

    w = sub.add_parser("worker")
    w.add_argument("--name", required=True)
    w.add_argument("--kind", choices=("interop", "filesharing"), default="interop")
    w.add_argument("--service", default="echo", help="the interop worker's service")
    w.add_argument("--endpoint", required=True)
    w.add_argument("--base-dir", required=True)
    w.add_argument("--log-level", default="INFO")
    w.add_argument("--shared-key", default=None, help="broker CURVE public key (zmq_auth on)")

    c = sub.add_parser("client")
    c.add_argument("--name", default="interop-client")
    c.add_argument("--endpoint", required=True)
    c.add_argument("--base-dir", required=True)
    c.add_argument("--wait-workers", help="JSON list of worker names to wait for (show_workers)")
    c.add_argument("--wait-timeout", type=float, default=15.0)
    c.add_argument("--mmi", help="task for client.mmi(), e.g. show_workers")
    c.add_argument("--mmi-service", default="mmi.service.broker")
    c.add_argument("--mmi-kwargs", default=None)
    c.add_argument("--mmi-timeout", type=int, default=10)
    c.add_argument("--service")
    c.add_argument("--services", default=None, help="JSON list: a job for each, in turn, by one client")
    c.add_argument("--task")
    c.add_argument("--workers", default='"all"', help='JSON: "any", "all", "w1" or ["w1","w2"]')
    c.add_argument("--kwargs", default="{}")
    c.add_argument("--timeout", type=int, default=30)
    c.add_argument("--fetch", default=None, help="JSON list of nf:// URLs for client.fetch_file")
    c.add_argument("--submit", default=None, help="service: submit_job (with --task...) and leave")
    c.add_argument("--linger", type=float, default=0.5, help="seconds to stay after --submit")
    c.add_argument("--answer-job", default=None, help="uuid of a job to answer the input request of")
    c.add_argument("--answer", default="yes")
    c.add_argument("--shared-key", default=None, help="broker CURVE public key (zmq_auth on)")

    args = parser.parse_args(argv)
    if args.role == "worker":
        return run_worker(args)
    return run_client(args)


if __name__ == "__main__":
    sys.exit(main())
