"""Run the real NorFab 0.25 broker (``norfab.core.broker.NFPBroker``) for the bench.

``python -m nfgate.bench.norfab_broker --base-dir DIR`` prints
``norfab broker listening on URL`` on stderr, then mediates until SIGTERM/SIGINT.
CURVE is off (``broker: {zmq_auth: false}``, as in tests/interop/norfab_broker.py), the
port is chosen by ZeroMQ, NorFab's logs go under ``DIR/__norfab__/logs``. Exits 2 with
one line if NorFab is not installed (``pip install nfgate[bench]``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nfgate.bench.norfab_broker", description=__doc__)
    parser.add_argument("--base-dir", required=True)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    try:
        import zmq
        from norfab.core.broker import NFPBroker
        from norfab.core.inventory import NorFabInventory
    except ImportError as exc:
        print(f"norfab broker: NorFab is not installed ({exc}); pip install 'nfgate[bench]'", file=sys.stderr)
        return 2

    os.makedirs(args.base_dir, exist_ok=True)
    inventory = NorFabInventory(
        data={"broker": {"endpoint": "tcp://127.0.0.1:0", "zmq_auth": False}},
        base_dir=args.base_dir,
    )
    exit_event = threading.Event()

    def stop(signum: int, frame: object) -> None:
        exit_event.set()  # mediate() checks it after every poll (100 ms at most)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    broker = NFPBroker(
        endpoint="tcp://127.0.0.1:*",
        exit_event=exit_event,
        inventory=inventory,
        log_level=args.log_level,
    )
    endpoint = broker.socket.getsockopt_string(zmq.LAST_ENDPOINT)
    print(f"norfab broker listening on {endpoint}", file=sys.stderr, flush=True)
    broker.mediate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
