"""Safir-Darbaan v1 (specs/safir-darbaan.md), with the PIRAN dialect: pure codec.

>>> from nfgate.codecs import sada
>>> sada.CODEC.decode([b"", b"SADA1", b"PING"])
Ping(proto=b'SADA1')
>>> sada.CODEC.decode([b"", b"SADA1", b"REP", b"12345678", b"\\x00\\x00\\x00\\xc8", b""])
Rep(proto=b'SADA1', request_id='12345678', status=200, payload=b'')
"""

from __future__ import annotations

from .._base import Codec
from . import codec, payload
from .codec import (
    DIALECTS,
    PIRAN_REQUEST_PREFIX,
    PiranRequestId,
    channel_identity,
    identity_endpoint,
    new_request_id,
    parse_piran_request_id,
    piran_checksum,
    server_identity,
)
from .messages import PROTO_ASCII, PROTO_BYTE, PROTOS, Intr, Ping, Pong, Rep, Req, Rintr, SadaMessage

__all__ = [
    "CODEC",
    "DIALECTS",
    "PIRAN_REQUEST_PREFIX",
    "PROTOS",
    "PROTO_ASCII",
    "PROTO_BYTE",
    "Intr",
    "Ping",
    "PiranRequestId",
    "Pong",
    "Rep",
    "Req",
    "Rintr",
    "SadaMessage",
    "channel_identity",
    "decode",
    "detect",
    "encode",
    "identity_endpoint",
    "new_request_id",
    "parse_piran_request_id",
    "payload",
    "piran_checksum",
    "server_identity",
]

CODEC = Codec(
    name="sada",
    title="Safir-Darbaan v1",
    dialects=DIALECTS,
    messages=(Intr, Rintr, Req, Rep, Ping, Pong),
    decoder=codec.decode,
    encoder=codec.encode,
    detector=codec.detect,
)

# The registry's methods, which check their input: the module's detect too, so that
# nfgate.codecs.<name>.detect(None) is a DecodeError, as codecs.get(name).detect(None).
decode = CODEC.decode
encode = CODEC.encode
detect = CODEC.detect
