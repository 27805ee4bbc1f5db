"""The protocols and dialects the generic codec tests run over.

``NFGATE_TEST_PROTOCOLS=dcp,sada`` narrows the run while developing one codec; CI never
sets it, so every protocol is always tested there.
"""

from __future__ import annotations

import os

from nfgate import codecs

BUILTIN = ("nfp", "dbp", "memodb", "dcp", "sada")
PROTOCOLS = [p for p in os.environ.get("NFGATE_TEST_PROTOCOLS", ",".join(BUILTIN)).split(",") if p]
CASES = [(p, d) for p in PROTOCOLS for d in codecs.get(p).dialects]
IDS = [f"{p}-{d}" for p, d in CASES]
