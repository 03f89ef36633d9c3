# The CAN space: dimensions, zones (boxes) and the geometry the overlay needs.
#
# Zones are half-open boxes: lo[d] <= x[d] < hi[d]. Bounds are only ever copied
# (from a split position or a neighbour's bound), never computed, so equality
# of floats is exact and adjacency tests need no tolerance.
#
# Distances for greedy routing are Euclidean in coordinates normalised by each
# dimension's span, so that no unit (MHz against MB) dominates.

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from node.wire import PathEntry

__all__ = [
    "Box",
    "Dimension",
    "Space",
    "abutment",
    "adjacent",
    "choose_split",
    "contains",
    "next_hop",
    "overlap",
]

Box = tuple[tuple[float, ...], tuple[float, ...]]  # (lo, hi)


@dataclass(frozen=True, slots=True)
class Dimension:
    """One CAN dimension: values lie in [lo, hi)."""

    name: str
    lo: float
    hi: float
    virtual: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi) and self.lo < self.hi):
            raise ValueError(
                f"dimension {self.name!r}: need finite lo < hi, got [{self.lo}, {self.hi})"
            )


_ON_FACE = 1e-24  # squared normalised distance of a point on a box's upper face


class Space:
    """The CAN space: an ordered list of dimensions, at most one of them virtual."""

    def __init__(self, dims: Sequence[Dimension]) -> None:
        if not dims:
            raise ValueError("a CAN space needs at least one dimension")
        names = [d.name for d in dims]
        if len(set(names)) != len(names):
            raise ValueError(f"dimension names repeat: {names}")
        virtual = [k for k, d in enumerate(dims) if d.virtual]
        if len(virtual) > 1:
            raise ValueError("at most one virtual dimension")
        self.dims = tuple(dims)
        self.n = len(dims)
        self.lo = tuple(d.lo for d in dims)
        self.hi = tuple(d.hi for d in dims)
        self.span = tuple(d.hi - d.lo for d in dims)
        self.virtual = virtual[0] if virtual else None
        self.real = tuple(k for k in range(self.n) if k != self.virtual)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Space) and self.dims == other.dims

    def __hash__(self) -> int:
        return hash(self.dims)

    def __repr__(self) -> str:
        return f"Space({list(self.dims)!r})"

    @property
    def root(self) -> Box:
        return self.lo, self.hi

    def contains_point(self, point: Sequence[float]) -> bool:
        return len(point) == self.n and all(
            lo <= x < hi for x, lo, hi in zip(point, self.lo, self.hi, strict=True)
        )

    def distance(self, lo: Sequence[float], hi: Sequence[float], point: Sequence[float]) -> float:
        """Normalised Euclidean distance from `point` to the box (0 inside)."""
        total = 0.0
        for x, a, b, span in zip(point, lo, hi, self.span, strict=True):
            if x < a:
                total += ((a - x) / span) ** 2
            elif x >= b:
                # On the upper face is outside (boxes are half-open): a little
                # further than inside, or greedy routing sees a tie and stops
                # (points on split positions are common: splits fall on the
                # joiners' own coordinates, capability values among them).
                total += ((x - b) / span) ** 2 + _ON_FACE
        return math.sqrt(total)

    def volume(self, lo: Sequence[float], hi: Sequence[float]) -> float:
        """Normalised volume (the whole space is 1)."""
        v = 1.0
        for a, b, span in zip(lo, hi, self.span, strict=True):
            v *= (b - a) / span
        return v

    def box_of_path(self, path: Sequence[PathEntry]) -> Box:
        """The box the root ∩ path's half-spaces describe."""
        lo, hi = list(self.lo), list(self.hi)
        for e in path:
            if e.upper:
                lo[e.dim] = max(lo[e.dim], e.pos)
            else:
                hi[e.dim] = min(hi[e.dim], e.pos)
        return tuple(lo), tuple(hi)


def contains(lo: Sequence[float], hi: Sequence[float], point: Sequence[float]) -> bool:
    return all(a <= x < b for x, a, b in zip(point, lo, hi, strict=True))


def overlap(
    alo: Sequence[float], ahi: Sequence[float], blo: Sequence[float], bhi: Sequence[float]
) -> bool:
    """True if two boxes share volume."""
    for a0, a1, b0, b1 in zip(alo, ahi, blo, bhi):  # noqa: B905, SIM110 - hot path, explicit early exit
        if a1 <= b0 or b1 <= a0:
            return False
    return True


def abutment(
    alo: Sequence[float], ahi: Sequence[float], blo: Sequence[float], bhi: Sequence[float]
) -> tuple[int, bool] | None:
    """(dim, a_is_below) if boxes a and b share a face of positive area, else None.

    They share a face when they touch in exactly one dimension (a.hi == b.lo or
    b.hi == a.lo) and overlap with positive length in every other one.
    """
    found = None
    d = 0
    for a0, a1, b0, b1 in zip(alo, ahi, blo, bhi, strict=True):
        if a1 == b0 or b1 == a0:
            if found is not None:
                return None  # touching in two dimensions: an edge or corner
            found = (d, a1 == b0)
        elif not (a0 < b1 and b0 < a1 and a0 < a1 and b0 < b1):  # max(a0, b0) < min(a1, b1)
            return None
        d += 1  # noqa: SIM113 - hot path: enumerate costs a tuple per dimension
    return found


def adjacent(
    alo: Sequence[float], ahi: Sequence[float], blo: Sequence[float], bhi: Sequence[float]
) -> bool:
    return abutment(alo, ahi, blo, bhi) is not None


def choose_split(
    space: Space,
    lo: Sequence[float],
    hi: Sequence[float],
    path: Sequence[PathEntry],
    mine: Sequence[float],
    theirs: Sequence[float],
) -> tuple[int, float] | None:
    """Where to split a zone between its owner's point and a joiner's point (seed 000 §3.1.1).

    Dimension: the next real dimension after the last split's, cyclically, in
    which the two points differ (splitting across dimensions in turn keeps zones
    close to cubic); the virtual dimension only if they differ in no real one.
    Position: the zone's midpoint if it separates the points, else the midpoint
    of the two coordinates. Returns (dim, pos), or None if the points are equal.
    """
    last = path[-1].dim if path else -1
    order = (
        [
            space.real[(space.real.index(last) + 1 + k) % len(space.real)]
            for k in range(len(space.real))
        ]
        if last in space.real
        else list(space.real)
    )
    candidates = [d for d in order if mine[d] != theirs[d]]
    if (
        not candidates
        and space.virtual is not None
        and mine[space.virtual] != theirs[space.virtual]
    ):
        candidates = [space.virtual]
    for d in candidates:
        low, high = min(mine[d], theirs[d]), max(mine[d], theirs[d])
        mid = (lo[d] + hi[d]) / 2
        pos = mid if low < mid <= high else (low + high) / 2
        if lo[d] < pos < hi[d] and low < pos <= high:
            return d, pos
    return None


def next_hop(
    space: Space,
    lo: Sequence[float],
    hi: Sequence[float],
    neighbors: Sequence[tuple[int, Sequence[float], Sequence[float]]],
    point: Sequence[float],
) -> int | None:
    """Greedy CAN routing: where a message for `point` goes from a zone.

    Returns -1 if this zone owns the point, the id of the neighbour whose zone
    contains the point or is strictly closer to it than this zone, or None
    when no neighbour is closer (a hole: the caller retries later).
    """
    if contains(lo, hi, point):
        return -1
    mine = space.distance(lo, hi, point)
    best, best_distance = None, mine
    for ident, nlo, nhi in neighbors:
        if contains(nlo, nhi, point):
            return ident
        distance = space.distance(nlo, nhi, point)
        if distance < best_distance or (
            distance == best_distance and best is not None and ident < best
        ):
            best, best_distance = ident, distance
    return best


def box_minus(
    lo: Sequence[float], hi: Sequence[float], cut_lo: Sequence[float], cut_hi: Sequence[float]
) -> list[Box]:
    """The part of box (lo, hi) outside the cut box, as at most 2n disjoint boxes."""
    if not overlap(lo, hi, cut_lo, cut_hi):
        return [(tuple(lo), tuple(hi))]
    pieces: list[Box] = []
    cur_lo, cur_hi = list(lo), list(hi)
    for d in range(len(lo)):
        if cut_lo[d] > cur_lo[d]:
            piece_hi = list(cur_hi)
            piece_hi[d] = cut_lo[d]
            pieces.append((tuple(cur_lo), tuple(piece_hi)))
            cur_lo[d] = cut_lo[d]
        if cut_hi[d] < cur_hi[d]:
            piece_lo = list(cur_lo)
            piece_lo[d] = cut_hi[d]
            pieces.append((tuple(piece_lo), tuple(cur_hi)))
            cur_hi[d] = cut_hi[d]
    return pieces


def uncovered(
    lo: Sequence[float], hi: Sequence[float], boxes: Sequence[Box], limit: int = 10_000
) -> list[Box] | None:
    """The part of box (lo, hi) outside every one of `boxes`, as disjoint boxes
    (exact, by subtraction); None if it breaks into more than `limit` pieces."""
    remaining: list[Box] = [(tuple(lo), tuple(hi))]
    for cut_lo, cut_hi in boxes:
        remaining = [piece for r in remaining for piece in box_minus(r[0], r[1], cut_lo, cut_hi)]
        if not remaining:
            return []
        if len(remaining) > limit:
            return None
    return remaining


def covered_by(
    lo: Sequence[float], hi: Sequence[float], boxes: Sequence[Box], limit: int = 10_000
) -> bool:
    """True if the union of `boxes` covers box (lo, hi) entirely; False also when
    the rest is too fragmented to tell (the caller waits)."""
    return uncovered(lo, hi, boxes, limit) == []


def contained(
    lo: Sequence[float], hi: Sequence[float], outer_lo: Sequence[float], outer_hi: Sequence[float]
) -> bool:
    return all(a <= x and y <= b for x, y, a, b in zip(lo, hi, outer_lo, outer_hi, strict=True))
