"""Run mypy over nfgate as it is installed: nfgate/, with codecs/, transports/ and
conformance/ mounted as nfgate.codecs, nfgate.transports and nfgate.conformance.

mypy cannot follow setuptools' package-dir mapping, and type-checking ``codecs/`` as a
top-level package would shadow the standard library's ``codecs``. So this builds a
tree of symlinks under build/typecheck/ shaped like the installed package and checks
that. Usage: ``python tools/typecheck.py [extra mypy args]``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"
MOUNTS = {"codecs": "codecs", "transports": "transports", "conformance": "conformance"}


def build() -> Path:
    if TREE.exists():
        shutil.rmtree(TREE)
    pkg = TREE / "nfgate"
    pkg.mkdir(parents=True)
    for item in (ROOT / "nfgate").iterdir():
        if item.name != "__pycache__":
            (pkg / item.name).symlink_to(item)
    for sub, folder in MOUNTS.items():
        (pkg / sub).symlink_to(ROOT / folder, target_is_directory=True)
    return pkg


def main() -> int:
    pkg = build()
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        str(pkg),
        *sys.argv[1:],
    ]
    return subprocess.call(cmd, cwd=TREE)


if __name__ == "__main__":
    sys.exit(main())
