"""nfgate.edges.forget_oldest: the bound on the records an edge keeps per peer."""

from __future__ import annotations

from collections import OrderedDict

from nfgate.edges import forget_oldest


def test_the_protected_are_passed_over_and_the_oldest_others_forgotten() -> None:
    records = OrderedDict((k, k.startswith("w")) for k in ["w1", "c1", "w2", "c2", "c3", "c4"])
    forget_oldest(records, 4, lambda _, worker: worker)
    assert list(records) == ["c3", "c4", "w1", "w2"]  # the workers kept, at the newest end
    records["c5"] = False
    forget_oldest(records, 4, lambda _, worker: worker)
    assert list(records) == ["c4", "w1", "w2", "c5"]  # next time the oldest client goes first


def test_all_protected_stays_over_the_limit_and_the_newest_is_never_forgotten() -> None:
    records = OrderedDict([("w1", True), ("w2", True), ("new", False)])
    forget_oldest(records, 1, lambda _, worker: worker)
    assert set(records) == {"w1", "w2", "new"}  # looked at each once, then stopped
