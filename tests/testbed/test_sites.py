# Placing hosts on machines and the delays each machine's engine gets
# (testbed/net/_sites.py); the network itself runs in
# tests/integration/netns/test_cluster_wan.py.

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from testbed.errors import FloorError
from testbed.net import ClusterWan, place_hosts


def two_clusters(n: int, near: float = 1.0, far: float = 80.0) -> np.ndarray:
    """RTTs of two groups: the even hosts and the odd ones."""
    group = np.arange(n) % 2
    rtt = np.where(group[:, None] == group[None, :], near, far)
    np.fill_diagonal(rtt, 0.0)
    return rtt


def test_close_hosts_share_a_machine_and_shares_follow_the_machines():
    placement = place_hosts(two_clusters(16), [1.0, 1.0])
    assert [len(p) for p in placement] == [8, 8]
    assert {frozenset(k % 2 for k in p) for p in placement} == {frozenset({0}), frozenset({1})}
    uneven = place_hosts(two_clusters(12), [2.0, 1.0])
    assert [len(p) for p in uneven] == [8, 4]
    assert sorted(k for p in uneven for k in p) == list(range(12))


def stub(link_ms: float, floor_rtt_ms: float):
    loaded = []
    agent = SimpleNamespace(load_one_way_s=SimpleNamespace(remote=lambda m, c: loaded.append(m)))
    return SimpleNamespace(
        hosts=[SimpleNamespace(name=f"h{k + 1}") for k in range(4)],
        site_of={0: 0, 1: 0, 2: 1, 3: 1},
        link_ms=np.array([[0.0, link_ms], [link_ms, 0.0]]),
        floor_rtt_ms=floor_rtt_ms,
        agents=[agent, agent],
        _get=lambda refs: refs,
        one_way_s=None,
    ), loaded


def test_each_engine_gets_the_delays_less_the_machines_latency():
    cwan, loaded = stub(link_ms=2.0, floor_rtt_ms=0.2)
    one_way = np.full((4, 4), 0.010)
    np.fill_diagonal(one_way, 0.0)
    assert ClusterWan.load_compensated(cwan, one_way, clamp=False) == 0
    matrix = loaded[0]
    assert matrix[0, 1] == pytest.approx(0.010)  # same machine: as asked
    assert matrix[0, 2] == pytest.approx(0.008) and matrix[3, 1] == pytest.approx(0.008)


def test_a_pair_shorter_than_its_machines_latency_is_refused_naming_it():
    cwan, loaded = stub(link_ms=5.0, floor_rtt_ms=0.2)
    one_way = np.full((4, 4), 0.010)
    one_way[0, 2] = 0.004  # 4 ms one way between machines 5 ms apart
    np.fill_diagonal(one_way, 0.0)
    with pytest.raises(FloorError, match="h1") as caught:
        ClusterWan.load_compensated(cwan, one_way, clamp=False)
    assert loaded == [] and "h3" in str(caught.value)
    assert ClusterWan.load_compensated(cwan, one_way, clamp=True) == 1
    assert loaded[0][0, 2] == pytest.approx(0.0001)  # raised to the floor's half, past the link
