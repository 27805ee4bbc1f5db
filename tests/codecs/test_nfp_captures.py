"""Frames captured from the real NorFab 0.25 broker, client and workers
(tests/captures/norfab-0.25.json, see docs/protocols/norfab-wire.md): every one is
detected as the NorFab dialect, decodes, and re-encodes to the same bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nfgate.codecs import nfp
from nfgate.errors import DecodeError

CAPTURES: list[dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parent.parent / "captures" / "norfab-0.25.json").read_text()
)
# NorFab's broker answers a spec-dialect (one-byte command) POST with a 5-frame
# RESPONSE that has no uuid and no status; NorFab's own client drops it as malformed.
BROKEN = "Reply to a spec-dialect POST"


@pytest.mark.parametrize("capture", CAPTURES, ids=[c["description"][:50] for c in CAPTURES])
def test_real_norfab_frames_roundtrip(capture: dict[str, Any]) -> None:
    wire = [bytes.fromhex(f) for f in capture["frames"]]
    assert nfp.detect(wire) == "norfab"
    if capture["description"].startswith(BROKEN):
        with pytest.raises(DecodeError, match="missing frame"):
            nfp.decode(wire)
        return
    message = nfp.decode(wire)
    assert nfp.encode(message, "norfab") == wire
    sender = capture["direction"].split("->")[0]
    assert message.header == {"client": nfp.CLIENT, "worker": nfp.WORKER, "broker": nfp.BROKER}[sender]  # type: ignore[attr-defined]


def test_captures_cover_the_norfab_flow() -> None:
    kinds = {
        (c["direction"], nfp.decode([bytes.fromhex(f) for f in c["frames"]]).TYPE)
        for c in CAPTURES
        if not c["description"].startswith(BROKEN)
    }
    for needed in [
        ("client->broker", "POST"),
        ("broker->worker", "POST"),
        ("worker->broker", "RESPONSE"),
        ("worker->broker", "EVENT"),
        ("client->broker", "GET"),
        ("broker->client", "RESPONSE"),
        ("worker->broker", "READY"),
        ("worker->broker", "KEEPALIVE"),
        ("broker->worker", "DISCONNECT"),
    ]:
        assert needed in kinds
