"""CURVE on a ROUTER edge: NorFab's allow-any server, the allow-list through ZAP, and
key files that cannot be used (transports/curve.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
import zmq.auth

from nfgate.errors import ConfigError
from nfgate.transports.curve import load_server_keys, stop_authenticators
from nfgate.transports.zmq import RouterEndpoint

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    stop_authenticators(context)
    context.destroy(linger=0)


def keys(folder: Path, name: str) -> tuple[bytes, bytes, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    _, secret_file = zmq.auth.create_certificates(folder, name)
    public, secret = zmq.auth.load_certificate(secret_file)
    assert secret is not None
    return public, secret, Path(secret_file)


def client(
    ctx: zmq.Context[zmq.Socket[bytes]], url: str, server_key: bytes | None, pair: tuple[bytes, bytes] | None
) -> zmq.Socket[bytes]:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if server_key is not None and pair is not None:
        sock.curve_serverkey = server_key
        sock.curve_publickey, sock.curve_secretkey = pair
    sock.connect(url)
    return sock


def answered(router: RouterEndpoint, sock: zmq.Socket[bytes]) -> bool:
    """Does a message from ``sock`` reach the router (and its echo come back)?"""
    sock.send_multipart([b"hello"])
    for _ in range(50):
        if router.socket.poll(20):
            got = router.recv()
            assert got is not None
            router.send(got[0], got[1])
            return sock.poll(1000) != 0
    return False


def test_curve_server_accepts_any_client_key_and_refuses_plain_peers(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path
) -> None:
    server_public, _, secret_file = keys(tmp_path / "server", "broker")
    curve = load_server_keys(secret_file)
    router = RouterEndpoint(ctx, "tcp://127.0.0.1:*", curve=curve)
    try:
        pub, sec, _ = keys(tmp_path / "c", "anyone")
        assert answered(router, client(ctx, router.endpoint, server_public, (pub, sec)))
        assert not answered(router, client(ctx, router.endpoint, None, None))
    finally:
        router.close()


def test_allow_list_admits_only_listed_client_keys(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path
) -> None:
    server_public, _, secret_file = keys(tmp_path / "server", "broker")
    allowed_dir = tmp_path / "allowed"
    allowed_dir.mkdir()
    good_public, good_secret, _ = keys(tmp_path / "good", "good")
    zmq.auth.create_certificates(allowed_dir, "placeholder")  # any other key in the folder
    (tmp_path / "good" / "good.key").rename(allowed_dir / "good.key")
    bad_public, bad_secret, _ = keys(tmp_path / "bad", "bad")
    router = RouterEndpoint(
        ctx, "tcp://127.0.0.1:*", curve=load_server_keys(secret_file, allowed_dir), domain="nfp"
    )
    try:
        assert answered(router, client(ctx, router.endpoint, server_public, (good_public, good_secret)))
        assert not answered(router, client(ctx, router.endpoint, server_public, (bad_public, bad_secret)))
    finally:
        router.close()


def test_unusable_key_files_are_config_errors(tmp_path: Path) -> None:
    _, _, secret_file = keys(tmp_path / "k", "broker")
    with pytest.raises(ConfigError, match="cannot read"):
        load_server_keys(tmp_path / "missing.key_secret")
    with pytest.raises(ConfigError, match="no secret key"):
        load_server_keys(tmp_path / "k" / "broker.key")  # the public half
    with pytest.raises(ConfigError, match="not a folder"):
        load_server_keys(secret_file, tmp_path / "nowhere")
