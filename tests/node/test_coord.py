# Latency predictors (node/coord) on matrices whose answer is known: points in
# a Euclidean space embed exactly, so any error there is the algorithm's.

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from node.coord.dtm import Dtm, DtmConfig, round_pow2
from node.coord.gnp import GnpConfig, solve_host, solve_landmarks
from node.coord.simplex import minimize
from node.coord.vivaldi import Coordinate, Vivaldi, VivaldiConfig, embed
from testbed.analysis.prediction import boundary_errors, relative_errors
from testbed.experiments.predict import Noise, Oracle, predict

from ..conftest import euclidean, path_lengths, tree_metric


def predicted(coords) -> np.ndarray:
    return np.array([[a.distance(b) for b in coords] for a in coords])


def test_simplex_finds_the_minimum_of_rosenbrock():
    def rosenbrock(x):
        return sum(100 * (b - a * a) ** 2 + (1 - a) ** 2 for a, b in itertools.pairwise(x))

    x, value = minimize(rosenbrock, [-1.2, 1.0, 0.5], step=0.5, xatol=1e-8, fatol=1e-12)
    assert value < 1e-10 and all(abs(v - 1) < 1e-4 for v in x)


def test_vivaldi_embeds_euclidean_points_and_improves_with_rounds():
    d = euclidean(60, 5, seed=1)
    few = relative_errors(
        np.array(d),
        predicted(embed(60, 20 * 60, lambda i, j: d[i][j], VivaldiConfig(), random.Random(2))),
    )
    many = relative_errors(
        np.array(d),
        predicted(embed(60, 2000 * 60, lambda i, j: d[i][j], VivaldiConfig(), random.Random(2))),
    )
    assert many.p99 < 0.01 and many.p99 < few.p99 / 10


def test_vivaldi_heights_absorb_an_access_link():
    # Every host sits 20 ms behind its access link: d = |x - y| + 20 + 20. Heights fit that.
    flat = euclidean(40, 2, seed=3)
    d = [[v + 40 if i != j else 0 for j, v in enumerate(row)] for i, row in enumerate(flat)]
    with_height = embed(
        40, 3000 * 40, lambda i, j: d[i][j], VivaldiConfig(dims=2, height=True), random.Random(4)
    )
    without = embed(40, 3000 * 40, lambda i, j: d[i][j], VivaldiConfig(dims=2), random.Random(4))
    assert relative_errors(np.array(d), predicted(with_height)).p95 < 0.02
    assert relative_errors(np.array(d), predicted(without)).p95 > 0.05
    assert 15 < sorted(c.height for c in with_height)[20] < 25


def test_vivaldi_ignores_unusable_samples():
    node = Vivaldi(VivaldiConfig(dims=2), random.Random(1))
    remote = Coordinate((3.0, 4.0))
    for rtt, other in ((0.0, remote), (-1, remote), (math.nan, remote), (5.0, Coordinate((1.0,)))):
        node.observe(rtt, other)
    assert node.samples == 0 and node.coord.vec == (0.0, 0.0)
    node.observe(10.0, remote)  # from the same place: pushed away in some direction
    assert node.samples == 1 and node.coord.vec != (0.0, 0.0)


def test_gnp_is_exact_on_euclidean_points():
    d = euclidean(50, 5, seed=5)
    config = GnpConfig()
    marks = random.Random(6).sample(range(50), config.landmarks)
    landmarks = solve_landmarks([[d[a][b] for b in marks] for a in marks], config, random.Random(7))
    coords = [
        Coordinate(solve_host([d[i][m] for m in marks], landmarks, config, random.Random(i)))
        for i in range(50)
    ]
    error = relative_errors(np.array(d), predicted(coords))
    assert error.max < 1e-3, error


def test_gnp_config_is_checked():
    with pytest.raises(ValueError, match="at least dims \\+ 1"):
        GnpConfig(dims=5, landmarks=5)
    with pytest.raises(ValueError, match="vivaldi.cc"):
        VivaldiConfig(cc=0)


def test_relative_errors_and_boundary_rates():
    actual = np.array([[0, 10, 20], [10, 0, 40], [20, 40, 0]], dtype=float)
    guess = np.array([[0, 10, 30], [10, 0, 4], [30, 4, 0]], dtype=float)
    error = relative_errors(actual, guess)
    assert (error.pairs, error.p50, error.max) == (3, 0.5, 0.9)
    rates = boundary_errors(actual, guess, boundary=10)
    assert rates == {"positive": 1 / 3, "negative": 0.0, "pairs_within": 1}
    with pytest.raises(ValueError, match="does not match"):
        relative_errors(actual, guess[:2, :2])


def build(d: np.ndarray, config: DtmConfig, seed: int = 1) -> Dtm:
    dtm = Dtm(config, random.Random(seed))
    order = list(range(len(d)))
    random.Random(seed + 1).shuffle(order)
    for host in order:
        dtm.join(host, lambda a, b: float(d[a, b]))
    return dtm


@pytest.mark.parametrize(
    "config",
    [
        DtmConfig(),
        DtmConfig(simulated_joins=2),
        DtmConfig(every_point=False, fit_leaf=False),
        DtmConfig(jump=1.0, leaf_hosts=4),
        DtmConfig(jump=0.1, leaf_hosts=4),
        DtmConfig(snap=0.5),
    ],
    ids=["default", "two-walks", "sequoia-plain", "jump", "jump-near", "snap"],
)
def test_dtm_embeds_a_tree_metric_exactly_in_any_order_and_after_rejoins(config):
    d = tree_metric(120, seed=3)
    for seed in (1, 2):
        dtm = build(d, config, seed)
        assert np.abs(dtm.predict_all(list(range(120))) - d).max() < 1e-9
        assert sum(dtm.measurements.values()) < 120 * 119 / 4  # far from all pairs
    dtm.rejoin_all(lambda a, b: float(d[a, b]))
    assert np.abs(dtm.predict_all(list(range(120))) - d).max() < 1e-9


def test_dtm_passes_a_clusters_star_without_measuring_its_members():
    # Vertex 1 is a cluster's switch with 200 members 4 us away; the grid goes on
    # through it to vertex 2 (20 ms) and its hosts. A host joining beyond the
    # switch measures a member or two, not all 64 of a branch sample.
    parent = [-1, 0, 1, 2, 2, 2] + [1] * 200
    weight = [0.0, 50.0, 20.0, 5.0, 5.0, 3.0] + [0.004] * 200
    hosts = [0, 3, 4, *range(6, 206), 5]  # the root, vertex 2's two, the members, the joiner
    d = path_lengths(parent, weight, hosts)
    dtm = Dtm(DtmConfig(), random.Random(1))
    for host in range(len(hosts)):
        dtm.join(host, lambda a, b: float(d[a, b]))
    joiner = len(hosts) - 1
    assert dtm.measurements[joiner] <= 6
    assert np.abs(dtm.predict_all(list(range(len(hosts)))) - d).max() < 1e-9
    assert max(dtm.measurements[h] for h in range(3, joiner)) <= 64 + 4  # members: one sample


def test_dtm_jumps_make_a_deep_tree_cheap_to_join():
    # 128 cherries (two hosts on a side branch) along one long spine. A walk
    # that takes one edge at a time measures a host of every cherry it passes
    # (O(n) a join); jumping to where the deepest host of a branch says the
    # joiner leaves it takes O(log n) walks (the heavy-path argument), and is
    # exact on a tree metric.
    rng = random.Random(5)
    parent, weight, hosts, spine = [-1], [0.0], [], 0
    for _ in range(128):
        parent.append(spine)  # the next spine vertex ...
        weight.append(rng.uniform(1, 10))
        spine = len(parent) - 1
        parent.append(spine)  # ... its side branch ...
        weight.append(rng.uniform(1, 10))
        for side in (len(parent) - 1,) * 2:  # ... with two hosts
            parent.append(side)
            weight.append(rng.uniform(1, 10))
            hosts.append(len(parent) - 1)
    d = path_lengths(parent, weight, hosts)
    n = len(hosts)
    walk = build(d, DtmConfig(tolerance=0.0))
    jump = build(d, DtmConfig(tolerance=0.0, jump=1.0))
    assert np.abs(jump.predict_all(list(range(n))) - d).max() < 1e-9
    per_host = {k: sum(t.measurements.values()) / n for k, t in [("walk", walk), ("jump", jump)]}
    assert per_host["jump"] < math.log2(n) < per_host["walk"] / 2, per_host


def test_dtm_snaps_a_cluster_of_independent_draws_into_a_shallow_cheap_tree():
    # Three clusters as in the SHARCNET-style grid: from outside a cluster is
    # one point (20, 30 and 40 ms apart, a tree), inside its members (300, 100
    # and 50) are independent draws of 100-150 us. The walk builds each into a
    # caterpillar dozens of levels deep and every later member walks down it;
    # snapping makes it a star, of which c measures a sample, and the check
    # keeps the clusters' first members where the tree says (no snap that fits
    # worse).
    rng = np.random.default_rng(4)
    sizes = [300, 100, 50]
    apart = np.array([[0.0, 20.0, 30.0], [20.0, 0.0, 40.0], [30.0, 40.0, 0.0]])
    cluster = np.repeat(np.arange(3), sizes)
    d = apart[np.ix_(cluster, cluster)]
    for k in range(3):
        members = np.flatnonzero(cluster == k)
        draws = np.triu(rng.uniform(0.100, 0.150, (len(members), len(members))), 1)
        d[np.ix_(members, members)] = draws + draws.T
    n, iu = len(d), np.triu_indices(len(d), 1)
    same = cluster[iu[0]] == cluster[iu[1]]
    out = {}
    for name, config in [
        ("walk", DtmConfig(tolerance=0.0)),
        ("snap", DtmConfig(tolerance=0.0, snap=0.5, leaf_sample=4)),
    ]:
        dtm = build(d, config)
        error = np.abs(dtm.predict_all(list(range(n)))[iu] - d[iu]) / d[iu]
        out[name] = {
            "per_host": sum(dtm.measurements.values()) / n,
            "most": max(dtm.measurements.values()),
            "levels": max(dtm.level(h) for h in range(n)),
            "intra_p99": float(np.quantile(error[same], 0.99)),
            "inter_max": float(error[~same].max()),
            "intra_max": float(error[same].max()),
        }
    walk, snap = out["walk"], out["snap"]
    # Its growth is measured by `testbed bench probes` (one tree, 2,048 hosts:
    # 16.8 samples per host against the walk's 43.6); here, with 450 hosts,
    # 19 against 36, and its cause: 10 levels against 41.
    assert snap["levels"] < walk["levels"] / 2 and snap["most"] < walk["most"], out
    assert snap["per_host"] < 0.75 * walk["per_host"], out  # 300 members: it pays already
    assert snap["intra_p99"] <= walk["intra_p99"] and snap["intra_max"] < 0.9, out
    assert snap["inter_max"] < 0.01, out


def test_dtm_rejoin_and_a_departed_base_keep_the_tree_exact():
    d = tree_metric(80, seed=5)
    dtm = build(d, DtmConfig())
    base = dtm.hosts[0]
    dtm.leave(base)  # the walks' base: the tree is re-rooted at the host nearest the root
    dtm.join(base, lambda a, b: float(d[a, b]))
    assert np.abs(dtm.predict_all(list(range(80))) - d).max() < 1e-9
    dtm.rejoin_all(lambda a, b: float(d[a, b]))
    assert np.abs(dtm.predict_all(list(range(80))) - d).max() < 1e-9


def test_dtm_does_not_fold_a_noisy_cluster_onto_one_point():
    # 40 members of a cluster 0.125 ms apart, one pair in eight measured at 0.25
    # (a busy host), 256 ms from the first host: a leaf fitted to the far host
    # alone is 0, and the members hung on one point (predicted 0 between them).
    n = 41
    rng = random.Random(3)
    d = np.full((n, n), 0.125)
    for a, b in itertools.combinations(range(1, n), 2):
        if rng.random() < 0.125:
            d[a, b] = d[b, a] = 0.25
    d[0, :] = d[:, 0] = 256.0
    np.fill_diagonal(d, 0.0)
    dtm = build(d, DtmConfig(tolerance=0.0))
    predicted = dtm.predict_all(list(range(n)))[1:, 1:]
    assert predicted[~np.eye(n - 1, dtype=bool)].min() > 0.05


def test_dtm_does_not_turn_on_measurement_noise():
    # A tree metric measured to a microsecond: a walk that followed any branch
    # running a hair further with the joiner took wrong turns (errors of 24x).
    d = np.round(tree_metric(40, seed=3), 3)
    for config in (DtmConfig(), DtmConfig(jump=1.0)):
        for seed in (4, 7, 8, 9):
            errors = relative_errors(d, build(d, config, seed).predict_all(list(range(40))))
            assert errors.max < 1e-3
    with pytest.raises(ValueError, match="tolerance"):
        DtmConfig(tolerance=0.5)
    with pytest.raises(ValueError, match="jump"):
        DtmConfig(jump=-0.1)


def test_dtm_leaves_keep_the_others_predictions():
    d = tree_metric(60, seed=4)
    dtm = build(d, DtmConfig())
    before = dtm.predict_all(list(range(60)))
    for host in (0, 17, 33, 59):
        dtm.leave(host)
    rest = dtm.hosts
    assert sorted(rest) == sorted(set(range(60)) - {0, 17, 33, 59})
    assert np.abs(dtm.predict_all(rest) - before[np.ix_(rest, rest)]).max() < 1e-9


def test_dtm_round_variant_and_bad_measurements():
    assert round_pow2(0.05, above=0.064) == 0.05
    assert round_pow2(0.1, above=0.064) == 0.125  # 2^-3: nearest power of two in log space
    assert round_pow2(45.0, above=0.064) == 32.0
    dtm = Dtm(DtmConfig(round_above=0.064), random.Random(1))
    dtm.join(0, lambda a, b: 0.0)
    dtm.join(1, lambda a, b: 45.0)
    assert dtm.predict(0, 1) == 32.0
    with pytest.raises(ValueError, match="is nan"):
        dtm.join(2, lambda a, b: math.nan)
    with pytest.raises(ValueError, match="already joined"):
        dtm.join(1, lambda a, b: 1.0)


def test_predict_pools_seeds_and_counts_probes():
    d = tree_metric(60, seed=8)
    result = predict(d, "dtm", [1, 2, 3], boundary=5.0)
    assert result["max"] < 1e-9 and len(result["per_seed"]) == 3
    assert 0 < result["probes_per_host"] < 59  # fewer than measuring everyone
    assert result["boundary"] == {"positive": 0.0, "negative": 0.0}
    euclid = np.array(euclidean(40, 5, seed=9))
    gnp = predict(euclid, "gnp", [1])
    assert gnp["p99"] < 1e-3 and gnp["probes_per_host"] == pytest.approx((34 * 6 + 6 * 5) / 40)
    with pytest.raises(ValueError, match="unknown technique"):
        predict(euclid, "sequoia", [1])


def test_the_lowest_quartile_filter_removes_spikes():
    rtt = np.full((2, 2), 10.0)
    spiky = Noise(sigma=0.01, spike=0.3, spike_scale=5.0)
    mean = Oracle(rtt, spiky, samples=16, how="mean", rng=random.Random(1))
    quartile = Oracle(rtt, spiky, samples=16, how="lowest_quartile", rng=random.Random(1))
    errors_mean = [abs(mean(0, 1) - 10) for _ in range(200)]
    errors_quartile = [abs(quartile(0, 1) - 10) for _ in range(200)]
    assert sum(errors_quartile) < sum(errors_mean) / 5
    assert mean.probes[0] == 16 * 200
    with pytest.raises(ValueError, match="noise.spike is a probability"):
        Noise(spike=2.0)
