"""The dependency floors in pyproject.toml are the versions ``tox -e oldest`` tests.

A floor nobody installs is a guess: attrs 23.1 was allowed while nfgate's codecs used
cached_property on slotted classes, which needs attrs 24.1. tests/oldest.txt pins each
floor exactly, and this keeps the pins and the floors from drifting apart.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Floors of the test extra that tox -e oldest installs; the rest of the extra (NorFab,
# Spark, setuptools) is not installed there.
TEST_EXTRA = {"hypothesis", "pytest", "pytest-timeout"}


def _floors(requirements: list[str]) -> dict[str, str]:
    floors = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?>=([0-9.]+)(?:,.*)?", requirement)
        if match:
            floors[match[1].lower()] = match[2]
    return floors


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "tests" / "oldest.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def _same(floor: str, pin: str) -> bool:
    # ">=6" is met first by 6.0 (or 6.0.0): compare with trailing zeros dropped.
    def parts(version: str) -> list[int]:
        numbers = [int(n) for n in version.split(".")]
        while numbers and numbers[-1] == 0:
            numbers.pop()
        return numbers

    return parts(floor) == parts(pin)


def test_every_floor_is_pinned_in_oldest_txt_and_nothing_else() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = _floors(project["dependencies"])
    floors |= {k: v for k, v in _floors(project["optional-dependencies"]["test"]).items() if k in TEST_EXTRA}
    pins = _pins()
    assert set(pins) == set(floors), "tests/oldest.txt and pyproject.toml name different packages"
    for name, floor in floors.items():
        assert _same(floor, pins[name]), (
            f"{name}: pyproject says >={floor}, tests/oldest.txt pins {pins[name]}"
        )
