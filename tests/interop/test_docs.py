"""docs/broker.md's NorFab worker and client, run as a newcomer would copy them.

The worker.py and client.py blocks of "Connecting NorFab (0.25) clients and workers" run unchanged
but for the broker endpoint (the test's gateway, on a random port, not 5555) and the
base directories (the test's temporary folder).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from .conftest import Broker, launch, stop_process

DOC = Path(__file__).resolve().parents[2] / "docs" / "broker.md"
SECTION = "## Connecting NorFab (0.25) clients and workers"


def _snippets() -> tuple[str, str]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    blocks = {b.split("\n", 1)[0]: b for b in re.findall(r"```python\n(.*?)```", section, re.S)}
    worker = next((b for first, b in blocks.items() if first.startswith("# worker.py")), None)
    client = next((b for first, b in blocks.items() if first.startswith("# client.py")), None)
    assert worker and client, (
        f"expected the worker.py and client.py blocks in {DOC.name}, found {list(blocks)}"
    )
    return worker, client


def _adapted(code: str, endpoint: str, root: Path) -> str:
    assert "tcp://127.0.0.1:5555" in code and "/tmp/norfab-" in code, "the snippet changed: adapt this test"
    return code.replace("tcp://127.0.0.1:5555", endpoint).replace("/tmp/norfab-", f"{root}/norfab-")


@pytest.mark.interop
@pytest.mark.timeout(90)
def test_the_documented_norfab_worker_and_client_work(broker: Broker, interop_dir: Path) -> None:
    if broker.kind != "nfgate":
        pytest.skip("the page documents nfgate")
    worker_code, client_code = _snippets()
    (interop_dir / "worker.py").write_text(_adapted(worker_code, broker.nfp, interop_dir))
    (interop_dir / "client.py").write_text(_adapted(client_code, broker.nfp, interop_dir))
    logs = interop_dir / "logs"
    worker = launch([sys.executable, "worker.py"], interop_dir, "doc-worker")
    try:
        # The client's job would wait in the gateway's queue for the worker anyway; waiting
        # here keeps a slow start from eating the snippet's 10 s job timeout.
        for _ in range(300):  # bounded: 30 s
            started = "".join(p.read_text(errors="replace") for p in logs.glob("doc-worker.*"))
            if "registered to broker" in started or worker.poll() is not None:
                break
            time.sleep(0.1)
        client = launch([sys.executable, "client.py"], interop_dir, "doc-client")
        client.wait(timeout=60)
    finally:
        stop_process(worker)
    out = (logs / "doc-client.out").read_text(errors="replace")
    report = f"client stdout:\n{out}\nclient stderr:\n{(logs / 'doc-client.err').read_text(errors='replace')[-3000:]}"
    assert client.returncode == 0, report
    # What the page says run_job prints, then show_workers with the worker in it.
    assert "{'echo-1': {'result': {'hello': 'world'}, 'failed': False" in out, report
    assert "'name': 'echo-1', 'service': 'echo', 'status': 'alive'" in out, report


TRANSLATION = DOC.parent / "translation.md"


def _translation_snippets() -> dict[str, str]:
    """docs/translation.md's runnable blocks, by their first line's file name."""
    blocks = re.findall(r"```python\n(.*?)```", TRANSLATION.read_text(encoding="utf-8"), re.S)
    return {b.split("\n", 1)[0].split()[1]: b for b in blocks if b.startswith("# ")}


@pytest.mark.interop
@pytest.mark.timeout(120)
def test_the_documented_dcp_peers_cross_to_and_from_norfab(broker: Broker, interop_dir: Path) -> None:
    """translation.md's DCP client, served by broker.md's NorFab worker, and its DCP
    worker, serving a NorFab client: run as copied, but for the endpoints."""
    if broker.kind != "nfgate":
        pytest.skip("the page documents nfgate")
    assert broker.dcp, f"nfgate announced no dcp edge: {broker.edges}"
    snippets = _translation_snippets()
    worker_code, _ = _snippets()
    (interop_dir / "worker.py").write_text(_adapted(worker_code, broker.nfp, interop_dir))
    for name in ("dcp_client.py", "dcp_worker.py"):
        code = snippets[name]
        assert "tcp://127.0.0.1:5556" in code, "the snippet changed: adapt this test"
        (interop_dir / name).write_text(code.replace("tcp://127.0.0.1:5556", broker.dcp))
    client_code = (
        "import threading\n"
        "from norfab.core.client import NFPClient\n"
        "from norfab.core.inventory import NorFabInventory\n"
        f"inventory = NorFabInventory(data={{'broker': {{'endpoint': '{broker.nfp}', 'zmq_auth': False}}}},"
        f" base_dir='{interop_dir}/norfab-client')\n"
        f"client = NFPClient(inventory, '{broker.nfp}', 'client-1', threading.Event())\n"
        "print(client.run_job('upper', 'shout', workers='any', kwargs={'text': 'hi'}, timeout=10))\n"
        "client.destroy()\n"
    )
    (interop_dir / "nf_client.py").write_text(client_code)
    logs = interop_dir / "logs"
    peers = [launch([sys.executable, name], interop_dir, name) for name in ("worker.py", "dcp_worker.py")]
    try:
        for _ in range(300):  # bounded: 30 s for the NorFab worker to register
            started = "".join(p.read_text(errors="replace") for p in logs.glob("worker.py.*"))
            if "registered to broker" in started:
                break
            time.sleep(0.1)
        runs = [
            launch([sys.executable, name], interop_dir, name) for name in ("dcp_client.py", "nf_client.py")
        ]
        for run in runs:
            run.wait(timeout=60)
    finally:
        for peer in peers:
            stop_process(peer)
    dcp_out = (logs / "dcp_client.py.out").read_text(errors="replace")
    nf_out = (logs / "nf_client.py.out").read_text(errors="replace")
    # What the page says each prints.
    assert "(b'req-1',) {'echo-1': {'result': {'hello': 'world'}, 'failed': False" in dcp_out, dcp_out
    assert "'result': {'TASK': 'SHOUT', 'KWARGS': {'TEXT': 'HI'}" in nf_out and "'failed': False" in nf_out, (
        nf_out
    )
