# Downhill simplex minimisation (Nelder and Mead 1965), the minimiser GNP
# (Ng and Zhang 2002) uses. Hand-written because it runs inside the peer,
# which stays light (scipy alone costs more memory than a peer may use); the
# coefficients and the stopping rule follow scipy.optimize.fmin.

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["minimize"]

REFLECT, EXPAND, CONTRACT, SHRINK = 1.0, 2.0, 0.5, 0.5


def minimize(
    f: Callable[[Sequence[float]], float],
    start: Sequence[float],
    *,
    step: float | Sequence[float] = 1.0,
    xatol: float = 1e-6,
    fatol: float = 1e-9,
    max_evals: int = 20_000,
) -> tuple[list[float], float]:
    """Minimise f from `start`; returns (x, f(x)).

    The first simplex is `start` and `start` moved by `step` along each axis.
    Stops when every vertex is within `xatol` of the best in every coordinate
    and every value within `fatol` of the best, or after `max_evals` calls.
    """
    n = len(start)
    steps = [float(step)] * n if isinstance(step, int | float) else [float(s) for s in step]
    points = [list(map(float, start))]
    for k in range(n):
        point = list(points[0])
        point[k] += steps[k]
        points.append(point)
    values = [f(p) for p in points]
    evals = n + 1
    while evals < max_evals:
        order = sorted(range(n + 1), key=values.__getitem__)
        points = [points[i] for i in order]
        values = [values[i] for i in order]
        best = points[0]
        if max(abs(v - values[0]) for v in values[1:]) <= fatol and all(
            abs(a - b) <= xatol for p in points[1:] for a, b in zip(p, best, strict=True)
        ):
            break
        centroid = [sum(p[k] for p in points[:-1]) / n for k in range(n)]
        worst = points[-1]
        reflected = [c + REFLECT * (c - w) for c, w in zip(centroid, worst, strict=True)]
        fr = f(reflected)
        evals += 1
        if fr < values[0]:
            expanded = [c + EXPAND * (r - c) for c, r in zip(centroid, reflected, strict=True)]
            fe = f(expanded)
            evals += 1
            points[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
            continue
        if fr < values[-2]:
            points[-1], values[-1] = reflected, fr
            continue
        if fr < values[-1]:  # outside contraction
            candidate = [c + CONTRACT * (r - c) for c, r in zip(centroid, reflected, strict=True)]
            bound = fr
        else:  # inside contraction
            candidate = [c + CONTRACT * (w - c) for c, w in zip(centroid, worst, strict=True)]
            bound = values[-1]
        fc = f(candidate)
        evals += 1
        if fc < bound:
            points[-1], values[-1] = candidate, fc
            continue
        for i in range(1, n + 1):
            points[i] = [b + SHRINK * (p - b) for b, p in zip(best, points[i], strict=True)]
            values[i] = f(points[i])
        evals += n
    i = min(range(n + 1), key=values.__getitem__)
    return points[i], values[i]
