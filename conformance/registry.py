"""Roles and their cases.

A role is one module under ``nfgate.conformance.roles`` that builds a :class:`Role` and
registers cases on it with :meth:`Role.case` (a large role may register more cases from
sibling modules). :func:`roles` imports every module of that package whose name does not
start with ``_``, so adding a role (MemoDB, DBP, SADA...) is adding one module: nothing
here or in the runner names a protocol.
"""

from __future__ import annotations

import fnmatch
import importlib
import itertools
import pkgutil
import secrets
from collections.abc import Callable, Iterable
from typing import Any

import zmq

from nfgate import codecs as codec_registry
from nfgate.conformance.context import CaseContext, Received, Wire
from nfgate.conformance.model import Case, Clause, RunOptions
from nfgate.errors import ConfigError
from nfgate.transports.zmq import wants_ipv6

__all__ = ["Role", "Session", "find_role", "roles", "select"]

CaseFunc = Callable[[CaseContext], None]
Hook = Callable[["Session"], None]


class Session:
    """One run against one peer: the options, the dialect in use, a ZeroMQ context and
    a dict where the role keeps what lives across cases (a bound ROUTER, counters)."""

    def __init__(
        self, role: Role, options: RunOptions, dialect: str, announce: Callable[[str], None] | None = None
    ) -> None:
        self.role = role
        # Tells the user things they must act on (where a worker role listens).
        self.announce: Callable[[str], None] = announce or (lambda text: None)
        self.options = options
        self.dialect = dialect
        self.wire = Wire(codec=codec_registry.get(role.codec), dialect=dialect)
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        if wants_ipv6(options.endpoint):
            # Every socket of the run meets the peer at that address (tcp://[::1]:5555):
            # libzmq refuses an IPv6 address on a socket without ZMQ_IPV6.
            self.context.setsockopt(zmq.IPV6, 1)
        self.state: dict[str, Any] = {}
        # Called on every wait of every case: the session's own heartbeats (worker roles).
        self.pumps: list[Callable[[CaseContext], None]] = []
        # Shown every received message: run-wide checks (status codes, malformed replies).
        self.observers: list[Callable[[CaseContext, Received], None]] = []
        # Names made by this run carry a random tag, so runs against a long-lived broker
        # never meet each other's services or workers.
        self.run_tag = secrets.token_hex(3)
        self._serial = itertools.count(1)

    def serial(self) -> int:
        return next(self._serial)

    def close(self) -> None:
        self.context.destroy(linger=0)


class Role:
    """The suite's side of one protocol role: which peer it tests, how, and the cases.

    ``binds`` is true when the suite binds ``--endpoint`` and the peer under test
    connects to it (worker roles); otherwise the suite connects to the peer.
    ``probe`` raises :class:`nfgate.conformance.context.NoAnswer` when the peer no
    longer answers; ``detect`` picks the dialect for ``--dialect auto`` (it returns one
    of ``dialects``); ``setup``/``teardown`` run once per session.
    """

    def __init__(
        self,
        *,
        protocol: str,
        role: str,
        codec: str,
        summary: str,
        dialects: tuple[str, ...],
        binds: bool,
        probe: CaseFunc,
        detect: Callable[[Session], str] | None = None,
        setup: Hook | None = None,
        teardown: Hook | None = None,
    ) -> None:
        self.protocol = protocol
        self.role = role
        self.codec = codec
        self.summary = summary
        self.dialects = dialects
        self.binds = binds
        self.probe = probe
        self.detect = detect
        self.setup = setup
        self.teardown = teardown
        self.cases: list[Case] = []

    @property
    def key(self) -> tuple[str, str]:
        return (self.protocol, self.role)

    def case(
        self,
        case_id: str,
        title: str,
        clause: Clause,
        *,
        dialects: tuple[str, ...] = (),
        heartbeats: float = 0.0,
        timeouts: float = 1.0,
        disruptive: bool = False,
        final: bool = False,
    ) -> Callable[[CaseFunc], CaseFunc]:
        """Register the decorated function as case ``case_id``; raises ValueError for a
        duplicate id or a dialect the role does not have."""
        if any(c.id == case_id for c in self.cases):
            raise ValueError(f"duplicate case id {case_id}")
        if not set(dialects) <= set(self.dialects):
            raise ValueError(f"{case_id}: unknown dialect in {dialects}")

        def register(func: CaseFunc) -> CaseFunc:
            self.cases.append(
                Case(
                    id=case_id,
                    protocol=self.protocol,
                    role=self.role,
                    title=title,
                    clause=clause,
                    run=func,
                    dialects=dialects,
                    heartbeats=heartbeats,
                    timeouts=timeouts,
                    disruptive=disruptive,
                    final=final,
                )
            )
            return func

        return register


_ROLES: dict[tuple[str, str], Role] = {}


def register_role(role: Role) -> Role:
    """Make ``role`` known (role modules call this at import)."""
    _ROLES[role.key] = role
    return role


def roles() -> dict[tuple[str, str], Role]:
    """Every role, importing the modules of ``nfgate.conformance.roles`` once."""
    if not _ROLES:
        from nfgate.conformance import roles as package

        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{package.__name__}.{info.name}")
    return _ROLES


def find_role(protocol: str, role: str) -> Role:
    """The role for ``protocol``/``role``; raises :class:`ConfigError` naming the known ones."""
    found = roles().get((protocol, role))
    if found is None:
        known = ", ".join(f"{p}/{r}" for p, r in sorted(roles()))
        raise ConfigError(f"no conformance role {protocol}/{role} (known: {known})")
    return found


def _case_key(case: Case) -> tuple[bool, bool, tuple[int, ...], str]:
    # NFP-BROKER-5.10 sorts after NFP-BROKER-5.9; disruptive cases, then run-wide
    # checks, come last.
    tail = case.id.rsplit("-", 1)[-1]
    try:
        return case.final, case.disruptive, tuple(int(p) for p in tail.split(".")), case.id
    except ValueError:
        return case.final, case.disruptive, (10**6,), case.id


def select(role: Role, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> list[Case]:
    """The role's cases in section order (disruptive, then final cases last), filtered
    by shell-style globs on the id (case-insensitive): any ``include`` must match, no
    ``exclude`` may."""
    inc = [g.upper() for g in include]
    exc = [g.upper() for g in exclude]
    chosen = [
        c
        for c in role.cases
        if (not inc or any(fnmatch.fnmatchcase(c.id, g) for g in inc))
        and not any(fnmatch.fnmatchcase(c.id, g) for g in exc)
    ]
    return sorted(chosen, key=_case_key)
