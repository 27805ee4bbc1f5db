"""MemoDB, the bcdb job broker protocol "memo01" (specs/memodb.md): pure codec.

One NNG message is one frame: a deterministically encoded CBOR header followed by the
payload.

>>> from nfgate.codecs import memodb
>>> memodb.CODEC.decode([bytes.fromhex("83666d656d6f3031044401020304")])
Heartbeat(id=b'\\x01\\x02\\x03\\x04')
"""

from __future__ import annotations

from .._base import Codec
from . import codec
from .codec import DIALECTS, VERSION
from .messages import Disconnect, Heartbeat, Job, MemodbMessage, Ready, Result

__all__ = [
    "CODEC",
    "DIALECTS",
    "VERSION",
    "Disconnect",
    "Heartbeat",
    "Job",
    "MemodbMessage",
    "Ready",
    "Result",
    "decode",
    "detect",
    "encode",
]

CODEC = Codec(
    name="memodb",
    title="MemoDB broker protocol (memo01)",
    dialects=DIALECTS,
    messages=(Ready, Job, Result, Heartbeat, Disconnect),
    decoder=codec.decode,
    encoder=codec.encode,
    detector=codec.detect,
    single_frame=True,
)

# The registry's methods, which check their input: the module's detect too, so that
# nfgate.codecs.<name>.detect(None) is a DecodeError, as codecs.get(name).detect(None).
decode = CODEC.decode
encode = CODEC.encode
detect = CODEC.detect
