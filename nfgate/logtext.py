"""Log lines a peer cannot forge.

Log messages carry what peers sent: a DCP service name "MAY contain any character" (a
newline, a terminal escape), a MemoDB spec-dialect name is any text, and a DCP name's
undecodable bytes are kept as lone surrogates (``surrogateescape``). Written as they
are, a newline starts a line the peer wrote (``nfgate: ready``, say), an escape
sequence recolours or rewrites the operator's terminal, and a lone surrogate makes the
stream handler fail with "--- Logging error ---" instead of the line. The formatter
shows each of them escaped, as Python's ``repr`` does (``\\n``, ``\\x1b``, ``\\udcff``),
so every record is one line of printable text; a traceback keeps its own lines.
"""

from __future__ import annotations

import logging
from typing import Final

__all__ = ["OneLineFormatter", "one_line"]

_CONTROL: Final = [
    *range(0x00, 0x20),
    *range(0x7F, 0xA0),
    0x2028,
    0x2029,
]  # C0, DEL, C1, line/paragraph separators
_SURROGATES: Final = range(0xD800, 0xE000)
_ESCAPES: Final = {code: repr(chr(code))[1:-1] for code in (*_CONTROL, *_SURROGATES)}


def one_line(text: str) -> str:
    """``text`` with control characters, Unicode line separators and lone surrogates
    escaped as ``repr`` shows them; printable text, backslashes included, as it is."""
    return text.translate(_ESCAPES)


class OneLineFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose message part is :func:`one_line`; the
    exception and stack text that :meth:`format` appends keep their lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))
