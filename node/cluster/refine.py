# Dynamic clusters (seed 002 §5.1), the serialized form the thesis explains
# them in: every step happens globally and in order. The distributed state
# machines (§5.1.4) will run the same per-node steps; this form is their
# reference and the simulator's fast path.
#
# Theory of operation
#   1. First approximation: a node x gathers the nodes predicted nearest to
#      it (the prediction tree's distances) while the whole set stays within
#      the diameter D, up to 2N of them, and keeps a random N (x included):
#      aggregating twice the size keeps a few nodes from landing in many
#      clusters (§5.1, "in practice, aggregating twice as many nodes is
#      enough"). That is x's candidate cluster; x is its head.
#   2. Limiting membership (Algorithm 3): every head solicits the members of
#      its candidate cluster; a node keeps at most M suitors, ranked FCFS
#      (solicitation order), by a global order (a consistent hash of the
#      suitor), or greedily (suitors whose clusters can still be large
#      first). A head's unfiltered cluster is itself and those who accepted.
#   3. Filtering: the members measure every pair of the unfiltered cluster;
#      the head keeps the largest set within D of each other that includes
#      itself (a maximum clique, exact: Bron-Kerbosch with pivoting; these
#      graphs are small and nearly complete or nearly empty).
#   4. Symmetry: a node advertises the largest filtered cluster it belongs
#      to (DYN-SYM); without it, its own (DYN).
#
# Pure functions over index-based matrices; randomness from the caller's rng.

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from node.cluster.clique import CRITERIA, max_clique_with

__all__ = [
    "CRITERIA",
    "Refined",
    "candidate_clusters",
    "gather",
    "limit_membership",
    "max_clique_with",
    "refine",
]


def gather(predicted_ms: np.ndarray, x: int, diameter_ms: float, limit: int) -> list[int]:
    """Step 1's aggregation for node x: the nodes predicted nearest to it, nearest
    first, while the whole set (x included) stays within the diameter; at most
    `limit` of them (x not included)."""
    predicted = np.asarray(predicted_ms, dtype=np.float64)
    near = np.flatnonzero(predicted[x] <= diameter_ms)
    near = near[near != x]
    order = near[np.argsort(predicted[x, near], kind="stable")]
    members: list[int] = []
    reach = predicted[x, order].copy()  # the largest predicted distance to a member so far
    for k, y in enumerate(order):
        if len(members) >= limit:
            break
        if reach[k] > diameter_ms:
            continue
        members.append(int(y))
        reach = np.maximum(reach, predicted[y, order])
    return members


def candidate_clusters(
    predicted_ms: np.ndarray, diameter_ms: float, size: int, rng: random.Random, aggregate: int = 2
) -> list[tuple[int, ...]]:
    """Step 1: each node's candidate cluster (itself first, then members by index)."""
    out = []
    for x in range(len(predicted_ms)):
        others = gather(predicted_ms, x, diameter_ms, aggregate * size - 1)
        if len(others) + 1 > size:
            others = rng.sample(others, size - 1)
        out.append((x, *sorted(others)))
    return out


def _hash(node: int) -> bytes:
    return hashlib.blake2b(node.to_bytes(8, "little"), digest_size=8).digest()


def limit_membership(
    candidates: Sequence[Sequence[int]],
    memberships: int,
    criterion: str,
    rng: random.Random,
) -> list[tuple[int, ...]]:
    """Step 2 (Algorithm 3): each head's unfiltered cluster, after every node
    kept at most `memberships` suitors (its own cluster is one of them)."""
    if criterion not in CRITERIA:
        raise ValueError(f"unknown criterion {criterion!r}; expected one of {CRITERIA}")
    n = len(candidates)
    heads = list(range(n))
    rng.shuffle(heads)  # the order solicitations arrive in (FCFS)
    suitors: list[list[int]] = [[] for _ in range(n)]
    for head in heads:
        for node in candidates[head][1:]:
            suitors[node].append(head)
    ceiling = [len(c) for c in candidates]  # greedy: how large each head's cluster can still be
    accepted: list[set[int]] = [set() for _ in range(n)]

    def rank(node: int) -> Callable[[int], tuple[int | bytes, ...]]:
        if criterion == "fcfs":
            order = {h: k for k, h in enumerate(suitors[node])}
            return lambda h: (order[h],)
        if criterion == "global":
            return lambda h: (_hash(h),)
        return lambda h: (-ceiling[h], -len(accepted[h]), _hash(h))

    for node in rng.sample(range(n), n) if criterion == "greedy" else range(n):
        # A node's own cluster takes one of its M places.
        keep = sorted(suitors[node], key=rank(node))[: max(0, memberships - 1)]
        for head in suitors[node]:
            if head in keep:
                accepted[head].add(node)
            else:
                ceiling[head] -= 1
    return [(head, *sorted(accepted[head])) for head in range(n)]


@dataclass
class Refined:
    candidate: list[tuple[int, ...]]  # step 1, each head first
    unfiltered: list[tuple[int, ...]]  # step 2
    filtered: list[tuple[int, ...]]  # step 3: DYN (each node's own job-ready cluster)
    symmetric: list[tuple[int, ...]]  # step 4: DYN-SYM
    measurements: list[int]  # pairs each node measured in step 3


def refine(
    predicted_ms: np.ndarray,
    measured_ms: np.ndarray,
    diameter_ms: float,
    size: int,
    memberships: int,
    *,
    criterion: str = "global",
    rng: random.Random,
    aggregate: int = 2,
) -> Refined:
    """The whole refinement: predicted distances for step 1, measured ones for step 3."""
    measured = np.asarray(measured_ms, dtype=np.float64)
    candidate = candidate_clusters(predicted_ms, diameter_ms, size, rng, aggregate)
    unfiltered = limit_membership(candidate, memberships, criterion, rng)
    filtered = []
    measured_pairs = [0] * len(unfiltered)
    for head, cluster in enumerate(unfiltered):
        members = list(cluster)
        block = measured[np.ix_(members, members)]
        close = np.maximum(block, block.T) <= diameter_ms
        filtered.append(max_clique_with(head, members, close))
        for node in members:  # each member measures the others (once per pair it learns)
            measured_pairs[node] += len(members) - 1
    symmetric = []
    belongs: list[list[tuple[int, ...]]] = [[] for _ in filtered]
    for cluster in filtered:
        for node in cluster:
            belongs[node].append(cluster)
    for node, own in enumerate(filtered):
        symmetric.append(max(belongs[node], key=lambda c: (len(c), c == own), default=own))
    return Refined(candidate, unfiltered, filtered, symmetric, measured_pairs)
