"""Loading golden vectors from ``tests/vectors/<protocol>/*.json``.

Each file is a JSON list. A *valid* vector has ``frames`` (hex strings, the wire after
the transport removed routing envelopes), ``message`` (the JSON form printed by
``nfgate decode``, without ``protocol``/``dialect``), ``dialect`` and ``section`` (the
spec section it is transcribed from). An *invalid* vector has ``error`` (a substring of
the DecodeError reason) instead of ``message``. ``detected: false`` marks a valid vector
whose dialect cannot be told from the bytes alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VECTOR_DIR = Path(__file__).parent / "vectors"


def load(protocol: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(id, vector) pairs, with ``protocol`` filled in from the folder name."""
    out: list[tuple[str, dict[str, Any]]] = []
    folders = [VECTOR_DIR / protocol] if protocol else sorted(p for p in VECTOR_DIR.iterdir() if p.is_dir())
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            for i, vector in enumerate(json.loads(path.read_text())):
                vector = dict(vector, protocol=folder.name)
                out.append((f"{folder.name}/{path.stem}[{i}]", vector))
    return out


def frames(vector: dict[str, Any]) -> list[bytes]:
    return [bytes.fromhex(f) for f in vector["frames"]]
