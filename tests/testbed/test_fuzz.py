# The acceptance fuzz: 100,000 random and mutated datagrams at a live peer
# process. It must survive, and count every datagram (accepted or dropped
# with a reason).

from __future__ import annotations

import json

from testbed.tools.fuzz import KINDS, datagrams, fuzz_local_peer

SPACE = [(0.0, 500.0), (0.0, 65536.0), (0.0, 1.0)]


def test_the_generator_is_deterministic_and_mixes_every_kind():
    a = list(datagrams(7, 3000, dims=3, space=SPACE, key=None))
    b = list(datagrams(7, 3000, dims=3, space=SPACE, key=None))
    c = list(datagrams(8, 3000, dims=3, space=SPACE, key=None))
    assert a == b and a != c
    assert {kind for kind, _ in a} == set(KINDS)
    assert max(len(d) for _, d in a) > 60_000  # oversized ones are in
    assert min(len(d) for _, d in a) == 0


def test_a_live_peer_survives_100000_fuzzed_datagrams_and_counts_each(tmp_path):
    result = fuzz_local_peer(tmp_path, count=100_000, seed=1)
    assert result.ok, json.dumps(result)
    assert result["rx_delta"] == 100_000 and result["uncounted"] == 0
    assert result["accepted"] + sum(result["dropped"].values()) == 100_000
    # Every reason a datagram can be dropped for is exercised.
    assert all(
        result["dropped"][r] > 0
        for r in (
            "truncated",
            "oversized",
            "foreign",
            "version",
            "auth",
            "malformed",
            "replayed",
            "invalid",
        )
    )
    log = (tmp_path / "target.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["kind"] == "exit"


def test_a_keyed_peer_accepts_nothing_from_outside(tmp_path):
    result = fuzz_local_peer(tmp_path, count=3000, seed=2, grid_key=bytes(range(32)))
    assert result.ok, json.dumps(result)
    # Only datagrams made with the grid's key get past the mac; the fuzzer
    # knows the key for its well-formed share, so those are the accepted ones.
    assert result["dropped"]["auth"] > 0
    assert result["accepted"] <= result["by_kind"]["message"]
