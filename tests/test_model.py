"""The command model refuses commands the core could not act on."""

from __future__ import annotations

import attrs
import pytest

from nfgate.model import (
    ALL,
    Peer,
    Register,
    Reply,
    Request,
    ServiceRef,
    Target,
    TargetKind,
)

PEER = Peer(edge="nfp", protocol="nfp", address=b"c1")


def test_commands_are_frozen_and_keyword_only() -> None:
    req = Request(service=ServiceRef(name="echo"), reply_to=PEER, body=[b"x"])
    assert req.body == (b"x",)  # lists become tuples
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        req.id = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        Request(ServiceRef(name="echo"), PEER)  # type: ignore[misc]


@pytest.mark.parametrize(
    "build",
    [
        lambda: ServiceRef(name=""),
        lambda: Peer(edge="", protocol="nfp", address=b""),
        lambda: Target(kind=TargetKind.NAMED),
        lambda: Target(kind=TargetKind.ANY, names=("w1",)),
        lambda: Target(kind=TargetKind.ALL, any_service=True),
        lambda: Register(peer=PEER, services=(ServiceRef(name="a"),), capacity=0),
        lambda: Reply(id=1, status=42),
        lambda: Reply(id=1, status=200, body=["text"]),
        lambda: Request(service=ServiceRef(name="echo"), reply_to=PEER, timeout_ms=-1),
    ],
)
def test_invalid_commands_are_refused_at_construction(build: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        build()  # type: ignore[operator]


def test_version_matching() -> None:
    any_version = ServiceRef(name="crm")
    v1 = ServiceRef(name="crm", version="1")
    assert any_version.matches(v1) and v1.matches(any_version) and v1.matches(v1)
    assert not v1.matches(ServiceRef(name="crm", version="2"))
    assert not v1.matches(ServiceRef(name="other", version="1"))
    assert Target(kind=TargetKind.NAMED, names=["w1"]).names == ("w1",)
    assert ALL.kind is TargetKind.ALL
