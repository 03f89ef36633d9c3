# How well a latency predictor does against the matrix (seed 002 §5.2.3):
# relative error |actual - predicted| / actual over every unordered pair,
# reported at the 50th, 95th and 99th percentile and the maximum (Tables
# 5.1-5.5), and the error rates at a cluster-diameter boundary (Table 5.6).
#
# Pairs are unordered and counted once (the thesis's "about 20 under-
# estimations in 2,091 hosts" at a rate of 1e-5 fits C(2091, 2) pairs); an
# asymmetric matrix is judged against the mean of its two directions. Pairs
# whose actual latency is 0 have no relative error and are left out (counted).

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "PredictionError",
    "boundary_errors",
    "error_percentiles",
    "pair_errors",
    "relative_errors",
]


@dataclass(frozen=True)
class PredictionError:
    p50: float
    p95: float
    p99: float
    max: float
    pairs: int
    skipped_zero: int  # pairs whose actual latency is 0

    def as_dict(self, digits: int = 4) -> dict[str, float | int]:
        return {
            "p50": round(self.p50, digits),
            "p95": round(self.p95, digits),
            "p99": round(self.p99, digits),
            "max": round(self.max, digits),
            "pairs": self.pairs,
            "skipped_zero": self.skipped_zero,
        }


def _pairs(actual: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    actual = np.asarray(actual, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64)
    if actual.ndim != 2 or actual.shape[0] != actual.shape[1]:
        raise ValueError(f"the actual matrix must be square, not of shape {actual.shape}")
    if predicted.shape != actual.shape:
        raise ValueError(
            f"predicted matrix of shape {predicted.shape} does not match the actual {actual.shape}"
        )
    upper = np.triu_indices(actual.shape[0], 1)
    truth = (actual[upper] + actual.T[upper]) / 2
    guess = (predicted[upper] + predicted.T[upper]) / 2
    if not np.isfinite(guess).all():
        raise ValueError("the prediction holds NaN or infinite values")
    return truth, guess


def pair_errors(actual: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, int]:
    """|actual - predicted| / actual of every unordered pair whose actual latency
    is positive, and how many pairs were left out for being 0."""
    truth, guess = _pairs(actual, predicted)
    keep = truth > 0
    return np.abs(truth[keep] - guess[keep]) / truth[keep], int((~keep).sum())


def error_percentiles(errors: np.ndarray, skipped_zero: int = 0) -> PredictionError:
    """The 50th, 95th, 99th percentile and maximum of relative errors."""
    if errors.size == 0:
        raise ValueError("no pair with a positive actual latency")
    p50, p95, p99 = np.percentile(errors, [50, 95, 99])
    return PredictionError(
        float(p50), float(p95), float(p99), float(errors.max()), int(errors.size), skipped_zero
    )


def relative_errors(actual: np.ndarray, predicted: np.ndarray) -> PredictionError:
    """Percentiles of |actual - predicted| / actual over the unordered pairs."""
    return error_percentiles(*pair_errors(actual, predicted))


def boundary_errors(actual: np.ndarray, predicted: np.ndarray, boundary: float) -> dict[str, float]:
    """Table 5.6's rates at a cluster diameter `boundary` (same unit as the matrices),
    as fractions of all unordered pairs: positive = predicted within the boundary
    but actually beyond it (a false cluster member: under-estimation), negative =
    predicted beyond but actually within (a missed member)."""
    truth, guess = _pairs(actual, predicted)
    inside, said_inside = truth <= boundary, guess <= boundary
    pairs = truth.size
    return {
        "positive": float((said_inside & ~inside).sum() / pairs),
        "negative": float((~said_inside & inside).sum() / pairs),
        "pairs_within": int(inside.sum()),
    }
