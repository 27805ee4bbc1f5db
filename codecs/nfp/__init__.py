"""NFP, the NORFAB Protocol (specs/nfp.md), and NorFab 0.25's dialect: pure codec."""

from __future__ import annotations

from .._base import Codec
from . import codec
from .codec import DIALECTS
from .messages import (
    BROKER,
    CLIENT,
    WORKER,
    Delete,
    Disconnect,
    Event,
    Get,
    Keepalive,
    Mmi,
    NfpMessage,
    Open,
    Post,
    Put,
    Ready,
    Response,
    Stream,
)
from .targets import parse_target

__all__ = [
    "BROKER",
    "CLIENT",
    "CODEC",
    "DIALECTS",
    "WORKER",
    "Delete",
    "Disconnect",
    "Event",
    "Get",
    "Keepalive",
    "Mmi",
    "NfpMessage",
    "Open",
    "Post",
    "Put",
    "Ready",
    "Response",
    "Stream",
    "decode",
    "detect",
    "encode",
    "parse_target",
]

CODEC = Codec(
    name="nfp",
    title="NORFAB Protocol",
    dialects=DIALECTS,
    messages=(Open, Ready, Keepalive, Disconnect, Post, Response, Get, Delete, Event, Stream, Put, Mmi),
    decoder=codec.decode,
    encoder=codec.encode,
    detector=codec.detect,
)

# The registry's methods, which check their input: the module's detect too, so that
# nfgate.codecs.<name>.detect(None) is a DecodeError, as codecs.get(name).detect(None).
decode = CODEC.decode
encode = CODEC.encode
detect = CODEC.detect
