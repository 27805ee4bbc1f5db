"""Click parameter types for user input that click's own let through: an empty path or
URL (``--data-dir ""`` would quietly mean the current folder) and a float that is not a
number (``--timeout nan`` passes every range check, and then every wait is 0 or never
ends). Each is refused as click refuses any bad value: one line, exit status 2."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import click

__all__ = ["NONEMPTY", "FiniteRange", "NonEmptyPath"]


def _empty(value: Any) -> bool:
    return isinstance(value, str) and not value.strip()


class NonEmptyPath(click.Path):
    """``click.Path`` that refuses an empty string."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if _empty(value):
            self.fail("an empty path; use '.' for the current folder", param, ctx)
        return super().convert(value, param, ctx)


if TYPE_CHECKING:
    _TextType = click.ParamType[str, Any]
else:  # click < 8.2 has no subscriptable ParamType
    _TextType = click.ParamType


class NonEmptyString(_TextType):
    """A string (a URL, a URI) that is not empty."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if _empty(value):
            self.fail("must not be empty", param, ctx)
        return str(value)


NONEMPTY = NonEmptyString()


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that also refuses nan and infinities."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number
