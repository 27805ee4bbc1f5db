"""attrs helpers for fields that hold frames, shared by the command model, the codecs
and the job store: one converter and one validator, so "a tuple of bytes" means the
same thing everywhere."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

__all__ = ["EMPTY_FRAME", "bytes_tuple", "check_bytes_tuple", "hex_frames"]

EMPTY_FRAME = "-"  # how an empty frame is written in hex form (`nfgate decode` takes it)


def bytes_tuple(value: Iterable[bytes]) -> tuple[bytes, ...]:
    """attrs converter: any iterable of frames to a tuple (frozen classes hold tuples).

    Raises ``TypeError`` for a single byte string or text: iterated, ``b""`` would
    quietly become no frame at all and ``b"ab"`` a tuple of ints.
    """
    if isinstance(value, bytes | bytearray | memoryview | str):
        raise TypeError(f"expected a sequence of frames, got a single {type(value).__name__}")
    return tuple(value)


def check_bytes_tuple(_: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    """attrs validator: every element is ``bytes``; raises ``TypeError`` naming the field."""
    for item in value:
        if not isinstance(item, bytes):
            raise TypeError(f"{attribute.name} must hold bytes, got {type(item).__name__}")


def hex_frames(frames: Iterable[bytes], limit: int | None = None) -> str:
    """Frames as space-separated hex, ``-`` for an empty one: what ``nfgate encode``
    prints and ``nfgate decode`` reads. ``limit`` cuts each frame to that many bytes."""
    return " ".join(f[:limit].hex() or EMPTY_FRAME for f in frames)
