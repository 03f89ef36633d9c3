# Running a scheduling spec (kind = "sched"): a job trace, prepared as the spec
# says (docs/workloads.md), scheduled on each clustering of a grid, and judged
# by bounded slowdown (seed 002 §4.3): the decentralised schedulers of chapter 4
# (STATIC, QB, DLB, QB+DLB at each over-provisioning level; testbed/models/p2psched.py)
# beside the idealised central FCFS baseline of §4.3.2 (testbed/models/central.py),
# with the thesis's figures where it gives them.
#
# Run folder: spec.toml, workload.swf (the prepared trace, its steps in the
# header), placements-<variant>.jsonl (each job: submit, start, end, nodes),
# summary.json (`jobs.{submitted, completed, failed, lost}`, the failures with
# their reasons, `slowdown.<variant>.{mean, median, mode, p95, p99, max}`,
# waits, utilisation, and per decentralised variant its messages, moves, routing
# hops and the node time held idle by ready tasks), slowdown.png (the CDFs).

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from node.cluster import static_clustering
from node.cluster.refine import refine
from testbed.analysis.slowdown import bounded_slowdown, plot_slowdown, slowdown_stats
from testbed.analysis.stats import quantiles
from testbed.experiments.clusters import labelled_grid
from testbed.experiments.predict import Noise, predict_dtm
from testbed.experiments.run import Report, Run, RunResult
from testbed.models.central import Placement, central_fcfs
from testbed.models.p2psched import Outcome, Policy, decentralised
from testbed.pool import run_tasks
from testbed.runs import JsonLog
from testbed.spec import SchedSpec
from testbed.workload import (
    Workload,
    describe,
    prepare_workload,
    write_swf,
)

__all__ = ["run_sched"]

# The thesis's figures for its intense 1,000-job SHARCNET set (seed 002 §4.3.2,
# Table 4.1, Table 5.7): bounded slowdown per variant, total over-provisioning.
PAPER: dict[str, dict[str, float]] = {
    "central/ACTUAL": {"mean": 61.4},
    "QB+DLB/ACTUAL": {"mean": 77.9, "median": 4, "mode": 2, "max": 3150},
    "QB/ACTUAL": {"mean": 83.8},
    "DLB/ACTUAL": {"mean": 91.5},
    "QB+DLB/DISJOINT-64": {
        "mean": 68.2,
        "median": 2,
        "mode": 2,
        "p95": 180,
        "p99": 992,
        "max": 25147,
    },
    "QB+DLB/DISJOINT-128": {"mean": 33.3, "median": 2, "mode": 2, "max": 5219},
    "QB+DLB/DISJOINT-256": {"mean": 51.3, "median": 3, "mode": 2, "max": 2910},
    "QB+DLB/DISJOINT-512": {"mean": 39.1, "median": 3, "mode": 2, "max": 5039},
    "QB+DLB/OVERLAP-64": {
        "mean": 55.2,
        "median": 2,
        "mode": 2,
        "p95": 285,
        "p99": 1114,
        "max": 4936,
    },
    "QB+DLB/OVERLAP-128": {"mean": 31.9, "median": 2, "mode": 2, "max": 7048},
    "QB+DLB/OVERLAP-256": {"mean": 40.4, "median": 3, "mode": 2, "max": 5035},
    "QB+DLB/OVERLAP-512": {"mean": 38.7, "median": 3, "mode": 2, "max": 2514},
    "QB+DLB/DYN-64": {"mean": 313, "median": 7, "mode": 2, "p95": 2392, "p99": 6820, "max": 19632},
    "QB+DLB/DYN-SYM-64": {
        "mean": 86.4,
        "median": 3,
        "mode": 2,
        "p95": 207,
        "p99": 1739,
        "max": 17957,
    },
}


def run_sched(
    spec: SchedSpec,
    data: dict[str, Any],
    *,
    out: str | Path | None = None,
    report: Report | None = None,
) -> RunResult:
    """Schedule the spec's workload with each scheduler on each clustering; writes the
    workload, each variant's placements, summary.json and slowdown.png."""
    say = (report or Report()).say
    started = time.monotonic()
    names = [c.strip().upper() for c in spec.clusterings]
    static = [c for c in names if not c.startswith("DYN")]
    topology, groups = labelled_grid(spec.topology, spec.seed, spec.label if static else None)
    rtt = np.asarray(topology.rtt_ms, dtype=np.float64)
    latency = np.maximum(rtt, rtt.T)  # a pair is as close as its slower way
    say(f"workload {spec.workload.trace}")
    workload = prepare_workload(spec.workload, topology.n)
    with Run(spec.name, data, out) as run:
        write_swf(workload, run.dir / "workload.swf")
        tally = _Tally(len(workload), topology.n)
        dynamic: dict[int, Any] = {}
        calls = []
        for clustering in names:  # each clustering once, here (DYN shares its predictions)
            clusters = _clustering(spec, clustering, groups, rtt, dynamic, say)
            calls.append((spec, clustering, clusters, latency, workload, topology.n))
        workers = min(spec.workers or os.cpu_count() or 1, len(calls))
        say(f"{len(workload)} jobs on {topology.n} nodes: {len(calls)} clusterings")
        ended: dict[int, list[_Variant]] = {}
        for k, variants in run_tasks(_schedule, calls, jobs=workers, ray=spec.cluster):
            ended[k] = variants
            say(f"{names[k]}: scheduled ({len(ended)} of {len(calls)})")
        for k in range(len(calls)):  # in the spec's order, whichever ended first
            for variant, placements, failed, lost, traffic in ended[k]:
                if traffic is not None:
                    tally.traffic[variant] = traffic
                _placements_log(run.dir / f"placements-{_file_name(variant)}.jsonl", placements)
                tally.add(variant, placements, failed, lost)
        result = run.finish(
            {
                "name": spec.name,
                "kind": "sched",
                "seed": spec.seed,
                "nodes": topology.n,
                "topology": topology.source,
                "latency_ms": spec.latency_ms,
                "workload": describe(workload)
                | {"offered_load_on_grid": _load(workload, topology.n)},
                "jobs": _totals(tally.jobs),
                "by_variant": tally.jobs,
                "slowdown": tally.slowdown,
                "wait_s": tally.waits,
                "utilisation": tally.utilisation,
                "traffic": tally.traffic,
                "clusterings": {str(k): v["figures"] for k, v in dynamic.items()},
                "paper": {k: v for k, v in PAPER.items() if k in tally.slowdown},
                "wall_s": round(time.monotonic() - started, 1),
            }
        )
        plot_slowdown(run.dir / "slowdown.png", tally.curves, spec.name)
        return result


_Variant = tuple[str, list[Placement], list[tuple[int, str]], list[tuple[int, str]], Any]


def _schedule(
    spec: SchedSpec,
    clustering: str,
    clusters: list[tuple[int, ...]],
    latency: np.ndarray,
    workload: Workload,
    nodes: int,
) -> list[_Variant]:
    """Every scheduler variant of one clustering: (variant, placements, failed, lost,
    traffic or None); a task of its own (testbed.pool.run_tasks)."""
    usable = _within(clusters, latency, spec.latency_ms)
    can = None  # the CAN is built once per clustering and shared by its variants
    out: list[_Variant] = []
    for variant, policy in _variants(spec, clustering):
        if policy is None:
            placements, failed, lost = _central(workload, usable)
            out.append((variant, placements, failed, lost, None))
            continue
        outcome, can = decentralised(
            workload,
            clusters,
            latency,
            policy,
            job_latency_ms=spec.latency_ms,
            seed=spec.seed,
            can=can,
        )
        traffic = _traffic(outcome, len(workload), outcome.placements, nodes)
        out.append((variant, outcome.placements, outcome.failed, outcome.lost, traffic))
    return out


def _central(
    workload: Workload, usable: list[tuple[int, ...]]
) -> tuple[list[Placement], list[tuple[int, str]], list[tuple[int, str]]]:
    """The idealised central FCFS scheduler: (placements, failed, lost); it loses none."""
    placements, unfit = central_fcfs(workload, usable)
    widest = max(len(c) for c in usable)
    failed = [(j, f"wider than every cluster within the latency bound ({widest})") for j in unfit]
    return placements, failed, []


class _Tally:
    """Each variant's figures, as the summary reports them."""

    def __init__(self, submitted: int, nodes: int) -> None:
        self.submitted, self.nodes = submitted, nodes
        self.jobs: dict[str, Any] = {}
        self.slowdown: dict[str, Any] = {}
        self.waits: dict[str, Any] = {}
        self.utilisation: dict[str, float] = {}
        self.traffic: dict[str, Any] = {}
        self.curves: dict[str, list[float]] = {}

    def add(
        self,
        variant: str,
        placements: list[Placement],
        failed: list[tuple[int, str]],
        lost: list[tuple[int, str]],
    ) -> None:
        submitted = self.submitted
        values = [bounded_slowdown(p.wait_s, p.end_s - p.start_s) for p in placements]
        self.jobs[variant] = {
            "submitted": submitted,
            "completed": len(placements),
            "failed": len(failed),
            "lost": submitted - len(placements) - len(failed),
            "failures": [{"job": j, "reason": r} for j, r in failed[:20]],
            "lost_jobs": [{"job": j, "reason": r} for j, r in lost[:20]],
        }
        self.slowdown[variant] = slowdown_stats(values)
        self.waits[variant] = quantiles([p.wait_s for p in placements])
        span = max((p.end_s for p in placements), default=0.0)
        busy = sum(len(p.nodes) * (p.end_s - p.start_s) for p in placements)
        self.utilisation[variant] = round(busy / (span * self.nodes), 4) if span > 0 else 0.0
        self.curves[variant] = values


def _variants(spec: SchedSpec, clustering: str) -> list[tuple[str, Policy | None]]:
    out: list[tuple[str, Policy | None]] = []
    for scheduler in spec.schedulers:
        if scheduler == "central":
            out.append((f"central/{clustering}", None))
            continue
        for level in spec.overprovision:
            policy = Policy(
                dlb="dlb" in scheduler,
                qb="qb" in scheduler,
                overprovision=None if level == "total" else float(level),
                indirect=spec.balance.neighbours == "indirect",
                period_s=spec.balance.period_s,
                update_s=spec.balance.update_s,
            )
            suffix = "" if level == "total" else f" x{level:g}"
            out.append((f"{policy.name}{suffix}/{clustering}", policy))
    return out


def _clustering(
    spec: SchedSpec,
    name: str,
    groups: list[str],
    rtt: np.ndarray,
    dynamic: dict[int, Any],
    say: Callable[[str], None],
) -> list[tuple[int, ...]]:
    """What every node advertises: a static clustering of the groups, or DYN-n /
    DYN-SYM-n refined from DTM's predictions (computed once per n)."""
    if not name.startswith("DYN"):
        return static_clustering(name, groups)
    n = int(name.rsplit("-", 1)[1])
    if n not in dynamic:
        say(f"DTM predictions ({spec.prediction.trees} trees) and refinement for DYN-{n}")
        began = time.monotonic()
        predicted, _ = predict_dtm(rtt, spec.prediction, spec.seed, Noise(0.0, 0.0, 1.0))
        refined = refine(
            predicted,
            (rtt + rtt.T) / 2,
            spec.diameter_ms,
            n,
            n,
            criterion=spec.criterion,
            rng=random.Random(f"{spec.seed}/refine"),
            aggregate=spec.aggregate,
        )
        sizes = {
            key: quantiles([len(c) for c in clusters])
            for key, clusters in (("DYN", refined.filtered), ("DYN-SYM", refined.symmetric))
        }
        dynamic[n] = {
            "DYN": refined.filtered,
            "DYN-SYM": refined.symmetric,
            "figures": {"sizes": sizes, "wall_s": round(time.monotonic() - began, 1)},
        }
    return dynamic[n]["DYN-SYM" if name.startswith("DYN-SYM") else "DYN"]


def _within(
    clusters: list[tuple[int, ...]], latency: np.ndarray, bound_ms: float
) -> list[tuple[int, ...]]:
    """The clusters a parallel job may use: those within the latency bound; a node
    of a wider one is alone (it may run serial jobs only)."""
    out = []
    for node, cluster in enumerate(clusters):
        members = list(cluster)
        ok = len(members) > 1 and latency[np.ix_(members, members)].max() <= bound_ms
        out.append(tuple(cluster) if ok else (node,))
    return out


def _traffic(
    outcome: Outcome, submitted: int, placements: list[Placement], nodes: int
) -> dict[str, Any]:
    span = max((p.end_s for p in placements), default=0.0)
    return {
        "messages": dict(outcome.messages),
        "messages_per_job": round(sum(outcome.messages.values()) / max(submitted, 1), 1),
        "moves": dict(outcome.moves),
        "route_hops": quantiles(outcome.route_hops),
        "held_idle_s": round(outcome.held_idle_s, 1),
        "held_idle_share": round(outcome.held_idle_s / max(span * nodes, 1e-9), 4),
    }


def _file_name(variant: str) -> str:
    return variant.replace("/", "-").replace(" ", "").replace("+", "_")


def _placements_log(path: Path, placements: list[Placement]) -> None:
    log = JsonLog(path)
    for p in placements:
        log.write(
            "job",
            job=p.job,
            submit_s=p.submit_s,
            start_s=p.start_s,
            end_s=p.end_s,
            nodes=len(p.nodes),
        )
    log.close()


def _load(workload: Workload, nodes: int) -> float | None:
    submits = [j.submit_s for j in workload.jobs]
    span = max(submits) - min(submits) if submits else 0.0
    work = sum(j.size * j.runtime_s for j in workload.jobs)
    return round(work / (span * nodes), 4) if span > 0 else None


def _totals(jobs: dict[str, Any]) -> dict[str, int]:
    """Over all variants: every job of every variant, so `lost` is 0 only if no variant lost one."""
    keys = ("submitted", "completed", "failed", "lost")
    return {k: sum(v[k] for v in jobs.values()) for k in keys}
