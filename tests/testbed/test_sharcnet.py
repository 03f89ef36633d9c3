from __future__ import annotations

import numpy as np
import pytest

from testbed.errors import TopologyError
from testbed.topology import (
    DEFAULT_CLUSTERS,
    IntraLatency,
    Topology,
    load_topology,
    planetlab_frame,
    sharcnet_grid,
)


@pytest.fixture(scope="module")
def planetlab():
    return planetlab_frame(1)


@pytest.fixture(scope="module")
def grid(planetlab):
    return sharcnet_grid(planetlab, seed=1)


def test_default_grid_has_the_thesis_shape(grid):
    assert grid.n == sum(DEFAULT_CLUSTERS) == 2091
    assert len(DEFAULT_CLUSTERS) == 10
    assert min(DEFAULT_CLUSTERS) == 32 and max(DEFAULT_CLUSTERS) == 768
    clusters = [lab["cluster"] for lab in grid.labels]
    assert len(set(clusters)) == 10
    assert clusters.count("c0") == 768
    assert grid.is_symmetric


def test_intra_cluster_latencies_follow_the_interconnect(grid):
    cluster = np.array([lab["cluster"] for lab in grid.labels])
    gige = np.array([lab["interconnect"] == "gige" for lab in grid.labels])
    same = cluster[:, None] == cluster[None, :]
    off_diag = ~np.eye(grid.n, dtype=bool)
    myrinet_pairs = same & off_diag & ~gige[:, None]
    gige_pairs = same & off_diag & gige[:, None]
    assert grid.rtt_ms[myrinet_pairs].min() >= 0.007 and grid.rtt_ms[myrinet_pairs].max() <= 0.008
    assert grid.rtt_ms[gige_pairs].min() >= 0.100 and grid.rtt_ms[gige_pairs].max() <= 0.150
    # only the largest cluster is on GigE
    assert {lab["cluster"] for lab in grid.labels if lab["interconnect"] == "gige"} == {"c0"}


def test_inter_cluster_latency_is_the_representatives_entry(grid, planetlab):
    # every pair of clusters has one constant value, taken from the real matrix
    reps = grid.source.split("reps ")[1].rstrip(")").split(",")
    assert len(reps) == 10
    rep_index = [planetlab.index(name) for name in reps]
    starts = np.cumsum((0, *DEFAULT_CLUSTERS))
    for a in range(10):
        for b in range(10):
            if a == b:
                continue
            block = grid.rtt_ms[starts[a] : starts[a + 1], starts[b] : starts[b + 1]]
            assert np.all(block == planetlab.rtt_ms[rep_index[a], rep_index[b]])


def test_seed_makes_it_reproducible(planetlab):
    a = sharcnet_grid(planetlab, seed=5, clusters=(3, 4, 2))
    b = sharcnet_grid(planetlab, seed=5, clusters=(3, 4, 2))
    c = sharcnet_grid(planetlab, seed=6, clusters=(3, 4, 2))
    np.testing.assert_array_equal(a.rtt_ms, b.rtt_ms)
    assert not np.array_equal(a.rtt_ms, c.rtt_ms)
    assert a.names == ("c0-0", "c0-1", "c0-2", "c1-0", "c1-1", "c1-2", "c1-3", "c2-0", "c2-1")


def test_other_intra_distributions(planetlab):
    topo = sharcnet_grid(
        planetlab,
        seed=2,
        clusters=(50, 5),
        gige=(),
        myrinet_latency=IntraLatency("normal", mean_ms=0.01, sd_ms=0.002),
    )
    block = topo.rtt_ms[:50, :50][~np.eye(50, dtype=bool)]
    assert block.min() > 0
    assert abs(block.mean() - 0.01) < 0.001
    constant = sharcnet_grid(
        planetlab,
        seed=2,
        clusters=(4,),
        myrinet_latency=IntraLatency("constant", value_ms=0.5),
        gige=(),
    )
    assert set(constant.off_diagonal()) == {0.5}


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"clusters": (3, 0)}, "clusters must be positive sizes"),
        ({"clusters": ()}, "clusters must be positive sizes"),
        ({"clusters": (3, 3), "gige": (2,)}, "gige cluster index 2 is out of range 0..1"),
    ],
)
def test_bad_grids_are_rejected(planetlab, kwargs, reason):
    with pytest.raises(TopologyError, match=reason):
        sharcnet_grid(planetlab, seed=1, **kwargs)


def test_more_clusters_than_source_nodes_is_an_error():
    tiny = Topology(np.array([[0.0, 1.0], [1.0, 0.0]]), ("a", "b"))
    with pytest.raises(TopologyError, match="3 clusters need 3 representatives"):
        sharcnet_grid(tiny, seed=1, clusters=(2, 2, 2))


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"dist": "weird"}, "unknown intra-cluster dist 'weird'"),
        ({"dist": "uniform", "low_ms": 1.0}, "needs high_ms"),
        ({"dist": "uniform", "low_ms": 2.0, "high_ms": 1.0}, "high_ms 1.0 < low_ms 2.0"),
        ({"dist": "normal", "mean_ms": -1.0, "sd_ms": 1.0}, "needs mean_ms >= 0"),
    ],
)
def test_bad_intra_distributions(spec, reason):
    with pytest.raises(TopologyError, match=reason):
        IntraLatency(**spec)


def test_topology_spec_files(tmp_path):
    (tmp_path / "m.txt").write_text("0 2\n2 0\n")
    spec = tmp_path / "two.toml"
    spec.write_text('matrix = "m.txt"\nnames = ["left", "right"]\nscale = 3.0\n')
    topo = load_topology(spec)
    assert topo.names == ("left", "right")
    assert topo.rtt_ms[0, 1] == 6.0

    grid_spec = tmp_path / "grid.toml"
    grid_spec.write_text(
        "[sharcnet]\nseed = 4\nclusters = [4, 3]\ngige = []\n"
        '[sharcnet.myrinet_latency]\ndist = "constant"\nvalue_ms = 0.25\n'
    )
    grid = load_topology(grid_spec)
    assert grid.n == 7 and grid.rtt_ms[0, 1] == 0.25

    wrong = tmp_path / "wrong.toml"
    wrong.write_text('matrix = "m.txt"\nsclae = 2\n')
    with pytest.raises(
        TopologyError,
        match=r"wrong.toml: invalid topology spec: Object contains unknown field `sclae`",
    ):
        load_topology(wrong)
    typed = tmp_path / "typed.toml"
    typed.write_text('[sharcnet]\nseed = "one"\n')
    with pytest.raises(TopologyError, match=r"Expected `int`, got `str` - at `\$.sharcnet.seed`"):
        load_topology(typed)
    both = tmp_path / "both.toml"
    both.write_text('matrix = "m.txt"\n[sharcnet]\nseed = 1\n')
    with pytest.raises(TopologyError, match="exactly one of"):
        load_topology(both)
    broken = tmp_path / "broken.toml"
    broken.write_text("matrix = \n")
    with pytest.raises(TopologyError, match="not valid TOML"):
        load_topology(broken)
