"""Experiments: one runner per kind of spec, each with one signature.

    run_<kind>(spec, data, *, out=None, report=None) -> RunResult(dir, summary)

    kind      spec             runner                               module
    can       ExperimentSpec   run_experiment (overlay, churn, jobs)  overlay.py (overlay_jobs.py)
    predict   PredictSpec      run_prediction                       predict.py
    cluster   ClusterSpec      run_clusters                         clusters.py
    sched     SchedSpec        run_sched                            sched.py
    program   ProgramSpec      run_program (a user's program, churn)  program.py

`run_spec` finds the runner from the spec's type in RUNNERS. Every runner opens a Run
(run.py): the folder and spec.toml first, logs as it goes, summary.json however it ends.
A campaign (campaign.py) runs an overlay or program spec once per churn script and seed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.experiments.clusters import run_clusters
from testbed.experiments.overlay import run_experiment
from testbed.experiments.predict import run_prediction
from testbed.experiments.program import run_program
from testbed.experiments.run import Report, RunResult
from testbed.experiments.sched import run_sched
from testbed.spec import ClusterSpec, ExperimentSpec, PredictSpec, ProgramSpec, SchedSpec

__all__ = ["RUNNERS", "Report", "RunResult", "run_spec"]

Spec = ExperimentSpec | PredictSpec | ClusterSpec | SchedSpec | ProgramSpec

RUNNERS: dict[type[Any], Callable[..., RunResult]] = {
    ExperimentSpec: run_experiment,
    PredictSpec: run_prediction,
    ClusterSpec: run_clusters,
    SchedSpec: run_sched,
    ProgramSpec: run_program,
}


def run_spec(
    spec: Spec, data: dict[str, Any], *, out: str | Path | None = None, report: Report | None = None
) -> RunResult:
    """Run any spec on its kind's runner; returns its folder and summary."""
    runner = RUNNERS.get(type(spec))
    if runner is None:
        raise TypeError(f"no runner for {type(spec).__name__}; expected one of {list(RUNNERS)}")
    return runner(spec, data, out=out, report=report)
