# Dynamic clusters, serialized (seed 002 §5.1): candidate clusters from the
# predictions, Algorithm 3's membership limit, filtering by a maximum clique,
# symmetry; accuracy and the bounds hold even when the predictions lie.

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from node.cluster.refine import candidate_clusters, limit_membership, max_clique_with, refine
from testbed.analysis.cluster_quality import cluster_quality
from testbed.errors import InputError
from testbed.experiments.clusters import run_clusters
from testbed.spec import load_any_spec
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


SMALL = {
    "kind": "cluster",
    "name": "cluster-small",
    "seed": 2,
    "diameter_ms": 0.010,
    "size": 16,
    "topology": {"ref": "sharcnet:{seed}", "hosts": 300, "pick": "random"},
}


def test_a_cluster_spec_reports_every_clustering(tmp_path):
    spec, data = load_any_spec(None, [], defaults=SMALL)
    run_dir, summary = run_clusters(spec, data, out=tmp_path / "run")
    clusters = summary["clusters"]
    assert list(clusters) == ["DYN", "DYN-SYM", "DISJOINT-16", "OVERLAP-16", "ACTUAL"]
    for name in ("DYN", "DYN-SYM"):
        assert clusters[name]["accuracy"] == 1.0 and clusters[name]["size_max"] <= 16
    assert clusters["DISJOINT-16"]["accuracy"] < 1.0  # the GigE pieces are 100-150 us wide
    assert clusters["DYN-SYM"]["peer_size_p50"] >= clusters["DYN"]["peer_size_p50"]
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["clusters"]["DYN"]["count"] == clusters["DYN"]["count"]
    advertised = json.loads((run_dir / "clusters.json").read_text())
    assert len(advertised["DYN-SYM"]) == 300
    assert summary["measurements_per_peer"]["prediction"]["p50"] > 0
    # The peers' agents ran the refinement over the (simulated) network and all settled.
    distributed = summary["distributed"]
    assert distributed["converged"] and distributed["messages_per_peer"]["p50"] > 0
    assert summary["measurements_per_peer"]["filtering"]["max"] > 0


def test_the_distributed_refinement_is_as_good_as_the_serialized_one(tmp_path):
    # Same candidates and criterion; the distributed one sees solicitations in
    # the order the network delivers them (a client that has answered defers
    # late ones), so the clusters differ a little, not the properties.
    results = {}
    for mode in ("distributed", "serialized"):
        spec, data = load_any_spec(None, [f'refinement.mode="{mode}"'], defaults=SMALL)
        _, summary = run_clusters(spec, data, out=tmp_path / mode)
        results[mode] = summary["clusters"]
    for name in ("DYN", "DYN-SYM"):
        ours, reference = results["distributed"][name], results["serialized"][name]
        assert ours["accuracy"] == reference["accuracy"] == 1.0
        assert ours["size_max"] <= 16 and ours["membership_max"] <= 16
        assert (
            abs(ours["peer_size_p50"] - reference["peer_size_p50"])
            <= 0.2 * reference["peer_size_p50"]
        )


def test_the_bundled_cluster_spec_is_valid():
    path = Path(__file__).parents[2] / "scripts" / "experiments" / "cluster-sharcnet-sim.toml"
    spec, _ = load_any_spec(path)
    assert spec.kind == "cluster" and spec.size == 64 and spec.prediction.trees == 9


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("diameter_ms=0", "diameter_ms"),
        ("size=1", "size"),
        ('clusterings=["DYN", "HALVES"]', "HALVES"),
        ('criterion="random"', "criterion"),
        ("refinement.stable_s=0", "refinement.stable_s"),
        ("refinement.samples=0", "refinement.samples"),
        ('refinement.mode="magic"', "mode"),
    ],
)
def test_bad_cluster_specs_are_named(override, says):
    with pytest.raises(InputError, match=says):
        load_any_spec(None, [override], defaults=SMALL)
