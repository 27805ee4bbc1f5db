"""NorFab 0.24 (0.24.16, the last 0.24.x), the minor before the pinned 0.25.0, against
nfgate: its real client and worker, installed from PyPI in a venv of their own.

0.24 speaks 0.25's wire format, but its worker has no ``result_ready`` EVENT: it ends
each job with a "progress" EVENT whose message and status are "completed". A job such a
worker ran for a client of another protocol (here DCP) never got its result before
nfgate took that event too (docs/protocols/nfp.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from .conftest import Broker, Peers
from .test_norfab_foreign import _dcp_call

NORFAB_024 = "norfab[nfcli]==0.24.16"  # as the pinned 0.25.0: the worker needs its extras


@pytest.fixture(scope="session")
def norfab_024_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A venv with NorFab 0.24.16 (about 10 s from pip's cache, a minute without)."""
    venv = tmp_path_factory.mktemp("norfab-0.24") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", NORFAB_024],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"pip install {NORFAB_024} failed:\n{done.stderr[-3000:]}"
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('norfab'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert version == "0.24.16", version
    return str(python)


@pytest.fixture
def peers_024(peers: Peers, norfab_024_python: str) -> Iterator[Peers]:
    peers.python = norfab_024_python
    yield peers


@pytest.mark.interop
@pytest.mark.timeout(300)
def test_a_norfab_024_worker_serves_a_norfab_024_client_and_a_dcp_client(
    broker: Broker, peers_024: Peers
) -> None:
    if broker.kind != "nfgate":
        pytest.skip("nfgate's own edges: the DCP client needs its DCP edge")
    assert broker.dcp, f"nfgate announced no dcp edge: {broker.edges}"
    peers_024.start_worker("nfw024", service="nfecho")
    answer = peers_024.run_client(
        "c024", service="nfecho", task="echo", workers="any", kwargs={"n": 1}, wait_workers=["nfw024"]
    )
    logs = f"{answer!r}\n{peers_024.logs()}"
    assert (answer.get("job") or {}).get("nfw024", {}).get("result") == {"n": 1}, logs
    # A DCP client's job: the worker's result reaches it only if nfgate fetches it on
    # 0.24's last "completed" event (0.24 has no result_ready).
    job = json.dumps({"task": "echo", "kwargs": {"a": 2}, "args": [], "timeout": 10}).encode()
    data = _dcp_call(broker.dcp, b"nfecho", (job,), 20_000)
    assert data is not None, f"no REPLY from the NorFab 0.24 worker\n{peers_024.logs()}"
    assert json.loads(data[0])["nfw024"]["result"] == {"a": 2}, peers_024.logs()
    assert "Traceback" not in peers_024.logs(), peers_024.logs()


@pytest.mark.interop
@pytest.mark.timeout(300)
def test_a_norfab_024_client_targets_all_and_named_workers(broker: Broker, peers_024: Peers) -> None:
    peers_024.start_worker("w1-024", service="nfecho")
    peers_024.start_worker("w2-024", service="nfecho")
    everyone = peers_024.run_client(
        "c-all",
        service="nfecho",
        task="echo",
        workers="all",
        kwargs={"x": 1},
        wait_workers=["w1-024", "w2-024"],
    )
    logs = f"{everyone!r}\n{peers_024.logs()}"
    job = everyone.get("job") or {}
    assert job.get("w1-024", {}).get("result") == {"x": 1} and job.get("w2-024", {}).get("result") == {
        "x": 1
    }, logs
    named = peers_024.run_client(
        "c-named", service="nfecho", task="echo", workers=["w2-024"], kwargs={"x": 2}
    )
    logs = f"{named!r}\n{peers_024.logs()}"
    assert set(named.get("job") or {}) == {"w2-024"}, logs
    assert named["job"]["w2-024"]["result"] == {"x": 2}, logs
