"""How a transport address is named in logs, worker lists and NorFab's client frames
(``nfgate.edges.peer_label``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nfgate.edges import peer_label


def test_readable_identities_are_kept_and_generated_ones_shown_in_hex() -> None:
    assert peer_label(b"nornir-worker-1") == "nornir-worker-1"  # NorFab sets readable identities
    assert peer_label(b"\x00k\x8bEg") == "id-006b8b4567"  # libzmq's generated identity
    assert peer_label(b"a b") == "id-612062"  # a space would split a log field
    assert peer_label(b"") == "id-"
    assert peer_label("é".encode()) == "id-c3a9"


@given(st.binary(max_size=64))
def test_text_exactly_when_every_byte_is_visible_ascii(address: bytes) -> None:
    visible = bool(address) and all(0x21 <= b < 0x7F for b in address)
    assert peer_label(address) == (address.decode("ascii") if visible else "id-" + address.hex())
