# Running a scheduling spec (kind = "sched"): a job trace, prepared as the spec
# says (docs/workloads.md), scheduled on each clustering of a grid, and judged
# by bounded slowdown (seed 002 §4.3). For now the scheduler is the idealised
# central FCFS baseline of §4.3.2 (testbed/sim/central.py); the decentralised
# ones (STATIC, QB, DLB, QB+DLB) are the scheduling issue's work and will add
# their variants to the same table.
#
# Run folder: spec.toml, workload.swf (the prepared trace, its steps in the
# header), placements-<variant>.jsonl (each job: submit, start, end, nodes),
# summary.json (`jobs.{submitted, completed, failed, lost}`, the failures with
# their reasons, `slowdown.<variant>.{mean, median, mode, p95, p99, max}`,
# waits and utilisation), slowdown.png (the CDFs).

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w

from node.cluster import static_clustering
from testbed.analysis.slowdown import bounded_slowdown, slowdown_stats
from testbed.analysis.stats import quantiles
from testbed.clusters import labelled_grid
from testbed.errors import InputError
from testbed.runs import JsonLog, new_run_dir, strip_none, write_json
from testbed.sim.central import central_fcfs
from testbed.spec import SchedSpec, WorkloadSpec
from testbed.workload import (
    Workload,
    compress,
    describe,
    read_swf,
    scale_runtime,
    select,
    shortest_slice,
    write_swf,
)

__all__ = ["prepare_workload", "run_sched"]

# The thesis's figures for the intense 1,000-job SHARCNET set (seed 002 §4.3.2):
# mean bounded slowdown of the idealised central FCFS scheduler on ACTUAL.
PAPER_CENTRAL_MEAN = {"ACTUAL": 61.4}


def prepare_workload(w: WorkloadSpec, nodes: int) -> Workload:
    """The trace after the spec's steps; `load` compresses the submissions so
    that the work offered per second is `load` times the grid's `nodes`."""
    workload = select(read_swf(w.trace), min_size=w.min_size, max_size=w.max_size)
    if w.slice is not None:
        if len(workload) < w.slice:
            raise InputError(
                f"workload.slice: {w.slice} jobs asked, the trace has {len(workload)} after selection",
                source=w.trace,
            )
        workload = shortest_slice(workload, w.slice)
    if w.runtime_scale != 1.0:
        workload = scale_runtime(workload, w.runtime_scale)
    window = w.window_s
    if w.load is not None:
        work = sum(j.size * j.runtime_s for j in workload.jobs)
        window = work / (w.load * nodes)
    if window is not None:
        workload = compress(workload, window)
    return workload


def run_sched(
    spec: SchedSpec,
    data: dict[str, Any],
    *,
    out: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Run the spec; returns (run folder, summary)."""
    say = progress or (lambda _: None)
    started = time.monotonic()
    topology, groups = labelled_grid(spec.topology, spec.seed, spec.label)
    say(f"workload {spec.workload.trace}")
    workload = prepare_workload(spec.workload, topology.n)
    run_dir = new_run_dir(spec.name, out)
    (run_dir / "spec.toml").write_text(tomli_w.dumps(strip_none(data)))
    write_swf(workload, run_dir / "workload.swf")
    submitted = len(workload)
    jobs: dict[str, Any] = {}
    slowdown: dict[str, Any] = {}
    waits: dict[str, Any] = {}
    utilisation: dict[str, float] = {}
    curves: dict[str, list[float]] = {}
    by_id = {j.job: j for j in workload.jobs}
    for name in spec.clusterings:
        clustering = name.strip().upper()
        clusters = static_clustering(clustering, groups)
        widest = max(len(c) for c in clusters)
        for scheduler in spec.schedulers:
            variant = f"{scheduler}/{clustering}"
            say(f"{variant}: {submitted} jobs on {topology.n} nodes")
            placements, unschedulable = central_fcfs(workload, clusters)
            log = JsonLog(run_dir / f"placements-{scheduler}-{clustering}.jsonl")
            values = []
            for p in placements:
                log.write(
                    "job",
                    job=p.job,
                    submit_s=p.submit_s,
                    start_s=p.start_s,
                    end_s=p.end_s,
                    nodes=len(p.nodes),
                )
                values.append(bounded_slowdown(p.wait_s, p.end_s - p.start_s))
            log.close()
            failed = [
                {"job": j, "reason": f"{by_id[j].size} nodes: wider than every cluster ({widest})"}
                for j in unschedulable
            ]
            jobs[variant] = {
                "submitted": submitted,
                "completed": len(placements),
                "failed": len(failed),
                "lost": submitted - len(placements) - len(failed),
                "failures": failed[:20],
            }
            slowdown[variant] = slowdown_stats(values)
            waits[variant] = quantiles([p.wait_s for p in placements])
            span = max((p.end_s for p in placements), default=0.0)
            busy = sum(len(p.nodes) * (p.end_s - p.start_s) for p in placements)
            utilisation[variant] = round(busy / (span * topology.n), 4) if span > 0 else 0.0
            curves[variant] = values
    summary = {
        "name": spec.name,
        "kind": "sched",
        "seed": spec.seed,
        "nodes": topology.n,
        "topology": topology.source,
        "workload": describe(workload) | {"offered_load_on_grid": _load(workload, topology.n)},
        "jobs": _totals(jobs),
        "by_variant": jobs,
        "slowdown": slowdown,
        "wait_s": waits,
        "utilisation": utilisation,
        "paper": {"central_mean": PAPER_CENTRAL_MEAN},
        "wall_s": round(time.monotonic() - started, 1),
    }
    write_json(run_dir / "summary.json", summary)
    _plot(run_dir / "slowdown.png", curves, spec.name)
    return run_dir, summary


def _load(workload: Workload, nodes: int) -> float | None:
    submits = [j.submit_s for j in workload.jobs]
    span = max(submits) - min(submits) if submits else 0.0
    work = sum(j.size * j.runtime_s for j in workload.jobs)
    return round(work / (span * nodes), 4) if span > 0 else None


def _totals(jobs: dict[str, Any]) -> dict[str, int]:
    """Over all variants: every job of every variant, so `lost` is 0 only if no variant lost one."""
    keys = ("submitted", "completed", "failed", "lost")
    return {k: sum(v[k] for v in jobs.values()) for k in keys}


def _plot(path: Path, curves: dict[str, list[float]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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
