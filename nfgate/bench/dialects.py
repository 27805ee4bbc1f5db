"""What the bench's raw clients and workers put on the wire, per dialect.

Frames are built once from the codecs (``nfgate.codecs.nfp``/``dcp``) as templates; in
the hot loop a request is a template plus its key and body, and a reply is parsed only
as far as the bench needs (its key, its status, its body). Nothing here touches a socket.

Dialects:

- ``raw``: the ceiling relay's own minimal frames (:mod:`nfgate.bench.relay`).
  Client ``["", service, key, body]``, reply ``["", key, body]``; worker READY
  ``["", "READY"]`` acknowledged with ``["", "OK"]``; the relay hands a worker
  ``["", client, key, body]`` and the worker echoes it unchanged.
- ``nfp``: NFP spec dialect. Client and worker OPEN first; POST, the broker's 202, then
  the relayed RESPONSE 200. The key is the job uuid.
- ``norfab``: NorFab 0.25 dialect. Client POST, broker 202, worker gets the routed POST
  and answers RESPONSE 200 with ``{"<worker>": <body>}`` (a NorFab ``{name: Result}``
  shape), which both the NorFab broker and nfgate relay; done at that 200.
- ``dcp``: DCP spec dialect; the key is the one metadata part, echoed by the broker.
- ``sada``: a SADA peer sending REQ to a channel (client side only); the key is the
  request id, which the REP carries back; the status must be 200.

MemoDB clients are NNG req0 sockets, not DEALERs: :mod:`nfgate.bench.nng_load`.
"""

from __future__ import annotations

from collections.abc import Callable

from nfgate.codecs.dcp import codec as dcp_wire
from nfgate.codecs.dcp.messages import Ping, Registration
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.nfp import codec as nfp_wire
from nfgate.codecs.nfp.messages import CLIENT, WORKER, Keepalive, Open, Post, Ready, Response
from nfgate.codecs.sada import codec as sada_wire
from nfgate.codecs.sada.messages import Req as SadaReq

__all__ = [
    "CLIENT_ONLY",
    "DIALECTS",
    "FINAL",
    "INTERIM",
    "SERVICE",
    "Dialect",
    "IGNORE",
    "make_body",
    "make_key",
]

SERVICE = "echo"
DIALECTS = ("raw", "nfp", "norfab", "dcp", "sada")
CLIENT_ONLY = frozenset({"sada"})  # no bench worker speaks these

# What a client-side parse says about one received message.
IGNORE = 0  # not about a request (OPEN reply, PONG ...)
INTERIM = 1  # about a request, not its end (NFP 202)
FINAL = 2  # the request is done: echoed body, or an error status
# Replies are tuples (kind, key, status_ok, body).
Parsed = tuple[int, bytes, bool, bytes]


def make_key(client: int, seq: int) -> bytes:
    """A request key that is unique within one bench run: 32 printable characters,
    usable as a NorFab uuid (``uuid4().hex`` has the same length)."""
    return b"%08x%024x" % (client, seq)


def make_body(key: bytes, size: int) -> bytes:
    """A JSON request body of exactly ``size`` bytes (at least 80) carrying ``key``, so
    a reply for the wrong request is seen as a mismatch. JSON because the NorFab flow
    re-keys JSON bodies, and it is NorFab's own POST body shape."""
    head = b'{"task":"echo","kwargs":{"key":"' + key + b'","pad":"'
    tail = b'"},"args":[],"timeout":15}'
    return head + b"x" * max(0, size - len(head) - len(tail)) + tail


def _parse_raw(frames: list[bytes]) -> Parsed:
    if len(frames) == 3:
        return FINAL, frames[1], True, frames[2]
    return IGNORE, b"", False, b""


def _parse_nfp(command: bytes) -> Callable[[list[bytes]], Parsed]:
    # Broker -> client RESPONSE: "", NFPB01, cmd, service, uuid, status, body (both dialects).
    def parse(frames: list[bytes]) -> Parsed:
        if len(frames) < 7 or frames[2] != command:
            return IGNORE, b"", False, b""
        status = frames[5]
        if status == b"202":
            return INTERIM, frames[4], True, b""
        return FINAL, frames[4], status == b"200", frames[6]

    return parse


def _parse_dcp(frames: list[bytes]) -> Parsed:
    # REPLY to a client: "", DGBX\x01, 0x05, "" (no address), key, "", body
    if len(frames) == 7 and frames[2] == b"\x05":
        return FINAL, frames[4], True, frames[6]
    return IGNORE, b"", False, b""


def _parse_sada(frames: list[bytes]) -> Parsed:
    # REP: "", SADA1, REP, request id, status (ASCII decimal, spec dialect), payload
    if len(frames) == 6 and frames[2] == b"REP":
        return FINAL, frames[3], frames[4] == b"200", frames[5]
    return IGNORE, b"", False, b""


class Dialect:
    """Frames and parsers of one dialect (see the module docstring).

    ``request(key, body)`` builds a client request; ``parse(frames)`` reads a message a
    client got; ``work(frames, name)`` is a worker's answer to a message (None: nothing
    to send); ``expected(body)`` is the body the client must get back.
    """

    def __init__(self, name: str) -> None:
        """Raises ValueError for an unknown dialect name."""
        if name not in DIALECTS:
            raise ValueError(f"unknown bench dialect {name!r}")
        self.name = name
        svc = SERVICE.encode()
        self.client_hello: list[bytes] | None = None  # sent first, and answered, before any request
        self.worker_hello: list[bytes] | None = None  # sent first and answered before READY
        self.worker_ready: list[bytes]
        self.worker_heartbeat: list[bytes] | None = None
        self.heartbeat_always = False  # NorFab: only KEEPALIVE refreshes a worker's hold time
        self.wrap_reply = False
        # NFP (both dialects): every request's final reply follows its own 202.
        self.acknowledged = name in ("nfp", "norfab")
        if name == "raw":
            self._prefix = [b"", svc]
            self.parse: Callable[[list[bytes]], Parsed] = _parse_raw
            self.worker_ready = [b"", b"READY"]
        elif name in ("nfp", "norfab"):
            wire = "spec" if name == "nfp" else "norfab"
            post = nfp_wire.encode(
                Post(header=CLIENT, service=SERVICE, target="any", uuid="k", body=(b"b",)), wire
            )
            self._prefix = post[:5]  # "", NFPC01, POST, service, target
            if wire == "norfab":
                result = Response(header=WORKER, client=b"c", uuid="k", status=200, body=(b"b",))
            else:
                result = Response(header=WORKER, service=SERVICE, uuid="k", status=200, body=(b"b",))
            response = nfp_wire.encode(result, wire)
            self._response_head = response[:3]
            self.parse = _parse_nfp(response[2])
            self._post_command = post[2]
            self.worker_ready = nfp_wire.encode(Ready(service=SERVICE), wire)
            self.worker_heartbeat = nfp_wire.encode(Keepalive(header=WORKER, service=SERVICE), wire)
            if name == "nfp":
                self.client_hello = nfp_wire.encode(Open(header=CLIENT), wire)
                self.worker_hello = nfp_wire.encode(Open(header=WORKER), wire)
            else:
                self.heartbeat_always = True
                self.wrap_reply = True
        elif name == "sada":
            req = sada_wire.encode(
                SadaReq(request_id="k", service=SERVICE, category="bench", action="echo"), "spec"
            )
            self._sada_head = req[:3]  # "", SADA1, REQ
            self._sada_tail = req[4:8]  # service, version (any), category, action
            self.parse = _parse_sada
            self.worker_ready = []  # never used: CLIENT_ONLY
        else:
            req = dcp_wire.encode(
                DcpRequest(service=svc, client=None, metadata=(b"k",), data=(b"b",)), "spec"
            )
            self._prefix = req[:5]  # "", DGBX\x01, REQUEST, service, "" (no client address)
            self._dcp_reply_head = [b"", dcp_wire.PROTOCOL, bytes((dcp_wire.REPLY,))]
            self.parse = _parse_dcp
            self.worker_ready = dcp_wire.encode(Registration(service=svc), "spec")
            self.worker_heartbeat = dcp_wire.encode(Ping(), "spec")

    def request(self, key: bytes, body: bytes) -> list[bytes]:
        if self.name == "dcp":
            return [*self._prefix, key, b"", body]
        if self.name == "sada":
            return [*self._sada_head, key, *self._sada_tail, body]
        return [*self._prefix, key, body]

    def expected(self, body: bytes) -> bytes:
        """What a correct reply's body is; for ``norfab`` only its tail (the worker
        name in front is the broker's choice)."""
        return b'":' + body + b"}" if self.wrap_reply else body

    def matches(self, got: bytes, body: bytes) -> bool:
        if self.wrap_reply:
            return got.startswith(b'{"') and got.endswith(b'":' + body + b"}")
        return got == body

    def is_ack(self, frames: list[bytes]) -> bool:
        """True for the broker's answer to a hello or a READY the bench waits for."""
        if self.name == "raw":
            return frames == [b"", b"OK"]
        if self.name == "nfp":
            return len(frames) == 4 and frames[2] == b"\x00"
        if self.name == "dcp":
            return (
                frames == self.worker_ready
            )  # "the broker will confirm it by responding with the same message"
        return False

    def work(self, frames: list[bytes], name: bytes) -> list[bytes] | None:
        """A worker's echo of one job, or None for anything else (KEEPALIVE, PONG ...)."""
        if self.name == "raw":
            return frames if len(frames) == 4 else None
        if self.name == "nfp":
            # "", NFPB01, POST, service, target, uuid, body -> "", NFPW01, RESPONSE, service, uuid, "200", body
            if len(frames) >= 7 and frames[2] == self._post_command:
                return [*self._response_head, frames[3], frames[5], b"200", *frames[6:]]
            return None
        if self.name == "norfab":
            # "", NFPB01, "0x04", client, "", uuid, body -> routed RESPONSE 200 {"<name>": body}
            if len(frames) == 7 and frames[2] == self._post_command:
                reply = b'{"' + name + b'":' + frames[6] + b"}"
                return [*self._response_head, frames[3], b"", frames[5], b"200", reply]
            return None
        # DCP: "", DGBX\x01, REQUEST, service, client, "", metadata..., "", data...
        if len(frames) >= 6 and frames[2] == b"\x04":
            return [*self._dcp_reply_head, *frames[4:]]
        return None
