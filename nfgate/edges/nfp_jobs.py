"""NFP job records on the client side of the NFP edge: POST, GET, DELETE, PUT.

design.md "Translation rules" and "Durability":

- A POST becomes a core :class:`Request`; once the core accepted it (``Accepted``) the
  job is written to the job store and its 202 is *held*. Everything this module sends to
  clients goes through one outbox that :meth:`NfpJobs.flush` sends after the store's
  commit, so a 202 never leaves before its job is on disk, and each client's replies
  keep their order (only a client with a job in the batch waits for the fsync).
- Each worker's final reply is relayed to the client (the spec: "Broker relays RESPONSE
  message to client") and kept; GET answers from the store: 200 with the results, 300
  while none is in, 400 for an unknown uuid.
- NorFab clients get NorFab's flow: the 202 lists worker names, results come as
  ``{name: Result}`` (bodies from other protocols wrapped; see
  ``nfgate.codecs.nfp.session.keyed_body``), a failed part is 200 with
  ``"failed": true``, and 201/EVENT/STREAM from NorFab workers are relayed as they come.
  Workers of other protocols (spec NFP workers included) get NorFab's statuses: any
  2xx is 200, any other final status a failed part, and their interim replies are
  not relayed (NorFab's client reads only NorFab's own).
"""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nfgate.codecs.nfp import codec as wire
from nfgate.codecs.nfp import session as nfpjson
from nfgate.codecs.nfp.messages import BROKER, Delete, Event, Get, Post, Put, Response, Stream
from nfgate.codecs.nfp.norfab_job import give_up_ms
from nfgate.codecs.nfp.targets import PSEUDO_SERVICE, format_target, parse_target, pseudo_targets
from nfgate.edges.nfp_job import (
    INTERIM_CLASS,
    Job,
    body_dict,
    error_response,
    job_target,
    nfp_status,
    store_refusal,
    wall_ms,
)
from nfgate.errors import DecodeError, EncodeError
from nfgate.model import Cancel, Command, Peer, Reply, Request, ServiceRef, Status, Target, TargetKind
from nfgate.routing_types import STATUS_CANCELLED, Accepted, Deliver
from nfgate.store import JobRecord, JobState, JobStore
from nfgate.transports.zmq import identity_label

if TYPE_CHECKING:
    from nfgate.edges.nfp import NfpEdge

__all__ = ["NfpJobs"]

log = logging.getLogger("nfgate.edge.nfp")


class NfpJobs:
    """The job records of one NFP edge (see the module docstring)."""

    def __init__(self, edge: NfpEdge, store: JobStore, clock: Callable[[], int] = wall_ms) -> None:
        self._edge = edge
        self._store = store
        self._clock = clock
        self._live: dict[int, Job] = {}
        self._by_uuid: dict[str, Job] = {}
        # Messages for clients, held until the batch's commit; each with the job it is
        # about (None for GET answers and errors), so a refused job's can be replaced.
        self._outbox: list[tuple[bytes, list[bytes], Job | None]] = []
        self._batch: list[Job] = []  # jobs whose records the open transaction holds
        self._failing = False  # the last durable commit failed (logged once per outage)

    def recovered(self, uuid: str) -> bool:
        """True for a job accepted before the gateway's restart: a worker may hold it."""
        job = self._by_uuid.get(uuid)
        return job is not None and job.recovered

    @property
    def data_dir(self) -> str:
        """The folder of the job store (NorFab's get_status calls it the broker's base_dir)."""
        return str(self._store.path.parent)

    @property
    def live(self) -> int:
        return len(self._live)

    def open_by_client(self) -> dict[bytes, int]:
        """Client address -> its jobs not yet finished."""
        counts: dict[bytes, int] = {}
        for job in self._by_uuid.values():
            counts[job.client] = counts.get(job.client, 0) + 1
        return counts

    def _nfp_workers(self) -> list[tuple[str, str]]:
        """(name, service) of every registered NFP worker, in registration order."""
        gateway = self._edge.gateway
        workers = gateway.router.workers() if gateway is not None else []
        return [(w.name, w.services[0].name) for w in workers if w.peer.protocol == "nfp" and w.services]

    # ------------------------------------------------------------ client input

    def post(self, peer: Peer, dialect: str, msg: Post) -> list[Command]:
        uuid, service = msg.uuid, msg.service or ""
        if self._edge.services.owns(service):
            self._edge.services.post(peer, dialect, msg)
            return []
        if not service:
            self.count("empty_service")
            self._error(peer.address, dialect, service, uuid, Status.UNKNOWN, "the service name is empty")
            return []
        text = msg.target or ""
        try:
            parsed = parse_target(text)
        except DecodeError as exc:
            self._error(peer.address, dialect, service, uuid, Status.UNKNOWN, exc.reason)
            return []
        known = self._by_uuid.get(uuid)
        if known is not None:
            # Only a job the core has taken (and the store holds): before that, the resend
            # would be answered 202 for a job that may still be refused.
            taken = known.core_id != 0
            if (
                taken
                and known.client != peer.address
                and (known.service, known.dialect) == (service, dialect)
            ):
                # The spec's retry: "close the request socket and open a new socket, and
                # resend the request on that new socket". The uuid names the job (any
                # client may GET it), so the new socket takes it over, results included.
                log.debug(
                    "%s: job %s resent by %s: its results go there",
                    self._edge.name,
                    uuid,
                    identity_label(peer.address),
                )
                known.client = peer.address
                self._stored(self._store.set_client, uuid, peer.address)
            if known.client == peer.address:  # a resend (REQ retry): answer again, route once
                if taken:  # else the first POST's own answer (202, or 500) is on its way
                    self._ack(known, known.announced)
            else:
                self._error(peer.address, dialect, service, uuid, Status.UNKNOWN, "job uuid already in use")
            return []
        if service == PSEUDO_SERVICE:
            # NorFab's workers of every service, picked now as NorFab's broker picks them;
            # the job (and its record, for a restart) names them.
            parsed = pseudo_targets(parsed, self._nfp_workers())
            if not parsed:
                reason = f"no worker of any service matches target {text[:80]!r}"
                self._error(peer.address, dialect, service, uuid, Status.UNKNOWN, reason)
                return []
            text = format_target(parsed, "norfab")
        target = job_target(service, parsed, norfab=dialect == "norfab")
        job = Job(uuid=uuid, client=peer.address, dialect=dialect, service=service, target=text)
        self._by_uuid[uuid] = job
        return [
            Request(
                service=self._edge.service(service),
                target=target,
                body=msg.body,
                # A NorFab client gives up at its job's timeout: no dispatch after it.
                give_up_ms=give_up_ms(msg.body[0]) if dialect == "norfab" and msg.body else None,
                reply_to=peer,
                origin=uuid.encode(),
                from_worker=self._edge.workers_client(peer.address),
            )
        ]

    def get(self, peer: Peer, dialect: str, msg: Get) -> None:
        uuid, service = msg.uuid, msg.service or ""
        job = self._by_uuid.get(uuid)
        try:
            record = None if job is not None else self._store.get(uuid)
            results = [] if job is None and record is None else self._store.results(uuid)
        except sqlite3.Error as exc:
            self._store_failed(exc)
            self._error(peer.address, dialect, service, uuid, Status.ERROR, "job store unavailable")
            return
        if job is None and record is None:
            self._error(peer.address, dialect, service, uuid, Status.UNKNOWN, "unknown job uuid")
            return
        try:
            wanted = parse_target(msg.target or "")
        except DecodeError:
            wanted = "all"
        if isinstance(wanted, tuple):
            results = [r for r in results if r.worker in wanted]
        if not results:
            # The worker answers the job's client (NorFab's own way: 300, 102 or the
            # result), so only that client's GET is passed on; another socket's (a client
            # back under a new identity) is answered here, or it would get nothing.
            if (
                job is not None
                and dialect == "norfab"
                and peer.address == job.client
                and self._edge.poll(job.core_id)
            ):
                return
            state = "PENDING" if job is not None else (record.state.value.upper() if record else "")
            body = nfpjson.dumps({"uuid": uuid, "service": service, "status": state})
            # 300 says "retry"; a job that ended without a result (cancelled) never has
            # one, so its client is told 400, "SHOULD NOT retry", with the state.
            code = Status.PENDING if job is not None else Status.UNKNOWN
            self._send(
                peer.address,
                dialect,
                Response(header=BROKER, service=service, uuid=uuid, status=code, body=(body,)),
            )
            return
        kept = [r for r in results if r.status < 300]
        if dialect == "norfab" and kept:
            # NorFab's results, one per worker, merged as NorFab's client reads them. A job
            # whose only results are the broker's failures (a 408 at the queue expiry, with
            # no worker to key it under) is told that failure, as it was when it ended.
            merged = nfpjson.merge(body_dict(r.body) for r in kept)
            self._send(
                peer.address,
                dialect,
                Response(header=BROKER, service=service, uuid=uuid, status=Status.OK, body=(merged,)),
            )
            if job is not None and peer.address == job.client:
                # A job some workers have not finished: their part of the GET goes on to
                # them, as NorFab's broker sends a GET to every worker it names (NorFab
                # 0.24 clients name the finished ones too), so a question (102) still
                # reaches a client that polls.
                self._edge.poll(job.core_id)
            return
        for r in results:
            self._send(
                peer.address,
                dialect,
                Response(header=BROKER, service=service, uuid=uuid, status=r.status, body=r.body or (b"",)),
            )

    def delete(self, peer: Peer, dialect: str, msg: Delete) -> list[Command]:
        uuid, service = msg.uuid, msg.service or ""
        job = self._by_uuid.get(uuid)
        if job is None or job.client != peer.address or not job.core_id:
            why = "no running job with that uuid"
            if job is not None and job.client != peer.address:
                why = "the job with that uuid was posted by another client"
            self._error(peer.address, dialect, service, uuid, Status.UNKNOWN, why)
            return []
        body = nfpjson.dumps({"uuid": uuid, "service": service, "status": "CANCELLED"})
        self._send(
            peer.address,
            dialect,
            Response(header=BROKER, service=service, uuid=uuid, status=Status.OK, body=(body,)),
        )
        return [Cancel(peer=peer, job_id=str(job.core_id))]

    def put(self, peer: Peer, dialect: str, msg: Put) -> None:
        job = self._by_uuid.get(msg.uuid)
        if job is None or job.client != peer.address or not self._edge.relay_input(job.core_id, msg):
            self.count("input_for_unknown_job")

    # ------------------------------------------------------------ core output

    def accepted(self, out: Accepted) -> list[Command]:
        request = out.request
        uuid = request.origin.decode()
        job = self._by_uuid.get(uuid)
        if job is None:
            self.count("accepted_unknown")
            return []
        job.core_id = request.id
        self._live[request.id] = job
        names = self._edge.names(out.workers)
        if request.target.kind is TargetKind.NAMED:
            names = list(dict.fromkeys([*names, *request.target.names]))
        if job.recovered:
            return []
        try:
            self._store.begin()
            added = self._store.add(
                JobRecord(
                    uuid=uuid,
                    service=job.service,
                    target=job.target,
                    edge=self._edge.name,
                    protocol=f"nfp/{job.dialect}",
                    client=job.client,
                    body=request.body,
                    created_ms=self._clock(),
                    state=JobState.DISPATCHED if out.workers else JobState.QUEUED,
                    workers=tuple(names),
                )
            )
        except sqlite3.Error as exc:  # e.g. the disk is full: refuse the job, keep serving
            self._store_failed(exc)
            cancel = self._refuse(job)
            job.told = True
            self._send(
                job.client, job.dialect, error_response(job.service, uuid, Status.ERROR, store_refusal(exc))
            )
            return [cancel]
        if not added:  # a uuid some earlier job used: refuse it, undo the routing
            del self._live[request.id]
            del self._by_uuid[uuid]
            self._error(job.client, job.dialect, job.service, uuid, Status.UNKNOWN, "job uuid already used")
            return [Cancel(peer=request.reply_to, job_id=str(request.id))]
        self._batch.append(job)
        self._ack(job, names)
        return []

    def _ack(self, job: Job, names: list[str]) -> None:
        job.announced = names
        self._respond(
            job, Status.ACCEPTED, (nfpjson.accepted_body(job.uuid, job.service, job.target, names),)
        )

    def _refuse(self, job: Job) -> Cancel:
        """Give up a job whose record could not be stored: no 202 may be sent for it.
        The client is told 500 instead (by the caller, or by :meth:`flush` in place of
        the held 202), its uuid is free to be POSTed again, and the returned Cancel
        stops the core's copy (a worker running it is told, as for a DELETE)."""
        job.refused = True
        self._by_uuid.pop(job.uuid, None)
        self.count("jobs_refused")
        return Cancel(peer=self._edge.peer(job.client), job_id=str(job.core_id))

    def _store_failed(self, exc: BaseException) -> None:
        """Count a failed store operation; log the first of an outage at ERROR (not one
        line per request while the disk stays full)."""
        self.count("store_errors")
        if not self._failing:
            self._failing = True
            log.error("%s: the job store failed, new jobs are refused with 500: %s", self._edge.name, exc)

    def deliver(self, out: Deliver) -> None:
        reply = out.reply
        job = self._live.get(reply.id)
        if job is None:
            if not self._turned_away(out):
                self.count("deliver_unknown")
            return
        name = reply.worker_name or (self._edge.label(reply.worker) if reply.worker else "")
        if job.refused:  # the client was told 500; only the core's final word is awaited
            if out.final:
                del self._live[reply.id]
                # Its record reached the database if only the fsync failed: it must not
                # be dispatched again after a restart.
                self._stored(self._store.set_state, job.uuid, JobState.CANCELLED)
            return
        if reply.interim:
            self._interim(job, reply)
            return
        if out.reason:
            status, body = self._failure(job, name, reply.status, out.reason)
        elif job.dialect == "norfab":
            key = self._key(job, name)
            if reply.worker is not None and self._edge.speaks_norfab(reply.worker):
                # NorFab's own answer is in NorFab's form already: relayed as it is.
                status, body = reply.status, (nfpjson.keyed_body(key, name, reply.body, norfab_worker=True),)
            elif 200 <= reply.status < 300:
                # Another protocol's success (a SADA REP 201 or 204, a DBP 201) is NorFab's
                # 200: its client takes a result only from a 200 (a 201 is its worker's
                # "job created", read for a "worker" key; a 204 is ignored, the job waits).
                status, body = Status.OK, (nfpjson.keyed_body(key, name, reply.body),)
            else:
                # Any other status (a 4xx/5xx, a 3xx: NorFab has no redirect) in NorFab's
                # own form of a failure (200, "failed": true): its client reads "failed",
                # drops the body of a 4xx/5xx and ignores a 3xx.
                status, body = Status.OK, (nfpjson.failed_body(key, reply.status, reply.body),)
            name = key
        else:
            status, body = reply.status, reply.body or (b"",)
        state = None
        if out.final:
            state = (
                JobState.CANCELLED
                if status == STATUS_CANCELLED
                else (JobState.FAILED if out.reason else JobState.DONE)
            )
        if status != STATUS_CANCELLED:
            # A result acknowledges nothing: no fsync for it (JobStore's module docstring).
            # One that cannot be stored is relayed all the same: the client is waiting
            # for it, and only a later GET misses it. The job's row keeps its first
            # result (and that worker's later ones), with the final state in the same
            # statement; a recovered job's row may hold one from before the restart.
            inline = not job.recovered and job.inline in ("", name)
            if inline:
                job.inline = name
            self._stored(
                self._store.add_result,
                job.uuid,
                name,
                status,
                body,
                self._clock(),
                inline=inline,
                state=state,
            )
            self._respond(job, status, body)
        elif state is not None:
            self._stored(self._store.set_state, job.uuid, state)
        if out.final:
            del self._live[reply.id]
            self._by_uuid.pop(job.uuid, None)

    def _turned_away(self, out: Deliver) -> bool:
        """A job the core refused before accepting it (its service's queue is full):
        no 202 went out and no record was stored, so the client gets the error now
        (500, "SHOULD retry") and the uuid is free again. A stored job taken up after a
        restart and refused (a full queue, its client's timeout passed) ends in its
        record too, or every restart would take it up again. True if ``out`` was that."""
        if not out.final or not out.reason:
            return False
        uuid = out.request.origin.decode(errors="replace")
        job = self._by_uuid.get(uuid)
        if job is None or job.core_id or job.client != out.request.reply_to.address:
            return False
        del self._by_uuid[uuid]
        if job.recovered:
            self._stored(self._store.set_state, uuid, JobState.FAILED)
        self.count("jobs_turned_away")
        log.debug("%s: job %s for %r refused: %s", self._edge.name, uuid, job.service, out.reason)
        self._error(job.client, job.dialect, job.service, uuid, nfp_status(out.reply.status), out.reason)
        return True

    def _stored(self, write: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        """Run one store write that acknowledges nothing; a failure is counted, not raised."""
        try:
            self._store.begin(durable=False)
            write(*args, **kwargs)
        except sqlite3.Error as exc:
            self._store_failed(exc)

    def _key(self, job: Job, name: str) -> str:
        """The name a NorFab client expects this result under (see keyed_result)."""
        if not job.announced:  # queued at POST time: tell the client who serves it now
            self._ack(job, [name])
        if name in job.announced:
            job.answered.add(name)
            return name
        for announced in job.announced:  # re-dispatched: answer for the worker it was told
            if announced not in job.answered:
                job.answered.add(announced)
                return announced
        return name

    def _failure(self, job: Job, name: str, status: int, reason: str) -> tuple[int, tuple[bytes, ...]]:
        if status == STATUS_CANCELLED:
            return status, ()
        if job.dialect == "norfab" and (name or job.announced):
            # NorFab's own convention: a failed job is 200 with "failed": true.
            key = self._key(job, name) if name else job.announced[0]
            return Status.OK, (nfpjson.dumps(nfpjson.failed_result(key, status, reason)),)
        code = nfp_status(status)
        return code, (nfpjson.error_body(job.uuid, job.service, "FAILED", [reason]),)

    def _interim(self, job: Job, reply: Reply) -> None:
        """Relay a NorFab worker's interim message (201, 102, 300, EVENT, STREAM) to a
        NorFab client; drop any other. The spec has no interim reply, and another
        protocol's (a SADA REP 1xx, a spec NFP worker's 201) is not in NorFab's form,
        which NorFab's client reads without a guard: a 201 or 102 body that is not an
        object with a ``worker`` kills its receiving thread, and every job after."""
        if job.dialect != "norfab" or reply.worker is None or not self._edge.speaks_norfab(reply.worker):
            return
        cls = INTERIM_CLASS.get(reply.progress, Response)
        body = reply.body or (b"",)
        self._send(
            job.client,
            job.dialect,
            cls(header=BROKER, service=job.service, uuid=job.uuid, status=reply.status, body=body),
            job,
        )

    # ------------------------------------------------------------ restart

    def recover(self) -> list[Command]:
        """Requests for the jobs this edge had accepted before a restart."""
        commands: list[Command] = []
        for rec in self._store.unfinished():
            if rec.edge != self._edge.name:
                continue
            dialect = rec.protocol.partition("/")[2] or "spec"
            job = Job(
                uuid=rec.uuid, client=rec.client, dialect=dialect, service=rec.service, target=rec.target
            )
            job.recovered = True
            job.announced = list(rec.workers)
            try:
                owed = self._still_owed(job, parse_target(rec.target))
                target = job_target(rec.service, owed, norfab=dialect == "norfab")
            except (DecodeError, ValueError):
                target = Target()
            self._by_uuid[rec.uuid] = job
            limit = give_up_ms(rec.body[0]) if dialect == "norfab" and rec.body else None
            if limit is not None:  # from the POST; 0: it passed while the gateway was down
                limit = max(0, limit - max(0, self._clock() - rec.created_ms))
            commands.append(
                Request(
                    service=ServiceRef(name=rec.service),
                    target=target,
                    body=rec.body,
                    give_up_ms=limit,
                    reply_to=self._edge.peer(rec.client),
                    origin=rec.uuid.encode(),
                )
            )
        if commands:
            log.info(
                "%s: %d stored job(s) taken up again (dispatched or queued)", self._edge.name, len(commands)
            )
        return commands

    def _still_owed(self, job: Job, parsed: str | tuple[str, ...]) -> str | tuple[str, ...]:
        """The target a recovered job is dispatched again with: an ``all`` job whose 202
        named its workers goes to those workers (the ones registered when it was
        accepted, as ``all`` means), not to whichever registers first after the restart;
        a job for several named workers goes to those whose result is not stored yet.
        Raises :class:`sqlite3.Error` (reading the stored results)."""
        if parsed == "all" and job.announced:
            parsed = tuple(job.announced)
        if isinstance(parsed, str):
            return parsed
        job.answered = {r.worker for r in self._store.results(job.uuid)}
        owed = tuple(name for name in parsed if name not in job.answered)
        return owed or parsed  # all answered but not finished: run it again (at least once)

    # ------------------------------------------------------------ sending

    def _error(self, address: bytes, dialect: str, service: str, uuid: str, status: int, reason: str) -> None:
        self.count("client_errors")
        self._send(address, dialect, error_response(service, uuid, status, reason))

    def _respond(self, job: Job, status: int, body: tuple[bytes, ...]) -> None:
        """A RESPONSE to ``job``'s client, into the outbox: the 202 and the results,
        built from their parts (``response_frames``: no message object per reply)."""
        try:
            frames = wire.response_frames(job.service, job.uuid, status, body, job.dialect)
        except EncodeError as exc:
            self._edge.unencodable("RESPONSE", job.dialect, exc)
            return
        self._outbox.append((job.client, frames, job))

    def _send(
        self, address: bytes, dialect: str, message: Response | Event | Stream, job: Job | None = None
    ) -> None:
        frames = self._edge.encode(message, dialect)
        if frames is not None:
            self._outbox.append((address, frames, job))

    def flush(self) -> None:
        """Commit the batch's job records, then send what was held for them.

        Two steps, because the fsync is most of a commit's wall time. A client with a
        job in this batch gets all of its messages after the fsync, in the order they
        were produced (its 202s first of all, as its messages need). Every other client's
        messages (results and GET answers of jobs acknowledged in earlier iterations,
        errors) go right after the COMMIT: every write of the iteration is in the OS's
        cache by then, and they wait for no other client's fsync.

        If the commit fails (SQLite error, failed fsync), every job whose record was in
        the batch is refused (:meth:`_refuse`): its held 202 becomes a 500, whatever else
        was held for it is dropped, and the core cancels it at the next tick. The rest of
        the outbox (results, GET answers) still goes out.
        """
        batch, self._batch = self._batch, []
        refusal = self._stored_batch(batch, functools.partial(self._store.commit, sync=False))
        if not refusal and self._store.unsynced and self._outbox:
            waiting = {job.client for job in batch}
            early = [m for m in self._outbox if m[0] not in waiting]
            if early:
                self._outbox = [m for m in self._outbox if m[0] in waiting]
                self._send_outbox(early, "")
        if not refusal:
            refusal = self._stored_batch(batch, self._store.sync)
            if not refusal and batch and self._failing:
                self._failing = False
                log.warning("%s: the job store works again, jobs are accepted", self._edge.name)
        if self._outbox:
            outbox, self._outbox = self._outbox, []
            self._send_outbox(outbox, refusal)

    def _stored_batch(self, batch: list[Job], step: Callable[[], None]) -> str:
        """Run one step of storing the batch (its COMMIT, then its fsync); if it fails,
        refuse the batch's jobs and return the reason, else return ""."""
        try:
            step()
        except (sqlite3.Error, OSError) as exc:
            self._store_failed(exc)
            for job in batch:
                self._edge.command_later(self._refuse(job))
            return store_refusal(exc)
        return ""

    def _send_outbox(self, outbox: list[tuple[bytes, list[bytes], Job | None]], refusal: str) -> None:
        send = self._edge.send
        for address, held, about in outbox:
            frames: list[bytes] | None = held
            if about is not None and about.refused:
                if about.told:
                    continue
                about.told = True
                frames = self._refusal_frames(about, refusal)
            if frames is not None:
                send(address, frames)

    def _refusal_frames(self, job: Job, reason: str) -> list[bytes] | None:
        reason = reason or "job store unavailable, job not accepted"
        return self._edge.encode(error_response(job.service, job.uuid, Status.ERROR, reason), job.dialect)

    def count(self, what: str) -> None:
        self._edge.counters[what] += 1
