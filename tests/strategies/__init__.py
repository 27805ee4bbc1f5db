"""Per-protocol hypothesis strategies: ``strategies.<protocol>.messages(dialect)`` returns
``{TYPE: strategy}`` covering every message class the codec has in that dialect."""

from __future__ import annotations

import importlib
from typing import Any

from hypothesis import strategies as st


def messages(protocol: str, dialect: str) -> dict[str, st.SearchStrategy[Any]]:
    module = importlib.import_module(f"tests.strategies.{protocol}")
    result: dict[str, st.SearchStrategy[Any]] = module.messages(dialect)
    return result
