# The static clusterings of seed 002 §4.3.4 and the cluster quality figures.

from __future__ import annotations

import numpy as np
import pytest

from node.cluster import actual, disjoint, overlap, static_clustering
from testbed.analysis.cluster_quality import cluster_quality
from testbed.topology import DEFAULT_CLUSTERS, load_topology


def test_the_thesis_examples_for_a_group_of_768():
    groups = ["big"] * 768
    pieces = disjoint(groups, 64)
    assert pieces[0] == tuple(range(64)) and pieces[1] == tuple(range(64))
    assert pieces[64] == tuple(range(64, 128))
    assert len(set(pieces)) == 12
    windows = overlap(groups, 64)
    assert windows[0] == tuple(range(64)) and windows[1] == tuple(range(1, 65))
    assert windows[767] == (*range(63), 767)  # "768 and 1 to 63", 1-based
    assert len(set(windows)) == 768
    assert set(actual(groups)) == {tuple(range(768))}


def test_groups_may_interleave_and_remainders_are_smaller():
    groups = ["a", "b"] * 50  # a: even nodes, b: odd nodes
    pieces = disjoint(groups, 32)
    assert pieces[0] == tuple(range(0, 64, 2)) and pieces[98] == tuple(range(64, 100, 2))
    assert sorted({len(p) for p in pieces}) == [18, 32]
    small = overlap(["x"] * 5, 8)
    assert set(small) == {(0, 1, 2, 3, 4)}  # a group no bigger than n: the whole group


def test_clusterings_by_name():
    groups = ["a"] * 10
    assert static_clustering("disjoint-4", groups) == disjoint(groups, 4)
    assert static_clustering(" OVERLAP-3 ", groups) == overlap(groups, 3)
    assert static_clustering("ACTUAL", groups) == actual(groups)
    with pytest.raises(ValueError, match="DISJOINT-<n>"):
        static_clustering("DISJOINT-", groups)
    with pytest.raises(ValueError, match="positive"):
        disjoint(groups, 0)


def test_quality_on_the_sharcnet_grid():
    grid = load_topology("sharcnet:1")
    groups = [label["cluster"] for label in grid.labels]
    rtt = grid.rtt_ms
    whole = cluster_quality(actual(groups), rtt, 0.010, max_size=768, max_memberships=1)
    # Ten clusters; the Myrinet ones (7-8 us) are within 10 us, the GigE one (100-150 us) is not.
    assert whole["count"] == 10 and whole["size_max"] == 768 and whole["membership_max"] == 1
    assert whole["accuracy"] == pytest.approx(0.9)
    assert whole["violations"]["counts"]["inaccurate"] == 1
    assert len(whole["violations"]["inaccurate"][0]) == DEFAULT_CLUSTERS[0]
    pieces = cluster_quality(disjoint(groups, 64), rtt, 0.010, max_size=64, max_memberships=1)
    assert pieces["count"] == sum(-(-size // 64) for size in DEFAULT_CLUSTERS)
    assert pieces["size_max"] == 64 and pieces["violations"]["counts"]["oversized"] == 0
    assert pieces["accuracy"] == pytest.approx(1 - 12 / pieces["count"])  # 768 GigE nodes / 64
    windows = cluster_quality(overlap(groups, 64), rtt, 0.2, max_size=64, max_memberships=64)
    assert windows["membership_max"] == 64 and windows["accuracy"] == 1.0
    assert windows["capacity"] == 1.0  # every peer advertises as much as its cluster allows
    # The GigE peers' pieces are no use at 10 us (but they could only ever have
    # had themselves); the Myrinet peers' pieces of 64 are, the remainders less so.
    assert 0.95 < pieces["capacity"] < 1.0
    assert windows["violations"]["counts"] == {"oversized": 0, "crowded_nodes": 0, "inaccurate": 0}


def test_quality_names_what_breaks_the_bounds():
    rtt = np.array([[0, 1, 9], [1, 0, 9], [9, 9, 0]], dtype=float)
    figures = cluster_quality([(0, 1, 2), (0, 1), ()], rtt, 2.0, max_size=2, max_memberships=1)
    assert figures["count"] == 2 and figures["size_p50"] == 2.5
    assert figures["accuracy"] == 0.5
    # Usable: only (0, 1); could: 2 each for peers 0 and 1 (peer 2 advertises nothing).
    assert figures["capacity"] == 0.5
    assert figures["violations"]["inaccurate"] == [[0, 1, 2]]
    assert figures["violations"]["oversized"] == [[0, 1, 2]]
    assert figures["violations"]["crowded_nodes"] == [0, 1]
