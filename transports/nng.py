"""NNG transport: a rep0 socket served with many contexts at once, plus req0 helpers.

MemoDB (specs/memodb.md, "Base layer") puts every client and worker behind one broker
rep0 socket, and workers long-poll: the broker holds a worker's request for up to the
heartbeat interval before it answers. So hundreds of requests are outstanding at once,
each on its own ``nng_ctx``, and the gateway's one event-loop thread must serve them
all without blocking.

Design (no helper thread, no per-message thread):

* **Receiving** -- the rep0 socket's ``recv_fd`` (``NNG_OPT_RECVFD``) is handed to the
  gateway's ``zmq.Poller`` as a plain file descriptor. NNG raises it while a pipe holds a
  request that no context is receiving. When it is readable, :meth:`RepEndpoint.recv`
  takes a context (a free one, or a new one) and calls ``nng_ctx_recvmsg`` with
  ``NNG_FLAG_NONBLOCK``: the waiting request is bound to that context, and the context
  is *held* until the edge answers or drops it. An empty socket answers ``NNG_EAGAIN``
  at once, never blocking the loop. Under a burst the edge also *posts* receives
  (``nng_ctx_recv`` with an aio and no callback), so that NNG's threads take the
  requests and do the socket reads; the loop collects them (:meth:`RepEndpoint.post`,
  below).
* **Replying** -- ``nng_ctx_sendmsg`` with ``NNG_FLAG_NONBLOCK`` is unusable: when the
  pipe is still busy with an earlier reply (several contexts multiplexed on one peer
  socket, multi-MB bodies) it fails *and* forgets the request (``NNG_ESTATE`` on retry).
  So a reply goes out through an ``nng_aio`` without a callback (``nng_ctx_send``): on
  an idle pipe NNG completes it inside the call; otherwise it stays in
  :attr:`RepEndpoint.sending` and :meth:`RepEndpoint.reap`, called once per loop
  iteration, collects it when ``nng_aio_busy`` turns false (the edge asks to be woken
  with a backoff of 1 to 32 ms while any is pending). A send that cannot finish within
  ``send_timeout_ms`` fails and is counted.
* **Disconnections** -- NNG reports a closed connection through a pipe callback on one
  of its threads; the callback appends the pipe id to a bounded deque and writes one
  byte to an ``os.pipe`` whose read end (:attr:`RepEndpoint.event_fd`) the loop polls
  too, so the edge learns at once that a worker or client is gone.

Cost: per request one non-blocking receive call (or, under a burst, one busy check of
a posted receive and one new post), per reply one aio start plus one busy check; no
thread hand-off and no wake-up byte per message (only per closed connection), no GIL
traffic from NNG's threads into Python on the message path (completion callbacks
would need pynng's private aio map). The price is the backoff
polling while a reply waits on a busy pipe, and the use of pynng's cffi ``lib``/``ffi``
for the NNG calls its Python classes lack (pynng's own TLSConfig uses them the same
way). A helper thread running contexts with pynng's blocking or asyncio API was the
alternative: it costs two thread hand-offs (and GIL contention) per request, which this
design avoids.

Limits: at most ``max_contexts`` requests are held; a request arriving beyond that is
received and dropped at once (the context is recycled without an answer, counted in
:attr:`RepEndpoint.refused`): req0 peers resend after their resend time, MemoDB clients
retry (specs/memodb.md, "Simple client"). Nothing is queued in Python without a bound:
held contexts, in-flight sends and free lists are all bounded by ``max_contexts``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections import deque
from pathlib import Path

import pynng
from pynng import ffi, lib

from nfgate.errors import TransportError
from nfgate.transports import Tap

__all__ = [
    "RepEndpoint",
    "client_tls",
    "connect_req",
    "nng_url",
    "server_tls",
]

log = logging.getLogger("nfgate.transports.nng")

_NONBLOCK = int(lib.NNG_FLAG_NONBLOCK)
_EAGAIN = int(lib.NNG_EAGAIN)
_ECLOSED = int(lib.NNG_ECLOSED)
_INFINITE = -1  # NNG_DURATION_INFINITE: a posted receive waits until a request or unpost()
_RETRY_MAX_MS = 32  # longest wait between two checks of a reply stuck on a busy pipe
_FREE_CONTEXTS = 256  # idle contexts kept for reuse; more are closed
_CLOSED_MAX = 4096  # closed connections remembered to drop their posted requests (recv)
_GONE_MAX = 65_536  # pipe closures remembered between two reads; older ones are lost (liveness still acts)
_SCHEMES = ("tcp://", "ipc://", "tls+tcp://", "inproc://", "tcp4://", "tcp6://")


def nng_url(url: str) -> str:
    """``url`` as NNG takes it: ZeroMQ's ``tcp://host:*`` (any port) becomes ``:0``.

    Raises :class:`TransportError` for a scheme NNG does not serve here.
    """
    if not url.startswith(_SCHEMES):
        raise TransportError(f"cannot bind {url}: not an NNG URL (tcp://, ipc://, tls+tcp://)")
    return re.sub(r":\*$", ":0", url)


def server_tls(
    cert_key_file: Path,
    ca_file: Path | None = None,
    *,
    keys: tuple[str, str] = ("tls_cert_key_file", "tls_ca_file"),
) -> pynng.TLSConfig:
    """A server TLS config from one PEM file holding the certificate and its key; with
    ``ca_file``, clients must present a certificate signed by it.

    Raises :class:`TransportError` when a file cannot be loaded, its message starting
    with the file's config key (``keys``: the certificate's, the CA file's; an edge
    gives them with their section, ``edges.memodb.tls_cert_key_file``) and naming the file.
    """
    try:
        config = pynng.TLSConfig(pynng.TLSConfig.MODE_SERVER, cert_key_file=str(cert_key_file))
    except pynng.NNGException as exc:
        raise TransportError(f"{keys[0]}: cannot load TLS certificate {cert_key_file}: {exc}") from None
    if ca_file is not None:
        try:
            config.add_ca_file(str(ca_file))
            config.set_auth_mode(pynng.TLSConfig.AUTH_MODE_REQUIRED)
        except pynng.NNGException as exc:
            raise TransportError(f"{keys[1]}: cannot load TLS CA certificates {ca_file}: {exc}") from None
    return config


def client_tls(ca_pem: str, server_name: str = "localhost") -> pynng.TLSConfig:
    """A client TLS config trusting the PEM certificate(s) ``ca_pem``."""
    return pynng.TLSConfig(pynng.TLSConfig.MODE_CLIENT, server_name=server_name, ca_string=ca_pem)


class RepEndpoint:
    """A bound rep0 socket whose requests are each held on their own context.

    Requests are identified by a *key* (an int, never reused) from :meth:`recv` until
    :meth:`send` or :meth:`drop`. Every method is meant for one thread (the gateway's).

    Raises :class:`TransportError` at construction when ``url`` cannot be bound.
    """

    capture_kind = "nng"

    def __init__(
        self,
        url: str,
        *,
        max_contexts: int = 1024,
        max_message_bytes: int = 64 * 1024 * 1024,
        send_timeout_ms: int = 30_000,
        tls: pynng.TLSConfig | None = None,
    ) -> None:
        if max_contexts < 1:
            raise ValueError("max_contexts must be at least 1")
        self.url = url
        self.max_contexts = max_contexts
        self.send_timeout_ms = send_timeout_ms
        self.received = 0
        self.received_posted = 0  # of those, taken by posted receives (read by NNG's threads)
        self.refused = 0  # requests dropped unanswered because max_contexts were held
        self.dropped = 0  # requests the edge chose not to answer
        self.orphaned = 0  # requests a posted receive took whose connection closed before recv()
        self.sent = 0  # replies handed to NNG
        self.send_failed = 0  # replies NNG could not deliver (timeout, socket closed)
        self.tap: Tap | None = None  # set by nfgate.capture when --capture is on
        self._pipe_of: dict[int, int] = {}  # key -> pipe id of a held request, while tapped
        self._held: dict[int, object] = {}  # key -> nng_ctx * of a request awaiting its answer
        self._free: list[object] = []  # contexts ready for the next request
        self._aios: list[object] = []  # idle nng_aio * for replies
        self.sending: list[tuple[object, object]] = []  # (aio, ctx) of replies still going out
        self.posted: deque[tuple[object, object]] = deque()  # (aio, ctx) of receives, oldest first
        self._raios: list[object] = []  # idle nng_aio * for posted receives
        self._target = 0  # receives to keep posted (post(), harvest())
        # (ctx, pipe id, message) of requests posted receives took, for recv()
        self._ready: deque[tuple[object, int, bytes]] = deque()
        self._next_key = 1
        self._msgp = ffi.new("nng_msg **")
        self._retry_ms = 1
        bind = nng_url(url)
        if bind.startswith("tls+") and tls is None:
            raise TransportError(f"cannot bind {url}: tls+tcp:// needs a certificate (tls_cert_key_file)")
        try:
            sock = pynng.Rep0(tls_config=tls) if tls is not None else pynng.Rep0()
        except pynng.NNGException as exc:
            raise TransportError(f"cannot open an NNG socket for {url}: {exc}") from None
        try:
            # 0 would be "unlimited"; NNG closes the pipe of a peer that sends more.
            sock.recv_max_size = max_message_bytes
            listener = sock.listen(bind)
        except pynng.NNGException as exc:
            sock.close()
            reason = "address already in use" if isinstance(exc, pynng.AddressInUse) else str(exc)
            raise TransportError(f"cannot bind {url}: {reason}") from None
        self.socket = sock
        self.endpoint: str = str(listener.url)
        self.fd: int = int(sock.recv_fd)
        self._sock = sock.socket
        # Peers that disconnect: NNG calls back on its own thread; the pipe id goes to a
        # bounded deque and one byte to a pipe whose read end the loop polls.
        self._gone: deque[int] = deque(maxlen=_GONE_MAX)
        self._closed: set[int] = set()  # the last _CLOSED_MAX closures returned by closed_pipes()
        self._closed_order: deque[int] = deque()
        self.event_fd, self._event_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        sock.add_post_pipe_remove_cb(self._pipe_removed)

    def _pipe_removed(self, pipe: pynng.Pipe) -> None:
        # Runs on an NNG thread: only thread-safe steps (deque.append, os.write).
        self._gone.append(int(pipe.id))
        fd = self._event_w
        if fd >= 0:
            with contextlib.suppress(OSError):  # full: the loop will read it anyway
                os.write(fd, b"\0")

    def closed_pipes(self) -> list[int]:
        """Ids of the connections closed since the last call (peers gone)."""
        with contextlib.suppress(OSError):
            while os.read(self.event_fd, 4096):
                pass
        gone: list[int] = []
        while self._gone:
            gone.append(self._gone.popleft())
        if gone:
            # A posted receive may hold a request from a connection that closed after NNG
            # gave it the request: recv() drops such a request, as NNG itself drops
            # what a closed connection had not handed over.
            closed = self._closed
            closed.update(gone)
            self._closed_order.extend(gone)
            while len(self._closed_order) > _CLOSED_MAX:
                closed.discard(self._closed_order.popleft())
        return gone

    # ------------------------------------------------------------------ receiving

    @property
    def held(self) -> int:
        """Requests received and not answered yet."""
        return len(self._held)

    def recv(self) -> tuple[int, int, bytes] | None:
        """The next waiting request as ``(key, pipe id, message)``, or None when none is
        waiting: first those that posted receives took (:meth:`harvest`), then those
        waiting on the socket. Requests beyond ``max_contexts`` are dropped and counted,
        not returned.

        Raises :class:`TransportError` if NNG fails for another reason than "nothing
        waiting" or "socket closed".
        """
        for _ in range(64):  # refusals consumed per call: bounded work per poll
            if self._ready or (self.posted and self.harvest()):
                ctx, pipe, data = self._ready.popleft()
                if pipe in self._closed:  # its peer is gone, and the edge has been told
                    self.orphaned += 1
                    self._recycle(ctx)
                    continue
            else:
                ctx = self._context()
                rv = lib.nng_ctx_recvmsg(ctx[0], self._msgp, _NONBLOCK)  # type: ignore[index]
                if rv != 0:
                    self._free.append(ctx)
                    if rv in (_EAGAIN, _ECLOSED):
                        return None
                    raise TransportError(f"receive on {self.url} failed: {_strerror(rv)}")
                pipe, data = _take(self._msgp[0])
            self.received += 1
            tap = self.tap
            if tap is not None:
                tap("in", f"pipe-{pipe}", (data,))
            if len(self._held) >= self.max_contexts:
                # The context forgets this request when it receives the next one.
                self.refused += 1
                log.debug("%s: request from pipe-%d refused: %d held", self.url, pipe, self.max_contexts)
                self._recycle(ctx)
                continue
            key = self._next_key
            self._next_key += 1
            self._held[key] = ctx
            if tap is not None:
                self._pipe_of[key] = pipe  # the reply's peer, for its capture record
            return key, pipe, data
        return None

    # Posted receives. A receive posted on a context before its request arrives is
    # completed by NNG's own thread, which also re-arms the connection's read; a
    # non-blocking nng_ctx_recvmsg does that (a readv, an epoll_ctl, and a getrandom
    # for the aio it sets up) on the caller's thread, the gateway's loop. So under a
    # burst the edge keeps receives posted (post), collects the completed ones (the
    # oldest, checked with nng_aio_busy) and posts new ones in their place (harvest).
    # NNG raises the socket's receive fd only when no context is waiting, so a request
    # taken by a posted receive wakes nobody: while any is posted the loop polls
    # without sleeping (pending), and the edge withdraws them (unpost) once the loop
    # has been quiet for a few iterations, after which the fd announces requests again.

    @property
    def pending(self) -> bool:
        """Receives are posted, or requests they took wait for :meth:`recv`."""
        return bool(self.posted or self._ready)

    def post(self, target: int) -> None:
        """Keep up to ``target`` receives posted (fewer when ``max_contexts`` would be passed).

        Raises :class:`TransportError` if NNG cannot open a context or an aio.
        """
        self._target = target
        want = min(target, self.max_contexts - len(self._held) - len(self._ready)) - len(self.posted)
        for _ in range(want):
            ctx = self._context()
            if self._raios:
                aio = self._raios.pop()
            else:
                aio = self._alloc_aio()
                lib.nng_aio_set_timeout(aio, _INFINITE)
            lib.nng_ctx_recv(ctx[0], aio)  # type: ignore[index]
            self.posted.append((aio, ctx))

    def harvest(self) -> int:
        """Collect the posted receives that got a request (for :meth:`recv`); returns how many did."""
        posted, busy = self.posted, lib.nng_aio_busy
        got = 0
        # rep0 hands a request to the context that has waited longest (its receive queue
        # is a FIFO), so the completed receives are the oldest: stop at the first busy one.
        while posted and not busy(posted[0][0]):
            got += self._collect(*posted.popleft())
        if got:
            self.post(self._target)
        return got

    def unpost(self) -> None:
        """Withdraw every posted receive; a request one took meanwhile is kept for :meth:`recv`."""
        posted, self.posted = self.posted, deque()
        self._target = 0
        for aio, _ in posted:
            lib.nng_aio_cancel(aio)  # completes it at once (NNG_ECANCELED) unless a request won the race
        for aio, ctx in posted:
            lib.nng_aio_wait(aio)
            self._collect(aio, ctx)

    def _collect(self, aio: object, ctx: object) -> int:
        rv = lib.nng_aio_result(aio)
        msg = lib.nng_aio_get_msg(aio) if rv == 0 else ffi.NULL
        lib.nng_aio_set_msg(aio, ffi.NULL)
        self._raios.append(aio)
        if msg == ffi.NULL:  # withdrawn, or the socket closed
            self._recycle(ctx)
            return 0
        self._ready.append((ctx, *_take(msg)))
        self.received_posted += 1
        return 1

    def _context(self) -> object:
        """A free context, or a new one. Raises :class:`TransportError`."""
        if self._free:
            return self._free.pop()
        ctx = ffi.new("nng_ctx *")
        rv = lib.nng_ctx_open(ctx, self._sock)
        if rv != 0:
            raise TransportError(f"cannot open an NNG context on {self.url}: {_strerror(rv)}")
        return ctx

    def _recycle(self, ctx: object) -> None:
        if len(self._free) < _FREE_CONTEXTS:
            self._free.append(ctx)
        else:
            lib.nng_ctx_close(ctx[0])  # type: ignore[index]

    # ------------------------------------------------------------------- replying

    def send(self, key: int, data: bytes) -> bool:
        """Answer request ``key`` with ``data``; False if ``key`` is not held (answered
        or dropped already). The reply may still be going out when this returns.

        Raises :class:`TransportError` if NNG cannot allocate the message.
        """
        ctx = self._held.pop(key, None)
        if ctx is None:
            return False
        if self.tap is not None:
            self.tap("out", f"pipe-{self._pipe_of.pop(key, 0)}", (data,))
        aio = self._aios.pop() if self._aios else self._alloc_aio()
        msgp = self._msgp
        rv = lib.nng_msg_alloc(msgp, 0)
        if rv == 0:
            rv = lib.nng_msg_append(msgp[0], data, len(data))
            if rv != 0:
                lib.nng_msg_free(msgp[0])
        if rv != 0:
            self._aios.append(aio)
            self._recycle(ctx)
            raise TransportError(f"cannot build a {len(data)}-byte NNG message: {_strerror(rv)}")
        lib.nng_aio_set_timeout(aio, self.send_timeout_ms)
        lib.nng_aio_set_msg(aio, msgp[0])
        lib.nng_ctx_send(ctx[0], aio)  # type: ignore[index]
        self.sent += 1
        if lib.nng_aio_busy(aio):
            self.sending.append((aio, ctx))
        else:
            self._sent(aio, ctx)
        return True

    @property
    def receive_failures(self) -> int:
        """Requests received and dropped here (:attr:`refused`)."""
        return self.refused

    @property
    def send_failures(self) -> int:
        """Replies NNG could not deliver (:attr:`send_failed`)."""
        return self.send_failed

    def drop(self, key: int) -> bool:
        """Leave request ``key`` unanswered (its peer times out and resends); False if
        it is not held."""
        ctx = self._held.pop(key, None)
        if ctx is None:
            return False
        self._pipe_of.pop(key, None)
        self.dropped += 1
        self._recycle(ctx)
        return True

    def _alloc_aio(self) -> object:
        aiop = ffi.new("nng_aio **")
        rv = lib.nng_aio_alloc(aiop, ffi.NULL, ffi.NULL)
        if rv != 0:
            raise TransportError(f"cannot allocate an NNG aio: {_strerror(rv)}")
        return aiop[0]

    def _sent(self, aio: object, ctx: object) -> None:
        if lib.nng_aio_result(aio) != 0:
            self.send_failed += 1
            msg = lib.nng_aio_get_msg(aio)  # still ours when the send failed
            if msg != ffi.NULL:
                lib.nng_msg_free(msg)
            lib.nng_aio_set_msg(aio, ffi.NULL)
        self._aios.append(aio)
        self._recycle(ctx)

    def reap(self) -> int:
        """Collect replies that finished going out; returns how many are still going."""
        if not self.sending:
            self._retry_ms = 1
            return 0
        busy = lib.nng_aio_busy
        still: list[tuple[object, object]] = []
        for aio, ctx in self.sending:
            if busy(aio):
                still.append((aio, ctx))
            else:
                self._sent(aio, ctx)
        self.sending = still
        if not still:
            self._retry_ms = 1
        return len(still)

    def retry_after_ms(self) -> int | None:
        """How long the loop may sleep before :meth:`reap` should run again (backoff
        1, 2, 4 ... 32 ms while replies are pending), or None when none is."""
        if not self.sending:
            return None
        wait = self._retry_ms
        self._retry_ms = min(_RETRY_MAX_MS, wait * 2)
        return wait

    def close(self, flush_ms: int = 200) -> None:
        """Give pending replies up to ``flush_ms`` to go out, then close everything."""
        deadline = time.monotonic() + flush_ms / 1000
        while self.reap() and time.monotonic() < deadline:
            time.sleep(0.002)
        for aio, _ in self.sending:
            lib.nng_aio_stop(aio)  # cancels and waits: NNG no longer touches it after this
            self._sent(aio, _)
        self.sending = []
        self.unpost()
        for aio in (*self._aios, *self._raios):
            lib.nng_aio_free(aio)
        self._aios, self._raios = [], []
        self._ready.clear()
        self._held.clear()
        self._free.clear()
        self.socket.close()  # closes every context too (and calls _pipe_removed per peer)
        # nng_close returns once its pipes are gone; -1 first so no late callback can
        # write to a descriptor number the process reuses.
        fds, self._event_w = (self.event_fd, self._event_w), -1
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _take(msg: object) -> tuple[int, bytes]:
    """The pipe id and body of a received ``nng_msg *``, which is freed."""
    try:
        return int(lib.nng_pipe_id(lib.nng_msg_get_pipe(msg))), bytes(
            ffi.buffer(lib.nng_msg_body(msg), lib.nng_msg_len(msg))
        )
    finally:
        lib.nng_msg_free(msg)


def _strerror(rv: int) -> str:
    return str(ffi.string(lib.nng_strerror(rv)).decode("utf-8", "replace"))


def connect_req(
    url: str,
    *,
    recv_timeout_ms: int = 3000,
    send_timeout_ms: int = 3000,
    resend_ms: int | None = None,
    max_message_bytes: int = 64 * 1024 * 1024,
    tls: pynng.TLSConfig | None = None,
) -> pynng.Req0:
    """A req0 socket dialled to ``url`` (tests and the conformance suite). The dial
    blocks until connected. ``resend_ms``: NNG's request resend time (None: NNG's
    default of one minute).

    Raises :class:`TransportError` when the dial fails.
    """
    sock = pynng.Req0(tls_config=tls) if tls is not None else pynng.Req0()
    try:
        sock.recv_timeout = recv_timeout_ms
        sock.send_timeout = send_timeout_ms
        sock.recv_max_size = max_message_bytes
        if resend_ms is not None:
            sock.resend_time = resend_ms
        sock.dial(nng_url(url), block=True)
    except pynng.NNGException as exc:
        sock.close()
        raise TransportError(f"cannot dial {url}: {exc}") from None
    return sock
