"""Log lines a peer cannot forge: nfgate.logtext."""

from __future__ import annotations

import logging
import sys

from nfgate.logtext import OneLineFormatter, one_line


def test_control_characters_separators_and_lone_surrogates_are_escaped() -> None:
    assert one_line("a\nb\r\tc\x1b[31m\x7f\x85") == "a\\nb\\r\\tc\\x1b[31m\\x7f\\x85"
    assert one_line("x\u2028y\u2029z") == "x\\u2028y\\u2029z"
    assert one_line("bad \udcff byte") == "bad \\udcff byte"
    # Format characters: a bidi override reorders the rest of the line in a viewer,
    # zero-width ones hide text.
    assert one_line("svc\u202eevil\u200b\ufeff\u2066") == "svc\\u202eevil\\u200b\\ufeff\\u2066"
    # Printable text is left as it is: backslashes, quotes, any script.
    assert one_line("C:\\path 'q' \"d\" café 服务") == "C:\\path 'q' \"d\" café 服务"


def test_the_formatter_keeps_a_tracebacks_lines_but_not_the_messages() -> None:
    formatter = OneLineFormatter("nfgate: %(message)s")
    try:
        raise ValueError("boom")
    except ValueError:
        info = sys.exc_info()
    record = logging.LogRecord("nfgate", logging.ERROR, __file__, 1, "bad %s", ("x\ny",), info)
    first, *rest = formatter.format(record).split("\n")
    assert first == "nfgate: bad x\\ny"
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: boom"
