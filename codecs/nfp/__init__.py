"""NFP, the NORFAB Protocol (specs/nfp.md), and NorFab 0.25's dialect: pure codec."""

from __future__ import annotations

from .._base import Codec
from . import codec
from .codec import DIALECTS, detect
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
    detector=detect,
)

decode = CODEC.decode
encode = CODEC.encode
