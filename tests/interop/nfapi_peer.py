"""NorFab 0.25 run through NFAPI, in a process of its own, for the NFAPI interop tests.

NFAPI is how NorFab's users run it (nfcli is built on it)::

    nf = NorFab(inventory="inventory.yaml")  # base_dir: the inventory's folder
    nf.start()                               # the broker if topology.broker, the topology's workers
    client = nf.make_client()                # "<script>_<cwd hash>_NFPClient"
    client.run_job(...); client.mmi(...); client.fetch_file(...)
    nf.destroy()                             # stops the client, then joins the workers

NFAPI starts each worker as a ``multiprocessing`` child, so this runs in a child of the
test (NorFab's threads and processes never inside pytest), and in a session of its own
so that the test can kill what is left of it by its process group.

Usage::

    python nfapi_peer.py client --inventory INV [--no-workers] [--wait '["w1"]'] \\
        --calls '[[label, op, kwargs], ...]'
    python nfapi_peer.py keys --base-dir DIR     # NorFab's broker key pair, as its broker makes it

``client`` starts the inventory's topology (``--no-workers``: none, a client-only
NFAPI, as ``nfcli -c``), makes NFAPI's client, waits (bounded) until
``show_workers`` lists every ``--wait`` name, runs each call and prints one line
``NFAPI_PEER_RESULT <json>``: ``{"client": its name, "ready": the wait, "calls": {label:
what the call returned}}``. The ops: ``mmi`` (``client.mmi(**kwargs)``), ``run_job``
(``client.run_job(**kwargs)``) and ``fetch_file`` (``client.fetch_file(**kwargs)``, plus
the fetched copy's text under ``"text"``). It exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

RESULT_PREFIX = "NFAPI_PEER_RESULT "


def _destroy(nf: Any, limit: float = 20.0) -> None:
    """``nf.destroy()``, bounded: it joins the worker processes, which must not hang us."""
    stopper = threading.Thread(target=nf.destroy, daemon=True)
    stopper.start()
    stopper.join(limit)


def _names(reply: dict[str, Any]) -> list[str]:
    results = reply.get("results")
    if reply.get("status") != "200" or not isinstance(results, list):
        return []
    return [str(w.get("name")) for w in results if isinstance(w, dict) and w.get("status") == "alive"]


def _wait_for_workers(client: Any, wanted: list[str], timeout: float) -> dict[str, Any]:
    """Poll ``show_workers`` until every wanted worker is alive in it (bounded)."""
    started = time.monotonic()
    names: list[str] = []
    for attempt in range(1, 101):
        names = _names(client.mmi("mmi.service.broker", "show_workers", timeout=3))
        if set(wanted) <= set(names):
            return {"names": names, "attempts": attempt, "seconds": round(time.monotonic() - started, 3)}
        if time.monotonic() - started > timeout:
            break
        time.sleep(0.2)
    return {"names": names, "timeout": True}


def _call(client: Any, op: str, kwargs: dict[str, Any]) -> Any:
    if op == "mmi":
        return client.mmi(**kwargs)
    if op == "run_job":
        return client.run_job(**kwargs)
    if op == "fetch_file":
        reply = client.fetch_file(**kwargs)
        path = reply.get("content") if isinstance(reply, dict) else None
        text = None
        if isinstance(path, str) and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                text = f.read()
        return {"reply": reply, "text": text}
    raise ValueError(f"unknown op {op!r}")


def run_client(args: argparse.Namespace) -> int:
    from norfab.core.nfapi import NorFab

    nf = NorFab(inventory=args.inventory, run_workers=not args.no_workers)
    out: dict[str, Any] = {"calls": {}}
    try:
        nf.start()
        client = nf.make_client()
        out["client"] = client.name
        if args.wait:
            out["ready"] = _wait_for_workers(client, json.loads(args.wait), args.wait_timeout)
        for label, op, kwargs in json.loads(args.calls):
            started = time.monotonic()
            try:
                out["calls"][label] = _call(client, op, kwargs)
            except Exception as exc:  # reported, not raised: the test names the call
                out["calls"][label] = {"exception": repr(exc)}
            out.setdefault("seconds", {})[label] = round(time.monotonic() - started, 3)
    finally:
        _destroy(nf)
        print(RESULT_PREFIX + json.dumps(out, default=str), flush=True)
        sys.stderr.flush()
        os._exit(0)  # a NorFab thread left behind must not keep the process


def run_keys(args: argparse.Namespace) -> int:
    """NorFab's broker key pair where its broker keeps it (``<base_dir>/__norfab__/files/
    broker/{private,public}_keys``), made by NorFab's own function, as ``NFPBroker`` does."""
    from norfab.core.inventory import NorFabInventory
    from norfab.core.security import generate_certificates

    broker_dir = os.path.join(args.base_dir, "__norfab__", "files", "broker")
    os.makedirs(broker_dir, exist_ok=True)
    inventory = NorFabInventory(data={"broker": {}}, base_dir=args.base_dir)
    generate_certificates(broker_dir, cert_name="broker", inventory=inventory)
    print(os.path.join(broker_dir, "private_keys", "broker.key_secret"), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NorFab's NFAPI for nfgate's interop tests")
    sub = parser.add_subparsers(dest="role", required=True)
    c = sub.add_parser("client")
    c.add_argument("--inventory", required=True)
    c.add_argument("--wait", default=None, help="JSON list of worker names to wait for")
    c.add_argument("--wait-timeout", type=float, default=20.0)
    c.add_argument("--calls", default="[]", help="JSON list of [label, op, kwargs]")
    c.add_argument("--no-workers", action="store_true", help="start no workers: a client-only NFAPI")
    k = sub.add_parser("keys")
    k.add_argument("--base-dir", required=True)
    args = parser.parse_args(argv)
    if args.role == "client":
        return run_client(args)
    return run_keys(args)


if __name__ == "__main__":
    sys.exit(main())
