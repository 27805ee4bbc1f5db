"""CURVE on a ROUTER edge: NorFab's allow-any server, the allow-list through ZAP (one
policy per edge in a shared context), refusals counted and logged, and key files that
cannot be used (transports/curve.py)."""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
import zmq.auth
from zmq.auth.thread import AuthenticationThread
from zmq.utils import z85

from nfgate.errors import ConfigError
from nfgate.transports.curve import MAX_KEYS_LOGGED, Guard, load_server_keys, stop_authenticators
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


def zap_threads() -> int:
    return sum(isinstance(t, AuthenticationThread) and t.is_alive() for t in threading.enumerate())


@pytest.mark.parametrize("listed_first", [True, False], ids=["allow-list-edge-first", "allow-any-edge-first"])
def test_an_allow_list_on_one_edge_leaves_another_edge_open_to_any_key(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path, listed_first: bool
) -> None:
    """docs/broker.md: without curve_allow any client key is accepted, even when another
    edge of the same gateway (the same context, the same ZAP handler) has an allow-list."""
    server_public, _, secret_file = keys(tmp_path / "server", "broker")
    allowed_dir = tmp_path / "allowed"
    listed_public, listed_secret, _ = keys(allowed_dir, "listed")
    other_public, other_secret, _ = keys(tmp_path / "other", "other")
    made: dict[str, RouterEndpoint] = {}
    order = [("listed", allowed_dir), ("open", None)]
    for name, allow in order if listed_first else order[::-1]:
        curve = load_server_keys(secret_file, allow)
        made[name] = RouterEndpoint(ctx, "tcp://127.0.0.1:*", curve=curve, domain=name)
        assert zap_threads() == (1 if allow is not None or "listed" in made else 0)
    listed, open_ = made["listed"], made["open"]
    try:
        assert answered(open_, client(ctx, open_.endpoint, server_public, (other_public, other_secret)))
        assert answered(open_, client(ctx, open_.endpoint, server_public, (listed_public, listed_secret)))
        assert answered(listed, client(ctx, listed.endpoint, server_public, (listed_public, listed_secret)))
        assert not answered(listed, client(ctx, listed.endpoint, server_public, (other_public, other_secret)))
        assert listed.curve_guard is not None and listed.curve_guard.refused >= 1
        assert open_.curve_guard is not None and open_.curve_guard.refused == 0
    finally:
        listed.close()
        open_.close()


def test_without_any_allow_list_no_zap_handler_runs(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path
) -> None:
    # NorFab's broker runs none: nothing stands between a handshake and libzmq.
    _, _, secret_file = keys(tmp_path / "server", "broker")
    routers = [
        RouterEndpoint(ctx, "tcp://127.0.0.1:*", curve=load_server_keys(secret_file), domain=name)
        for name in ("nfp", "dcp")
    ]
    try:
        assert zap_threads() == 0
    finally:
        for router in routers:
            router.close()


def test_a_refused_key_is_counted_each_time_and_logged_once(
    ctx: zmq.Context[zmq.Socket[bytes]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server_public, _, secret_file = keys(tmp_path / "server", "broker")
    allowed_dir = tmp_path / "allowed"
    keys(allowed_dir, "listed")
    stranger_public, stranger_secret, _ = keys(tmp_path / "stranger", "stranger")
    router = RouterEndpoint(
        ctx, "tcp://127.0.0.1:*", curve=load_server_keys(secret_file, allowed_dir), domain="nfp"
    )
    guard = router.curve_guard
    assert guard is not None
    caplog.set_level(logging.WARNING, logger="nfgate.transports.curve")
    try:
        for attempt in (1, 2):
            stranger = client(ctx, router.endpoint, server_public, (stranger_public, stranger_secret))
            assert not answered(router, stranger)
            stranger.close(0)
            assert guard.refused >= attempt  # a client that reconnects is counted again
        lines = [r.getMessage() for r in caplog.records if stranger_public.decode() in r.getMessage()]
        assert len(lines) == 1, lines
        assert lines[0].startswith("nfp edge: refused a CURVE client") and "from 127.0.0.1" in lines[0]
    finally:
        router.close()


def test_refusals_beyond_the_logged_keys_make_one_summary_line(caplog: pytest.LogCaptureFixture) -> None:
    # A flood of new keys cannot fill the log: past MAX_KEYS_LOGGED keys, one line a minute.
    guard = Guard("nfp", frozenset())
    caplog.set_level(logging.WARNING, logger="nfgate.transports.curve")
    flood = [z85.encode(os.urandom(32)) for _ in range(MAX_KEYS_LOGGED + 50)]
    assert not any(guard.admits(key, "10.0.0.1") for key in flood)
    assert guard.refused == len(flood)
    assert len(caplog.records) == MAX_KEYS_LOGGED + 1
    assert "refused 1 more CURVE handshakes" in caplog.records[-1].getMessage()


def bad_allow_folder(tmp_path: Path, variant: str) -> Path:
    """An allow-list folder that would start a gateway refusing every client."""
    folder = tmp_path / "allow"
    keys(folder, "good")  # one usable key beside the bad one
    if variant == "malformed":
        (folder / "README.key").write_text("# notes, not a certificate\n")
    elif variant == "not-z85":
        (folder / "short.key").write_text('curve\n    public-key = "tooshort"\n')
    elif variant == "binary":
        (folder / "blob.key").write_bytes(os.urandom(200).replace(b"public-key", b""))
    elif variant == "directory":
        (folder / "x.key").mkdir()
    elif variant == "dangling-link":
        (folder / "gone.key").symlink_to(tmp_path / "nowhere.key")
    elif variant == "unreadable-file":
        (folder / "good.key").chmod(0)
    elif variant == "unreadable-folder":
        folder.chmod(0)
    elif variant == "empty":
        for each in folder.iterdir():
            each.unlink()
    elif variant == "no-public-key-files":
        (folder / "good.key").rename(folder / "good.pub")
    return folder


BAD_ALLOW = {
    "malformed": "README.key holds no CURVE public key",
    "not-z85": "short.key holds no CURVE public key",
    "binary": "blob.key holds no CURVE public key",
    "directory": "cannot read .*x.key",
    "dangling-link": "cannot read .*gone.key",
    "unreadable-file": "cannot read .*good.key: Permission denied",
    "unreadable-folder": "cannot read the folder .*allow: Permission denied",
    "empty": "holds no public .key files: every client would be refused",
    "no-public-key-files": "holds no public .key files",
}
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.mark.parametrize("variant", list(BAD_ALLOW))
def test_an_allow_list_that_would_refuse_everyone_is_a_config_error(
    tmp_path: Path, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, secret_file = keys(tmp_path / "server", "broker")
    folder = bad_allow_folder(tmp_path, variant)
    if variant.startswith("unreadable") and AS_ROOT:
        # Root reads whatever the mode (CI runs as root): the reads fail as they do for
        # the gateway's own user, from the same calls.
        real_load, real_iterdir = zmq.auth.load_certificate, Path.iterdir

        def load(path: str | os.PathLike[str]) -> tuple[bytes, bytes | None]:
            if Path(path).parent == folder:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_load(path)

        def iterdir(self: Path) -> Iterator[Path]:
            if self == folder and variant == "unreadable-folder":
                raise PermissionError(errno.EACCES, "Permission denied", str(self))
            return real_iterdir(self)

        monkeypatch.setattr(zmq.auth, "load_certificate", load)
        monkeypatch.setattr(Path, "iterdir", iterdir)
    try:
        with pytest.raises(ConfigError, match=f"^config: curve_allow: .*{BAD_ALLOW[variant]}"):
            load_server_keys(secret_file, folder)
    finally:
        folder.chmod(0o755)
        if (folder / "good.key").exists():
            (folder / "good.key").chmod(0o644)


def test_the_allow_list_is_the_keys_read_at_load(tmp_path: Path) -> None:
    _, _, secret_file = keys(tmp_path / "server", "broker")
    first, _, _ = keys(tmp_path / "allow", "first")
    second, _, _ = keys(tmp_path / "allow", "second")
    (tmp_path / "allow" / "second.key_secret").unlink()  # a secret beside it is not a .key file
    curve = load_server_keys(secret_file, tmp_path / "allow")
    assert curve.allowed == frozenset({first, second})
    assert load_server_keys(secret_file).allowed is None


def test_unusable_key_files_are_config_errors(tmp_path: Path) -> None:
    _, _, secret_file = keys(tmp_path / "k", "broker")
    with pytest.raises(ConfigError, match="cannot read"):
        load_server_keys(tmp_path / "missing.key_secret")
    with pytest.raises(ConfigError, match="no secret key"):
        load_server_keys(tmp_path / "k" / "broker.key")  # the public half
    with pytest.raises(ConfigError, match="not a folder"):
        load_server_keys(secret_file, tmp_path / "nowhere")
