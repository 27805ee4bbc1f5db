"""Shared test configuration.

Hypothesis profiles: ``ci`` (the default) runs enough examples to mean it while keeping
CI well under its budget; ``deep`` is for long local fuzzing sessions
(``HYPOTHESIS_PROFILE=deep pytest tests/test_robustness.py``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "deep", max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def scaled(ci_examples: int) -> int:
    """``ci_examples`` under the ci profile, proportionally more under ``deep``."""
    return max(1, ci_examples * settings.default.max_examples // 300)
