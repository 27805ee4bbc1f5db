"""Building blocks shared by the per-protocol strategies."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

#: message TYPE -> strategy producing instances of that message class
MessageStrategies = dict[str, st.SearchStrategy[Any]]

frame = st.binary(max_size=64)
nonempty_frame = st.binary(min_size=1, max_size=64)
printable_text = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp", "Co", "Cn", "Cf", "Zs")
    ),
    min_size=1,
    max_size=24,
)
