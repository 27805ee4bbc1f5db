"""The SADA channel's servers, kept in the data dir to be asked back after a restart.

specs/safir-darbaan.md: "If a channel restarted, it can send a RINTR(request for INTR)
command to servers. and servers SHOULD response by INTR command." A server speaks first
only at its own start (INTR); a channel that restarts under it learns of it only when
it speaks again, which an idle server never does, as the channel PINGs only servers it
knows. So the channel writes down the identities of the servers introduced to it, and
after a restart sends each a RINTR once its connection is back (libzmq reconnects the
server's socket by itself).

Only identities a server set itself (PIRAN's ``ip:port``) are kept: one that libzmq
made up names one connection and dies with it. Pure bookkeeping and a small JSON file;
the edge does the sending.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

from nfgate.codecs.sada import DIALECTS, PROTOS

__all__ = ["RETRY_MS", "ServerRecall", "recall_path"]

log = logging.getLogger("nfgate.edge.sada")

RETRY_MS = 200  # between RINTR rounds while recalled servers are not back yet
FORMAT = 1  # the file's "format": a file of another is ignored (logged), not misread


def recall_path(data_dir: Path, edge_name: str) -> Path:
    return data_dir / f"sada-{edge_name}-servers.json"


class ServerRecall:
    """The servers (identity -> proto frame, dialect) the channel ``path`` belongs to
    had introduced, as of its last change, at most ``limit`` of them; and, after a
    start, those still to be sent RINTR, for up to ``window_ms`` (the time the channel
    would wait for a silent server before taking it for dead).

    Never raises for the file: one that cannot be read is logged and taken as empty, a
    write that fails is logged (once until one succeeds) and tried again at the next
    change."""

    def __init__(self, path: Path, *, window_ms: int, limit: int) -> None:
        self.path = path
        self._window = window_ms
        self._limit = limit
        self._known: dict[bytes, tuple[bytes, str]] = self._load()
        self._pending = dict(self._known)
        self._until: int | None = None  # set at the first round
        self._next = 0
        self._failing = False

    def _load(self) -> dict[bytes, tuple[bytes, str]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("%s: cannot read (%s): no server is asked back", self.path, exc)
            return {}
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, not {FORMAT}")
            known = {
                bytes.fromhex(s["identity"]): (bytes.fromhex(s["proto"]), s["dialect"])
                for s in data["servers"][: self._limit]
            }
            for proto, dialect in known.values():
                # What a RINTR is encoded with: anything else would fail at the first tick.
                if proto not in PROTOS or dialect not in (*DIALECTS, "auto"):
                    raise ValueError(f"a server's proto {proto!r} or dialect {dialect!r} is not SADA's")
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            log.warning("%s: not a server list (%s): no server is asked back", self.path, exc)
            return {}
        return known

    @property
    def pending(self) -> int:
        return len(self._pending)

    def keep(self, identity: bytes, proto: bytes, dialect: str) -> None:
        """A server with a lasting ``identity`` introduced services: keep it (it needs no
        RINTR any more)."""
        self._pending.pop(identity, None)
        if self._known.get(identity) == (proto, dialect):
            return
        if identity not in self._known and len(self._known) >= self._limit:
            return  # bounded: the newest beyond the bound is the one not kept
        self._known[identity] = (proto, dialect)
        self._write()

    def expect(self, identity: bytes) -> bool:
        """A kept server's connection went (a network break): RINTR it once it is back,
        within a new window. False when it is not kept (nothing to ask)."""
        known = self._known.get(identity)
        if known is None:
            return False
        self._pending[identity] = known
        self._until = None  # the window starts again at the next round
        self._next = 0
        return True

    def drop(self, identity: bytes) -> None:
        """A server withdrew (no services) or was taken for dead: forget it."""
        self._pending.pop(identity, None)
        if self._known.pop(identity, None) is not None:
            self._write()

    def due(self) -> int | None:
        """When :meth:`ask` has work (monotonic ms); None once nothing is pending."""
        return self._next if self._pending else None

    def ask(self, now_ms: int, rintr: Callable[[bytes, bytes, str], bool]) -> int:
        """Send RINTR, through ``rintr(identity, proto, dialect)`` (True once sent), to
        every pending server whose connection is back; return how many were sent. Past
        the window the rest are given up (and forgotten: such a server INTRs when it
        starts again) and 0 is returned."""
        if not self._pending or now_ms < self._next:
            return 0
        if self._until is None:
            self._until = now_ms + self._window
        self._next = now_ms + RETRY_MS  # set first: whatever happens below, not again at once
        sent = [i for i, (proto, dialect) in self._pending.items() if rintr(i, proto, dialect)]
        for identity in sent:
            del self._pending[identity]
        if self._pending and now_ms >= self._until:
            log.info(
                # Pending since the start (known before a restart) or since their connection
                # went (expect): the line must not claim a restart that never happened.
                "%d SADA server(s) not connected again within %d ms (of a restart or of their "
                "connection going): forgotten",
                len(self._pending),
                self._window,
            )
            for identity in self._pending:
                self._known.pop(identity, None)
            self._pending.clear()
            self._write()
        return len(sent)

    def _write(self) -> None:
        servers = [{"identity": i.hex(), "proto": p.hex(), "dialect": d} for i, (p, d) in self._known.items()]
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"format": FORMAT, "servers": servers}, f)
            os.replace(tmp, self.path)
        except OSError as exc:
            if not self._failing:
                log.warning(
                    "%s: cannot write (%s): servers may not be asked back after a restart", self.path, exc
                )
            self._failing = True
            return
        self._failing = False
