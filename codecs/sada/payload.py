"""msgpack helpers for Safir-Darbaan payload frames.

The REQ Command's payload "MAY be formatted by the msgPack or protocolBuffer", and the
REP Command's likewise. The codec itself never looks inside a payload (it is one opaque
frame, relayed untouched); these helpers are for code that builds or reads payloads.
PIRAN itself puts Jackson JSON in its payloads, not msgpack.

Options are fixed so that a payload means the same thing everywhere: strings are msgpack
``str`` (UTF-8) and byte strings msgpack ``bin`` (``use_bin_type``), arrays come back as
lists, maps as dicts with ``str``/``bytes`` keys only (``strict_map_key``: unhashable or
surprising keys from the network are refused), the msgpack timestamp extension as
``msgpack.Timestamp`` and other extensions as ``msgpack.ExtType``.
"""

from __future__ import annotations

from typing import Any

import msgpack

from nfgate.errors import DecodeError, EncodeError

__all__ = ["MAX_PAYLOAD", "pack", "unpack"]

NAME = "sada"

# nfgate's ceiling for unpacking (the spec sets none). msgpack also bounds every string,
# array and map by the input length, and nesting depth by its own stack limit.
MAX_PAYLOAD = 16 * 1024 * 1024


def pack(obj: Any) -> bytes:
    """Serialize ``obj`` as one msgpack object.

    Raises :class:`EncodeError` for objects msgpack cannot represent (unknown types,
    integers beyond 64 bits, self-referencing containers).
    """
    try:
        data: bytes = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise EncodeError(NAME, f"payload cannot be packed as msgpack: {exc}") from None
    return data


def unpack(
    data: bytes | bytearray | memoryview, *, max_size: int = MAX_PAYLOAD, strict_map_key: bool = True
) -> Any:
    """Deserialize a payload holding exactly one msgpack object.

    Raises :class:`DecodeError` for anything else: not bytes, longer than ``max_size``,
    truncated, trailing bytes, invalid msgpack, invalid UTF-8 in a string, nesting too
    deep, non-``str``/``bytes`` map keys when ``strict_map_key`` is true, a bad timestamp
    extension.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError(NAME, f"payload must be bytes, got {type(data).__name__}")
    if len(data) > max_size:
        raise DecodeError(NAME, f"payload of {len(data)} bytes exceeds the {max_size}-byte msgpack limit")
    if not data:
        raise DecodeError(NAME, "payload is empty: no msgpack object")
    try:
        return msgpack.unpackb(bytes(data), raw=False, use_list=True, strict_map_key=strict_map_key)
    except msgpack.ExtraData as exc:
        raise DecodeError(
            NAME, f"payload has {len(exc.extra)} trailing byte(s) after the msgpack object"
        ) from None
    except Exception as exc:  # msgpack: "Other exceptions can be raised during unpacking"
        raise DecodeError(NAME, f"payload is not valid msgpack: {type(exc).__name__}: {exc}") from None
