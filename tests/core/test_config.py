"""`nfgate serve` configuration: defaults, TOML, overrides, one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from nfgate.config import DEFAULT_BINDS, default_data_dir, load
from nfgate.edges.kinds import KINDS
from nfgate.errors import ConfigError
from nfgate.routing_types import DEFAULT_LIVENESS


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "nfgate.toml"
    path.write_text(text)
    return path


def test_embedded_defaults_bind_loopback() -> None:
    cfg = load(None, data_dir=Path("/tmp/x"))
    assert {e.kind: e.bind for e in cfg.edges} == dict(DEFAULT_BINDS)
    assert all(url.startswith("tcp://127.0.0.1:") for e in cfg.edges for url in e.bind)
    assert cfg.edge("nfp").heartbeat_ms == 2500 and cfg.edge("nfp").liveness == 6  # NorFab's
    assert cfg.routing.queue_expiry_ms == 300_000
    assert cfg.limits.max_peers == 100_000


def test_file_values_and_command_line_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[gateway]
data_dir = "state"
[routing]
queue_expiry_ms = 1000
[edges.nfp]
bind = ["tcp://127.0.0.1:7000", "tcp://127.0.0.1:7001"]
liveness = 4
[edges.dcp]
enabled = false
""",
    )
    cfg = load(path)
    assert cfg.data_dir == tmp_path / "state"
    assert cfg.edge("nfp").bind == ("tcp://127.0.0.1:7000", "tcp://127.0.0.1:7001")
    assert cfg.routing.queue_expiry_ms == 1000 and cfg.routing.liveness["nfp"] == (2500, 4)
    assert not cfg.edge("dcp").enabled
    cfg = load(path, binds=[("nfp", "tcp://127.0.0.1:9")], disabled=["nfp"], data_dir=Path("/d"))
    assert cfg.edge("nfp").bind == ("tcp://127.0.0.1:9",) and not cfg.edge("nfp").enabled
    assert cfg.data_dir == Path("/d")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[edges.nfp]\nbnd = 'x'\n", "edges.nfp.bnd"),
        ("[edges.mqtt]\n", "edges.mqtt"),
        ("[routing]\nmax_redispatch = -1\n", "routing.max_redispatch"),
        ("[routing]\nqueue_expiry_ms = true\n", "routing.queue_expiry_ms"),
        ("[edges.dcp]\ninventory = 'inv.yaml'\n", "edges.dcp.inventory"),
        ("[edges.nfp]\nbind = 'localhost:5555'\n", "edges.nfp.bind"),
        ("[edges.nfp]\nenabled = 'yes'\n", "edges.nfp.enabled"),
        ("[gateway]\nlog_level = 'loud'\n", "gateway.log_level"),
        ("limits = 3\n", "limits"),
        ("[limits]\nmax_peers = 0\n", "limits.max_peers"),
        ("[routing]\nmax_queued = 0\n", "routing.max_queued"),
        # libzmq would bind :70000 as :4464 (the low 16 bits) without a word
        ("[edges.nfp]\nbind = 'tcp://127.0.0.1:70000'\n", "edges.nfp.bind"),
        ("[edges.dcp]\nbind = ['tcp://127.0.0.1:5556', 'tcp://127.0.0.1:-5']\n", "edges.dcp.bind"),
        ("[edges.memodb]\nbind = 'tcp://127.0.0.1'\n", "edges.memodb.bind"),
        ("[nope]\n", "nope"),
        # Values past what the sockets, NNG or SQLite take: refused here, not raised as
        # OverflowError once the edges are bound (which hung the exit) or at the first purge.
        ("[limits]\nhigh_water_mark = 9999999999999\n", "limits.high_water_mark"),
        ("[limits]\nmax_message_bytes = 99999999999999999999\n", "limits.max_message_bytes"),
        ("[gateway]\njob_retention_s = 10000000000000000\n", "gateway.job_retention_s"),
        ("[gateway]\ndrain_ms = -1\n", "gateway.drain_ms"),
        ("[gateway]\ndrain_ms = 1.5\n", "gateway.drain_ms"),
        ("[gateway]\nstall_ms = -1\n", "gateway.stall_ms"),
        ("[edges.memodb]\nsend_timeout_ms = 3000000000\n", "edges.memodb.send_timeout_ms"),
        ("[edges.dbp]\nbeacon_interval_ms = 3000000000\n", "edges.dbp.beacon_interval_ms"),
        ("[edges.nfp]\nheartbeat_ms = 3000000000\n", "edges.nfp.heartbeat_ms"),
        # An edge that binds, with nothing to bind: say so (enabled = false switches it off).
        ("[edges.nfp]\nbind = []\n", "edges.nfp.bind is empty"),
        # An edge that connects out binds nothing: a bind would be silently ignored.
        ("[edges.sada-server]\nbind = 'tcp://127.0.0.1:5056'\n", "edges.sada-server.bind"),
        # The SADA server role has no heartbeat (specs/safir-darbaan.md: channels PING,
        # servers answer): the keys were read and never used.
        ("[edges.sada-server]\nheartbeat_ms = 1000\n", "unknown key edges.sada-server.heartbeat_ms"),
        ("[edges.sada-server]\nliveness = 2\n", "unknown key edges.sada-server.liveness"),
        # Every beacon sent to port 0 failed (EINVAL), counted once a second, never said.
        ("[edges.dbp]\nbeacon = '127.0.0.1:0'\n", "edges.dbp.beacon: port 0 is not a destination"),
        # Found when the edge was built (after others had bound), now as the config loads.
        (
            "[edges.sada]\nbind = 'tcp://0.0.0.0:5055'\n",
            "edges.sada: the channel identity is its public endpoint",
        ),
        (
            "[edges.sada-server]\nchannels = ['tcp://10.0.0.5']\n",
            "edges.sada-server.channels: 'tcp://10.0.0.5'",
        ),
        (
            "[edges.sada-server]\ncurve_secret_key = 'server.key_secret'\n",
            "edges.sada-server.curve_secret_key needs edges.sada-server.curve_server_key",
        ),
        # The second edge failed to bind "address already in use", as if another program held it.
        (
            "[edges.dbp]\nbind = ['tcp://127.0.0.1:5246', 'tcp://127.0.0.1:5247']\nudp = '127.0.0.1:5246'\n",
            "edges.dbp.udp: one UDP port for 2 binds",
        ),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load(write(tmp_path, text))


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(write(tmp_path, "[oops\n"))
    with pytest.raises(ConfigError, match="unknown edge"):
        load(None, binds=[("mqtt", "tcp://127.0.0.1:1")])


def test_job_retention_is_a_day_unless_configured(tmp_path: Path) -> None:
    assert load(None, data_dir=tmp_path).job_retention_s == 86_400
    assert load(write(tmp_path, "[gateway]\njob_retention_s = 0\n")).job_retention_s == 0
    with pytest.raises(ConfigError, match=r"gateway\.job_retention_s"):
        load(write(tmp_path, "[gateway]\njob_retention_s = -1\n"))


def test_a_stop_drains_for_five_seconds_unless_configured(tmp_path: Path) -> None:
    assert load(None, data_dir=tmp_path).drain_ms == 5_000
    assert load(write(tmp_path, "[gateway]\ndrain_ms = 0\n")).drain_ms == 0


def test_a_stall_is_a_second_unless_configured(tmp_path: Path) -> None:
    assert load(None, data_dir=tmp_path).stall_ms == 1000
    assert load(write(tmp_path, "[gateway]\nstall_ms = 0\n")).stall_ms == 0


def test_fsync_is_on_unless_switched_off(tmp_path: Path) -> None:
    assert load(None, data_dir=tmp_path).fsync is True
    assert load(write(tmp_path, "[gateway]\nfsync = false\n")).fsync is False
    with pytest.raises(ConfigError, match=r"gateway\.fsync"):
        load(write(tmp_path, "[gateway]\nfsync = 'no'\n"))


def test_the_largest_values_a_key_takes_are_taken(tmp_path: Path) -> None:
    cfg = load(
        write(
            tmp_path,
            "[limits]\nhigh_water_mark = 2147483647\n[capture]\ndir = 'c'\nmax_bytes = 50_000_000_000\n",
        )
    )
    assert cfg.limits.high_water_mark == 2**31 - 1
    assert cfg.capture is not None and cfg.capture.max_bytes == 50_000_000_000  # a disk budget past 2 GiB


def test_a_path_starting_with_a_tilde_is_in_the_home_folder(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, "[gateway]\ndata_dir = '~/nfgate-data'\n"))
    assert cfg.data_dir == Path.home() / "nfgate-data"
    assert load(write(tmp_path, "[gateway]\ndata_dir = 'rel'\n")).data_dir == tmp_path / "rel"


def test_a_curve_key_file_whose_keys_are_not_curve_keys_is_refused(tmp_path: Path) -> None:
    # libzmq refuses such keys only at setsockopt, after other edges bound.
    (tmp_path / "broker.key_secret").write_text('curve\n    public-key = "abc"\n    secret-key = "def"\n')
    with pytest.raises(
        ConfigError, match=r"edges\.nfp\.curve_secret_key: the public key in .* is not a CURVE key"
    ):
        load(write(tmp_path, "[edges.nfp]\ncurve_secret_key = 'broker.key_secret'\n"))


def test_the_command_line_wins_over_the_file_and_no_options_win_over_both(tmp_path: Path) -> None:
    # docs/broker.md, "Configuration file": --bind and --metrics switch on what the file
    # switched off; --no-EDGE and --no-metrics switch off whatever else says.
    path = write(tmp_path, "[edges.dcp]\nenabled = false\n[metrics]\nenabled = false\n")
    cfg = load(path, binds=[("dcp", "tcp://127.0.0.1:7100")], metrics_bind="http://127.0.0.1:7101")
    assert cfg.edge("dcp").enabled and cfg.edge("dcp").bind == ("tcp://127.0.0.1:7100",)
    assert cfg.metrics == "http://127.0.0.1:7101"
    cfg = load(
        path,
        binds=[("dcp", "tcp://127.0.0.1:7100")],
        disabled=["dcp"],
        metrics_bind="http://127.0.0.1:7101",
        no_metrics=True,
    )
    assert not cfg.edge("dcp").enabled and cfg.metrics is None
    cfg = load(path)  # the file alone
    assert not cfg.edge("dcp").enabled and cfg.metrics is None


def test_a_relative_xdg_data_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The XDG Base Directory spec: "If an implementation encounters a relative path in
    # any of these variables it should consider the path invalid and ignore it."
    home = Path.home() / ".local" / "share" / "nfgate"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")
    assert default_data_dir() == home
    monkeypatch.setenv("XDG_DATA_HOME", "")
    assert default_data_dir() == home
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / "nfgate"


def test_heartbeat_defaults_are_the_same_everywhere() -> None:
    # The core's defaults (a Router built without a config), each edge kind's and the
    # configuration's: DBP's core watchdog was on (2500 ms) in the first, off in the others.
    cfg = load(None, data_dir=Path("/tmp/x"))
    for kind, spec in KINDS.items():
        if spec.heartbeat is None:
            assert kind not in DEFAULT_LIVENESS and kind not in cfg.routing.liveness
            continue
        assert DEFAULT_LIVENESS[kind] == spec.heartbeat == cfg.routing.liveness[kind], kind
        assert (cfg.edge(kind).heartbeat_ms, cfg.edge(kind).liveness) == spec.heartbeat
    assert set(DEFAULT_LIVENESS) == {k for k, spec in KINDS.items() if spec.heartbeat is not None}


def test_command_line_values_are_named_by_their_option() -> None:
    # They were named as config keys (edges.nfp.bind, metrics.bind) with no file given.
    with pytest.raises(ConfigError, match=r"^--bind nfp: 'tcp://127\.0\.0\.1:70000' needs a port"):
        load(None, data_dir=Path("/tmp/x"), binds=[("nfp", "tcp://127.0.0.1:70000")])
    with pytest.raises(ConfigError, match=r"^--bind dcp: 'localhost:1' is not a URL"):
        load(None, data_dir=Path("/tmp/x"), binds=[("dcp", "localhost:1")])
    with pytest.raises(ConfigError, match=r"^--bind sada-server: the sada-server edge binds nothing"):
        load(None, data_dir=Path("/tmp/x"), binds=[("sada-server", "tcp://127.0.0.1:1")])
    with pytest.raises(
        ConfigError, match=r"^--metrics must look like http://127\.0\.0\.1:9464, got 'http://x'"
    ):
        load(None, data_dir=Path("/tmp/x"), metrics_bind="http://x")


def test_bind_port_0_becomes_a_wildcard_port_and_nothing_else() -> None:
    from nfgate.cli import bind_pair

    assert bind_pair("nfp=tcp://127.0.0.1:0") == ("nfp", "tcp://127.0.0.1:*")
    # ":0" inside an IPv6 address was replaced too: tcp://[2001:*db8::1]:*
    assert bind_pair("nfp=tcp://[2001:0db8::1]:0") == ("nfp", "tcp://[2001:0db8::1]:*")
    assert bind_pair("nfp=tcp://[::0]:5555") == ("nfp", "tcp://[::0]:5555")


def test_serve_options_reach_the_config_with_their_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The command line as typed, through nfgate.cli into nfgate.config.load: --bind on an
    # edge the file switched off starts it, --no-EDGE beside it does not.
    from click.testing import CliRunner

    import nfgate.serve
    from nfgate.cli import main
    from nfgate.config import ServeConfig

    seen: list[ServeConfig] = []

    def fake_serve(
        config: Path | None, data_dir: Path | None, binds, disabled, log_level, metrics, no_metrics, capture
    ):  # type: ignore[no-untyped-def]
        seen.append(
            load(
                config,
                data_dir=data_dir,
                binds=binds,
                disabled=disabled,
                log_level=log_level,
                metrics_bind=metrics,
                no_metrics=no_metrics,
                capture_dir=capture,
            )
        )

    monkeypatch.setattr(nfgate.serve, "serve", fake_serve)
    path = write(
        tmp_path, "[edges.dcp]\nenabled = false\n[edges.nfp]\nenabled = false\n[metrics]\nenabled = false\n"
    )
    args = ["serve", "-c", str(path), "--data-dir", str(tmp_path), "--bind", "dcp=tcp://127.0.0.1:0"]
    args += ["--bind", "nfp=tcp://127.0.0.1:0", "--no-nfp", "--metrics", "http://127.0.0.1:0"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    [cfg] = seen
    assert cfg.edge("dcp").enabled and cfg.edge("dcp").bind == ("tcp://127.0.0.1:*",)
    assert not cfg.edge("nfp").enabled
    assert cfg.metrics == "http://127.0.0.1:0"


def test_relative_paths_are_made_absolute_against_the_config_folder_and_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # get_status reports these paths (NorFab's broker shows absolute ones), logs name them,
    # and a relative path would change meaning if anything later changed the directory.
    (tmp_path / "etc").mkdir()
    write(tmp_path / "etc", '[edges.nfp]\ninventory = "inv.yaml"\n[capture]\ndir = "cap"\n')
    monkeypatch.chdir(tmp_path)
    cfg = load(Path("etc/nfgate.toml"), data_dir=Path("data"))
    assert cfg.data_dir == tmp_path / "data"
    assert cfg.edge("nfp").options["inventory"] == tmp_path / "etc" / "inv.yaml"
    assert cfg.capture is not None and cfg.capture.dir == tmp_path / "etc" / "cap"
    cfg = load(None, data_dir=None, capture_dir=Path("here"))
    assert cfg.capture is not None and cfg.capture.dir == tmp_path / "here"
