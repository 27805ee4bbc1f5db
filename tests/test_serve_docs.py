"""docs/broker.md against what ``nfgate serve`` really takes: its options table against
``nfgate serve --help``, and the config examples in the docs against the config loader."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import click
import pytest

from nfgate.cli import serve
from nfgate.edges.kinds import KINDS

DOCS = Path(__file__).resolve().parents[1] / "docs"
BROKER = DOCS / "broker.md"


def _documented_options() -> set[str]:
    """The options in broker.md's table (``| option | meaning |``), ``--no-EDGE`` as one
    ``--no-<kind>`` per edge kind."""
    text = BROKER.read_text(encoding="utf-8")
    table = text.split("| option | meaning |", 1)[1].split("\n\n", 1)[0]
    options: set[str] = set()
    for row in table.splitlines()[2:]:
        cell = row.split("|")[1]
        options.update(re.findall(r"`(-{1,2}[A-Za-z][\w-]*)", cell))
    if "--no-EDGE" in options:
        options.remove("--no-EDGE")
        options.update(f"--no-{kind}" for kind in KINDS)
    return options


def _help_options() -> set[str]:
    opts: set[str] = set()
    for param in serve.params:
        if isinstance(param, click.Option):
            opts.update(param.opts)
    return opts - {"-h", "--help"}


def test_every_serve_option_is_in_the_docs_table_and_every_row_is_an_option() -> None:
    documented, offered = _documented_options(), _help_options()
    assert offered - documented == set(), "options missing from docs/broker.md's table"
    assert documented - offered == set(), "docs/broker.md's table names options serve lacks"


def _toml_blocks(path: Path) -> list[dict[str, object]]:
    text = path.read_text(encoding="utf-8")
    return [tomllib.loads(block) for block in re.findall(r"```toml\n(.*?)```", text, re.S)]


DOC_FILES = [BROKER, *sorted((DOCS / "protocols").glob("*.md"))]


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: p.name)
def test_the_docs_config_examples_use_known_keys_and_the_real_heartbeat_defaults(doc: Path) -> None:
    # Every [edges.X] key a doc shows is one the loader takes (a key it refuses, or one
    # it refused after a change, would be a wrong example), and the heartbeat values the
    # examples show are the defaults (the DBP core watchdog was documented off while on).
    for block in _toml_blocks(doc):
        edges = block.get("edges", {})
        assert isinstance(edges, dict)
        for kind, table in edges.items():
            assert kind in KINDS, f"{doc.name}: unknown edge {kind}"
            spec = KINDS[kind]
            for key in table:
                known = {"enabled", "bind", *spec.options}
                if spec.heartbeat is not None:
                    known |= {"heartbeat_ms", "liveness"}
                assert key in known, f"{doc.name}: edges.{kind}.{key} is not a key"
            if spec.heartbeat is not None:
                shown = (
                    table.get("heartbeat_ms", spec.heartbeat[0]),
                    table.get("liveness", spec.heartbeat[1]),
                )
                assert shown == spec.heartbeat, f"{doc.name}: edges.{kind} heartbeat"


def test_the_heartbeat_table_gives_each_kinds_defaults() -> None:
    text = BROKER.read_text(encoding="utf-8")
    table = text.split("| edge | `heartbeat_ms` | `liveness` |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.split("|")[1:4]]
        rows[cells[0].strip("`")] = (cells[1], cells[2])
    assert set(rows) == set(KINDS)
    for kind, spec in KINDS.items():
        want = ("—", "—") if spec.heartbeat is None else tuple(str(v) for v in spec.heartbeat)
        assert rows[kind] == want, kind
