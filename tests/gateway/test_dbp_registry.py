"""The DBP catalog's registry over a service's life: the catalog's size limit (DENIED,
never a crash or a silent drop) and a connection registering again under another name
(specs/dbp.md "Registration", docs/protocols/dbp.md)."""

from __future__ import annotations

import pytest

import nfgate.edges.dbp
from nfgate.codecs import dbp

from .conftest import Running, until
from .dbp_helpers import edge, get, info, now, register, send

pytestmark = pytest.mark.timeout(60)


def registration(name: str, function: str = "") -> dbp.Registration:
    text = dbp.make_info(name=name, ip="127.0.0.1", port=9, function=function, heartbeat=30)
    return dbp.Registration(time=now(), info=(text,))


def test_a_full_catalog_denies_new_services_and_takes_them_once_one_leaves(
    gw: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nfgate.edges.dbp, "MAX_SERVICES", 2)
    first = register(gw, "one")
    register(gw, "two")
    third = gw.dealer("dbp")
    send(third, registration("three"))
    denied = get(third)
    assert isinstance(denied, dbp.Denied) and denied.reasons == (b"the catalog is full",)
    assert info(gw, "three")["status"] == "unknown"
    # A registered service registering again is not a new one: approved.
    send(first, registration("one", function="f"))
    assert isinstance(get(first), dbp.Approved)
    # One leaves: there is room again.
    send(first, dbp.Disconnect(time=now()))
    until(lambda: edge(gw).stats()["services"] == 1)
    send(third, registration("three"))
    assert isinstance(get(third), dbp.Approved)
    assert info(gw, "three")["status"] == "active"


def test_registering_again_under_another_name_retires_the_first(gw: Running) -> None:
    sock = register(gw, "old-name", function="svc")
    until(lambda: [w.name for w in gw.gateway.router.workers()] == ["dbp-old-name"])
    send(sock, registration("new-name", function="svc"))
    assert isinstance(get(sock), dbp.Approved)
    until(lambda: [w.name for w in gw.gateway.router.workers()] == ["dbp-new-name"])
    assert info(gw, "old-name")["status"] == "inactive"  # the spec's "inactive warning"
    assert info(gw, "new-name")["status"] == "active"
    assert edge(gw).stats()["services"] == 1


def test_an_update_that_is_not_json_is_denied_and_changes_nothing(gw: Running) -> None:
    sock = register(gw, "sensor", function="read", colour="blue")
    until(lambda: [w.name for w in gw.gateway.router.workers()] == ["dbp-sensor"])
    send(sock, dbp.Update(time=now(), info=(b"{not json",)))
    denied = get(sock)
    assert isinstance(denied, dbp.Denied) and b"not JSON" in denied.reasons[0]
    entry = info(gw, "sensor")
    assert (entry["status"], entry["colour"], entry["function"]) == ("active", "blue", "read")
    assert [w.name for w in gw.gateway.router.workers()] == ["dbp-sensor"]  # still a worker
