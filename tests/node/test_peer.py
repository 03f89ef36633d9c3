# The sans-IO Peer (node/peer.py) driven by hand: two peers join by trading
# datagrams, and bad datagrams (garbage, truncated, foreign, oversized,
# replayed, unauthenticated) are counted as drops and never raise.

from __future__ import annotations

import random

import pytest

from node.events import Joined
from node.peer import NodeConfig, Peer
from node.wire import MAX_DATAGRAM_BYTES
from testbed.analysis.can_oracle import check_can

from .conftest import CAN, SPACE

A = ("10.0.0.1", 7000)
B = ("10.0.0.2", 7000)
KEY = b"k" * 32
HEADER = 20  # magic 2, version 1, flags 1, sender 8, seq 8 (node/wire.py)


def make_peer(address, point, seed, key=None):
    return Peer(
        NodeConfig(CAN, grid_key=key), address=address, point=point, rng=random.Random(seed)
    )


def run(peers, now, until):
    """Deliver every datagram at once; with none in flight, jump to the next timer. Returns now."""
    by_address = {p.address: p for p in peers}
    for _ in range(100_000):
        flight = [(data, p.address, to) for p in peers for data, to in p.datagrams_to_send(now)]
        for data, source, to in flight:
            by_address[to].receive_datagram(data, source, now)
        if flight:
            continue
        timers = [t for p in peers if (t := p.get_timer()) is not None]
        if not timers or min(timers) > until:
            return now
        now = max(now, min(timers))
        for p in peers:
            p.handle_timer(now)
    raise AssertionError("the peers never went quiet")


def founder(key=None):
    a = make_peer(A, (20.0, 0.3), seed=1, key=key)
    a.join([], 0.0)
    return a


def join_request(key=None):
    """A joiner, and the JoinRequest datagram it sends to A."""
    b = make_peer(B, (70.0, 0.6), seed=2, key=key)
    b.join([A], 0.0)
    [(data, to)] = b.datagrams_to_send(0.0)
    assert to == A
    return b, data


def drops(peer):
    return {k: v for k, v in peer.stats().items() if k.startswith("drop.") and v}


@pytest.mark.parametrize("key", [None, KEY], ids=["open", "keyed"])
def test_two_peers_join_and_tile_the_space(key):
    a, b = founder(key), make_peer(B, (70.0, 0.6), seed=2, key=key)
    b.join([A], 0.0)
    run([a, b], 0.0, until=20.0)
    assert a.member and b.member
    report = check_can(
        SPACE,
        [{"host": "a", **a.dump()}, {"host": "b", **b.dump()}],
        expected_members=["a", "b"],
        routes=200,
    )
    assert report.ok, report.to_dict()
    assert report.members == 2 and report.routes_checked == 200
    joined = [e for e in iter(b.next_event, None) if isinstance(e, Joined)]
    assert len(joined) == 1 and not joined[0].first
    assert drops(a) == {} and drops(b) == {}
    assert a.stats()["accepted"] > 0 and b.stats()["accepted"] > 0


def mutate(data, how):
    return {
        "garbage": b"\x00\xff\x13 not a datagram at all",
        "empty": b"",
        "magic-only": data[:2],
        "truncated-header": data[:10],
        "foreign-magic": b"XX" + data[2:],
        "other-version": data[:2] + bytes([data[2] + 1]) + data[3:],
        "bad-body": data[:HEADER] + b"\xc1",  # 0xc1: never used by msgpack
        "cut-body": data[:-3],
        "oversized": data + bytes(MAX_DATAGRAM_BYTES),
        "keyed-flag": data[:3] + b"\x01" + data[4:],
    }[how]


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("garbage", "foreign"),
        ("empty", "truncated"),
        ("magic-only", "truncated"),
        ("truncated-header", "truncated"),
        ("foreign-magic", "foreign"),
        ("other-version", "version"),
        ("bad-body", "malformed"),
        ("cut-body", "malformed"),
        ("oversized", "oversized"),
        ("keyed-flag", "auth"),
    ],
)
def test_bad_datagram_is_counted_and_dropped(how, reason):
    a = founder()
    a.datagrams_to_send(0.0)
    _, data = join_request()
    a.receive_datagram(mutate(data, how), B, 1.0)
    stats = a.stats()
    assert drops(a) == {f"drop.{reason}": 1}
    assert stats["rx"] == 1 and stats.get("accepted", 0) == 0
    assert a.datagrams_to_send(1.0) == []
    assert a.member and a.dump()["neighbors"] == []


def test_the_unmutated_datagram_is_accepted():
    a = founder()
    _, data = join_request()
    a.receive_datagram(data, B, 1.0)
    assert drops(a) == {} and a.stats()["accepted"] == 1


def test_datagram_delivered_twice_is_accepted_once():
    a = founder()
    a.datagrams_to_send(0.0)
    _, data = join_request()
    a.receive_datagram(data, B, 1.0)
    answer = a.datagrams_to_send(1.0)
    a.receive_datagram(data, B, 1.5)
    stats = a.stats()
    assert stats["rx"] == 2 and stats["accepted"] == 1
    assert drops(a) == {"drop.replayed": 1}
    assert answer and a.datagrams_to_send(1.5) == []  # the replay is not answered again


@pytest.mark.parametrize(
    ("key_a", "key_b"),
    [(KEY, None), (None, KEY), (KEY, b"x" * 32)],
    ids=["keyed-grid-unkeyed-joiner", "open-grid-keyed-joiner", "other-key"],
)
def test_datagrams_without_the_grid_key_are_dropped(key_a, key_b):
    a, b = founder(key_a), make_peer(B, (70.0, 0.6), seed=2, key=key_b)
    b.join([A], 0.0)
    run([a, b], 0.0, until=10.0)
    stats = a.stats()
    assert stats["drop.auth"] >= 2  # the first request and at least one retry
    assert drops(a) == {"drop.auth": stats["rx"]}
    assert stats.get("accepted", 0) == 0
    assert a.member and a.dump()["neighbors"] == []
    assert b.status == "joining"
