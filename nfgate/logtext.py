"""Log lines a peer cannot forge.

Log messages carry what peers sent: a DCP service name "MAY contain any character" (a
newline, a terminal escape), a MemoDB spec-dialect name is any text, and a DCP name's
undecodable bytes are kept as lone surrogates (``surrogateescape``). Written as they
are, a newline starts a line the peer wrote (``nfgate: ready``, say), an escape
sequence recolours or rewrites the operator's terminal, and a lone surrogate makes the
stream handler fail with "--- Logging error ---" instead of the line. The formatter
shows each of them escaped, as Python's ``repr`` does (``\\n``, ``\\x1b``, ``\\udcff``,
``\\u202e``: a bidi override would reorder the rest of the line in a viewer),
so every record is one line of printable text; a traceback keeps its own lines.
"""

from __future__ import annotations

import logging

__all__ = ["OneLineFormatter", "one_line"]


def one_line(text: str) -> str:
    """``text`` with every character ``repr`` would escape escaped as it shows it:
    control characters, line separators, lone surrogates, and the format characters
    (bidi overrides such as U+202E, zero-width ones) that reorder or hide what a viewer
    shows. Printable text, backslashes included, is left as it is."""
    if text.isprintable():  # nearly every line: one pass in C
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class OneLineFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose message part is :func:`one_line`; the
    exception and stack text that :meth:`format` appends keep their lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return one_line(super().formatMessage(record))
