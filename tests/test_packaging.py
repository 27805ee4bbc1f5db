"""The wheel a user installs: every module in it under its import name, the type marker,
the entry points, and a working package imported from the wheel alone.

The source tree maps three top-level directories into the package (``codecs/`` is
``nfgate.codecs``, ``transports/`` ``nfgate.transports``, ``conformance/``
``nfgate.conformance``) through an explicit package list in pyproject.toml. A
subpackage left out of that list, or a mapping gone wrong, still imports in a checkout
and fails only for whoever installs the wheel: this test builds it and looks.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Source directory -> where its modules go in the wheel (pyproject.toml, package-dir).
MAPPED = {
    "nfgate": "nfgate",
    "codecs": "nfgate/codecs",
    "transports": "nfgate/transports",
    "conformance": "nfgate/conformance",
}
CODECS = {"nfp", "dbp", "memodb", "dcp", "sada"}
# Not sources: virtual environments, build outputs, caches, data the tests leave.
SKIP = (
    ".git",
    ".venv",
    "venv",
    ".tox",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # From a copy of the sources: setuptools builds in the tree's build/, where files of
    # an earlier build (a module since dropped from the package list) would still be
    # picked up.
    source = tmp_path_factory.mktemp("source") / "nfgate"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*SKIP))
    # No build isolation: the test extra brings the setuptools pyproject.toml asks for,
    # so the build needs no network.
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (built,) = out.glob("nfgate-*.whl")
    return built


def _sources() -> set[str]:
    names = set()
    for src, dest in MAPPED.items():
        for path in (ROOT / src).rglob("*.py"):
            if "__pycache__" not in path.parts:
                names.add(f"{dest}/{path.relative_to(ROOT / src).as_posix()}")
    return names


def test_every_module_is_in_the_wheel_under_its_import_name(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = _sources() - names
    assert not missing, f"modules left out of the wheel: {sorted(missing)}"
    assert "nfgate/py.typed" in names  # PEP 561: users' type checkers read the hints
    # Only the package ships: no tests, tools or top-level codecs/transports packages.
    stray = (
        {n.split("/", 1)[0] for n in names}
        - {"nfgate"}
        - {n.split("/", 1)[0] for n in names if ".dist-info/" in n}
    )
    assert not stray, f"unexpected top-level entries in the wheel: {sorted(stray)}"


def test_the_wheel_declares_the_console_script_and_the_codec_plugins(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    (entry_points,) = (n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))
    parser = configparser.ConfigParser()
    parser.read_string(archive.read(entry_points).decode())
    assert parser["console_scripts"]["nfgate"] == "nfgate.cli:main"
    assert set(parser["nfgate.codecs"]) == CODECS
    for name, target in parser["nfgate.codecs"].items():
        assert target == f"nfgate.codecs.{name}:CODEC"


def test_the_package_works_from_the_wheel_alone(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # Import every module from the unpacked wheel (PYTHONPATH comes before the
    # checkout's editable finder), then use the codec library and the CLI from it.
    script = """
import importlib, pkgutil, sys
import nfgate
assert nfgate.__file__.startswith(sys.argv[1]), nfgate.__file__
for info in pkgutil.walk_packages(nfgate.__path__, "nfgate."):
    if info.name.endswith("__main__"):  # runs the command line when imported
        continue
    module = importlib.import_module(info.name)
    assert module.__file__.startswith(sys.argv[1]), module.__file__
from nfgate import codecs
msg = codecs.get("dcp").decode([b"", b"DGBX\\x01", b"\\x04", b"echo", b"", b"req-1", b"", b"hello"])
print(type(msg).__name__, sorted(codecs.names()))
"""
    env = {**os.environ, "PYTHONPATH": str(site)}

    def python(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    assert python("-c", script, str(site)).strip() == "Request ['dbp', 'dcp', 'memodb', 'nfp', 'sada']"
    # The command line, as `python -m nfgate` (the wheel's console script runs the same main).
    assert python("-m", "nfgate", "--version").split()[-1] == "0.1.0"
