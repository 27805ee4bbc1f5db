"""A self-signed TLS certificate for the NNG tests (the openssl CLI, which `.ci/run`
installs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def in_ci() -> bool:
    """True under CI (``CI`` set, as CI services set it, and not ``false`` or ``0``):
    there what ``.ci/run`` installs must be present, and a test fails without it."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


# Skipped on a developer's machine without it; never in CI, which installs it: there
# the tests run and fail on the missing CLI rather than quietly testing less.
needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None and not in_ci(), reason="openssl CLI not installed"
)


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for localhost in ``folder``: the certificate (``cert.pem``), and one
    PEM file with the certificate and its key (``both.pem``, what ``tls_cert_key_file``
    takes). Raises subprocess.CalledProcessError if openssl fails."""
    key, cert, both = folder / "key.pem", folder / "cert.pem", folder / "both.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
        ],
        check=True,
        capture_output=True,
        timeout=20,
    )  # fmt: skip
    both.write_text(cert.read_text() + key.read_text())
    return cert, both
