"""What the state-machine tables share.

Every state machine here (the core's request parts, each protocol's sessions) is a
dict keyed by ``(state, event)`` tuples of enum members, looked up once or more per
message.
"""

from __future__ import annotations

import enum

__all__ = ["StateEnum"]


class StateEnum(enum.Enum):
    """An enum whose members hash by identity.

    ``enum.Enum.__hash__`` is a Python-level method (``hash(self._name_)``), so every
    table lookup paid two Python calls for hashing the key tuple; members are singletons
    that compare by identity, so the identity hash is consistent with ``==``.
    """

    __hash__ = object.__hash__
