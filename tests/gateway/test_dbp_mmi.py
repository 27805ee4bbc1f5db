"""The broker's MMI ``disconnect`` and ``restart`` (mmi.service.broker, asked for by an NFP
client) carried out on DBP services that are workers: each is told DISCONNECT, the core
drops its worker, its catalog entry turns inactive, and it may register again; a request
it held is not lost (docs/protocols/dbp.md; nfgate.gateway.Gateway.request)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nfgate.codecs import dbp, dcp
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest

from .conftest import Running, nothing, recv, until
from .dbp_helpers import Sock, get, info, now, register, send
from .nfp_helpers import mmi_call

pytestmark = pytest.mark.timeout(60)

MMI = "mmi.service.broker"


def names(gw: Running) -> set[str]:
    return {w.name for w in gw.gateway.router.workers()}


def answer(sock: Sock, envelope: dict[str, Any], body: str) -> None:
    reply = json.dumps({"id": envelope["id"], "status": 200, "body": [body]}).encode()
    send(sock, dbp.Reply(time=now(), info=reply))


def test_disconnect_by_name_drops_only_that_service(gw: Running) -> None:
    alpha = register(gw, "alpha", function="upper")
    beta = register(gw, "beta", function="upper")
    until(lambda: names(gw) == {"dbp-alpha", "dbp-beta"})

    status, text = mmi_call(gw.dealer("nfp"), MMI, "disconnect", name="dbp-alpha")
    assert status == 200 and "dbp-alpha" in str(text)
    assert isinstance(get(alpha), dbp.Disconnect)
    until(lambda: names(gw) == {"dbp-beta"})
    assert nothing(beta)  # the other service is left alone
    assert info(gw, "alpha")["status"] == "inactive"  # the spec's "inactive warning"

    # Told DISCONNECT, a service registers again ("re-register after a broker restart").
    send(
        alpha,
        dbp.Registration(
            time=now(),
            info=(dbp.make_info(name="alpha", ip="127.0.0.1", port=9, function="upper", heartbeat=30),),
        ),
    )
    assert isinstance(get(alpha), dbp.Approved)
    until(lambda: names(gw) == {"dbp-alpha", "dbp-beta"})
    assert info(gw, "alpha").get("status") != "inactive"


def test_restart_disconnects_every_service_and_keeps_the_request_it_held(gw: Running) -> None:
    alpha = register(gw, "alpha", function="upper")
    beta = register(gw, "beta", function="other")
    until(lambda: names(gw) == {"dbp-alpha", "dbp-beta"})
    client = gw.dealer("dcp")
    client.send_multipart(dcp.encode(DcpRequest(service=b"upper", metadata=(b"m",), data=(b"abc",))))
    first = get(alpha)
    assert isinstance(first, dbp.Request)

    status, _ = mmi_call(gw.dealer("nfp"), MMI, "restart")
    assert status == 200
    assert isinstance(get(alpha), dbp.Disconnect)
    assert isinstance(get(beta), dbp.Disconnect)
    until(lambda: not names(gw))

    # The answer to the request it held before the restart comes from a service the
    # catalog no longer knows: refused (DISCONNECT), not relayed to the client.
    answer(alpha, json.loads(first.query), "STALE")
    assert isinstance(get(alpha), dbp.Disconnect)
    assert nothing(client)

    # The request waited in the core's queue; the service back, it is dispatched again.
    info_bytes = dbp.make_info(name="alpha", ip="127.0.0.1", port=9, function="upper", heartbeat=30)
    send(alpha, dbp.Registration(time=now(), info=(info_bytes,)))
    assert isinstance(get(alpha), dbp.Approved)
    again = get(alpha)
    assert isinstance(again, dbp.Request)
    envelope = json.loads(again.query)
    assert envelope["body"] == ["abc"]
    answer(alpha, envelope, "ABC")
    assert dcp.decode(recv(client)) == DcpReply(client=None, metadata=(b"m",), data=(b"ABC",))
    assert nothing(client)  # exactly one reply
