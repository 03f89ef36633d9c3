# Per-source rate limits (node/limits.py): a flooding source is cut to its rate and
# counted, the others are not touched, strangers get less than contacts, and the tables
# of sources stay bounded.

from __future__ import annotations

import dataclasses
import random

import pytest

from node.can.config import CanConfig
from node.fields import FieldError
from node.limits import Contacts, SourceLimiter
from node.peer import NodeConfig, Peer
from node.wire import Codec, Ping

from .conftest import CAN

A = ("10.0.0.1", 7000)


def test_a_bucket_lets_a_burst_through_then_the_rate():
    limiter = SourceLimiter(rate_per_s=10.0, burst=5.0, table=8)
    assert [limiter.allow("10.0.0.9", 0.0) for _ in range(7)] == [True] * 5 + [False] * 2
    assert limiter.allow("10.0.0.9", 0.05) is False  # half a token
    assert limiter.allow("10.0.0.9", 0.1) is True  # one token after 0.1 s at 10/s
    assert limiter.allow("10.0.0.2", 0.1) is True  # another source has its own bucket
    assert [limiter.allow("10.0.0.9", 100.0) for _ in range(6)].count(True) == 5  # full again


def test_the_table_forgets_the_least_recently_heard_source():
    limiter = SourceLimiter(rate_per_s=1.0, burst=1.0, table=2)
    assert limiter.allow("a", 0.0) and limiter.allow("b", 0.0)
    assert not limiter.allow("a", 0.0)  # a is now the most recent
    assert limiter.allow("c", 0.0)  # b is forgotten, not a
    assert len(limiter) == 2 and not limiter.allow("a", 0.0)
    assert limiter.allow("b", 0.0)  # forgotten: a full bucket again


def test_no_limit_at_a_rate_of_zero():
    limiter = SourceLimiter(rate_per_s=0.0, burst=1.0, table=1)
    assert all(limiter.allow(f"s{k}", 0.0) for k in range(1000)) and len(limiter) == 0


def test_a_stranger_gets_the_strangers_rate_and_burst_never_more_than_a_contact():
    limiter = SourceLimiter(10.0, 5.0, 8, stranger_per_s=2.0, stranger_burst=3.0)
    assert [limiter.allow("s", 0.0, known=False) for _ in range(4)] == [True] * 3 + [False]
    assert limiter.allow("s", 0.4, known=False) is False  # 0.8 of a token at 2/s
    assert limiter.allow("s", 0.5, known=False) is True
    assert [limiter.allow("k", 0.0) for _ in range(6)] == [True] * 5 + [False]
    capped = SourceLimiter(1.0, 2.0, 8, stranger_per_s=50.0, stranger_burst=90.0)
    assert (capped.stranger_per_s, capped.stranger_burst) == (1.0, 2.0)


def test_contacts_forget_the_least_recently_spoken_to():
    contacts = Contacts(2)
    contacts.note("a")
    contacts.note("b")
    contacts.note("a")  # a is now the most recent
    contacts.note("c")
    assert "a" in contacts and "c" in contacts and "b" not in contacts and len(contacts) == 2


def test_a_flood_is_dropped_before_decoding_and_counted_and_the_others_still_get_in():
    config = NodeConfig(
        dataclasses.replace(
            CAN,
            per_source_per_s=50.0,
            per_source_burst=20.0,
            stranger_per_s=10.0,
            stranger_burst=5.0,
        )
    )
    peer = Peer(config, address=A, point=(20.0, 0.3), rng=random.Random(1))
    peer.join([], 0.0)
    peer.measure_rtt(9, ("10.0.0.66", 7000), 0.0)  # we speak first: a contact
    for k in range(1000):  # one second of garbage at 1,000/s from one host
        peer.receive_datagram(b"junk", ("10.0.0.66", 7000), k / 1000)
    stats = peer.stats()
    limited = stats["drop.rate_limited"]
    assert stats["rx"] == 1000 and decoded(stats) == 1000 - limited  # the rest was decoded
    assert 20 + 49 <= 1000 - limited <= 20 + 51  # the burst, then 50/s for a second
    for k in range(1000):  # the same from a stranger: its burst, then 10/s
        peer.receive_datagram(b"junk", ("10.0.0.67", 7000), 1 + k / 1000)
    assert 5 + 9 <= decoded(peer.stats()) - (1000 - limited) <= 5 + 11
    before = decoded(peer.stats())
    peer.receive_datagram(b"junk", ("10.0.0.7", 7000), 2.0)  # another host: decoded
    assert decoded(peer.stats()) == before + 1


def test_answering_pings_makes_no_contact():
    # A host that only sends Pings hears only Pongs: it stays a stranger, held to
    # stranger_per_s however long it goes on.
    config = NodeConfig(dataclasses.replace(CAN, stranger_per_s=10.0, stranger_burst=5.0))
    peer = Peer(config, address=A, point=(20.0, 0.3), rng=random.Random(1))
    peer.join([], 0.0)
    codec = Codec(None)
    for k in range(3000):  # three seconds at 1,000/s
        ping = codec.encode(Ping(k), sender=77, seq=k + 1)
        peer.receive_datagram(ping, ("10.0.0.66", 7000), k / 1000)
        peer.datagrams_to_send(k / 1000)
    stats = peer.stats()
    assert 5 + 29 <= stats["rx.Ping"] <= 5 + 31 and stats["tx.Pong"] == stats["rx.Ping"]


def decoded(stats):
    """Datagrams that reached the decoder (all junk: each dropped for a reason of its own)."""
    return sum(v for k, v in stats.items() if k.startswith("drop.") and k != "drop.rate_limited")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("per_source_per_s", -1.0, "must be >= 0"),
        ("per_source_per_s", float("nan"), "must be >= 0"),
        ("per_source_burst", 0.5, "must be >= 1"),
        ("per_source_table", 0, "positive integer"),
        ("stranger_per_s", 0.0, "must be > 0"),
        ("stranger_burst", float("inf"), "must be >= 1"),
    ],
)
def test_bad_limits_are_refused_naming_the_field(field, value, message):
    with pytest.raises(FieldError, match=f"{field}.*{message}"):
        CanConfig(CAN.space, **{field: value})
