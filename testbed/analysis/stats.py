# Small summaries of measured values, shared by every engine's summary.json.

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["quantiles"]


def quantiles(values: Sequence[float], digits: int = 3) -> dict[str, float | None]:
    """{"p50", "p99", "max"} of `values` (all None when there are none)."""
    if len(values) == 0:
        return {"p50": None, "p99": None, "max": None}
    array = np.asarray(values, dtype=np.float64)
    return {
        "p50": round(float(np.percentile(array, 50)), digits),
        "p99": round(float(np.percentile(array, 99)), digits),
        "max": round(float(array.max()), digits),
    }
