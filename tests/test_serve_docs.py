"""docs/broker.md against what ``nfgate serve`` really takes: its options table against
``nfgate serve --help``, and the config examples in the docs against the config loader."""

from __future__ import annotations

import json
import re
import textwrap
import tomllib
from pathlib import Path

import click
import pytest

from nfgate.cli import serve
from nfgate.config import load
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
    if path.suffix == ".py":  # nfgate/config.py's docstring: the block after "::"
        text = path.read_text(encoding="utf-8").split("::\n", 1)[1].split('"""', 1)[0]
        return [tomllib.loads(textwrap.dedent(text))]
    text = path.read_text(encoding="utf-8")
    return [tomllib.loads(block) for block in re.findall(r"```toml\n(.*?)```", text, re.S)]


DOC_FILES = [
    BROKER,
    *sorted((DOCS / "protocols").glob("*.md")),
    Path(__file__).resolve().parents[1] / "nfgate" / "config.py",
]


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


# Keys whose example value is not the default on purpose: files and places of the
# reader's own, and values the docs show as an example of setting one.
NOT_DEFAULTS = {
    ("gateway", "data_dir"),
    ("edges.nfp", "inventory"),
    ("edges.nfp", "files_root"),
    ("edges.dbp", "udp"),  # shown as what the default works out to: the ROUTER's host:port
    ("edges.sada-server", "channels"),
    ("capture", "max_bytes"),
    ("capture", "edges"),
}


def _defaults_only(block: dict[str, object]) -> dict[str, object]:
    """``block`` without :data:`NOT_DEFAULTS` and CURVE keys (files of the reader's)."""
    out: dict[str, object] = {}
    for section, table in block.items():
        assert isinstance(table, dict)
        if section == "edges":
            out["edges"] = {
                kind: {
                    k: v
                    for k, v in keys.items()
                    if (f"edges.{kind}", k) not in NOT_DEFAULTS and "curve" not in k
                }
                for kind, keys in table.items()
            }
        else:
            out[section] = {k: v for k, v in table.items() if (section, k) not in NOT_DEFAULTS}
    return out


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is JSON's for these values
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def _dump(doc: dict[str, object]) -> str:
    lines = []
    for section, table in doc.items():
        assert isinstance(table, dict)
        if section == "edges":
            for kind, keys in table.items():
                lines.append(f'[edges."{kind}"]')
                lines += [f"{k} = {_toml(v)}" for k, v in keys.items()]
        else:
            lines.append(f"[{section}]")
            lines += [f"{k} = {_toml(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: p.name)
def test_the_docs_example_values_are_the_defaults(doc: Path, tmp_path: Path) -> None:
    # An example saying `max_contexts = 4096` where the code's default is another number
    # tells the reader a wrong default.
    for block in _toml_blocks(doc):
        path = tmp_path / "example.toml"
        path.write_text(_dump(_defaults_only(block)))
        capture = tmp_path / "captures"
        shown = load(path, data_dir=tmp_path, capture_dir=capture)
        assert shown == load(None, data_dir=tmp_path, capture_dir=capture), doc.name
