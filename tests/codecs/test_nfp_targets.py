"""NFP target frames and the workers NorFab's pseudo-service ``all`` stands for."""

from __future__ import annotations

import pytest

from nfgate.codecs.nfp.targets import format_target, parse_target, pseudo_targets
from nfgate.errors import DecodeError

# (name, service) in registration order
WORKERS = [("n1", "nornir"), ("f1", "filesharing"), ("n2", "nornir"), ("x1", "netbox")]


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("", "all"),
        ("all", "all"),
        ("any", "any"),
        ("w1", ("w1",)),
        ("w1, w2", ("w1", "w2")),
        ('["a","b"]', ("a", "b")),
    ],
)
def test_parse_target(text: str, parsed: object) -> None:
    assert parse_target(text) == parsed


@pytest.mark.parametrize("text", ["[1]", "[]", "w1,,w2", "[not json", "[" * 100_000 + "]" * 100_000])
def test_parse_target_refuses(text: str) -> None:
    with pytest.raises(DecodeError):
        parse_target(text)


def test_format_target_per_dialect() -> None:
    assert format_target(("a", "b"), "norfab") == '["a","b"]'
    assert format_target(("a", "b"), "spec") == "a,b"
    assert format_target("any", "norfab") == "any"


def test_pseudo_service_all_is_every_worker_of_every_service() -> None:
    assert pseudo_targets("all", WORKERS) == ("n1", "f1", "n2", "x1")


def test_pseudo_service_any_is_one_worker_of_each_service() -> None:
    assert pseudo_targets("any", WORKERS) == ("n1", "f1", "x1")


def test_pseudo_service_names_keep_the_known_ones_in_order_once() -> None:
    assert pseudo_targets(("x1", "gone", "n1", "x1"), WORKERS) == ("x1", "n1")
    assert pseudo_targets(("gone",), WORKERS) == ()
    assert pseudo_targets("all", []) == ()
