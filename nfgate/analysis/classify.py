"""One captured frame list -> one row of the commands table. Pure: runs inside Spark's
Python workers (:mod:`nfgate.analysis.job`), and in tests without Spark.

What a row says beyond the capture (docs/pipeline.md, "The commands table"):

- ``dialect``, ``type``: as the codec detects and decodes the frames (the spec's
  dialect when unsure, as the gateway decides per message).
- ``role``: ``request`` (asks for work: NFP POST, DCP REQUEST, MemoDB JOB, SADA REQ,
  DBP REQUEST/REGISTRATION/UPDATE), ``reply`` (its final answer), ``interim`` (an
  answer that is not the last: NFP 202, 201, 300, 1xx, EVENT, STREAM), ``query`` (NFP
  GET/DELETE/PUT/MMI: about a job, not a job) or ``control`` (registration, heartbeats,
  the rest).
- ``key``: what pairs a request with its reply on the same peer: the NFP job uuid, the
  DCP metadata parts, the MemoDB job id, the SADA request id; DBP has no id, so its
  exchanges pair in order (``query``, ``registration``).
- ``error``: the decoder's reason when the frames are not a valid message; the other
  derived columns are then null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nfgate import codecs
from nfgate.codecs.dbp import udp as dbp_udp
from nfgate.errors import NfgateError

__all__ = ["COLUMNS", "Row", "classify", "malformed"]

Row = dict[str, Any]

COLUMNS = ("dialect", "type", "role", "service", "key", "status", "error")
"""The columns :func:`classify` adds to a capture record."""

# NFP: a RESPONSE with one of these statuses is not the job's last word (specs/nfp.md:
# 202 accepted, 300 still pending for a GET; NorFab 0.25: 201 accepted by the worker,
# and any 1xx, e.g. 102 waiting for the client's input).
_NFP_INTERIM = frozenset({201, 202, 300})


def _nfp_final(status: int) -> bool:
    return status >= 200 and status not in _NFP_INTERIM


_NFP_QUERIES = frozenset({"GET", "DELETE", "PUT", "MMI"})


def classify(protocol: str, transport: str, frames: Sequence[bytes]) -> Row:
    """The derived columns for one capture record; never raises for any frames."""
    try:
        if transport == "udp":
            return _udp(list(frames))
        codec = codecs.get(protocol)
        data = list(frames)
        dialect = codec.detect(data)
        message = codec.decode(data, dialect)
    except NfgateError as exc:
        return _row(error=str(exc))
    except Exception as exc:  # a codec bug must cost one row, not the Spark task
        return _row(error=f"{type(exc).__name__}: {exc}")
    rule = _RULES.get(protocol)
    found = rule(message) if rule is not None else {}
    return _row(dialect=dialect, type=message.TYPE, **found)


def malformed(error: str) -> Row:
    """The derived columns of a record that is not a message for a reason the codecs do
    not see (a null frame, a message the gateway cut): ``error`` set, the rest null."""
    return _row(error=error)


def _row(**values: Any) -> Row:
    row: Row = dict.fromkeys(COLUMNS)
    row["role"] = "control" if "error" not in values else None
    row.update(values)
    return row


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _nfp(m: Any) -> Row:
    kind = m.TYPE
    service = _text(getattr(m, "service", "") or "") or None
    if kind == "POST":
        return {"role": "request", "service": service, "key": m.uuid}
    if kind in ("RESPONSE", "EVENT", "STREAM"):
        final = kind == "RESPONSE" and _nfp_final(m.status)
        return {
            "role": "reply" if final else "interim",
            "service": service,
            "key": m.uuid,
            "status": m.status,
        }
    if kind in _NFP_QUERIES:
        return {"role": "query", "service": service, "key": m.uuid}
    return {"service": service}


def _dcp(m: Any) -> Row:
    kind = m.TYPE
    key = ".".join(part.hex() for part in getattr(m, "metadata", ()))
    if kind == "REQUEST":
        return {"role": "request", "service": _text(m.service), "key": key}
    if kind == "REPLY":
        return {"role": "reply", "key": key}
    if kind == "REGISTRATION":
        return {"service": _text(m.service)}
    return {}


def _memodb(m: Any) -> Row:
    kind = m.TYPE
    if kind == "JOB":
        return {"role": "request", "service": m.service, "key": m.id.hex()}
    if kind == "RESULT":
        return {"role": "reply", "key": m.id.hex()}
    if kind == "READY":
        return {"service": ",".join(m.services) or None}
    return {}


def _sada(m: Any) -> Row:
    kind = m.TYPE
    if kind == "REQ":
        return {"role": "request", "service": _text(m.service), "key": str(m.request_id)}
    if kind == "REP":
        return {"role": "reply", "key": str(m.request_id), "status": int(m.status)}
    return {}


def _dbp(m: Any) -> Row:
    kind = m.TYPE
    if kind == "REQUEST":
        return {"role": "request", "service": _text(m.query) or None, "key": "query"}
    if kind == "REPLY":
        return {"role": "reply", "key": "query"}
    if kind in ("REGISTRATION", "UPDATE"):
        return {"role": "request", "key": "registration"}
    if kind in ("APPROVED", "DENIED"):
        return {"role": "reply", "key": "registration"}
    if kind == "HEARTBEAT":
        return {"service": _text(m.service)}
    return {}


_RULES = {"nfp": _nfp, "dcp": _dcp, "memodb": _memodb, "sada": _sada, "dbp": _dbp}


def _udp(frames: list[bytes]) -> Row:
    # DBP's datagrams (codecs/dbp/udp.py): a heartbeat, or the catalog's beacon.
    if len(frames) != 1:
        return _row(error=f"dbp: a datagram is one frame, got {len(frames)}")
    data = frames[0]
    try:
        heartbeat = dbp_udp.decode_heartbeat_datagram(data)
    except NfgateError as heartbeat_error:
        try:
            dbp_udp.decode_beacon(data)
        except NfgateError:
            return _row(error=str(heartbeat_error))
        return _row(dialect="spec", type="BEACON")
    return _row(dialect="spec", type="HEARTBEAT", service=_text(heartbeat.service))
