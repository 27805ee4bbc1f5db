"""Shared by the routing core's tests: a config, peers, services, and shorthands for feeding
a Router and reading what it emits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from nfgate.model import Peer, Register, Reply, Request, ServiceRef, Target
from nfgate.routing import Router
from nfgate.routing_types import Accepted, Dispatch, Output, RouterConfig

T = TypeVar("T")

# MemoDB workers by default: 10 s x 3 liveness unless a test's config says otherwise.
CFG = RouterConfig(
    queue_expiry_ms=1_000,
    max_redispatch=2,
    liveness={"memodb": (100, 3), "nfp": (100, 3), "sada": (100, 3), "dcp": (100, 3)},
)
LIVE = 300  # interval * liveness above

CA = Peer(edge="nfp", protocol="nfp", address=b"client-a")
CB = Peer(edge="sada", protocol="sada", address=b"client-b")


def worker(name: str, protocol: str = "memodb") -> Peer:
    return Peer(edge=protocol, protocol=protocol, address=name.encode())


W1, W2, W3 = worker("w1"), worker("w2"), worker("w3")


def svc(name: str = "echo", version: str | None = None) -> ServiceRef:
    return ServiceRef(name=name, version=version)


def reg(
    router: Router,
    peer: Peer,
    now: int = 0,
    *services: ServiceRef,
    capacity: int = 1,
    name: str = "",
    name_lasts: bool = True,
) -> list[Output]:
    return router.handle(
        Register(
            peer=peer, services=services or (svc(),), capacity=capacity, name=name, name_lasts=name_lasts
        ),
        now,
    )


def req(
    service: str | ServiceRef = "echo",
    client: Peer = CA,
    target: Target | None = None,
    timeout_ms: int | None = None,
) -> Request:
    ref = svc(service) if isinstance(service, str) else service
    return Request(
        service=ref, reply_to=client, target=target or Target(), timeout_ms=timeout_ms, body=(b"x",)
    )


def of(out: Sequence[object], cls: type[T]) -> list[T]:
    return [o for o in out if isinstance(o, cls)]


def submit(router: Router, request: Request, now: int = 0) -> tuple[int, list[Output]]:
    out = router.handle(request, now)
    accepted = of(out, Accepted)
    assert len(accepted) == 1, out
    return accepted[0].request.id, out


def answer(router: Router, w: Peer, rid: int, now: int = 0, status: int = 200) -> list[Output]:
    return router.handle(Reply(id=rid, status=status, body=(b"r",), worker=w), now)


def dispatched(out: Sequence[object]) -> list[tuple[Peer, int]]:
    return [(d.worker, d.request.id) for d in of(out, Dispatch)]
