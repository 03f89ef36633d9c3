# DTM, the decentralised tree-metric embedding (Song, Keleher, Bhattacharjee,
# Sussman, INFOCOM 2011) as seed 002 §2.2.1 and §5.2.3.3 use it for latency,
# reconstructed: the thesis gives its outline, and neither the INFOCOM paper
# nor Sequoia's (Ramasubramanian et al., SIGMETRICS 2009), which it
# decentralises, is at hand. docs/prediction.md lists what is ours.
#
# Theory of operation
#   Hosts are vertices of a tree with non-negative edge weights; the predicted
#   latency of two hosts is the length of the tree path between them. A host c
#   joins Sequoia's way: seen from a base host s, the Gromov product
#   (h|c)_s = (d_T(s, h) + d(s, c) - d(h, c)) / 2 is how far the paths s -> h
#   and s -> c run together, so c leaves the tree where no host's path runs
#   further with it, and hangs there by an edge of d(s, c) minus that
#   distance. On a tree metric every pair then comes out exact, in any join
#   order. To find that point without measuring everyone, c walks the
#   prediction tree from s: at each vertex it measures one host in each branch
#   (up to `branch_sample` of them) and follows the branch whose host runs
#   furthest with it; so a join costs O(depth x branching) measurements (with
#   `jump`, O(log n) walks along heavy paths: see DtmConfig.jump). The
#   thesis's "two simulated joins" are two such walks, the second looking at
#   other (random) hosts in each branch; c joins where its tree distances fit
#   everything it measured best.
#
#   Ours, and why: the base is the host nearest the tree's root (the first host
#   until it leaves). A random base per join (the "random measurement starting
#   point" of Song et al.) was exact on tree metrics too, but on PlanetLab a walk
#   that starts at a leaf gives up at the first noisy step (relative error p50
#   1.5 against 0.17); so does Rejoin's when the next-oldest host becomes the
#   base (p50 0.03 -> 1.3 over 300 rejoins on a SHARCNET-style subset).
#   Besides the walks' places, c tries those seen from the nearest host it
#   measured (`near_points`): the walk sees a cluster through one member, and
#   one noisy member can send c beside the cluster rather than into it
#   (SHARCNET-style maps 1 and 4, 9 trees: p99 0.85 -> 0.48 and 0.69 -> 0.34).
#
# Variants of Table 5.5: Round (measurements above 64 us rounded to a power of
# two, in log space) is `round_above`; Lowest Quartile belongs to the probing
# filter (not written yet); Rejoin is `rejoin_all()`.
#
# Two parts: _Tree is the tree itself (vertices, weighted edges, the hosts at
# them and the hosts that stand for each subtree) and its operations; Dtm
# decides where a host joins (the walks, the fits, the snap) and keeps the
# join order and the base.
#
# Pure Python (numpy only inside predict_all(), for the simulator's all-pairs
# evaluation); randomness from the injected rng; measurements through the
# caller's `measure(a, b)`.

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Dtm", "DtmConfig", "round_pow2"]

Measure = Callable[[int, int], float]
# Relative distance under which two points of the tree are one (float rounding).
_CLOSE = 1e-9
# A snap is made unless the edge's end fits c's measurements worse than this
# times its place (1.5: p99 0.459 over the ten SHARCNET-style maps; 3: 0.491).
_SNAP_MISFIT = 1.5


@dataclass(frozen=True)
class DtmConfig:
    simulated_joins: int = 1  # walks per join (seed 002: two; our second walk did not help)
    round_above: float | None = None  # Round variant: threshold in the matrix's unit (64 us)
    every_point: bool = True  # choose among all places the walks saw, not only their ends
    fit_leaf: bool = True  # leaf weight fitted to all measurements, not the base's alone
    # Also try the places seen from the nearest host measured (on its paths to
    # the others): a walk from the base sees a cluster through one of its
    # members, and on noisy input may hang c beside the cluster, not in it.
    near_points: int = 8  # ... towards the nearest this many others (0: off)
    branch_sample: int = 64  # branches tried at a vertex with more (a star of a whole cluster)
    # A branch must run this share of d(base, c) further with c to be followed:
    # measurement noise below it is no reason to turn (1e-9: float rounding only).
    tolerance: float = 0.01
    # Jump along the path to a branch's deepest host, to where that host says c
    # parts from it, past the vertices in between, once the walk is within this
    # share of d(base, c) of c (0: never, 1: anywhere). Exact on a tree metric and
    # O(log n) walks (the heavy-path argument); on input far from a tree one
    # measurement decides a whole stretch, so a small share keeps the jumps inside
    # c's own cluster (docs/prediction.md, "Probe cost").
    jump: float = 0.0
    # Then c measures this many hosts nearest its place in the tree, and its leaf
    # is fitted to them too: a walk that jumped measured few of its neighbours.
    leaf_hosts: int = 0
    # c hangs at the nearer end of the edge it parts in when that end is within
    # this share of its leaf (0: off) and fits c's measurements about as well
    # (_SNAP_MISFIT; a tree metric stays exact). Members of a cluster of
    # independent draws then hang around one point (a star) instead of a
    # caterpillar 30-58 levels deep that each later member walks down.
    snap: float = 0.0
    # Branches to a lone host tried at a vertex (0: as `branch_sample` allows): a
    # random few of a star's members stand for the others (not exact on a tree
    # metric with bigger stars).
    leaf_sample: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.simulated_joins, int) and self.simulated_joins >= 1):
            raise ValueError(
                f"dtm.simulated_joins must be a positive integer, not {self.simulated_joins!r}"
            )
        if not (isinstance(self.branch_sample, int) and self.branch_sample >= 2):
            raise ValueError(
                f"dtm.branch_sample must be an integer >= 2, not {self.branch_sample!r}"
            )
        if not (isinstance(self.tolerance, int | float) and 0 <= self.tolerance < 0.5):
            raise ValueError(f"dtm.tolerance must be within [0, 0.5), not {self.tolerance!r}")
        if not (isinstance(self.near_points, int) and self.near_points >= 0):
            raise ValueError(f"dtm.near_points must be an integer >= 0, not {self.near_points!r}")
        if not (isinstance(self.jump, int | float) and 0 <= self.jump <= 1):
            raise ValueError(f"dtm.jump must be within [0, 1], not {self.jump!r}")
        if not (isinstance(self.leaf_hosts, int) and self.leaf_hosts >= 0):
            raise ValueError(f"dtm.leaf_hosts must be an integer >= 0, not {self.leaf_hosts!r}")
        if not (isinstance(self.snap, int | float) and 0 <= self.snap <= 1):
            raise ValueError(f"dtm.snap must be within [0, 1], not {self.snap!r}")
        if not (isinstance(self.leaf_sample, int) and self.leaf_sample >= 0):
            raise ValueError(f"dtm.leaf_sample must be an integer >= 0, not {self.leaf_sample!r}")
        if self.round_above is not None and not (self.round_above > 0):
            raise ValueError(f"dtm.round_above must be positive, not {self.round_above!r}")


def round_pow2(value: float, above: float) -> float:
    """The Round variant: values above `above` go to the nearest power of two (in log space)."""
    if value <= above:
        return value
    return 2.0 ** round(math.log2(value))


class _Tree:
    """The prediction tree: vertices joined by edges of non-negative weight, a
    host at some of them, and for each vertex a host in its subtree and the
    deepest one (the hosts a walk measures for a branch). Only tree operations:
    where a host joins is the Dtm's decision."""

    def __init__(self) -> None:
        # vertex -> parent (-1 at the root), weight of the edge to the parent,
        # distance from the root, and hop count from the root.
        self.parent: list[int] = []
        self.weight: list[float] = []
        self.depth: list[float] = []
        self.level: list[int] = []
        self.children: list[list[int]] = []
        self.host_vertex: dict[int, int] = {}
        self.vertex_host: dict[int, int] = {}
        self.free: list[int] = []  # vertices removed by leaves, for reuse
        self.rep: dict[int, int] = {}  # vertex -> a host in its subtree
        self.deep: dict[int, int] = {}  # vertex -> the deepest host in its subtree

    # -- shape and distances -------------------------------------------------------------------------

    def new_vertex(self, parent: int, weight: float) -> int:
        depth = self.depth[parent] + weight if parent >= 0 else 0.0
        level = self.level[parent] + 1 if parent >= 0 else 0
        if self.free:
            v = self.free.pop()
            self.parent[v], self.weight[v], self.depth[v], self.level[v] = (
                parent,
                weight,
                depth,
                level,
            )
            self.children[v] = []
        else:
            v = len(self.parent)
            self.parent.append(parent)
            self.weight.append(weight)
            self.depth.append(depth)
            self.level.append(level)
            self.children.append([])
        if parent >= 0:
            self.children[parent].append(v)
        return v

    def bump_levels(self, v: int) -> None:
        stack = [v]
        while stack:
            u = stack.pop()
            self.level[u] = self.level[self.parent[u]] + 1
            stack.extend(self.children[u])

    def lca(self, u: int, v: int) -> int:
        parent, level = self.parent, self.level
        while level[u] > level[v]:
            u = parent[u]
        while level[v] > level[u]:
            v = parent[v]
        while u != v:
            u, v = parent[u], parent[v]
        return u

    def vertex_distance(self, u: int, v: int) -> float:
        return self.depth[u] + self.depth[v] - 2 * self.depth[self.lca(u, v)]

    def point_on_path(self, s: int, a: int, x: float) -> tuple[int, float]:
        """The point at distance x from vertex s on the tree path s -> a, as
        (v, depth): it lies on the edge from v up to v's parent, at that depth
        from the root (depth == depth[v] means v itself)."""
        top = self.lca(s, a)
        up = self.depth[s] - self.depth[top]
        if x <= up:
            start, target = s, self.depth[s] - x
        else:
            start, target = a, self.depth[top] + (x - up)
        v = start
        while self.parent[v] >= 0 and self.depth[self.parent[v]] >= target:
            v = self.parent[v]
        return v, target

    def distances_from_point(
        self, v: int, depth: float, targets: Sequence[int], ancestors: set[int]
    ) -> list[float]:
        """Tree distances from the point (v, depth) to each vertex in `targets`;
        `ancestors` is v's ancestors and v (each target walks up to one of them:
        their lowest common ancestor)."""
        parent, depths = self.parent, self.depth
        out = []
        for m in targets:
            lca = m
            while lca not in ancestors:
                lca = parent[lca]
            if lca == v:  # m is below the point
                out.append(depths[m] - depth)
            else:
                out.append(depth + depths[m] - 2 * depths[lca])
        return out

    def on_edge(self, x: int, q: int, along: float, leaf: float) -> tuple[int, float, float]:
        """The point `along` from x towards its neighbour q, with a leaf of that weight."""
        if q == self.parent[x]:
            return x, self.depth[x] - along, max(0.0, leaf)
        return q, self.depth[x] + along, max(0.0, leaf)

    # -- hosts at vertices ---------------------------------------------------------------------------

    def add_host(self, c: int, vertex: int) -> None:
        """Put host c at `vertex` (new, a leaf): it represents the vertex, and is
        the deepest host of every ancestor it is deeper than."""
        self.host_vertex[c] = vertex
        self.vertex_host[vertex] = c
        self.rep[vertex] = c
        self.deep[vertex] = c
        depth, a = self.depth[vertex], self.parent[vertex]
        while a >= 0 and self.depth[self.host_vertex[self.deep[a]]] < depth:
            self.deep[a] = c
            a = self.parent[a]

    def remove_host(self, c: int) -> None:
        """Take host c out of the tree; its vertex goes too unless it is a branch
        point (the tree stays a tree over the others, their distances unchanged).

        Raises:
            KeyError: c is not in the tree (nothing changed).
        """
        v = self.host_vertex.pop(c)
        del self.vertex_host[v]
        above = self.parent[v]
        if not self.children[v]:
            self.remove_leaf(v)
        else:
            above = v  # a branch point as well: it stays, as a vertex without a host
        # Representatives that named c now name another host below.
        while above >= 0:
            if self.deep.get(above) == c:
                self.deep[above] = self.deepest(above)
            if self.rep.get(above) == c:
                self.rep[above] = self.a_host(above)
            above = self.parent[above]

    def a_host(self, v: int) -> int:
        """A host in the subtree of v: its own, or its first child's representative."""
        host = self.vertex_host.get(v)
        return host if host is not None else self.rep[self.children[v][0]]

    def deepest(self, v: int) -> int:
        """The deepest host in the subtree of v (from its children's representatives)."""
        best = self.vertex_host.get(v)
        for q in self.children[v]:
            host = self.deep[q]
            if (
                best is None
                or self.depth[self.host_vertex[host]] > self.depth[self.host_vertex[best]]
            ):
                best = host
        assert best is not None
        return best

    def rep_outside(self, u: int) -> int | None:
        """A host outside the subtree of u (on the other side of u's parent edge)."""
        child, p = u, self.parent[u]
        while p >= 0:
            host = self.vertex_host.get(p)
            if host is not None:
                return host
            for q in self.children[p]:
                if q != child:
                    return self.rep[q]
            child, p = p, self.parent[p]
        return None

    def random_host_below(self, v: int, rng: random.Random) -> int:
        """A host in the subtree of v, by a random walk down (the second and later
        simulated joins look at other hosts than the first)."""
        while True:
            children = self.children[v]
            host = self.vertex_host.get(v)
            if host is not None and (not children or rng.random() < 0.5):
                return host
            if not children:
                return self.rep[v]
            v = children[rng.randrange(len(children))]

    def hosts_near(self, v: int, depth: float, k: int) -> list[int]:
        """The k hosts nearest the point (v, depth) in the tree (Dijkstra's order)."""
        heap = [(self.depth[v] - depth, v)]
        if self.parent[v] >= 0:
            heap.append((depth - self.depth[self.parent[v]], self.parent[v]))
        heap.sort()
        done: set[int] = set()
        out: list[int] = []
        while heap and len(out) < k:
            dist, x = heapq.heappop(heap)
            if x in done:
                continue
            done.add(x)
            if x in self.vertex_host:
                out.append(self.vertex_host[x])
            for q in self.children[x]:
                heapq.heappush(heap, (dist + self.weight[q], q))
            if self.parent[x] >= 0:
                heapq.heappush(heap, (dist + self.weight[x], self.parent[x]))
        return out

    def stranger_at(self, v: int, depth: float, seen: dict[int, float]) -> bool:
        """Whether a host c did not measure sits at the point (v, depth). Jumps
        pass vertices without measuring their branches, a leaf sample leaves most
        of a star's members unmeasured, and a place seen from the nearest host or
        a snap may be one of theirs: c would hang on such a host by a leaf fitted
        to others, 0 within their noise."""
        close = _CLOSE * max(depth, 1.0)
        if depth < self.depth[v] - close:
            v = self.parent[v]
            if v < 0 or depth > self.depth[v] + close:
                return False  # inside an edge: no host there
        stack, visited = [v], {v}
        while stack:
            x = stack.pop()
            host = self.vertex_host.get(x)
            if host is not None and host not in seen:
                return True
            around = [q for q in self.children[x] if self.weight[q] <= close]
            if self.parent[x] >= 0 and self.weight[x] <= close:
                around.append(self.parent[x])
            for q in around:
                if q not in visited:
                    visited.add(q)
                    stack.append(q)
        return False

    # -- changes of shape ----------------------------------------------------------------------------

    def attach(self, v: int, depth: float, leaf: float) -> int:
        """Hang a new host vertex by an edge of `leaf` from the point (v, depth).
        A point within rounding of a vertex is that vertex (no edges of length 0)."""
        close = _CLOSE * max(self.depth[v], 1.0)
        parent = self.parent[v]
        if depth >= self.depth[v] - close or parent < 0:
            at = v
        elif depth <= self.depth[parent] + close:
            at = parent
        else:
            at = self.new_vertex(parent, depth - self.depth[parent])
            self.rep[at] = self.rep[v]
            self.deep[at] = self.deep[v]
            self.children[parent].remove(v)
            self.children[at].append(v)
            self.parent[v] = at
            self.weight[v] = self.depth[v] - depth
            self.bump_levels(v)
        return self.new_vertex(at, leaf)

    def reroot(self, s: int) -> None:
        """Make vertex s the root (predictions do not change), when the base left
        and the host nearest the root takes its place: a walk from a base below
        the root would see everything above it through one host, the up branch's
        representative (on a grid, a member of the base's own cluster)."""
        path = [s]
        while self.parent[path[-1]] >= 0:
            path.append(self.parent[path[-1]])
        weights = [self.weight[v] for v in path[:-1]]
        for a, b, w in zip(path[:-1], path[1:], weights, strict=True):
            self.children[b].remove(a)
            self.children[a].append(b)
            self.parent[b], self.weight[b] = a, w
        self.parent[s], self.weight[s] = -1, 0.0
        top = path[-1]  # the old root: without its host and its one branch, a dead end
        if top != s and top not in self.vertex_host and not self.children[top]:
            self.remove_leaf(top)
        order = [s]
        self.depth[s], self.level[s] = 0.0, 0
        for v in order:  # breadth first: parents before children
            for q in self.children[v]:
                self.depth[q] = self.depth[v] + self.weight[q]
                self.level[q] = self.level[v] + 1
                order.append(q)
        for v in reversed(order):
            self.deep[v] = self.deepest(v)
            self.rep[v] = self.a_host(v)

    def remove_leaf(self, v: int) -> None:
        parent = self.parent[v]
        self.free.append(v)
        self.rep.pop(v, None)
        self.deep.pop(v, None)
        if parent < 0:
            return
        self.children[parent].remove(v)
        if parent in self.vertex_host:
            return
        if not self.children[parent]:
            self.remove_leaf(parent)
        elif len(self.children[parent]) == 1 and self.parent[parent] >= 0:
            # A bend with one branch left: splice it out (depths are unchanged).
            child = self.children[parent][0]
            grand = self.parent[parent]
            self.children[grand].remove(parent)
            self.children[grand].append(child)
            self.parent[child] = grand
            self.weight[child] += self.weight[parent]
            self.free.append(parent)
            self.rep.pop(parent, None)
            self.deep.pop(parent, None)
            self.bump_levels(child)

    # -- all pairs (the simulator's evaluation) ------------------------------------------------------

    def distances(self, vertices: Sequence[int]) -> np.ndarray:
        """The tree distances between `vertices`, as a matrix (each row by one walk
        up the tree: fast for thousands)."""
        import numpy as np  # not at module level: the peer process stays light

        order = self.euler()
        position = {v: k for k, v in enumerate(order)}
        # Host k's place in the DFS order, and each vertex's range of descendants in it.
        host_pos = np.array([position[v] for v in vertices])
        size = self.subtree_sizes(order)
        depth = np.array([self.depth[v] for v in vertices])
        out = np.empty((len(vertices), len(vertices)))
        lca_depth = np.empty(len(order))
        for k, v in enumerate(vertices):
            chain = []
            u = v
            while u >= 0:
                chain.append(u)
                u = self.parent[u]
            for u in reversed(chain):  # root first: deeper ancestors overwrite their part
                start = position[u]
                lca_depth[start : start + size[u]] = self.depth[u]
            out[k] = depth[k] + depth - 2 * lca_depth[host_pos]
        return out

    def euler(self) -> list[int]:
        roots = [v for v in range(len(self.parent)) if self.parent[v] == -1 and v not in self.free]
        order: list[int] = []
        stack = list(reversed(roots))
        while stack:
            v = stack.pop()
            order.append(v)
            stack.extend(reversed(self.children[v]))
        return order

    def subtree_sizes(self, order: list[int]) -> dict[int, int]:
        size = dict.fromkeys(order, 1)
        for v in reversed(order):
            parent = self.parent[v]
            if parent >= 0:
                size[parent] += size[v]
        return size


class Dtm:
    """A prediction tree and the joins that build it (one object for all hosts,
    as the simulator runs it; every decision a host makes uses only what it
    measured and what the hosts it talks to know)."""

    def __init__(self, config: DtmConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self._tree = _Tree()
        self._order: list[int] = []  # hosts in join order (for deterministic choices)
        self._base: int | None = None  # where joins start their walk
        self.measurements: dict[int, int] = {}  # host -> measurements it made to join
        # Walks that skip hosts (jumps, a sample of a star's members) must not
        # hang c on one of those it did not measure (by a leaf fitted to others).
        self._skips = bool(config.jump or config.leaf_sample or config.snap)

    # -- predictions ---------------------------------------------------------------------------------

    @property
    def hosts(self) -> list[int]:
        return list(self._order)

    def level(self, host: int) -> int:
        """How many edges lie between joined host `host` and the tree's root."""
        return self._tree.level[self._tree.host_vertex[host]]

    def predict(self, a: int, b: int) -> float:
        """Predicted latency between two joined hosts: the tree path length."""
        tree = self._tree
        return tree.vertex_distance(tree.host_vertex[a], tree.host_vertex[b])

    def predict_all(self, hosts: Sequence[int]) -> np.ndarray:
        """The predicted matrix for `hosts` (each row by one walk up the tree: fast for thousands)."""
        return self._tree.distances([self._tree.host_vertex[h] for h in hosts])

    # -- joins ---------------------------------------------------------------------------------------

    def join(self, c: int, measure: Measure) -> None:
        """Add host c, measuring through `measure(c, other)` (counted in `measurements[c]`)."""
        tree = self._tree
        if c in tree.host_vertex:
            raise ValueError(f"host {c} has already joined")
        seen: dict[int, float] = {}
        rounding = self.config.round_above

        def m(other: int) -> float:
            if other not in seen:
                value = measure(c, other)
                if not (value >= 0 and math.isfinite(value)):
                    raise ValueError(f"measurement {c} -> {other} is {value!r}")
                seen[other] = round_pow2(value, rounding) if rounding is not None else value
                self.measurements[c] = self.measurements.get(c, 0) + 1
            return seen[other]

        self.measurements.setdefault(c, 0)
        if not self._order:
            vertex = tree.new_vertex(-1, 0.0)
        else:
            if self._base is None:  # the first host; once it left, the one nearest the root
                self._base = min(self._order, key=lambda h: tree.depth[tree.host_vertex[h]])
                tree.reroot(tree.host_vertex[self._base])
            base = self._base
            candidates = []
            for k in range(self.config.simulated_joins):
                walk = self._descend(base, m, k > 0)
                # The walk's end first: on a tie (a tree metric) it is the exact place.
                candidates.append(walk[-1])
                if self.config.every_point:
                    candidates.extend(walk[:-1])
            if self.config.near_points:
                candidates.extend(self._near_points(seen))
            v, depth, leaf = self._best_place(candidates, seen)
            if self.config.leaf_hosts:
                for host in tree.hosts_near(v, depth, self.config.leaf_hosts):
                    m(host)
                v, depth, leaf = self._best_place([(v, depth, leaf)], seen)
            if self.config.snap:
                v, depth, leaf = self._snap(v, depth, leaf, seen)
            vertex = tree.attach(v, depth, leaf)
        tree.add_host(c, vertex)
        self._order.append(c)

    def _descend(
        self, base: int, m: Callable[[int], float], shuffle: bool
    ) -> list[tuple[int, float, float]]:
        """Walk the tree away from host `base` towards where c branches off.

        At each vertex, every branch but the one we came by is tried through one
        host in it (its representative h): the Gromov product
        g = (d_T(base, h) + d(base, c) - d(h, c)) / 2 is how far from the base
        the paths to h and to c run together. The branch with the largest g
        beyond the current vertex is followed; c hangs where no branch goes
        further. Returns the places the walk saw (each vertex passed, and where
        each tried branch says c parts from it), its end last, as
        (v, depth, leaf weight).
        """
        tree = self._tree
        d_base = m(base)
        s = tree.host_vertex[base]

        def runs_with(host: int) -> float:  # the Gromov product (host | c) seen from the base
            return (tree.vertex_distance(s, tree.host_vertex[host]) + d_base - m(host)) / 2

        u, came, at = s, -1, 0.0  # current vertex, where we came from, its distance from s
        tolerance = max(self.config.tolerance, _CLOSE) * max(d_base, 1e-12)
        sample = self.config.branch_sample
        seen: list[tuple[int, float, float]] = []
        while True:
            # Branches to a lone host (a cluster's members around its star) last:
            # once a bigger branch runs further with c than any of them could
            # (their edge), c does not part here and they go unmeasured: on a tree
            # metric that is exact, and a join through a cluster's star costs
            # O(1) rather than `sample` measurements. Only they are sampled.
            inner: list[tuple[int, int, int, float]] = []
            leaves: list[tuple[int, int, int, float]] = []
            for branch in self._branches(u, came, tolerance, shuffle):
                x, q = branch[0], branch[1]
                (leaves if q != tree.parent[x] and not tree.children[q] else inner).append(branch)
            room = max(0, sample - len(inner))
            if self.config.leaf_sample:
                room = min(room, self.config.leaf_sample)
            if len(leaves) > room:
                leaves = self.rng.sample(leaves, room)
            reach = max((branch[3] for branch in leaves), default=0.0)
            best: tuple[int, int, float, float] | None = None
            for k, (x, q, host, weight) in enumerate(inner + leaves):
                if k == len(inner) and best is not None and best[2] > at + reach + tolerance:
                    break
                g = runs_with(host)
                if q != tree.parent[x] and tree.deep[q] != host:
                    # A branch down runs as far with c as the further of its oldest
                    # and its deepest host says: one host stands for the branch
                    # only on a tree metric (on a grid the oldest may be a member
                    # of the cluster it starts at, and hosts of the clusters
                    # beyond it, rejoining, hung beside their own).
                    g = max(g, runs_with(tree.deep[q]))
                if g > at + tolerance:
                    seen.append(tree.on_edge(x, q, min(g, at + weight) - at, d_base - g))
                    if best is None or g > best[2]:
                        best, best_at = (x, q, g, weight), len(seen) - 1
            if best is None:
                return [*seen, (u, tree.depth[u], max(0.0, d_base - at))]
            seen.append((u, tree.depth[u], max(0.0, d_base - at)))
            x, q, g, weight = best
            if g >= at + weight - tolerance:
                jump = self._jump(s, x, q, at, runs_with, tolerance, d_base)
                if jump is None:
                    u, came, at = q, x, at + weight
                    continue
                v, depth, g_deep = jump
                del seen[best_at]  # the point at q: its branches go unmeasured
                if depth < tree.depth[v]:  # c parts inside the edge above v
                    return [*seen, (v, depth, max(0.0, d_base - g_deep))]
                u, came, at = v, tree.parent[v], depth
                if u in tree.vertex_host:  # a host at the landing point: measured too
                    runs_with(tree.vertex_host[u])
                continue
            return [*seen, tree.on_edge(x, q, g - at, d_base - g)]

    def _jump(
        self,
        s: int,
        x: int,
        q: int,
        at: float,
        runs_with: Callable[[int], float],
        tolerance: float,
        d_base: float,
    ) -> tuple[int, float, float] | None:
        """With `jump`: where c parts from the path s -> h, h the deepest host
        below q (the walk runs on from x into q), as (v, depth, g): the vertex v
        itself when depth == depth[v] (the walk goes on from there), else the
        point inside the edge above v. None: take one edge as before."""
        tree = self._tree
        if not self.config.jump or d_base - at > self.config.jump * d_base or tree.parent[q] != x:
            return None  # c is further off than jumps go, or not a branch down
        t = tree.host_vertex[tree.deep[q]]  # measured already, trying the branch
        g = min(runs_with(tree.deep[q]), tree.depth[t])  # s is the root: depth = d_T(s, .)
        if g <= tree.depth[q] + tolerance or g >= d_base:
            return None  # no further than q, or more than the tree can explain
        # The topmost vertex within the tolerance of the point: c is on it, or
        # parts inside the edge above it.
        near = max(tolerance, _CLOSE * max(g, 1.0))
        v, _ = tree.point_on_path(s, t, g - near)
        return v, (tree.depth[v] if tree.depth[v] <= g + near else g), g

    def _near_points(self, seen: dict[int, float]) -> list[tuple[int, float, float]]:
        """Where c parts, seen from the nearest host a it measured, from the path
        to each other host b it measured: at (d(c, a) + d_T(a, b) - d(c, b)) / 2
        from a (Sequoia's join point with a as the base), a's vertex first."""
        tree = self._tree
        (a, d_a), *others = heapq.nsmallest(
            self.config.near_points + 1, seen.items(), key=lambda item: (item[1], item[0])
        )
        s = tree.host_vertex[a]
        out = [(s, tree.depth[s], d_a)]
        for b, d_b in others:
            t = tree.host_vertex[b]
            span = tree.vertex_distance(s, t)
            x = min(max((d_a + span - d_b) / 2, 0.0), span)
            v, depth = tree.point_on_path(s, t, x)
            out.append((v, depth, max(0.0, d_a - x)))
        return out

    def _branches(
        self, u: int, came: int, tolerance: float, shuffle: bool
    ) -> list[tuple[int, int, int, float]]:
        """The ways on from u, not back to `came`, as (from, to, a host beyond, length).
        Edges of length 0 (a host on a path joins by one) lead to the same point:
        the branches beyond them count as u's, and a host there is one too (its
        distance is c's leaf: without it, c could hang there by a leaf fitted to
        far hosts only, 0 within their noise, and its whole cluster after it)."""
        tree = self._tree
        out = []
        seen = {u, came}
        stack = [u]
        while stack:
            x = stack.pop()
            around = [(q, True) for q in tree.children[x]]
            if tree.parent[x] >= 0:
                around.append((tree.parent[x], False))
            for q, down in around:
                if q in seen:
                    continue
                seen.add(q)
                weight = tree.weight[q] if down else tree.weight[x]
                if weight <= tolerance:
                    stack.append(q)
                    if q in tree.vertex_host:  # a host at this very point: measured too
                        out.append((x, q, tree.vertex_host[q], weight))
                    continue
                if not down:
                    host = tree.rep_outside(x)
                elif shuffle:
                    host = tree.random_host_below(q, self.rng)
                else:
                    host = tree.rep[q]
                if host is not None:
                    out.append((x, q, host, weight))
        return out

    def _best_place(
        self, candidates: list[tuple[int, float, float]], seen: dict[int, float]
    ) -> tuple[int, float, float]:
        """The candidate whose tree distances fit what c measured best (least sum
        of relative errors; the first on a tie). With fit_leaf, each candidate's
        leaf weight is first fitted to every measurement: the median, weighted
        by 1/d, of d(c, m) - d_T(point, m) (least relative error)."""
        fits = self._fits(candidates, seen)
        return min(fits, key=lambda fit: fit[1])[0] if fits else candidates[0]

    def _fits(
        self, candidates: list[tuple[int, float, float]], seen: dict[int, float]
    ) -> list[tuple[tuple[int, float, float], float]]:
        """Each candidate (one a point with fit_leaf, none where a stranger sits)
        with its leaf fitted, and its misfit: the sum of relative errors."""
        targets = [self._tree.host_vertex[other] for other in seen]
        measured = list(seen.values())
        weights = [1 / max(d, 1e-12) for d in measured]
        half = sum(weights) / 2
        ancestors: dict[int, set[int]] = {}
        fits = []
        tried: set[tuple[int, float]] = set()
        for v, depth, leaf in candidates:
            if self.config.fit_leaf:  # the leaf is refitted: one try per point
                if (v, depth) in tried:
                    continue
                tried.add((v, depth))
            if self._skips and self._tree.stranger_at(v, depth, seen):
                continue
            if v not in ancestors:
                chain, u = set(), v
                while u >= 0:
                    chain.add(u)
                    u = self._tree.parent[u]
                ancestors[v] = chain
            tree = self._tree.distances_from_point(v, depth, targets, ancestors[v])
            if self.config.fit_leaf:
                acc = 0.0
                for gap, weight in sorted(
                    zip((d - t for d, t in zip(measured, tree, strict=True)), weights, strict=True)
                ):
                    acc += weight
                    if acc >= half:
                        leaf = max(0.0, gap)
                        break
                # c never lands on a host it measured some way off: a leaf fitted
                # to far hosts is 0 within their noise, and put c onto a neighbour
                # at the point (then its whole cluster). A floor of d/2 - d_T for
                # every host, not only those at the point, cost PlanetLab's p99
                # 0.77 -> 3.6 (its triangle violations).
                for d, t in zip(measured, tree, strict=True):
                    if t <= _CLOSE * d:
                        leaf = max(leaf, d / 2)
            misfit = 0.0
            for d, t in zip(measured, tree, strict=True):
                misfit += abs(leaf + t - d) / max(d, 1e-12)
            fits.append(((v, depth, leaf), misfit))
        return fits

    def _snap(
        self, v: int, depth: float, leaf: float, seen: dict[int, float]
    ) -> tuple[int, float, float]:
        """c's place (v, depth, leaf), moved to an end of its edge within `snap` x
        leaf (the upper end first), unless the end fits c's measurements clearly
        worse (by half as much misfit again): a cluster's member parts from the
        others by noise, a host on a tree where the tree says."""
        tree = self._tree
        parent = tree.parent[v]
        reach = self.config.snap * leaf
        if parent < 0:
            return v, depth, leaf
        if depth - tree.depth[parent] <= reach:
            end = tree.depth[parent]
        elif tree.depth[v] - depth <= reach:
            end = tree.depth[v]
        else:
            return v, depth, leaf
        if end == depth:  # at a vertex already
            return v, depth, leaf
        fits = self._fits([(v, depth, leaf), (v, end, leaf)], seen)
        if len(fits) < 2:  # a host c did not measure sits at the end
            return v, depth, leaf
        (here, misfit_here), (there, misfit_there) = fits
        return there if misfit_there <= _SNAP_MISFIT * misfit_here else here

    # -- leaving and rejoining -----------------------------------------------------------------------

    def leave(self, c: int) -> None:
        """Remove host c; the tree stays a tree over the others (their predictions do not change)."""
        self._tree.remove_host(c)
        self._order.remove(c)
        self.measurements.setdefault(c, 0)
        if c == self._base:
            self._base = None

    def rejoin_all(self, measure: Measure) -> None:
        """The Rejoin variant: once everyone has joined, each host in join order
        leaves and joins again (serialised, with global knowledge); all but the
        base, whose place is where every walk starts (moving it moves the tree's
        reference point, and on a grid the new base is a cluster member whose
        walks hang hosts of other clusters beside theirs)."""
        for c in list(self._order):
            if len(self._order) < 2:
                return
            if c == self._base:
                continue
            self.leave(c)
            self.join(c, measure)
