# Kim's RNT baseline (seed 000 §3.1.2, seed 003 §5.1): matchmaking over a
# Rendezvous Node Tree built on a Chord ring, the P2P scheme his CAN is
# measured against. A simulator baseline computed beside a run on Kim's grid
# (docs/workloads.md), like CENTRAL; not a scheduler of the peers.
#
# Theory of operation
#   Every node has a random GUID on a ring of 2^32. The node holding key 0 is
#   the root; any other node c's parent is successor(GUID(predecessor(c)) / 2),
#   which always has a smaller GUID, so the pointers form a tree of height
#   O(log N). Each node knows the maximum of every resource in its subtree (the
#   periodic aggregation towards the parent, taken as up to date: the nodes do
#   not change here). A job goes to a uniformly random owner, which searches its
#   own subtree, then each ancestor and the ancestor's other subtrees in turn,
#   skipping any subtree whose maxima cannot meet the job, until `k` capable
#   nodes are found (the extended search, k = 5) or the whole tree was seen.
#   Every node the search visits is one message (matchmaking cost). The job
#   goes to the fastest free candidate if one is free, else to the one with the
#   least queue / speed (seed 003 eq. 5, the rule of the E2 comparison;
#   `choose="least-loaded"`: the shortest queue, seed 000 ch. 3). Nodes run
#   their queues in arrival order, one job at a time, as in kim_central.
#
# Rules
#   Draws from random.Random(seed) only: the GUIDs, then each job's owner in
#   submission order.

from __future__ import annotations

import bisect
import heapq
import random
from collections.abc import Sequence
from typing import Literal, NamedTuple

__all__ = ["Rnt", "kim_rnt"]

Point = Sequence[float]
RING = 2**32


class Rnt(NamedTuple):
    waits: list[float | None]  # each job's, in the order given; None: no node can run it
    messages: list[int]  # nodes each job's search visited (0 for one no node can run)
    height: int  # the tree's height (edges from the deepest node to the root)


def _tree(n: int, rng: random.Random) -> list[int]:
    """Each node's parent (-1 for the root) by Kim's rule on random GUIDs."""
    guids = rng.sample(range(RING), n)
    ring = sorted(range(n), key=lambda i: guids[i])
    keys = [guids[i] for i in ring]

    def successor(key: int) -> int:
        return ring[bisect.bisect_left(keys, key) % n]

    parent = [-1] * n
    for pos, node in enumerate(ring):
        if pos > 0:  # ring[0] holds key 0: the root
            parent[node] = successor(keys[pos - 1] // 2)
    return parent


def kim_rnt(
    nodes: Sequence[Point],
    jobs: Sequence[tuple[float, Point, float]],
    *,
    speed: int = 0,
    per_speed: bool = True,
    k: int = 5,
    choose: Literal["fastest-free", "least-loaded"] = "fastest-free",
    seed: int = 0,
) -> Rnt:
    """Each job's wait (submission to start) and search cost under RNT. `jobs`:
    (submit time, requirement, run time); `speed` and `per_speed` as kim_central."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    n = len(nodes)
    rng = random.Random(seed)
    parent = _tree(n, rng) if n else []
    children: list[list[int]] = [[] for _ in range(n)]
    for c, p in enumerate(parent):
        if p >= 0:
            children[p].append(c)
    dims = len(nodes[0]) if n else 0
    maxima = [list(map(float, node)) for node in nodes]  # of each subtree, leaves up
    depth = [0] * n
    for c in range(n):
        _depth(c, parent, depth)
    for c in sorted(range(n), key=lambda c: -depth[c]):
        p = parent[c]
        if p >= 0:
            maxima[p] = [max(a, b) for a, b in zip(maxima[p], maxima[c], strict=True)]
    free_at = [0.0] * n
    ends: list[list[float]] = [[] for _ in range(n)]
    order = sorted(range(len(jobs)), key=lambda j: (jobs[j][0], j))
    waits: list[float | None] = [None] * len(jobs)
    messages = [0] * len(jobs)
    for j in order:
        t, want, work = jobs[j]
        owner = rng.randrange(n) if n else -1
        found, visited = _search(owner, want, k, parent, children, maxima, nodes, dims)
        if not found:
            continue
        messages[j] = visited
        for c in found:
            while ends[c] and ends[c][0] <= t:
                heapq.heappop(ends[c])
        idle = [c for c in found if not ends[c]]
        if choose == "fastest-free" and idle:
            chosen = max(idle, key=lambda c: (nodes[c][speed], -c))
        elif choose == "fastest-free":
            chosen = min(found, key=lambda c: (len(ends[c]) / nodes[c][speed], c))
        else:
            chosen = min(found, key=lambda c: (len(ends[c]), c))
        start = max(t, free_at[chosen])
        free_at[chosen] = start + (work / nodes[chosen][speed] if per_speed else work)
        heapq.heappush(ends[chosen], free_at[chosen])
        waits[j] = start - t
    return Rnt(waits, messages, max(depth, default=0))


def _depth(c: int, parent: list[int], depth: list[int]) -> int:
    """c's distance to the root, memoised in `depth` (0 until computed; the root is 0)."""
    path = []
    while parent[c] >= 0 and depth[c] == 0:
        path.append(c)
        c = parent[c]
    d = depth[c]
    for node in reversed(path):
        d += 1
        depth[node] = d
    return d


def _search(
    owner: int,
    want: Point,
    k: int,
    parent: list[int],
    children: list[list[int]],
    maxima: list[list[float]],
    nodes: Sequence[Point],
    dims: int,
) -> tuple[list[int], int]:
    """Up to k capable nodes, the owner's subtree first, then each ancestor's;
    and how many nodes the search visited."""

    def fits(have: Sequence[float]) -> bool:
        return all(have[d] >= want[d] for d in range(dims))

    found: list[int] = []
    visited = 0
    done: set[int] = set()  # subtrees searched already

    def subtree(root: int) -> None:
        nonlocal visited
        stack = [root]
        while stack and len(found) < k:
            c = stack.pop()
            visited += 1
            if fits(nodes[c]):
                found.append(c)
            stack.extend(x for x in reversed(children[c]) if x not in done and fits(maxima[x]))

    node, below = owner, -1
    while node >= 0 and len(found) < k:
        if below < 0:
            if fits(maxima[node]) or node == owner:
                subtree(node)
        else:
            visited += 1  # the search climbs to the ancestor
            if fits(nodes[node]):
                found.append(node)
            done.add(below)
            for x in children[node]:
                if len(found) >= k:
                    break
                if x not in done and fits(maxima[x]):
                    subtree(x)
        done.add(node)
        node, below = parent[node], node
    return found, visited
