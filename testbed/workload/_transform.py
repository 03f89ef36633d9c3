# What experiments do to a trace before replaying it (seed 002 §4.3): keep the
# jobs a grid can run, slice the k jobs submitted over the shortest interval,
# compress their submission times into a target window, scale run times; and a
# synthetic generator for when no trace fits. Every step returns a new
# Workload that remembers what was done (written into saved SWF headers).

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import msgspec
import numpy as np

from testbed.errors import InputError
from testbed.workload._swf import Job, Workload

__all__ = ["compress", "describe", "head", "scale_runtime", "select", "shortest_slice", "synthetic"]


def select(
    workload: Workload,
    *,
    min_size: int = 1,
    max_size: int | None = None,
    completed_only: bool = False,
) -> Workload:
    """Jobs with a known size within [min_size, max_size] and a known run time
    (min_size=2: parallel jobs only); completed_only keeps status 1."""
    if min_size < 1 or (max_size is not None and max_size < min_size):
        raise InputError(f"sizes must satisfy 1 <= min <= max, got {min_size}..{max_size}")
    kept = [
        job
        for job in workload.jobs
        if job.size >= min_size
        and (max_size is None or job.size <= max_size)
        and job.runtime_s >= 0
        and (not completed_only or job.status == 1)
    ]
    bound = f"{min_size}..{max_size}" if max_size is not None else f">= {min_size}"
    note = f"kept {len(kept)} of {len(workload)} jobs: size {bound}, known run time" + (
        ", completed" if completed_only else ""
    )
    return workload.with_jobs(kept, note)


def _rebased(jobs: Sequence[Job]) -> list[Job]:
    if not jobs:
        return []
    start = jobs[0].submit_s
    return [_replace(job, submit_s=job.submit_s - start) for job in jobs]


def _replace(job: Job, **changes: float) -> Job:
    return msgspec.structs.replace(job, **changes)


def _by_submit(workload: Workload) -> list[Job]:
    return sorted(workload.jobs, key=lambda job: (job.submit_s, job.job))


def shortest_slice(workload: Workload, k: int) -> Workload:
    """The k consecutive jobs (by submit time) submitted over the shortest
    interval (the earliest such run on a tie), rebased to start at 0."""
    jobs = _by_submit(workload)
    if not 1 <= k <= len(jobs):
        raise InputError(f"cannot slice {k} jobs out of {len(jobs)}", source=workload.source)
    submit = np.array([job.submit_s for job in jobs])
    spans = submit[k - 1 :] - submit[: len(jobs) - k + 1]
    start = int(np.argmin(spans))
    chosen = jobs[start : start + k]
    note = (
        f"shortest slice of {k} jobs: jobs {chosen[0].job}..{chosen[-1].job}, "
        f"submitted over {spans[start]:.0f} s from {submit[start]:.0f} s"
    )
    return workload.with_jobs(_rebased(chosen), note)


def head(workload: Workload, k: int) -> Workload:
    """The first k jobs by submit time."""
    if k < 1:
        raise InputError(f"need at least one job, not {k}", source=workload.source)
    jobs = _by_submit(workload)[:k]
    return workload.with_jobs(jobs, f"first {len(jobs)} jobs")


def compress(workload: Workload, window_s: float) -> Workload:
    """Scale the submission times so that the first is at 0 and the last at window_s
    (inter-arrival times shrink or grow by one factor; run times are unchanged)."""
    if not (math.isfinite(window_s) and window_s >= 0):
        raise InputError(f"a submission window is >= 0 s, not {window_s}")
    jobs = _rebased(_by_submit(workload))
    span = jobs[-1].submit_s if jobs else 0.0
    factor = window_s / span if span > 0 else 0.0
    scaled = [_replace(job, submit_s=round(job.submit_s * factor, 3)) for job in jobs]
    note = f"submissions compressed from {span:.0f} s to {window_s:g} s (x{factor:.4g})"
    return workload.with_jobs(scaled, note)


def scale_runtime(workload: Workload, factor: float) -> Workload:
    """Multiply every known run time (and requested time) by factor."""
    if not (math.isfinite(factor) and factor > 0):
        raise InputError(f"a run-time factor is > 0, not {factor}")
    scaled = [
        _replace(
            job,
            run_s=job.run_s * factor if job.run_s >= 0 else job.run_s,
            req_time_s=job.req_time_s * factor if job.req_time_s >= 0 else job.req_time_s,
        )
        for job in workload.jobs
    ]
    return workload.with_jobs(scaled, f"run times x{factor:g}")


def synthetic(
    count: int,
    *,
    seed: int,
    mean_interarrival_s: float = 30.0,
    sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    size_weights: Sequence[float] | None = None,
    runtime_median_s: float = 600.0,
    runtime_sigma: float = 1.5,
    runtime_max_s: float = 86_400.0,
) -> Workload:
    """A synthetic trace: Poisson arrivals, sizes drawn from `sizes` (weights
    default to favouring small jobs, 1/size), log-normal run times."""
    if count < 1 or mean_interarrival_s <= 0 or not sizes or min(sizes) < 1:
        raise InputError(
            "synthetic workloads need count >= 1, a positive inter-arrival, sizes >= 1"
        )
    rng = random.Random(f"{seed}/workload")
    weights = list(size_weights) if size_weights is not None else [1.0 / s for s in sizes]
    jobs, t = [], 0.0
    for k in range(1, count + 1):
        size = rng.choices(list(sizes), weights)[0]
        run = min(
            runtime_max_s, max(1.0, rng.lognormvariate(math.log(runtime_median_s), runtime_sigma))
        )
        jobs.append(
            Job(job=k, submit_s=round(t, 3), run_s=round(run), procs=size, req_procs=size, status=1)
        )
        t += rng.expovariate(1.0 / mean_interarrival_s)
    header = [
        ";       Version: 2.2",
        f";      Computer: synthetic (testbed, seed {seed})",
        f";       MaxJobs: {count}",
        f";      MaxProcs: {max(sizes)}",
    ]
    note = (
        f"synthetic: {count} jobs, Poisson arrivals every {mean_interarrival_s:g} s on average, "
        f"sizes {list(sizes)}, log-normal run times (median {runtime_median_s:g} s, sigma {runtime_sigma:g})"
    )
    return Workload(jobs, header, f"<synthetic seed {seed}>", [note])


def describe(workload: Workload) -> dict[str, object]:
    """The figures of a trace: jobs, span, sizes, run times, work and offered load."""
    jobs = workload.jobs
    sizes = np.array([max(job.size, 0) for job in jobs], dtype=float)
    runs = np.array([max(job.runtime_s, 0.0) for job in jobs], dtype=float)
    submits = np.array([job.submit_s for job in jobs], dtype=float)
    span = float(submits.max() - submits.min()) if len(jobs) else 0.0
    work = float((sizes * runs).sum())
    procs = workload.header_value("MaxProcs")
    capacity = int(procs.split()[0]) if procs and procs.split()[0].isdigit() else None
    figures: dict[str, object] = {
        "source": workload.source,
        "jobs": len(jobs),
        "span_s": round(span, 3),
        "parallel_share": round(float((sizes >= 2).mean()), 4) if len(jobs) else 0.0,
        "size_p50": float(np.median(sizes)) if len(jobs) else 0.0,
        "size_max": int(sizes.max()) if len(jobs) else 0,
        "runtime_p50_s": float(np.median(runs)) if len(jobs) else 0.0,
        "runtime_p95_s": float(np.percentile(runs, 95)) if len(jobs) else 0.0,
        "core_hours": round(work / 3600.0, 1),
    }
    if capacity and span > 0:
        figures["max_procs"] = capacity
        figures["offered_load"] = round(work / (span * capacity), 4)
    figures["notes"] = list(workload.notes)
    return figures
