"""The console script as a user runs it: decode/encode round trips, and bad input
giving one line on stderr with exit status 2."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .protocols import PROTOCOLS
from .vectors import load

# The script installed beside the interpreter running the tests (the install under test,
# found even when its venv is not on PATH), else the one on PATH. The test extra always
# installs it: a missing script is a packaging failure, not a reason to skip.
_BESIDE = Path(sys.executable).with_name("nfgate")
NFGATE = str(_BESIDE) if os.access(_BESIDE, os.X_OK) else shutil.which("nfgate") or ""


@pytest.fixture(autouse=True)
def _script_installed() -> None:
    assert NFGATE, f"no nfgate console script beside {sys.executable} nor on PATH"


def run(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NFGATE, *args], input=stdin, capture_output=True, text=True, timeout=60, env=env)


def first_valid_vector(protocol: str) -> dict:
    return next(v for _, v in load(protocol) if "message" in v)


def test_version_and_help() -> None:
    out = run("--version")
    assert out.returncode == 0 and "nfgate" in out.stdout
    assert run("--help").returncode == 0
    serve_help = run("serve", "--help")
    assert serve_help.returncode == 0 and serve_help.stdout.startswith("Usage: nfgate serve")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_decode_then_encode_restores_the_frames(protocol: str) -> None:
    vector = first_valid_vector(protocol)
    args = [f or "-" for f in vector["frames"]]
    decoded = run("decode", "--protocol", protocol, "--dialect", vector["dialect"], *args)
    assert decoded.returncode == 0, decoded.stderr
    obj = json.loads(decoded.stdout)
    assert obj["protocol"] == protocol and obj["type"] == vector["message"]["type"]
    encoded = run("encode", "--protocol", protocol, stdin=decoded.stdout)
    assert encoded.returncode == 0, encoded.stderr
    assert encoded.stdout.split() == args
    as_json = run("encode", "--protocol", protocol, "--json", stdin=decoded.stdout)
    assert json.loads(as_json.stdout) == vector["frames"]


@pytest.mark.parametrize(
    ("args", "stdin", "needle"),
    [
        (["decode", "--protocol", "dcp", "zz"], "", "not hex"),
        (["decode", "--protocol", "dcp", "-", "4447425801", "07"], "", "unknown message type"),
        (["decode", "--protocol", "nope", "00"], "", "unknown protocol"),
        (["decode", "--protocol", "dcp", "--dialect", "klingon", "00"], "", "unknown dialect"),
        (["decode", "--protocol", "dcp", "--dialect", "", "-", "4447425801", "02"], "", "unknown dialect"),
        (["encode", "--protocol", "dcp", "--dialect", ""], '{"type": "PING"}', "unknown dialect"),
        (["encode", "--protocol", "dcp"], "{not json", "not JSON"),
        (["encode", "--protocol", "dcp"], '{"type": "TELEPORT"}', "unknown message type"),
        (["encode", "--protocol", "dcp"], '{"type": "REQUEST", "service": 5}', "bad REQUEST fields"),
        (
            ["encode", "--protocol", "dcp"],
            '{"type": "REQUEST"}',
            "bad REQUEST fields: missing field 'service'",
        ),
        # click's usage errors, which it would report in three lines
        # (click 8.1 says "No such option: --bogus", 8.4+ "No such option '--bogus'.")
        (
            ["serve", "--bogus"],
            "",
            re.compile(r"^nfgate serve: No such option:? '?--bogus'?\. Try 'nfgate serve --help'\.$"),
        ),
        (["no-such-command"], "", "No such command 'no-such-command'"),
        (["bench", "--scenario", "nope"], "", "nfgate bench: Invalid value for '--scenario'"),
        (["decode"], "", "nfgate decode: Missing option '--protocol'"),
        (["serve", "--config"], "", "'--config' requires an argument"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], stdin: str, needle: str | re.Pattern[str]) -> None:
    out = run(*args, stdin=stdin)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    if isinstance(needle, str):
        assert needle in lines[0], out.stderr
    else:
        assert needle.search(lines[0]), out.stderr
    assert "Traceback" not in out.stderr


def test_third_party_codec_plugin_is_found_through_its_entry_point(tmp_path: Path) -> None:
    # A real distribution on sys.path: importlib.metadata finds its entry point exactly
    # as it would after `pip install`.
    pkg = tmp_path / "nfgate_testplugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            from typing import ClassVar
            import attrs
            from nfgate.codecs import Codec, Message
            from nfgate.errors import DecodeError

            @attrs.frozen(kw_only=True)
            class Blob(Message):
                TYPE: ClassVar[str] = "BLOB"
                data: bytes

            def _decode(frames, dialect):
                if len(frames) != 1:
                    raise DecodeError("blob", "expected one frame")
                return Blob(data=frames[0])

            CODEC = Codec(name="blob", title="Test blob protocol", dialects=("spec",),
                          messages=(Blob,), decoder=_decode,
                          encoder=lambda m, d: [m.data], detector=lambda f: "spec")
            """
        )
    )
    dist = tmp_path / "nfgate_testplugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: nfgate-testplugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[nfgate.codecs]\nblob = nfgate_testplugin:CODEC\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))

    listing = run("protocols", env=env)
    assert listing.returncode == 0 and "blob" in listing.stdout
    decoded = run("decode", "--protocol", "blob", "cafe", env=env)
    assert decoded.returncode == 0, decoded.stderr
    assert json.loads(decoded.stdout) == {
        "protocol": "blob",
        "dialect": "spec",
        "type": "BLOB",
        "data": "cafe",
    }
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "from nfgate import codecs; print(codecs.names()[-1], codecs.get('blob').title)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert check.stdout.split() == ["blob", "Test", "blob", "protocol"]


def test_readme_commands_and_ci_agree() -> None:
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    ci = (root / ".ci" / "run").read_text()
    blocks = [b.split("```", 1)[0].strip() for b in readme.split("```sh\n")[1:]]
    test_cmd = next(b for b in blocks if "pytest" in b)
    assert test_cmd in ci.splitlines(), "the README's test command must be what .ci/run runs"
