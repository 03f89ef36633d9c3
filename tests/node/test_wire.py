from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node import wire
from node.wire import (
    MAX_DATAGRAM_BYTES,
    Codec,
    Commit,
    Evicted,
    JoinAccept,
    JoinAck,
    JoinRequest,
    JoinRetry,
    Lookup,
    PathEntry,
    PeerInfo,
    Ping,
    Pong,
    Probe,
    ProbeReply,
    Propose,
    ProposeOK,
    ReplayWindow,
    Tombstone,
    Update,
    WireError,
    check_peer_info,
)

KEY = b"k" * 32

INFO = PeerInfo(
    7,
    "10.0.0.3",
    7000,
    4,
    (280.0, 2048.0, 0.25),
    (0.0, 0.0, 0.0),
    (500.0, 4096.0, 0.5),
    (PathEntry(99, 2, 0.5, False), PathEntry(100, 0, 500.0, False)),
)

JOB = wire.JobInfo(9, 4, 120.5, 1_000.0, (4.0, 1.0, 0.25))

MESSAGES = [
    Update(INFO, (INFO,), (Tombstone(8, 2, INFO.lo, INFO.hi, INFO.path),)),
    JoinRequest(5, INFO, 3),
    JoinRequest(5, INFO, 3, 4),
    JoinAccept(5, INFO, (INFO, INFO)),
    JoinRetry(5, "conflict"),
    JoinAck(5),
    Propose(12),
    Propose(12, 3, wire.COMMIT_SPLIT),
    ProposeOK(12, True),
    ProposeOK(12, False, "neighbour busy"),
    Commit(12, wire.COMMIT_SPLIT, INFO, INFO, ()),
    Commit(13, wire.COMMIT_NOOP, None, None, ()),
    Probe(77),
    ProbeReply(77, None),
    ProbeReply(77, INFO),
    Evicted(3),
    Lookup(1, (1.0, 2.0, 0.5), INFO, 0),
    Ping(1 << 62),
    Pong(1 << 62),
    wire.Solicit(3, 64, 12),
    wire.SolicitAnswer(3, wire.ANSWER_DEFER),
    wire.Roster(3, (wire.Endpoint("10.0.0.3", 7000), wire.Endpoint("10.0.0.4", 7000))),
    wire.RttReport(3, (0, 8, -1)),
    wire.Confirm(3, (wire.Endpoint("10.0.0.3", 7000),)),
    wire.Release(3),
    wire.ClusterBeat(3),
    wire.JobRoute(JOB, 1 << 30, wire.Endpoint("10.0.0.3", 7000), 4, 1),
    wire.JobRoute(
        JOB, 7, wire.Endpoint("10.0.0.3", 7000), 4, 1, wire.Endpoint("10.0.0.5", 7000), 3
    ),
    wire.JobAck(9, 1 << 30, True),
    wire.JobEnd(9, 1 << 30, False, "routing found a hole at 10.0.0.7", 0.0),
    wire.JobCancel(9, 1 << 30),
    wire.TaskOffer(JOB, 1 << 30, 2),
    wire.TaskReady(9, 1 << 30, 2, False),
    wire.TaskStart(9, 1 << 30, 2, 1, (wire.Endpoint("10.0.0.3", 7100),) * 4),
    wire.TaskCancel(9, 1 << 30, 2),
    wire.TaskDone(9, 1 << 30, 2, True, ""),
    wire.SchedBeat(3, 16, 4, 7, (12.5, 30.0, 0.0, 0.0, 3.25, 8.0), ((9, 1 << 30, 3), (10, 5, 0))),
    wire.JobHandover(JOB, 1 << 30, 2, None),
    wire.JobHandover(JOB, 1 << 30, 2, wire.Endpoint("10.0.0.4", 7000)),
    wire.JobHandover(JOB, 1 << 30, 3, None, (5, 1 << 30)),
    wire.JobTaken(9),
    wire.JobWatch(9, 1 << 30),
    Update(INFO, (), (), wire.Root(0, 7, 12, 480.5)),
    wire.Reunite(5, wire.Root(1, 7, 3, 2.0), INFO, False),
    wire.Reunite(5, None, None, True),
    wire.Dissolve(wire.Root(0, 3, 9, 500.0), (INFO,)),
]


@pytest.mark.parametrize("key", [None, KEY])
@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(key, message):
    codec = Codec(key)
    data = codec.encode(message, sender=123456, seq=9)
    assert codec.decode_untrusted(data) == (123456, 9, message)


def test_byte_by_byte_prefixes_are_rejected_not_raised():
    codec = Codec(KEY)
    data = codec.encode(MESSAGES[0], sender=1, seq=1)
    for cut in range(len(data)):
        with pytest.raises(WireError):
            codec.decode_untrusted(data[:cut])


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (b"P", "truncated"),
        (b"XX" + bytes(30), "foreign"),
        (b"PG\x02\x00" + bytes(16) + b"\x90", "version"),
        (b"PG\x01\x00" + bytes(16) + b"\x90", "malformed"),  # seq 0
        (b"PG\x01\x00" + bytes(8) + (1).to_bytes(8, "big") + b"\xc1", "malformed"),
        (b"PG\x01\x80" + bytes(8) + (1).to_bytes(8, "big") + b"\x90", "malformed"),  # unknown flag
        (b"x" * (MAX_DATAGRAM_BYTES + 1), "oversized"),
    ],
)
def test_bad_datagrams_have_a_reason(data, reason):
    with pytest.raises(WireError) as info:
        Codec().decode_untrusted(data)
    assert info.value.reason == reason


def test_grid_key_keeps_outsiders_out():
    ours, theirs, open_grid = Codec(KEY), Codec(b"z" * 32), Codec()
    keyed = ours.encode(Probe(1), sender=1, seq=1)
    for codec, data in (
        (theirs, keyed),
        (open_grid, keyed),
        (ours, open_grid.encode(Probe(1), sender=1, seq=1)),
    ):
        with pytest.raises(WireError) as info:
            codec.decode_untrusted(data)
        assert info.value.reason == "auth"
    tampered = bytearray(keyed)
    tampered[-1] ^= 1
    with pytest.raises(WireError, match="bad mac"):
        ours.decode_untrusted(bytes(tampered))
    with pytest.raises(ValueError, match="at least 16 bytes"):
        Codec(b"short")


def test_a_shared_codec_decodes_a_body_once_but_checks_every_header():
    shared = Codec(KEY, shared_bodies=2)
    update = MESSAGES[0]
    first = shared.encode(update, sender=1, seq=1)
    again = shared.encode(update, sender=1, seq=2)  # same message: same body, new header
    assert first[-40:] == again[-40:] and first != again
    one = shared.decode_untrusted(first)
    two = shared.decode_untrusted(again)
    assert (one[1], two[1]) == (1, 2) and one[2] == update and two[2] is one[2]
    tampered = bytearray(again)
    tampered[8] ^= 1  # the header changes, the body is a known one: the mac still fails
    with pytest.raises(WireError, match="bad mac"):
        shared.decode_untrusted(bytes(tampered))
    for seq, message in enumerate(MESSAGES[1:4], start=3):  # older bodies make way
        shared.decode_untrusted(shared.encode(message, sender=1, seq=seq))
    assert shared.decode_untrusted(first)[2] is not one[2]  # decoded anew
    assert shared.decode_untrusted(first)[2] == update


def test_encoding_refuses_oversized_datagrams():
    many = tuple(INFO for _ in range(1000))
    with pytest.raises(ValueError, match="exceeds 60000"):
        Codec().encode(Update(INFO, many, ()), sender=1, seq=1)


def test_replay_window():
    window = ReplayWindow(max_senders=2)
    assert window.accept(1, 10)
    assert not window.accept(1, 10)  # replay
    assert window.accept(1, 8)  # late but new
    assert not window.accept(1, 8)
    assert window.accept(1, 300)
    assert not window.accept(1, 10)  # older than the window
    assert window.accept(2, 1)
    assert window.accept(3, 1)  # evicts sender 1 (least recently seen)
    assert window.accept(1, 300)  # forgotten, so accepted again


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_garbage_only_ever_raises_wire_error(data):
    for codec in (Codec(), Codec(KEY)):
        try:
            codec.decode_untrusted(data)
        except WireError as exc:
            assert exc.reason in wire.DROP_REASONS


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(MESSAGES), st.data())
def test_mutated_messages_only_ever_raise_wire_error(message, data):
    raw = bytearray(Codec().encode(message, sender=5, seq=5))
    for _ in range(data.draw(st.integers(1, 6))):
        raw[data.draw(st.integers(20, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        Codec().decode_untrusted(bytes(raw))
    except WireError:
        pass


def test_content_checks():
    assert check_peer_info(INFO, 3) is None
    assert check_peer_info(INFO, 2) == "bad point"
    bad_zone = PeerInfo(1, "h", 1, 1, (1.0,), (2.0,), (1.0,), ())
    assert check_peer_info(bad_zone, 1) == "empty or non-finite zone"
    assert check_peer_info(PeerInfo(1, "h", 0, 1, (1.0,), (), (), ()), 1) == "bad address"
    assert check_peer_info(PeerInfo(1, "h", 5, 1, (float("nan"),), (), (), ()), 1) == "bad point"
    assert (
        check_peer_info(PeerInfo(1, "h", 5, 1, (1.0,), (), (), (PathEntry(1, 4, 0.5, True),)), 1)
        == "bad path entry"
    )
