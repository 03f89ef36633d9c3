# SHARCNET-style synthetic grids (seed 002 §5.2.2; digest seed-jackson.md §6.2).
#
# The thesis built its 2,091-node matrix from three sources: one real PlanetLab
# node chosen at random per cluster, whose pairwise PlanetLab latency becomes the
# latency between every node of the two clusters; all-pairs MPI latencies of a
# Myrinet-2000 cluster (7-8 us) inside the Myrinet clusters; GigE MPI latencies
# (100-150 us) inside the one large Gigabit Ethernet cluster.
#
# Where the thesis is silent we decided (docs/topologies.md says why):
#   * cluster sizes: 10 clusters of 32..768 nodes summing to 2,091 (DEFAULT_CLUSTERS);
#   * the GigE cluster is the largest one;
#   * intra-cluster values are drawn independently per unordered pair from the
#     interconnect's distribution (uniform over the measured range by default),
#     so the intra-cluster block is symmetric;
#   * entries keep the matrix convention of the whole testbed (RTT semantics):
#     the MPI latencies are stored as they were measured, so that the thesis's
#     10 us cluster boundary applies to the matrix values unchanged;
#   * "ten maps" = ten seeds: the seed picks the representatives and the draws.

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from testbed.errors import TopologyError
from testbed.topology._matrix import Topology

__all__ = ["DEFAULT_CLUSTERS", "IntraLatency", "sharcnet_grid"]

# 10 clusters, 32..768 nodes, 2,091 in all (the thesis gives only these facts).
DEFAULT_CLUSTERS: tuple[int, ...] = (768, 384, 256, 192, 128, 128, 96, 64, 43, 32)


@dataclass(frozen=True)
class IntraLatency:
    """A distribution of intra-cluster latency, in milliseconds.

    dist="uniform" uses low_ms..high_ms; dist="normal" uses mean_ms and sd_ms
    (values below 1 ns are redrawn); dist="constant" uses value_ms.
    """

    dist: str = "uniform"
    low_ms: float | None = None
    high_ms: float | None = None
    mean_ms: float | None = None
    sd_ms: float | None = None
    value_ms: float | None = None

    def __post_init__(self) -> None:
        def need(*names: str) -> None:
            for name in names:
                value = getattr(self, name)
                if value is None or not math.isfinite(value) or value < 0:
                    raise TopologyError(
                        f"intra-cluster dist={self.dist!r} needs {name} >= 0, got {value!r}",
                        source="<sharcnet>",
                    )

        if self.dist == "uniform":
            need("low_ms", "high_ms")
            if self.high_ms < self.low_ms:  # type: ignore[operator]
                raise TopologyError(
                    f"high_ms {self.high_ms} < low_ms {self.low_ms}", source="<sharcnet>"
                )
        elif self.dist == "normal":
            need("mean_ms", "sd_ms")
        elif self.dist == "constant":
            need("value_ms")
        else:
            raise TopologyError(
                f"unknown intra-cluster dist {self.dist!r}; expected uniform, normal or constant",
                source="<sharcnet>",
            )

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        if self.dist == "uniform":
            return rng.uniform(self.low_ms, self.high_ms, count)
        if self.dist == "constant":
            return np.full(count, self.value_ms, dtype=np.float64)
        values = rng.normal(self.mean_ms, self.sd_ms, count)
        bad = values < 1e-6
        while bad.any():
            values[bad] = rng.normal(self.mean_ms, self.sd_ms, int(bad.sum()))
            bad = values < 1e-6
        return values


MYRINET = IntraLatency("uniform", low_ms=0.007, high_ms=0.008)
GIGE = IntraLatency("uniform", low_ms=0.100, high_ms=0.150)


def sharcnet_grid(
    inter: Topology,
    *,
    seed: int,
    clusters: tuple[int, ...] = DEFAULT_CLUSTERS,
    gige: tuple[int, ...] | None = None,
    myrinet_latency: IntraLatency = MYRINET,
    gige_latency: IntraLatency = GIGE,
) -> Topology:
    """Build a SHARCNET-style grid matrix.

    Args:
        inter: the real matrix that inter-cluster latencies come from (one randomly
            chosen node of it represents each cluster).
        seed: picks the representatives and every intra-cluster draw.
        clusters: cluster sizes (nodes), at least 1 each.
        gige: indices of clusters on Gigabit Ethernet; default: the largest cluster.
        myrinet_latency, gige_latency: intra-cluster latency distributions.

    Returns:
        A Topology whose nodes are named "c<k>-<i>" and labelled
        {"cluster": "c<k>", "interconnect": "myrinet" | "gige"}.

    Raises:
        TopologyError: bad sizes, bad GigE indices, or more clusters than `inter` has nodes.
    """
    if not clusters or any(not isinstance(s, int) or s < 1 for s in clusters):
        raise TopologyError(
            f"clusters must be positive sizes, got {list(clusters)!r}", source="<sharcnet>"
        )
    k = len(clusters)
    if k > inter.n:
        raise TopologyError(
            f"{k} clusters need {k} representatives but the inter-cluster matrix has {inter.n} nodes",
            source="<sharcnet>",
        )
    if gige is None:
        gige = (max(range(k), key=lambda c: clusters[c]),)
    for c in gige:
        if not 0 <= c < k:
            raise TopologyError(
                f"gige cluster index {c} is out of range 0..{k - 1}", source="<sharcnet>"
            )
    rng = np.random.default_rng(seed)
    reps = rng.choice(inter.n, size=k, replace=False)
    cluster_of = np.repeat(np.arange(k), clusters)
    # Inter-cluster: every pair inherits its clusters' representatives' entry.
    matrix = inter.rtt_ms[np.ix_(reps, reps)][np.ix_(cluster_of, cluster_of)].copy()
    start = 0
    for c, size in enumerate(clusters):
        dist = gige_latency if c in gige else myrinet_latency
        iu = np.triu_indices(size, 1)
        block = np.zeros((size, size))
        block[iu] = dist.draw(rng, len(iu[0]))
        block += block.T
        matrix[start : start + size, start : start + size] = block
        start += size
    names = tuple(f"c{c}-{i}" for c, size in enumerate(clusters) for i in range(size))
    labels = tuple(
        {"cluster": f"c{c}", "interconnect": "gige" if c in gige else "myrinet"}
        for c, size in enumerate(clusters)
        for _ in range(size)
    )
    rep_names = ",".join(inter.names[r] for r in reps)
    source = f"sharcnet(seed={seed}, clusters={list(clusters)}, gige={list(gige)}, inter={inter.source} reps {rep_names})"
    return Topology(matrix, names, labels, source)
