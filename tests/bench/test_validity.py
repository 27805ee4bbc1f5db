"""The bench's figures are only worth their checks: medians that are medians, wrong or
unacknowledged answers that are not counted as throughput, and a run with any of them
that fails instead of printing ratios as if nothing happened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from nfgate.bench import runner
from nfgate.bench.dialects import SERVICE, Dialect
from nfgate.bench.load import run_clients
from nfgate.codecs import nfp
from nfgate.codecs.nfp.messages import BROKER, Open, Response

pytestmark = pytest.mark.timeout(120)


def test_two_rounds_give_their_mean_ratio_and_the_slower_rounds_figures() -> None:
    assert runner._median([0.5, 0.7]) == 0.6  # not the better round
    assert runner._median([0.9, 0.5, 0.7]) == 0.7
    rounds = [{"req_per_s": 900.0, "round": 1}, {"req_per_s": 700.0, "round": 2}]
    assert runner.median_round(rounds)["round"] == 2
    assert runner.median_round([*rounds, {"req_per_s": 800.0, "round": 3}])["round"] == 3


def test_any_wrong_answer_in_any_round_makes_the_run_invalid() -> None:
    checks = dict.fromkeys(runner.CHECKS, 0)
    objects = [
        {
            "scenario": "relay",
            "mode": "sync",
            "all_rounds": {"raw": checks, "nfgate-dcp": {**checks, "mismatches": 3}},
        },
        {"scenario": "churn", "brokers": {"nfgate-dcp": {"failed": 2}, "raw": {"failed": 0}}},
    ]
    assert runner.invalid(objects) == ["relay sync: nfgate-dcp: 3 mismatches", "churn: nfgate-dcp: 2 failed"]
    assert runner.invalid([]) == []


BAD_RELAY = '''
"""The raw relay, but every 10th request is answered at once with a wrong body."""
import sys
from nfgate.bench.relay import serve

def relay(sock):
    workers, known, turn, n = [], set(), 0, 0
    while True:
        msg = sock.recv_multipart()
        sender = msg[0]
        if sender in known:
            sock.send_multipart([msg[2], b"", *msg[3:]])
        elif len(msg) == 3 and msg[2] == b"READY":
            known.add(sender)
            workers.append(sender)
            sock.send_multipart([sender, b"", b"OK"])
        else:
            n += 1
            if n % 10 == 0:
                sock.send_multipart([sender, b"", msg[3], b"WRONG"])
                continue
            turn = (turn + 1) % len(workers)
            sock.send_multipart([workers[turn], b"", sender, *msg[3:]])

sys.exit(serve(relay, "nfgate.bench.relay", None, None))
'''

RUN_BENCH = """
import sys
from nfgate.bench import runner
from nfgate.bench.cli import bench
plain = runner._python_module
runner._python_module = lambda m, *a: plain("bad_relay" if m == "nfgate.bench.relay" else m, *a)
bench.main(sys.argv[1:])
"""


def test_a_broker_that_answers_wrongly_fails_the_run_after_its_json(tmp_path: Path) -> None:
    (tmp_path / "bad_relay.py").write_text(BAD_RELAY)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN_BENCH,
            "--scenario",
            "relay",
            "--brokers",
            "raw",
            "--duration",
            "0.5",
            "--warmup",
            "0.2",
        ],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        cwd=tmp_path,
    )
    objects = [json.loads(line) for line in done.stdout.splitlines()]
    assert [o["mode"] for o in objects] == ["sync", "pipelined"], done.stderr
    assert all(o["all_rounds"]["raw"]["mismatches"] > 0 for o in objects)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "wrong answers, so no valid figures: relay sync: raw: " in last and "mismatches" in last


@pytest.fixture
def half_acknowledging_broker() -> Iterator[str]:
    """An NFP spec broker in a thread that echoes every POST but sends the 202 for only
    every other one."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()

    def serve() -> None:
        n = 0
        while not stop.is_set():
            if not sock.poll(50):
                continue
            identity, *frames = sock.recv_multipart()
            if frames[2] == nfp.encode(Open(header=BROKER))[2]:  # the client's OPEN
                sock.send_multipart([identity, *nfp.encode(Open(header=BROKER))])
                continue
            key, body = frames[5].decode(), frames[6]  # "", NFPC01, POST, service, target, uuid, body
            n += 1
            if n % 2:
                ack = Response(header=BROKER, service=SERVICE, uuid=key, status=202, body=(b"{}",))
                sock.send_multipart([identity, *nfp.encode(ack)])
            done = Response(header=BROKER, service=SERVICE, uuid=key, status=200, body=(body,))
            sock.send_multipart([identity, *nfp.encode(done)])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close(0)
        context.term()


def test_an_nfp_result_without_its_202_is_counted_and_not_as_throughput(
    half_acknowledging_broker: str,
) -> None:
    got = run_clients(
        Dialect("nfp"), half_acknowledging_broker, clients=1, window=1, warmup=0.1, duration=0.5
    )
    assert got["unacknowledged"] > 0 and got["mismatches"] == got["errors"] == 0
    # Half the answers had no 202: only the others are requests done in the window.
    assert 0 < got["requests"] <= got["done"] - got["unacknowledged"]
