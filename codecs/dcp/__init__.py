"""DCP, the DagBox Communication Protocol v1 (specs/dcp.md): pure codec.

>>> from nfgate.codecs import dcp
>>> dcp.CODEC.decode([b"", b"DGBX\\x01", b"\\x02"])
Ping()
"""

from __future__ import annotations

from .._base import Codec
from . import codec
from .codec import DIALECTS, PROTOCOL
from .messages import DcpMessage, Ping, Pong, Reconnect, Registration, Reply, Request

__all__ = [
    "CODEC",
    "DIALECTS",
    "PROTOCOL",
    "DcpMessage",
    "Ping",
    "Pong",
    "Reconnect",
    "Registration",
    "Reply",
    "Request",
    "decode",
    "detect",
    "encode",
]

CODEC = Codec(
    name="dcp",
    title="DagBox Communication Protocol v1",
    dialects=DIALECTS,
    messages=(Registration, Ping, Pong, Request, Reply, Reconnect),
    decoder=codec.decode,
    encoder=codec.encode,
    detector=codec.detect,
)

# The registry's methods, which check their input: the module's detect too, so that
# nfgate.codecs.<name>.detect(None) is a DecodeError, as codecs.get(name).detect(None).
decode = CODEC.decode
encode = CODEC.encode
detect = CODEC.detect
