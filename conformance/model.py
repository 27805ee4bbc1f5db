"""The conformance suite's records: verdicts, clauses, exchanged frames, case results.

Everything here is a frozen attrs class (house style) with a ``to_json`` that the
reports share, so report.json, junit.xml and index.html all show the same facts.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from nfgate.conformance.context import CaseContext
    from nfgate.conformance.curve import SuiteCurve

__all__ = [
    "Case",
    "CaseResult",
    "Clause",
    "FrameRecord",
    "RunOptions",
    "RunReport",
    "Verdict",
    "violation_verdict",
]


class Verdict(enum.Enum):
    """Autobahn-style verdicts; ``FAIL`` is the only one that fails a run (``--strict``
    adds ``NON-STRICT``)."""

    PASS = "PASS"
    FAIL = "FAIL"  # a MUST (SHALL, REQUIRED, MUST NOT) broken
    NON_STRICT = "NON-STRICT"  # a SHOULD (RECOMMENDED, SHOULD NOT, MAY NOT) broken
    INFO = "INFO"  # behaviour worth recording where the spec allows a choice
    SKIP = "SKIP"  # not run; the reason says why


# RFC 2119 keywords, as the specs write them. "MAY NOT" is not RFC 2119 (NFP uses it for
# status codes); it reads as a prohibition without force, so it grades like SHOULD NOT.
MUST_KEYWORDS = frozenset({"MUST", "MUST NOT", "SHALL", "SHALL NOT", "REQUIRED"})
SHOULD_KEYWORDS = frozenset({"SHOULD", "SHOULD NOT", "RECOMMENDED", "MAY NOT", "NOT RECOMMENDED"})
KEYWORDS = MUST_KEYWORDS | SHOULD_KEYWORDS | {"MAY", "OPTIONAL"}


def violation_verdict(keyword: str) -> Verdict:
    """The verdict for breaking a clause with ``keyword``: FAIL for MUST-class words,
    NON-STRICT for SHOULD-class words, INFO for MAY/OPTIONAL (breaking nothing)."""
    if keyword in MUST_KEYWORDS:
        return Verdict.FAIL
    if keyword in SHOULD_KEYWORDS:
        return Verdict.NON_STRICT
    return Verdict.INFO


def _keyword(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in KEYWORDS:
        raise ValueError(f"{attribute.name} must be an RFC 2119 keyword, got {value!r}")


@attrs.frozen(kw_only=True)
class Clause:
    """The spec text a case checks: its section heading, the quoted words and the RFC
    2119 keyword that sets how a violation is graded.

    Where a spec states a rule as a plain description ("Broker sends OPEN message back
    to client"), the case names the keyword the rule is graded with and says so in
    ``note``.
    """

    section: str
    text: str
    keyword: str = attrs.field(validator=_keyword)
    note: str = ""

    def to_json(self) -> dict[str, str]:
        return {"section": self.section, "text": self.text, "keyword": self.keyword, "note": self.note}


@attrs.frozen(kw_only=True)
class FrameRecord:
    """One message on the wire during a case, as sent or received by the suite."""

    direction: str  # "sent" or "received"
    peer: str  # which of the suite's sockets: "client", "worker w1", "broker"...
    at_ms: float  # since the case started
    frames: tuple[bytes, ...]
    decoded: str  # the codec's reading, or "undecodable: <reason>"

    def to_json(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "peer": self.peer,
            "at_ms": round(self.at_ms, 1),
            "frames": [f.hex() for f in self.frames],
            "decoded": self.decoded,
        }


@attrs.frozen(kw_only=True)
class Case:
    """One numbered check, registered by a role module.

    ``run`` drives the exchange through a :class:`CaseContext` and returns normally
    for PASS, or raises one of the outcomes in :mod:`nfgate.conformance.context`.
    ``dialects`` is empty when the case applies to every dialect of the role.
    ``heartbeats`` adds that many heartbeat intervals to the case's deadline (cases
    that wait for liveness to expire), ``timeouts`` is how many ``--timeout`` waits it
    holds (cases that wait for several answers in turn); ``disruptive`` cases run
    after the others that talk to the peer, as they may leave it unreachable (a peer
    that fails one must not get the blame in the cases after it); ``final`` cases run
    last, over what every other case saw.
    """

    id: str
    protocol: str
    role: str
    title: str
    clause: Clause
    run: Callable[[CaseContext], None] = attrs.field(repr=False, eq=False)
    dialects: tuple[str, ...] = ()
    heartbeats: float = 0.0
    timeouts: float = 1.0
    disruptive: bool = False  # runs after the others that talk to the peer
    final: bool = False  # runs after the others: checks over what the whole run saw

    def budget_s(self, options: RunOptions) -> float:
        """The case's deadline in seconds from its start."""
        return self.timeouts * options.timeout_s + self.heartbeats * options.heartbeat_ms / 1000.0


@attrs.frozen(kw_only=True)
class RunOptions:
    """What the user chose on the command line."""

    protocol: str
    role: str
    endpoint: str
    dialect: str = "auto"
    timeout_s: float = 2.0  # a case's deadline, times its Case.timeouts (budget_s)
    heartbeat_ms: int = 2500  # the agreed heartbeat interval
    liveness: int = 6  # intervals of silence before a peer counts as gone (NorFab: 6)
    strict: bool = False
    curve: SuiteCurve | None = None  # CURVE on the suite's sockets (conformance/curve.py)
    tls: Any = None  # pynng.TLSConfig for a tls+tcp:// MemoDB peer (conformance/tls.py)


@attrs.frozen(kw_only=True)
class CaseResult:
    """A case's outcome, with everything a reader needs to judge it."""

    id: str
    title: str
    clause: Clause
    verdict: Verdict
    reason: str = ""
    expected: str = ""
    actual: str = ""
    frames: tuple[FrameRecord, ...] = ()
    duration_s: float = 0.0
    dialect: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "clause": self.clause.to_json(),
            "expected": self.expected,
            "actual": self.actual,
            "dialect": self.dialect,
            "duration_s": round(self.duration_s, 3),
            "frames": [f.to_json() for f in self.frames],
        }


@attrs.frozen(kw_only=True)
class RunReport:
    """A finished run: the options, the dialect used and every case's result."""

    options: RunOptions
    dialect: str
    results: tuple[CaseResult, ...]
    started: str  # ISO 8601 UTC
    duration_s: float
    version: str

    def counts(self) -> Mapping[str, int]:
        out = {v.value: 0 for v in Verdict}
        for r in self.results:
            out[r.verdict.value] += 1
        return out

    def failed(self) -> bool:
        """True when the run fails: a FAIL, or a NON-STRICT under ``--strict``."""
        bad = {Verdict.FAIL, Verdict.NON_STRICT} if self.options.strict else {Verdict.FAIL}
        return any(r.verdict in bad for r in self.results)

    def to_json(self) -> dict[str, Any]:
        o = self.options
        return {
            "tool": "nfgate conformance",
            "version": self.version,
            "protocol": o.protocol,
            "role": o.role,
            "endpoint": o.endpoint,
            "dialect": self.dialect,
            "options": {
                "dialect": o.dialect,
                "timeout_s": o.timeout_s,
                "heartbeat_ms": o.heartbeat_ms,
                "liveness": o.liveness,
                "strict": o.strict,
                "curve": o.curve.describe() if o.curve is not None else None,
                "tls": o.tls is not None,
            },
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "summary": dict(self.counts()),
            "failed": self.failed(),
            "cases": [r.to_json() for r in self.results],
        }
