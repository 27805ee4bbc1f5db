"""Run the REAL NorFab 0.25 broker (``norfab.core.broker.NFPBroker``) for the interop tests.

Used when ``NFGATE_INTEROP_BROKER=norfab``, to check the harness against the reference
implementation. It speaks the same start-up contract as ``nfgate serve`` on stderr::

    nfgate: nfp edge (nfp) listening on tcp://127.0.0.1:<port>
    nfgate: ready

and exits 0 on SIGTERM/SIGINT. CURVE is off (``broker: {zmq_auth: false}``) unless
``--zmq-auth`` (NorFab's default: its keys under ``<base-dir>/__norfab__``), the port is
chosen by ZeroMQ (``tcp://127.0.0.1:*``), and NorFab's own logs go to
``<base-dir>/__norfab__/logs``. NorFab has no DCP edge, so no dcp line is printed.

    python tests/interop/norfab_broker.py --base-dir DIR [--log-level INFO] [--zmq-auth]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log-level", default="INFO")
    # NorFab's default: CURVE on, keys written under <base-dir>/__norfab__/files/broker.
    parser.add_argument("--zmq-auth", action="store_true")
    args = parser.parse_args(argv)

    import zmq
    from norfab.core.broker import NFPBroker
    from norfab.core.inventory import NorFabInventory

    os.makedirs(args.base_dir, exist_ok=True)
    inventory = NorFabInventory(
        data={"broker": {"endpoint": f"tcp://{args.host}:0", "zmq_auth": args.zmq_auth}},
        base_dir=args.base_dir,
    )
    exit_event = threading.Event()

    def stop(signum: int, frame: object) -> None:
        exit_event.set()  # mediate() checks it every poll (100 ms), then destroy()s

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    broker = NFPBroker(
        endpoint=f"tcp://{args.host}:*",
        exit_event=exit_event,
        inventory=inventory,
        log_level=args.log_level,
    )
    endpoint = broker.socket.getsockopt_string(zmq.LAST_ENDPOINT)
    print(f"nfgate: nfp edge (nfp) listening on {endpoint}", file=sys.stderr, flush=True)
    print("nfgate: ready", file=sys.stderr, flush=True)
    broker.mediate()
    print("nfgate: stopped", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
