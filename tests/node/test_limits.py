# Per-source rate limits (node/limits.py): a flooding source is cut to its rate and
# counted, the others are not touched, and the table of sources stays bounded.

from __future__ import annotations

import dataclasses
import random

import pytest

from node.can.config import CanConfig
from node.fields import FieldError
from node.limits import SourceLimiter
from node.peer import NodeConfig, Peer

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


def test_a_flood_is_dropped_before_decoding_and_counted_and_the_others_still_get_in():
    config = NodeConfig(dataclasses.replace(CAN, per_source_per_s=50.0, per_source_burst=20.0))
    peer = Peer(config, address=A, point=(20.0, 0.3), rng=random.Random(1))
    peer.join([], 0.0)
    for k in range(1000):  # one second of garbage at 1,000/s from one host
        peer.receive_datagram(b"junk", ("10.0.0.66", 7000), k / 1000)
    stats = peer.stats()
    limited = stats["drop.rate_limited"]
    assert stats["rx"] == 1000 and decoded(stats) == 1000 - limited  # the rest was decoded
    assert 20 + 49 <= 1000 - limited <= 20 + 51  # the burst, then 50/s for a second
    peer.receive_datagram(b"junk", ("10.0.0.7", 7000), 1.0)  # another host: decoded
    assert decoded(peer.stats()) == 1000 - limited + 1


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
    ],
)
def test_bad_limits_are_refused_naming_the_field(field, value, message):
    with pytest.raises(FieldError, match=f"{field}.*{message}"):
        CanConfig(CAN.space, **{field: value})
