"""NFP message validation: a message that can be built can be encoded in at least one
dialect and reads back as itself (docs/library.md), MMI's layouts are told apart by the
header alone, and NorFab's swapped broker DISCONNECT never shadows a real command."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nfgate.codecs import nfp
from nfgate.codecs.nfp import codec
from nfgate.codecs.nfp.messages import NORFAB_COMMANDS
from nfgate.errors import DecodeError, EncodeError

# Small pools of awkward values: empty strings, command-like text, empty addresses. A
# pool keeps most draws constructible, so the property below is exercised, not skipped.
texts = st.sampled_from(["", "s", " ", "0x02", "0x03", "200", "any", "mmi.service.broker"])
fields: dict[str, st.SearchStrategy[Any]] = {
    "header": st.sampled_from([nfp.CLIENT, nfp.WORKER, nfp.BROKER]),
    "service": st.none() | texts,
    "target": st.none() | texts,
    "client": st.none() | st.sampled_from([b"", b"c", b"\xff", b"svc"]),
    "uuid": texts,
    "status": st.none() | st.sampled_from([200, 202, 99, 1000]),
    "status_text": st.sampled_from(["", "OK"]),
    "body": st.lists(st.sampled_from([b"", b"x", b"200", b"0x03"]), max_size=3).map(tuple),
    "legacy_order": st.booleans(),
}
disconnect_bodies = st.none() | st.sampled_from([b"", b"bye"])


@st.composite
def attempts(draw: st.DrawFn) -> tuple[type[Any], dict[str, Any]]:
    cls = draw(st.sampled_from(nfp.CODEC.messages))
    names = [a.name for a in cls.__attrs_attrs__]  # type: ignore[attr-defined]
    kwargs = {name: draw(fields[name]) for name in names if name in fields and draw(st.booleans())}
    if "body" in names and cls in (nfp.Disconnect, nfp.Open):
        kwargs["body"] = draw(disconnect_bodies if cls is nfp.Disconnect else st.binary(max_size=2))
    return cls, kwargs


@settings(max_examples=1500)
@given(attempts())
def test_every_message_that_can_be_built_round_trips_in_some_dialect(
    attempt: tuple[type[Any], dict[str, Any]],
) -> None:
    cls, kwargs = attempt
    try:
        message = cls(**kwargs)
    except (TypeError, ValueError):
        return
    dialects = []
    for dialect in codec.DIALECTS:
        try:
            wire = nfp.encode(message, dialect)
        except EncodeError:
            continue
        dialects.append(dialect)
        assert nfp.decode(wire, dialect) == message
        assert nfp.detect(wire) == dialect
        assert nfp.decode(wire) == message
    assert dialects, f"{message!r} encodes in no dialect"


# -- 1: a result carries a status --------------------------------------------------------


@pytest.mark.parametrize("cls", [nfp.Response, nfp.Event, nfp.Stream])
def test_a_result_needs_a_status(cls: type[Any]) -> None:
    with pytest.raises((TypeError, ValueError), match="status"):
        cls(header=nfp.WORKER, service="echo", uuid="u", status=None, body=(b"x",))
    with pytest.raises((TypeError, ValueError), match="status"):
        cls(header=nfp.BROKER, service="echo", uuid="u", body=(b"x",))  # no status at all


# -- 4: messages that no dialect can carry are refused at construction ---------------


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (nfp.Post, {"header": nfp.CLIENT, "client": b"c"}),  # routed is broker -> worker only
        (nfp.Get, {"header": nfp.CLIENT, "client": b"c"}),
        (nfp.Put, {"header": nfp.BROKER, "service": "s", "target": "any"}),  # NorFab routes it
        (nfp.Event, {"header": nfp.WORKER, "service": "s", "status": 200}),  # NorFab routes it
        (nfp.Stream, {"header": nfp.WORKER, "service": "s", "status": 200}),
        (nfp.Response, {"header": nfp.BROKER, "client": b"c", "status": 200}),  # routed: worker only
        (nfp.Mmi, {"header": nfp.WORKER, "service": "s", "target": "t"}),
    ],
)
def test_messages_no_dialect_carries_are_refused(cls: type[Any], kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        cls(uuid="u", body=(b"x",), **kwargs)


def test_the_gateways_own_forms_still_validate() -> None:
    # What nfgate/edges/nfp*.py build, in both dialects.
    nfp.Delete(header=nfp.BROKER, client=b"c", uuid="u", body=(b"{}",))
    nfp.Delete(header=nfp.BROKER, service="s", target="any", uuid="u", body=(b"",))
    nfp.Put(header=nfp.BROKER, client=b"c", uuid="u", body=(b"{}",))
    nfp.Get(header=nfp.BROKER, client=b"c", uuid="u", body=(b"{}",))
    nfp.Response(header=nfp.BROKER, service="s", uuid="u", status=202, body=(b"{}",))
    nfp.Response(header=nfp.WORKER, service="s", uuid="u", status=200, body=(b"{}",))
    nfp.Response(header=nfp.WORKER, client=b"c", uuid="u", status=200, body=(b"{}",))
    nfp.Mmi(header=nfp.BROKER, service="mmi.service.broker", uuid="u", status=200, body=(b"[]",))


# -- 2: MMI layouts ----------------------------------------------------------------------


def _round_trip(message: nfp.Mmi) -> None:
    wire = nfp.encode(message, "norfab")
    assert nfp.decode(wire) == message
    assert nfp.encode(nfp.decode(wire), "norfab") == wire


@pytest.mark.parametrize(
    "message",
    [
        # a client's request with an empty target: frame 4 is empty, still addressed
        nfp.Mmi(header=nfp.CLIENT, service="mmi.service.broker", target="", uuid="u1", body=(b"{}",)),
        nfp.Mmi(header=nfp.CLIENT, service="", target="", uuid="u1", body=(b"{}",)),
        nfp.Mmi(header=nfp.BROKER, service="", uuid="u1", status=200, body=(b"",)),
        nfp.Mmi(header=nfp.BROKER, client=b"c1", uuid="u1", body=(b"{}",)),
        nfp.Mmi(header=nfp.WORKER, client=b"c1", uuid="u1", status=200, body=(b"", b"{}")),
    ],
)
def test_every_mmi_layout_round_trips(message: nfp.Mmi) -> None:
    _round_trip(message)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"header": nfp.CLIENT, "client": b"\xff", "target": " ", "uuid": "u"},  # a client never routes
        {"header": nfp.CLIENT, "service": "s", "target": "t", "uuid": "u", "status": 200},
        {"header": nfp.CLIENT, "service": "s", "target": "t", "uuid": ""},  # "" would read as a delimiter
        {"header": nfp.BROKER, "service": "s", "uuid": "", "status": 200},
        {"header": nfp.BROKER, "service": "s", "target": "t", "uuid": "u"},  # the broker answers
        {"header": nfp.BROKER, "client": b"c", "uuid": "u", "status": 200},
        {"header": nfp.WORKER, "service": "svc", "uuid": "u", "status": 200},  # a worker routes
        {"header": nfp.WORKER, "client": b"c", "uuid": "u"},  # and answers
    ],
)
def test_mmi_forms_that_cannot_round_trip_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        nfp.Mmi(body=(b"{}",), **kwargs)


@pytest.mark.parametrize(
    "message",
    [
        # routed: NorFab's layout, whose status frame is three digits only
        lambda: nfp.Response(
            header=nfp.WORKER, client=b"c", uuid="u", status=200, status_text="OK", body=(b"",)
        ),
        # NorFab's command: the spec dialect, the one with status text, has no EVENT
        lambda: nfp.Event(
            header=nfp.BROKER, service="s", uuid="u", status=200, status_text="OK", body=(b"",)
        ),
    ],
)
def test_status_text_where_no_dialect_writes_it_is_refused(message: Any) -> None:
    with pytest.raises(ValueError, match="status text"):
        message()


def test_a_workers_mmi_is_read_by_its_header() -> None:
    # Once the worker's unrouted answer with an empty uuid, now only the routed answer.
    wire = [b"", b"NFPW01", b"0x11", b"svc", b"", b"200", b"200", b"{}"]
    message = nfp.decode(wire)
    assert message == nfp.Mmi(header=nfp.WORKER, client=b"svc", uuid="200", status=200, body=(b"{}",))
    assert nfp.encode(message, "norfab") == wire


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        ([b"", b"NFPC01", b"0x11", b"s", b"t", b"", b"{}"], "uuid"),
        ([b"", b"NFPB01", b"0x11", b"s", b"u", b"200 OK", b"{}"], "status"),
        ([b"", b"NFPB01", b"0x11", b"", b"", b"u", b"{}"], "client address is empty"),
        ([b"", b"NFPW01", b"0x11", b"c", b"x", b"u", b"200", b"{}"], "delimiter"),
    ],
)
def test_mmi_decoder_refuses(wire: list[bytes], reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        nfp.decode(wire, "norfab")


# -- 3: NorFab's swapped broker DISCONNECT -----------------------------------------------


def test_a_command_in_frame_2_wins_over_the_swapped_disconnect() -> None:
    wire = [b"", b"NFPB01", b"0x02", b"0x03"]
    assert nfp.detect(wire) == "norfab"
    assert nfp.decode(wire) == nfp.Keepalive(header=nfp.BROKER, service="0x03")
    # a spec command byte in frame 2 is that command, in the spec dialect
    spec = [b"", b"NFPB01", b"\x02", b"0x03"]
    assert nfp.detect(spec) == "spec"
    assert nfp.decode(spec) == nfp.Keepalive(header=nfp.BROKER, service="0x03")


def test_disconnect_for_a_service_named_like_a_command_round_trips() -> None:
    message = nfp.Disconnect(header=nfp.BROKER, service="0x03", body=None)
    wire = nfp.encode(message, "norfab")
    assert wire == [b"", b"NFPB01", b"0x03", b"0x03"]
    assert nfp.decode(wire) == message


def test_what_norfabs_broker_sends_is_still_the_swapped_form() -> None:
    wire = [b"", b"NFPB01", b"echosvc", b"0x03"]
    message = nfp.Disconnect(header=nfp.BROKER, service="echosvc", body=None, legacy_order=True)
    assert nfp.detect(wire) == "norfab"
    assert nfp.decode(wire) == message
    assert nfp.encode(message, "norfab") == wire


@pytest.mark.parametrize("service", sorted(NORFAB_COMMANDS))
def test_the_swapped_form_cannot_name_a_command(service: str) -> None:
    with pytest.raises(ValueError, match="command"):
        nfp.Disconnect(header=nfp.BROKER, service=service, body=None, legacy_order=True)


def test_the_command_list_is_the_codecs() -> None:
    assert {frame.decode() for frame in codec._NORFAB_NUMBER} == NORFAB_COMMANDS


# -- frame builders: an unknown dialect is the caller's mistake --------------------------


def test_frame_builders_refuse_an_unknown_dialect() -> None:
    from nfgate.errors import ConfigError

    with pytest.raises(ConfigError):
        codec.response_frames("s", "u", 200, (b"x",), "bogus")
    with pytest.raises(ConfigError):
        codec.dispatch_frames("u", (b"x",), "bogus", service="s", target="any")


@pytest.mark.parametrize(
    ("wire", "dialect", "reason"),
    [
        # "three digits, optionally followed by a space and descriptive text": a space with
        # no text would be re-encoded without it.
        ([b"", b"NFPW01", b"\x05", b"svc", b"u1", b"200 ", b"x"], "spec", "followed by text"),
        # NorFab compares the whole status frame (norfab-wire.md section 1).
        ([b"", b"NFPW01", b"0x05", b"c1", b"", b"u1", b"200 OK", b"x"], "norfab", "no text"),
    ],
)
def test_status_frames_that_cannot_come_back_as_they_were_are_refused(
    wire: list[bytes], dialect: str, reason: str
) -> None:
    with pytest.raises(DecodeError, match=reason):
        nfp.decode(wire, dialect)


def test_a_status_with_text_is_not_encoded_for_norfab() -> None:
    message = nfp.Response(
        header=nfp.BROKER, service="s", uuid="u", status=200, status_text="OK", body=(b"x",)
    )
    assert nfp.encode(message, "spec")[5] == b"200 OK"
    with pytest.raises(EncodeError, match="no text"):
        nfp.encode(message, "norfab")
