"""Codecs and the routing core are sans-I/O: nothing under codecs/, and no module of the
core, imports sockets, clocks, randomness, threads or logging set-up (design.md "Codec
(pure, sans-I/O)"; docs/routing.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CODECS = Path(__file__).resolve().parent.parent / "codecs"
FORBIDDEN = {
    "zmq",
    "pynng",
    "socket",
    "time",
    "datetime",
    "random",
    "threading",
    "asyncio",
    "logging",
    "selectors",
}


CORE = [
    CODECS.parent / "nfgate" / f"{name}.py"
    for name in (
        "routing",
        "routing_workers",
        "routing_failures",
        "routing_views",
        "routing_types",
        "queues",
        "model",
    )
]


@pytest.mark.parametrize(
    "path", [*sorted(CODECS.rglob("*.py")), *CORE], ids=lambda p: str(p.relative_to(CODECS.parent))
)
def test_pure_module_imports_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN, f"{path.name} imports {sorted(imported & FORBIDDEN)}"


def test_no_module_is_oversized() -> None:
    root = CODECS.parent
    for folder in ("nfgate", "codecs", "transports", "conformance"):
        for path in (root / folder).rglob("*.py"):
            assert len(path.read_text().splitlines()) <= 650, f"{path} is over ~600 lines: split it"
