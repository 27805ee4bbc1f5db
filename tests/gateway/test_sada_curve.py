"""CURVE on the SADA edges: the channel edge as a CURVE server (``curve_secret_key``), the
``sada-server`` edge as a CURVE client (``curve_server_key``), end to end between two
gateways; and a sada-server edge whose handshake can never succeed, which says so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import zmq
import zmq.auth

from nfgate.codecs import dcp
from nfgate.codecs.dcp.messages import Reply as DcpReply
from nfgate.codecs.dcp.messages import Request as DcpRequest
from nfgate.codecs.sada.messages import Rep, Req
from nfgate.transports.curve import client_keys, enable_client

from .conftest import finish, recv, start_gateway, until
from .test_sada_edges import Channel, dcp_worker, get, send


@pytest.mark.timeout(60)
def test_a_req_crosses_two_gateways_over_curve(tmp_path: Path) -> None:
    """Gateway A's channel runs CURVE; gateway B's sada-server edge trusts A's key and
    offers B's DCP worker there; a CURVE client of A's channel is served by it."""
    public, secret = zmq.auth.create_certificates(str(tmp_path), "channel")
    Path(secret).chmod(0o600)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_gateway(tmp_path / "a", f'[edges.sada]\ncurve_secret_key = "{secret}"\n')
    try:
        channel_url = a.endpoint("sada")
        b = start_gateway(
            tmp_path / "b",
            f'[edges.sada-server]\nchannels = ["{channel_url}"]\nrefresh_ms = 50\ncurve_server_key = "{public}"\n',
        )
        try:
            assert b.gateway.edges["sada-server"].curve_client_key  # type: ignore[attr-defined]
            worker = dcp_worker(b, b"upper")
            until(lambda: any(w.name.startswith("sada-") for w in a.gateway.router.workers()))
            context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
            client = context.socket(zmq.DEALER)
            client.setsockopt(zmq.LINGER, 0)
            client.setsockopt(zmq.RCVTIMEO, 5000)
            enable_client(client, client_keys(public, None, ("server key", "client key")))
            client.connect(channel_url)
            try:
                send(
                    client,
                    Req(request_id="curve-1", service="upper", category="c", action="a", payload=b"abc"),
                )
                request = dcp.decode(recv(worker))
                assert isinstance(request, DcpRequest) and request.data == (b"abc",)
                worker.send_multipart(
                    dcp.encode(DcpReply(client=request.client, metadata=request.metadata, data=(b"ABC",)))
                )
                rep = get(client)
                assert isinstance(rep, Rep) and rep.request_id == "curve-1" and rep.status == 200
                assert rep.payload == b"ABC"
            finally:
                client.close(0)
                context.term()
        finally:
            finish(b)
    finally:
        finish(a)


@pytest.mark.timeout(60)
def test_a_sada_server_edge_whose_handshake_fails_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """curve_server_key given, the channel plain: libzmq retries for ever and the INTR
    never goes. The edge counts each failed handshake and warns, naming the key."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    channel = Channel(context, "spec")
    key, _ = zmq.curve_keypair()
    caplog.set_level(logging.WARNING, logger="nfgate")
    gw = start_gateway(
        tmp_path, f'[edges.sada-server]\nchannels = ["{channel.url}"]\ncurve_server_key = "{key.decode()}"\n'
    )
    try:
        edge = gw.gateway.edges["sada-server"]
        until(lambda: edge.counters["handshake_failed"] >= 1)
        # The warning is logged as the failure is read, in the gateway's thread: wait for it.
        until(lambda: any("handshake_failed" in r.getMessage() for r in caplog.records))
        warned = [r.getMessage() for r in caplog.records if "handshake_failed" in r.getMessage()]
        assert warned and "curve_server_key" in warned[0], warned
        assert edge.counters["intr_sent"] == 0
    finally:
        finish(gw)
        channel.sock.close(0)
        context.term()
