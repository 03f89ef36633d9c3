# Bounded slowdown (seed 002 §4.3): s = 1 + Q / max(R, 10 s), Q the time a job
# waited, R its run time, in trace seconds; and the statistics Tables 4.1 and
# 5.7 give (mean, median, mode, maximum), with the 95th and 99th percentiles.

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["bounded_slowdown", "plot_slowdown", "slowdown_stats"]

BOUND_S = 10.0


def bounded_slowdown(wait_s: float, run_s: float, bound_s: float = BOUND_S) -> float:
    return 1.0 + max(wait_s, 0.0) / max(run_s, bound_s)


def slowdown_stats(values: Sequence[float]) -> dict[str, float | int | None]:
    """mean, median, mode (of the slowdowns rounded down to whole numbers, as the
    thesis's small integer modes suggest), p95, p99, max, and the count."""
    if not len(values):
        return {
            "jobs": 0,
            "mean": None,
            "median": None,
            "mode": None,
            "p95": None,
            "p99": None,
            "max": None,
        }
    array = np.asarray(values, dtype=np.float64)
    mode = Counter(int(v) for v in array).most_common(1)[0][0]
    return {
        "jobs": len(array),
        "mean": round(float(array.mean()), 3),
        "median": round(float(np.median(array)), 3),
        "mode": mode,
        "p95": round(float(np.percentile(array, 95)), 3),
        "p99": round(float(np.percentile(array, 99)), 3),
        "max": round(float(array.max()), 3),
    }


def plot_slowdown(path: Path, curves: dict[str, list[float]], title: str) -> None:
    """The CDF of each variant's bounded slowdowns (log x), as a PNG."""
    import matplotlib  # only to draw: a peer or a plain run never loads it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for variant, values in curves.items():
        if values:
            x = np.sort(np.asarray(values))
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=variant)
    ax.set_xscale("log")
    ax.set_xlabel("bounded slowdown")
    ax.set_ylabel("fraction of jobs")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.savefig(path, dpi=120)
    plt.close(fig)
