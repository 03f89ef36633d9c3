# Global Network Positioning (Ng and Zhang, INFOCOM 2002), as seed 002 §2.2
# uses it: a fixed set of landmarks (default 6 in 5-D) measure each other and
# solve their coordinates together; every other host measures the landmarks
# and solves its own. Both solve by downhill simplex on the sum of squared
# normalised errors ((d - d_hat) / d)^2, the GNP paper's objective (the thesis
# does not name one). The landmark problem has many local minima, so it is
# solved from several random starts and the best kept.

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from node.coord.simplex import minimize

__all__ = ["GnpConfig", "solve_host", "solve_landmarks"]

# Distances at or below this count as this much in the normalised error (the
# matrix may hold zeros; a pair at 0 would otherwise divide by zero).
_MIN_DISTANCE = 1e-9


@dataclass(frozen=True)
class GnpConfig:
    dims: int = 5
    landmarks: int = 6
    landmark_starts: int = 5  # random starts of the landmark problem; the best is kept
    host_starts: int = 3

    def __post_init__(self) -> None:
        if not (isinstance(self.dims, int) and 1 <= self.dims <= 16):
            raise ValueError(f"gnp.dims must be an integer in 1..16, not {self.dims!r}")
        if not (isinstance(self.landmarks, int) and self.landmarks >= self.dims + 1):
            raise ValueError(
                f"gnp.landmarks must be at least dims + 1 = {self.dims + 1} "
                f"(a {self.dims}-D position needs that many), not {self.landmarks!r}"
            )
        for name in ("landmark_starts", "host_starts"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise ValueError(f"gnp.{name} must be a positive integer")


def _normalised_error(d: float, predicted: float) -> float:
    return ((d - predicted) / max(d, _MIN_DISTANCE)) ** 2


def solve_landmarks(
    d: Sequence[Sequence[float]], config: GnpConfig, rng: random.Random
) -> list[tuple[float, ...]]:
    """Coordinates of the landmarks from their symmetric k x k distances."""
    k, dims = len(d), config.dims
    pairs = [(i, j, (d[i][j] + d[j][i]) / 2) for i in range(k) for j in range(i + 1, k)]
    scale = max((dist for _, _, dist in pairs), default=1.0) or 1.0

    def objective(x: Sequence[float]) -> float:
        return sum(
            _normalised_error(
                dist, math.dist(x[i * dims : i * dims + dims], x[j * dims : j * dims + dims])
            )
            for i, j, dist in pairs
        )

    best: tuple[list[float], float] | None = None
    for _ in range(config.landmark_starts):
        start = [rng.uniform(-scale, scale) / 2 for _ in range(k * dims)]
        found = minimize(objective, start, step=scale / 4, xatol=scale * 1e-7, max_evals=60_000)
        if best is None or found[1] < best[1]:
            best = found
    assert best is not None
    x = best[0]
    return [tuple(x[i * dims : i * dims + dims]) for i in range(k)]


def solve_host(
    d: Sequence[float], landmarks: Sequence[Sequence[float]], config: GnpConfig, rng: random.Random
) -> tuple[float, ...]:
    """A host's coordinate from its distances `d[i]` to landmark i."""
    dims = config.dims
    marks = [(tuple(mark), dist) for mark, dist in zip(landmarks, d, strict=True)]
    scale = max(d, default=1.0) or 1.0

    def objective(x: Sequence[float]) -> float:
        return sum(_normalised_error(dist, math.dist(x, mark)) for mark, dist in marks)

    # Start where the distances put us by least squares (exact for Euclidean
    # input), at the closest landmark, and at random; polish each by simplex.
    nearest = min(marks, key=lambda m: m[1])[0]
    starts = [list(nearest)] + [
        [rng.uniform(-scale, scale) for _ in range(dims)] for _ in range(config.host_starts - 1)
    ]
    lateration = _multilaterate(landmarks, d)
    # On non-Euclidean input the linearised fit can land far off (landmarks
    # close to a lower-dimensional plane): then it is no start at all.
    if lateration is not None and math.dist(lateration, nearest) <= 2 * scale:
        starts.insert(0, lateration)
    best: tuple[list[float], float] | None = None
    for start in starts:
        found = minimize(
            objective, start, step=scale / 8, xatol=scale * 1e-4, fatol=1e-7, max_evals=4_000
        )
        # A simplex that collapsed on a ridge is often not at a minimum: restart
        # it once from where it stopped (the usual remedy for Nelder-Mead).
        found = minimize(
            objective, found[0], step=scale / 32, xatol=scale * 1e-4, fatol=1e-7, max_evals=2_000
        )
        if best is None or found[1] < best[1]:
            best = found
        if best[1] < 1e-12:
            break  # exact: the other starts cannot do better
    assert best is not None
    return tuple(best[0])


def _multilaterate(landmarks: Sequence[Sequence[float]], d: Sequence[float]) -> list[float] | None:
    """The point whose distances to the landmarks best fit `d` in the linearised
    least-squares sense (|x - p_i|^2 - |x - p_0|^2 = d_i^2 - d_0^2), or None if
    the landmarks do not span the space."""
    p0, r0 = landmarks[0], d[0]
    dims = len(p0)
    rows = [
        ([2 * (a - b) for a, b in zip(p, p0, strict=True)],
         r0 * r0 - r * r + sum(a * a for a in p) - sum(b * b for b in p0))
        for p, r in zip(landmarks[1:], d[1:], strict=True)
    ]  # fmt: skip
    # Normal equations A^T A x = A^T b, by Gaussian elimination with partial pivoting.
    m = [
        [sum(row[i] * row[j] for row, _ in rows) for j in range(dims)]
        + [sum(row[i] * rhs for row, rhs in rows)]
        for i in range(dims)
    ]
    for col in range(dims):
        pivot = max(range(col, dims), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12 * max(1.0, max(abs(v) for v in m[pivot][:dims])):
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, dims):
            factor = m[r][col] / m[col][col]
            m[r] = [a - factor * b for a, b in zip(m[r], m[col], strict=True)]
    x = [0.0] * dims
    for r in range(dims - 1, -1, -1):
        x[r] = (m[r][dims] - sum(m[r][c] * x[c] for c in range(r + 1, dims))) / m[r][r]
    return x if all(math.isfinite(v) for v in x) else None
