"""A SADA server's REPs that answer nothing the channel gave it: counted, dropped, and
the server goes on serving (docs/protocols/sada.md)."""

from __future__ import annotations

import pytest

from nfgate.codecs.sada.messages import Rep, Req

from .conftest import Running, nothing
from .test_sada_edges import answer, get, gw, req, send, server  # noqa: F401 - gw: the fixture

pytestmark = pytest.mark.timeout(60)


def test_a_rep_for_a_request_id_it_was_not_given_is_counted_and_dropped(gw: Running) -> None:  # noqa: F811
    s = server(gw, ("calc", ""))
    client = gw.dealer("sada")
    send(s, Rep(request_id="never-sent", status=200, payload=b"?"))
    send(client, req("c-1", "calc", payload=b"1+1"))
    request = answer(s, b"=2")
    assert isinstance(request, Req)
    assert get(client) == Rep(request_id="c-1", status=200, payload=b"1+1=2")
    # The same REP again: its request is answered already.
    send(s, Rep(request_id=request.request_id, status=200, payload=b"again"))
    assert nothing(client)
    assert gw.gateway.edges["sada"].stats()["unknown_reply"] == 2
    assert len(gw.gateway.router.workers()) == 1  # still a worker
