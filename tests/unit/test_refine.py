# Dynamic clusters, serialized (seed 002 §5.1): candidate clusters from the
# predictions, Algorithm 3's membership limit, filtering by a maximum clique,
# symmetry; accuracy and the bounds hold even when the predictions lie.

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from node.cluster.refine import candidate_clusters, limit_membership, max_clique_with, refine
from testbed.analysis.clusters import cluster_quality
from testbed.topology import load_topology, sharcnet_grid


def test_the_maximum_clique_must_hold_the_head():
    # 0-1-2-3 a clique of four; 4-5-6-7-8 a clique of five without node 0.
    close = np.zeros((9, 9), dtype=bool)
    for group in ((0, 1, 2, 3), (4, 5, 6, 7, 8)):
        for a in group:
            for b in group:
                close[a, b] = True
    close[0, 4] = close[4, 0] = True
    members = [10, 11, 12, 13, 14, 15, 16, 17, 18]
    assert max_clique_with(10, members, close) == (10, 11, 12, 13)
    assert max_clique_with(14, members, close) == (14, 15, 16, 17, 18)
    lonely = np.eye(3, dtype=bool)
    assert max_clique_with(7, [5, 6, 7], lonely) == (7,)


def grid():
    # c0 is Gigabit Ethernet (100-150 us: no cluster at 10 us), c1-c3 Myrinet (7-8 us).
    return sharcnet_grid(load_topology("planetlab"), seed=3, clusters=(90, 60, 40, 8))


def test_candidates_stay_within_the_predicted_diameter_and_the_size():
    rtt = grid().rtt_ms
    candidates = candidate_clusters(rtt, 0.010, 16, random.Random(1))
    for x, cluster in enumerate(candidates):
        assert cluster[0] == x and len(cluster) <= 16
        members = list(cluster)
        assert rtt[np.ix_(members, members)].max() <= 0.010
    assert len(candidates[0]) == 1  # a GigE node: nobody within 10 us
    assert len(candidates[90]) == 16  # a 60-node Myrinet cluster offers more than enough


@pytest.mark.parametrize("criterion", ["fcfs", "global", "greedy"])
def test_no_node_joins_more_than_m_clusters(criterion):
    rtt = grid().rtt_ms
    candidates = candidate_clusters(rtt, 0.010, 16, random.Random(1))
    unfiltered = limit_membership(candidates, 4, criterion, random.Random(2))
    counts = Counter(node for cluster in unfiltered for node in cluster)
    assert max(counts.values()) <= 4
    assert all(cluster[0] == head for head, cluster in enumerate(unfiltered))
    with pytest.raises(ValueError, match="criterion"):
        limit_membership(candidates, 4, "random", random.Random(2))


def test_refined_clusters_are_accurate_even_when_predictions_lie():
    g = grid()
    rtt = g.rtt_ms
    predicted = rtt.copy()
    # The predictions put a handful of GigE nodes right next to c1's Myrinet nodes.
    liars = [k for k, label in enumerate(g.labels) if label["cluster"] == "c0"][:5]
    c1 = [k for k, label in enumerate(g.labels) if label["cluster"] == "c1"]
    predicted[np.ix_(liars, c1)] = predicted[np.ix_(c1, liars)] = 0.005
    predicted[np.ix_(liars, liars)] = 0.005
    result = refine(predicted, rtt, 0.010, 16, 16, criterion="global", rng=random.Random(4))
    for name, clusters in (("DYN", result.filtered), ("DYN-SYM", result.symmetric)):
        figures = cluster_quality(clusters, rtt, 0.010, max_size=16)
        assert figures["accuracy"] == 1.0, name
        assert figures["size_max"] <= 16, name
    assert cluster_quality(result.candidate, rtt, 0.010)["accuracy"] < 1.0  # the lie was there
    own = cluster_quality(result.filtered, rtt, 0.010, max_memberships=16)
    assert own["violations"]["counts"]["crowded_nodes"] == 0
    for node in range(len(rtt)):  # symmetry only ever advertises a larger cluster
        assert node in result.symmetric[node]
        assert len(result.symmetric[node]) >= len(result.filtered[node])
    myrinet = [k for k, label in enumerate(g.labels) if label["cluster"] in ("c1", "c2")]
    assert np.median([len(result.symmetric[k]) for k in myrinet]) >= 14
