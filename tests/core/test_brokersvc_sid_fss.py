"""The broker's inventory (sid) and file (fss) services of nfgate.brokersvc; inventory
merging is compared with NorFab's WorkersInventory on the same files."""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from nfgate.brokersvc import fss, sid
from nfgate.errors import ConfigError

# ----------------------------------------------------------------------------- sid


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_simple_yaml_inventory(tmp_path: Path) -> None:
    path = write(
        tmp_path / "inv.yaml", "workers:\n  w1:\n    service: echosvc\n    foo: bar\n    day: 2024-01-02\n"
    )
    inv = sid.load_inventory(path)
    assert sid.get_inventory(inv, "w1") == (200, {"service": "echosvc", "foo": "bar", "day": "2024-01-02"})
    assert sid.get_inventory(inv, "w2") == (200, None)  # NorFab answers null
    assert sid.handle("get_inventory", {"name": "w1"}, [], inv)[1]["foo"] == "bar"
    assert sid.handle("get_inventory", {}, ["w1"], inv)[1]["foo"] == "bar"
    status, value = sid.handle("get_inventory", {}, [], inv)
    assert status == 400 and "name" in value
    assert sid.handle("get_inventory", {"name": 3}, [], inv)[0] == 400
    assert sid.handle("list", {}, [], inv) == (200, "Unsupported task 'list'")
    # With no inventory configured: null for any worker, and still NorFab's word for a task.
    assert sid.handle("get_inventory", {"name": "w1"}, [], None) == (200, None)
    assert sid.handle("list", {}, [], None) == (200, "Unsupported task 'list'")


NORFAB_FORM = """\
broker: {endpoint: "tcp://127.0.0.1:5555"}
workers:
  nornir-*:
    - nornir/common.yaml
    - {runner: {plugin: RetryRunner}, tags: [a]}
  nornir-worker-1:
    - nornir/common.yaml
    - nornir/nornir-worker-1.yaml
    - {tags: [b, a]}
  "*-2":
    - nornir/extra.toml
  lonely: {}
"""


def norfab_files(tmp_path: Path) -> Path:
    write(
        tmp_path / "nornir/common.yaml", "service: nornir\nrunner: {options: {num_workers: 100}}\ntags: [c]\n"
    )
    write(
        tmp_path / "nornir/nornir-worker-1.yaml", "hosts: {r1: {platform: ios}}\nrunner: {options: {x: 1}}\n"
    )
    write(tmp_path / "nornir/extra.toml", 'service = "other"\n[hosts.r2]\nplatform = "eos"\n')
    return write(tmp_path / "inventory.yaml", NORFAB_FORM)


def test_norfab_glob_form_merges_as_norfab(tmp_path: Path) -> None:
    inv = sid.load_inventory(norfab_files(tmp_path))
    _, w1 = sid.get_inventory(inv, "nornir-worker-1")
    assert w1 == {
        "service": "nornir",
        "runner": {"options": {"num_workers": 100, "x": 1}, "plugin": "RetryRunner"},
        "tags": ["c", "a", "b"],  # lists gain what they lack; common.yaml merged once
        "hosts": {"r1": {"platform": "ios"}},
    }
    _, w2 = sid.get_inventory(inv, "nornir-worker-2")
    assert w2["service"] == "other" and w2["hosts"] == {"r2": {"platform": "eos"}}
    assert sid.get_inventory(inv, "lonely") == (200, None)  # an empty merge is "nothing"
    assert sid.get_inventory(inv, "NORNIR-worker-1") == (200, None)  # globs are case-sensitive
    assert inv.as_dict()["workers"]["nornir-*"][0] == "nornir/common.yaml"  # as written


def test_merge_agrees_with_norfab_workers_inventory(tmp_path: Path) -> None:
    norfab_inventory = importlib.import_module("norfab.core.inventory")
    path = norfab_files(tmp_path)
    # NorFab reads only YAML: compare on the YAML-only globs.
    data = yaml.safe_load(path.read_text())["workers"]
    del data["*-2"]
    theirs = norfab_inventory.WorkersInventory(str(tmp_path), data)
    ours = sid.load_inventory(write(tmp_path / "yaml-only.yaml", yaml.safe_dump({"workers": data})))
    for name in ("nornir-worker-1", "nornir-worker-7"):
        assert sid.get_inventory(ours, name)[1] == theirs[name]


def test_toml_inventory(tmp_path: Path) -> None:
    path = write(
        tmp_path / "inv.toml",
        '[workers.w1]\nservice = "echosvc"\n\n[workers."fs-*"]\nbase_dir = "/srv"\n',
    )
    inv = sid.load_inventory(path)
    assert sid.get_inventory(inv, "w1") == (200, {"service": "echosvc"})
    assert sid.get_inventory(inv, "fs-1") == (200, {"base_dir": "/srv"})
    assert inv.patterns() == ("w1", "fs-*")


JINJA = """\
workers:
  w1:
    home: '{{ env.NFGATE_TEST_HOME }}'
    hosts:
{%- for i in range(2) %}
      r{{ i }}: {platform: ios}
{%- endfor %}
"""


def test_yaml_inventory_files_are_jinja2_templates_as_in_norfab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NFGATE_TEST_HOME", "/home/nf")
    write(tmp_path / "w1.yaml", "{% if env.NFGATE_TEST_HOME %}extra: yes{% endif %}\n")
    path = write(tmp_path / "inv.yaml", JINJA + "  w2: [w1.yaml]\n")
    inv = sid.load_inventory(path)
    assert sid.get_inventory(inv, "w1")[1] == {
        "home": "/home/nf",
        "hosts": {"r0": {"platform": "ios"}, "r1": {"platform": "ios"}},
    }
    assert sid.get_inventory(inv, "w2")[1] == {"extra": True}
    norfab_inventory = importlib.import_module("norfab.core.inventory")
    theirs = norfab_inventory.WorkersInventory(str(tmp_path), {"w2": ["w1.yaml"]})
    assert sid.get_inventory(inv, "w2")[1] == theirs["w2"]


def test_the_dotenv_beside_the_inventory_is_in_env_over_the_environment_as_nfapi_loads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NFAPI runs load_dotenv(<inventory folder>/.env, override=True) before rendering.
    monkeypatch.setenv("NFGATE_TEST_HOME", "/from/environment")
    monkeypatch.setenv("NFGATE_TEST_OUTER", "outer")
    monkeypatch.delenv("NFGATE_TEST_BARE", raising=False)
    write(
        tmp_path / ".env",
        "export NFGATE_TEST_HOME='/from/dotenv'  # wins\n"
        'NFGATE_TEST_TOKEN="${NFGATE_TEST_HOME}/${NFGATE_TEST_OUTER}/${NFGATE_TEST_UNSET:-fallback}"\n'
        "NFGATE_TEST_BARE\n",
    )
    write(
        tmp_path / "w1.yaml",
        "token: '{{ env.NFGATE_TEST_TOKEN }}'\nbare: '{{ env.NFGATE_TEST_BARE is defined }}'\n",
    )
    path = write(tmp_path / "inv.yaml", JINJA + "  w2: [w1.yaml]\n")
    inv = sid.load_inventory(path)
    assert sid.get_inventory(inv, "w1")[1]["home"] == "/from/dotenv"
    # A referenced file sees it too; a bare NAME sets nothing; the process is untouched.
    assert sid.get_inventory(inv, "w2")[1] == {"token": "/from/dotenv/outer/fallback", "bare": "False"}
    assert os.environ["NFGATE_TEST_HOME"] == "/from/environment" and "NFGATE_TEST_TOKEN" not in os.environ


def test_a_dotenv_line_that_does_not_parse_is_one_line_naming_it(tmp_path: Path) -> None:
    write(tmp_path / ".env", "TOKEN=1\nPASSWORD secret\n")
    path = write(tmp_path / "inv.yaml", "workers: {}\n")
    with pytest.raises(ConfigError, match=r"\.env: line 2: not a NAME=value binding$"):
        sid.load_inventory(path)


def test_a_template_that_does_not_render_is_one_line_naming_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "inv.yaml", "workers:\n  w1: {a: 1}\n{% for x in %}\n")
    with pytest.raises(ConfigError) as info:
        sid.load_inventory(path)
    message = str(info.value)
    assert "inv.yaml" in message and "Jinja2" in message and "line 3" in message and "\n" not in message


def test_answers_are_copies(tmp_path: Path) -> None:
    inv = sid.load_inventory(write(tmp_path / "inv.yaml", "workers: {w1: {hosts: {r1: {}}}}\n"))
    first = sid.get_inventory(inv, "w1")[1]
    first["hosts"]["r1"]["changed"] = True
    assert sid.get_inventory(inv, "w1")[1] == {"hosts": {"r1": {}}}


def test_number_keys_are_json_strings_and_quoted_yaml_words_plain_keys(tmp_path: Path) -> None:
    text = "workers:\n  'yes': {vlans: {100: a, 2.5: b}, 'null': c, 'on': d}\n"
    inv = sid.load_inventory(write(tmp_path / "inv.yaml", text))
    assert inv.patterns() == ("yes",)
    assert sid.get_inventory(inv, "yes") == (200, {"vlans": {"100": "a", "2.5": "b"}, "null": "c", "on": "d"})


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("missing.yaml", None, "file not found"),
        ("bad.yaml", "workers:\n  w1: [unclosed\n", "invalid YAML"),
        ("bad.toml", "[workers\n", "invalid TOML"),
        ("list.yaml", "- a\n- b\n", "top level must be a mapping"),
        ("empty.yaml", "", "empty"),
        ("shape.yaml", "workers: [w1, w2]\n", "'workers' must be a mapping"),
        ("value.yaml", "workers: {w1: 5}\n", "workers.w1 must be"),
        ("item.yaml", "workers: {w1: [5]}\n", "workers.w1[0]"),
        ("ref.yaml", "workers: {w1: [nope/there.yaml]}\n", "there.yaml: file not found"),
        ("inv.json", "{}", "unknown inventory format"),
        ("binary.yaml", "workers: {w1: {blob: !!binary aGk=}}\n", "cannot be sent as JSON"),
        # YAML's null and boolean keys: silently "null" and "true" before (`yes:` a pattern "true").
        ("null-worker.yaml", "workers:\n  ~: {a: 1}\n", "workers: a key is YAML's null"),
        ("empty-key.yaml", "workers:\n  w1:\n    ?\n    : 1\n", "workers.w1: a key is YAML's null"),
        ("yes-worker.yaml", "workers:\n  yes: {a: 1}\n", "workers: key True is a YAML boolean"),
        ("off-key.yaml", "workers:\n  w1: {hosts: {r1: {off: 1}}}\n", "workers.w1.hosts.r1: key False"),
        ("null-top.yaml", "null: {a: 1}\nworkers: {}\n", "top level: a key is YAML's null"),
        # Two keys that are one JSON key: one value would go unseen.
        ("twice.yaml", "workers:\n  w1: {1: a, '1': b}\n", "are one JSON key"),
    ],
)
def test_broken_inventory_is_one_line_config_error(
    tmp_path: Path, name: str, text: str | None, problem: str
) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError) as info:
        sid.load_inventory(path)
    message = str(info.value)
    assert name in message and problem in message and "\n" not in message


# ----------------------------------------------------------------------------- fss


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    write(root / "a.txt", "alpha\n")
    write(root / "sub/b.bin", "bravo")
    write(root / "sub/deep/c.txt", "charlie")
    write(root / ".hidden", "x")
    write(root / "__norfab__/state.txt", "x")
    write(tmp_path / "secret.txt", "top secret")
    return root


def call(root: fss.FileRoot, task: str, **kwargs: Any) -> tuple[int, Any]:
    status, value = fss.handle(task, kwargs, [], root)
    json.dumps(value)
    return status, value


def test_file_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        fss.FileRoot(tmp_path / "nope")
    with pytest.raises(ConfigError, match="not a directory"):
        fss.FileRoot(write(tmp_path / "f", ""))


def test_list_files(tree: Path) -> None:
    root = fss.FileRoot(tree)
    assert call(root, "list_files", url="nf://") == (200, [".hidden", "__norfab__", "a.txt", "sub"])
    assert call(root, "list_files", url="nf://sub") == (200, ["b.bin", "deep"])
    assert fss.handle("list_files", {}, ["nf://sub/deep"], root) == (200, ["c.txt"])
    assert call(root, "list_files", url="nf://nope")[0] == 404
    assert call(root, "list_files", url="nf://a.txt")[0] == 400
    assert call(root, "list_files")[0] == 400  # url is required


def test_file_details(tree: Path) -> None:
    root = fss.FileRoot(tree)
    status, details = call(root, "file_details", url="nf://sub/b.bin")
    assert status == 200
    assert details == {
        "md5hash": hashlib.md5(b"bravo").hexdigest(),
        "size_bytes": 5,
        "exists": True,
        "sha256hash": hashlib.sha256(b"bravo").hexdigest(),
        "modified": os.stat(tree / "sub/b.bin").st_mtime,
    }
    assert call(root, "file_details", url="nf://missing.txt")[0] == 404
    assert call(root, "file_details", url="nf://sub")[0] == 400
    status, many = call(root, "file_details", url=["nf://a.txt", "nf://missing", "nf://../secret.txt"])
    assert status == 200 and many["nf://a.txt"]["exists"] is True
    assert many["nf://missing"]["exists"] is False and "not found" in many["nf://missing"]["error"]
    assert many["nf://../secret.txt"]["exists"] is False and ".." in many["nf://../secret.txt"]["error"]
    assert call(root, "file_details", url=["nf://a.txt", 5])[0] == 400


def test_file_details_hashes_a_file_once_while_it_is_unchanged(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hashing runs on the loop: a URL listed many times, or asked for again, must
    # not be read again (a 2 MB file listed 2,000 times blocked the broker for 10 s).
    root = fss.FileRoot(tree)
    reads: list[int] = []
    real = hashlib.sha256

    def counting() -> Any:
        reads.append(1)
        return real()

    monkeypatch.setattr(fss.hashlib, "sha256", counting)
    status, many = call(root, "file_details", url=["nf://a.txt"] * 500)
    assert status == 200 and list(many) == ["nf://a.txt"] and len(reads) == 1
    assert call(root, "file_details", url="nf://a.txt")[1]["md5hash"] == hashlib.md5(b"alpha\n").hexdigest()
    assert len(reads) == 1
    write(tree / "a.txt", "changed, and longer\n")  # new size (and mtime): hashed again
    details = call(root, "file_details", url="nf://a.txt")[1]
    assert details["sha256hash"] == real(b"changed, and longer\n").hexdigest() and len(reads) == 2


def test_a_name_too_long_is_400_not_500(tree: Path) -> None:
    root = fss.FileRoot(tree)
    status, message = call(root, "file_details", url="nf://" + "x" * 5000)
    assert status == 400 and "too long" in message


@pytest.mark.parametrize("task", ["file_details", "fetch_file", "list_files", "walk"])
def test_a_url_with_a_lone_surrogate_is_400_not_an_internal_error(tree: Path, task: str) -> None:
    # JSON's "\\ud800" decodes to a lone surrogate, which realpath cannot encode.
    status, message = call(fss.FileRoot(tree), task, url="nf://\ud800")
    assert status == 400 and "lone surrogate" in message


def test_a_url_list_too_long_in_all_is_400_before_any_path_is_resolved(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 10,000 URLs of 2,000 components each held the loop (every peer) for a minute.
    urls = [f"nf://{i:05}/" + "a/" * 2000 for i in range(200)]
    root = fss.FileRoot(tree)
    resolved: list[str] = []
    monkeypatch.setattr(fss.os.path, "realpath", lambda p: resolved.append(p) or p)
    status, message = call(root, "file_details", url=urls)
    assert status == 400 and f"more than {fss.MAX_LISTED} characters" in message
    assert resolved == []
    monkeypatch.undo()
    status, value = call(root, "file_details", url=urls[:20])  # 80,000 characters: taken
    assert status == 200 and len(value) == 20


def test_a_path_removed_while_it_is_resolved_is_400(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(path: str) -> str:
        raise FileNotFoundError(2, "No such file or directory")

    root = fss.FileRoot(tree)
    monkeypatch.setattr(fss.os.path, "realpath", gone)
    status, message = call(root, "fetch_file", url="nf://sub/c.txt")
    assert status == 400 and "cannot resolve: No such file or directory" in message


def test_walk(tree: Path) -> None:
    root = fss.FileRoot(tree)
    (tree / "out").symlink_to(tree.parent / "secret.txt")
    (tree / "in").symlink_to(tree / "a.txt")
    (tree / "outdir").symlink_to(tree.parent, target_is_directory=True)
    assert call(root, "walk", url="nf://") == (
        200,
        ["nf://a.txt", "nf://in", "nf://sub/b.bin", "nf://sub/deep/c.txt"],
    )
    assert call(root, "walk", url="nf://sub") == (200, ["nf://sub/b.bin", "nf://sub/deep/c.txt"])
    assert call(root, "walk", url="nf://missing")[0] == 404


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("nf://../secret.txt", "'..'"),
        ("nf://sub/../../secret.txt", "'..'"),
        ("nf://sub/..", "'..'"),
        ("nf://..\\secret.txt", "'..'"),
        ("nf:///etc/passwd", "absolute"),
        ("nf://C:/Windows/win.ini", "absolute"),
        ("nf://c:\\boot.ini", "absolute"),
        ("file:///etc/passwd", "not an nf:// URL"),
        ("/etc/passwd", "not an nf:// URL"),
        ("nf://a.txt\x00.png", "NUL"),
    ],
)
def test_refused_urls(tree: Path, url: str, reason: str) -> None:
    root = fss.FileRoot(tree)
    for task in ("fetch_file", "file_details", "list_files", "walk"):
        status, message = call(root, task, url=url)
        assert status == 400 and reason in message, (task, message)


def test_symlinks_out_are_refused_and_in_are_allowed(tree: Path) -> None:
    root = fss.FileRoot(tree)
    os.symlink(tree.parent / "secret.txt", tree / "escape.txt")
    os.symlink(tree.parent, tree / "up")
    os.symlink(tree / "sub/b.bin", tree / "alias.bin")
    for url in ("nf://escape.txt", "nf://up/secret.txt", "nf://up"):
        status, message = call(root, "fetch_file", url=url)
        assert status == 400 and "outside the files root" in message
    status, chunk = call(root, "fetch_file", url="nf://alias.bin")
    assert status == 200 and base64.b64decode(chunk["data"]) == b"bravo"


def test_root_reached_through_a_symlink(tree: Path, tmp_path: Path) -> None:
    link = tmp_path / "link-to-root"
    link.symlink_to(tree, target_is_directory=True)
    root = fss.FileRoot(link)  # the root's own symlink does not count as leaving it
    assert call(root, "fetch_file", url="nf://a.txt")[0] == 200


def fetch_all(root: fss.FileRoot, url: str, chunk_size: int) -> tuple[bytes, int]:
    data, offset, chunks = b"", 0, 0
    for _ in range(1000):  # bounded: a reader that never says eof fails, not hangs
        status, chunk = call(root, "fetch_file", url=url, offset=offset, chunk_size=chunk_size)
        assert status == 200 and chunk["offset"] == offset and chunk["encoding"] == "base64"
        data += base64.b64decode(chunk["data"])
        offset += chunk["length"]
        chunks += 1
        if chunk["eof"]:
            return data, chunks
    pytest.fail(f"no eof after {chunks} chunks ({offset} bytes) of {url}")


def test_chunked_fetch_reassembles_exactly(tree: Path) -> None:
    payload = os.urandom(700_000)
    (tree / "big.bin").write_bytes(payload)
    root = fss.FileRoot(tree)
    assert fetch_all(root, "nf://big.bin", 256_000) == (payload, 3)
    assert fetch_all(root, "nf://big.bin", 700_000) == (payload, 1)
    _, chunk = call(root, "fetch_file", url="nf://big.bin")  # NorFab's default chunk
    assert chunk["length"] == fss.DEFAULT_CHUNK and chunk["size"] == 700_000 and not chunk["eof"]


def test_chunk_size_is_capped(tree: Path) -> None:
    payload = os.urandom(fss.MAX_CHUNK * 2 + 10)
    (tree / "huge.bin").write_bytes(payload)
    root = fss.FileRoot(tree)
    status, chunk = call(root, "fetch_file", url="nf://huge.bin", chunk_size=50 * 1024 * 1024)
    assert status == 200 and chunk["length"] == fss.MAX_CHUNK and not chunk["eof"]
    assert fetch_all(root, "nf://huge.bin", 50 * 1024 * 1024) == (payload, 3)


def test_fetch_edges_and_bad_arguments(tree: Path) -> None:
    root = fss.FileRoot(tree)
    (tree / "empty").write_bytes(b"")
    assert call(root, "fetch_file", url="nf://empty")[1] | {"data": ""} == {
        "url": "nf://empty",
        "offset": 0,
        "length": 0,
        "size": 0,
        "eof": True,
        "encoding": "base64",
        "data": "",
    }
    at_end = call(root, "fetch_file", url="nf://a.txt", offset=6)[1]
    assert (at_end["length"], at_end["eof"]) == (0, True)
    assert call(root, "fetch_file", url="nf://a.txt", offset=7)[0] == 400
    assert call(root, "fetch_file", url="nf://a.txt", offset=-1)[0] == 400
    assert call(root, "fetch_file", url="nf://a.txt", chunk_size=0)[0] == 400
    assert call(root, "fetch_file", url="nf://a.txt", chunk_size=True)[0] == 400
    assert call(root, "fetch_file", url="nf://a.txt", offset="0")[0] == 400
    assert call(root, "fetch_file", url="nf://missing")[0] == 404
    assert call(root, "fetch_file", url="nf://sub/b.bin/x")[0] == 404
    assert call(root, "fetch_file", url="nf://sub")[0] == 400
    assert call(root, "fetch_file", url=42)[0] == 400
    assert call(root, "upload", url="nf://a.txt") == (200, "Unsupported task 'upload'")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_blocking(tree: Path) -> None:
    os.mkfifo(tree / "pipe")
    root = fss.FileRoot(tree)
    for task in ("fetch_file", "file_details"):
        status, message = call(root, task, url="nf://pipe")
        assert status == 400 and "not a regular file" in message
    assert "nf://pipe" not in call(root, "walk", url="nf://")[1]


def test_a_path_of_too_many_components_is_refused_before_it_is_resolved(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # os.path.realpath takes time in the square of the components: 400,000 of them held
    # the gateway's loop (every peer) for 10 s. Such a URL is refused unresolved.
    root = fss.FileRoot(tree)
    resolved: list[str] = []
    real = os.path.realpath

    def counting(path: str, **kwargs: Any) -> str:
        resolved.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(os.path, "realpath", counting)
    for task in ("fetch_file", "file_details", "list_files", "walk"):
        status, message = call(root, task, url="nf://" + "a/" * 200_000)
        assert status == 400 and "too long" in message and len(message) < 400
    assert resolved == []
    assert call(root, "fetch_file", url="nf://" + "/".join(["sub"] * 1) + "/b.bin")[0] == 200


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_followed(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race a local user can win: the path is checked, then a directory on it becomes
    # a symlink out of the root before the open. Simulated at the worst moment: right
    # after every check.
    write(tree.parent / "outside/b.bin", "OUTSIDE SECRET")
    write(tree.parent / "outside/deep/c.txt", "OUTSIDE SECRET")
    root = fss.FileRoot(tree)
    checked = fss.FileRoot.resolve

    def swap_after_check(self: fss.FileRoot, url: object) -> str:
        real = checked(self, url)
        if (tree / "sub").is_dir() and not (tree / "sub").is_symlink():
            (tree / "sub").rename(tree / "sub.away")
            (tree / "sub").symlink_to(tree.parent / "outside", target_is_directory=True)
        return real

    for task, url in (
        ("fetch_file", "nf://sub/b.bin"),
        ("file_details", "nf://sub/b.bin"),
        ("list_files", "nf://sub"),
        ("list_files", "nf://sub/deep"),
        ("walk", "nf://sub"),
    ):
        monkeypatch.setattr(fss.FileRoot, "resolve", swap_after_check)
        status, value = call(root, task, url=url)
        assert status == 400 and "symbolic link" in value, (task, url, status, value)
        monkeypatch.undo()
        (tree / "sub").unlink()
        (tree / "sub.away").rename(tree / "sub")
        assert call(root, task, url=url)[0] == 200  # unswapped, the same request is served


def test_file_details_hashes_at_most_max_hashed_bytes_per_request(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hashing runs on the loop: one request for many large files must not hold every
    # other peer for seconds. What does not fit is answered without digests, with why.
    monkeypatch.setattr(fss, "MAX_HASHED", 10)
    fss._DIGESTS.clear()
    root = fss.FileRoot(tree)
    status, many = call(root, "file_details", url=["nf://a.txt", "nf://sub/b.bin", "nf://sub/deep/c.txt"])
    assert status == 200
    assert many["nf://a.txt"]["md5hash"] == hashlib.md5(b"alpha\n").hexdigest()  # 6 bytes of 10
    past = many["nf://sub/b.bin"]  # 5 more: past the 10
    assert past["exists"] is True and past["size_bytes"] == 5
    assert past["md5hash"] is None and past["sha256hash"] is None and "not hashed" in past["error"]
    assert many["nf://sub/deep/c.txt"]["md5hash"] is None
    # The next request has its own budget, and a file hashed before costs nothing.
    again = call(root, "file_details", url=["nf://a.txt", "nf://sub/b.bin"])[1]
    assert again["nf://sub/b.bin"]["md5hash"] == hashlib.md5(b"bravo").hexdigest()
