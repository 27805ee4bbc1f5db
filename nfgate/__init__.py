"""nfgate: a translating broker, conformance suite and codec library for the
Majordomo family of service protocols (NFP, DBP, MemoDB, DCP, Safir-Darbaan)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nfgate")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
