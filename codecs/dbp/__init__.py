"""DBP, the Distributive Broker Protocol of LASP's Core Catalog Service (specs/dbp.md):
pure codec, service-information helpers and UDP datagrams.

>>> from nfgate.codecs import dbp
>>> dbp.CODEC.decode([b"", b"u_U", b"1732251000", b"echo"])
Request(time=1732251000.0, query='echo')
"""

from __future__ import annotations

from .._base import Codec
from . import codec
from .codec import (
    DIALECTS,
    REQUIRED_KEYS,
    decode_time,
    encode_time,
    make_info,
    missing_required,
    service_info,
)
from .messages import (
    Ack,
    Approved,
    DbpMessage,
    Denied,
    Disconnect,
    Heartbeat,
    Registration,
    Reply,
    Request,
    Update,
)
from .udp import (
    BEACON_PORT,
    CATALOG_PORT,
    decode_beacon,
    decode_heartbeat_datagram,
    encode_beacon,
    encode_heartbeat_datagram,
)

__all__ = [
    "BEACON_PORT",
    "CATALOG_PORT",
    "CODEC",
    "DIALECTS",
    "REQUIRED_KEYS",
    "Ack",
    "Approved",
    "DbpMessage",
    "Denied",
    "Disconnect",
    "Heartbeat",
    "Registration",
    "Reply",
    "Request",
    "Update",
    "decode",
    "decode_beacon",
    "decode_heartbeat_datagram",
    "decode_time",
    "detect",
    "encode",
    "encode_beacon",
    "encode_heartbeat_datagram",
    "encode_time",
    "make_info",
    "missing_required",
    "service_info",
]

CODEC = Codec(
    name="dbp",
    title="Distributive Broker Protocol (Core Catalog Service)",
    dialects=DIALECTS,
    messages=(Request, Reply, Registration, Update, Approved, Denied, Heartbeat, Disconnect, Ack),
    decoder=codec.decode,
    encoder=codec.encode,
    detector=codec.detect,
)

# The registry's methods, which check their input: the module's detect too, so that
# nfgate.codecs.<name>.detect(None) is a DecodeError, as codecs.get(name).detect(None).
decode = CODEC.decode
encode = CODEC.encode
detect = CODEC.detect
