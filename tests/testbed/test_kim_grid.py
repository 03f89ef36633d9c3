# Kim's synthetic grid (testbed/workload/_kim.py) and a jobs run on it in the
# simulator: the generator's statistics, the spec's checks, and a run where every
# job a node can run completes on a node as capable as it asks.

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from testbed.errors import InputError
from testbed.experiments.overlay import run_experiment
from testbed.models.kim_central import kim_central
from testbed.spec import KimProfilesSpec, load_spec
from testbed.workload import RESOURCES, kim_jobs, kim_nodes


@pytest.mark.parametrize(("constraints", "mean"), [("light", 1.3), ("heavy", 2.4), (0.5, 0.5)])
def test_jobs_constrain_as_many_resources_as_asked_on_average(constraints, mean):
    jobs = kim_jobs(KimProfilesSpec(constraints=constraints, jobs=6000, tau_s=2.0), seed=3)
    constrained = [sum(1 for v in job.requirement if v > 0) for job in jobs]
    assert statistics.fmean(constrained) == pytest.approx(mean, abs=0.06)
    gaps = [b.submit_s - a.submit_s for a, b in itertools.pairwise(jobs)]
    assert statistics.fmean(gaps) == pytest.approx(2.0, rel=0.05)  # Poisson, mean tau_s
    assert all(1200.0 <= job.work_s <= 3600.0 for job in jobs)


def test_most_nodes_are_small_and_the_clustered_model_has_its_classes():
    nodes = kim_nodes(KimProfilesSpec(), 4000, seed=1)
    slowest = sum(1 for n in nodes if n[0] == RESOURCES["cpu"][0]) / len(nodes)
    assert slowest == pytest.approx(32 / 63, abs=0.03)  # weights 2^-k over six rungs
    assert nodes == kim_nodes(KimProfilesSpec(), 4000, seed=1)  # seeded
    clustered = kim_nodes(KimProfilesSpec(model="clustered", classes=4), 500, seed=1)
    assert len(set(clustered)) <= 4


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (['jobs.workload={trace="x.swf"}'], "give exactly one of"),
        (["jobs.profiles.constraints=4.0"], "jobs.profiles.constraints"),
        (["jobs.profiles.work_s=[10.0, 5.0]"], "jobs.profiles.work_s"),
        (["jobs.profiles.tau_s=0.0"], "jobs.profiles.tau_s"),
    ],
)
def test_bad_profiles_are_refused_naming_the_field(overrides, message):
    with pytest.raises(InputError, match=message):
        load_spec("scripts/experiments/kim-sim.toml", overrides)


def test_run_time_per_speed_is_refused_for_a_trace():
    with pytest.raises(InputError, match="jobs.runtime_per_speed: only with"):
        load_spec("scripts/experiments/sched-emu.toml", ["jobs.runtime_per_speed=true"])


def test_a_simulated_run_on_kims_grid_places_every_feasible_job_on_a_capable_node(tmp_path):
    overrides = [
        "topology.hosts=30",
        "jobs.profiles.jobs=60",
        "jobs.profiles.tau_s=1.0",
        "jobs.profiles.work_s=[20.0, 40.0]",
        "jobs.drain_s=400.0",
    ]
    spec, data = load_spec("scripts/experiments/kim-sim.toml", overrides)
    run_dir = run_experiment(spec, data, out=tmp_path / "run").dir
    summary = json.loads((run_dir / "summary.json").read_text())
    jobs = summary["jobs"]
    assert jobs["submitted"] == 60 and jobs["lost"] == 0 and jobs["misplaced"] == 0, jobs
    assert jobs["failed"] == jobs["infeasible"] and jobs["completed"] == 60 - jobs["infeasible"]
    assert jobs["executed_twice"] == 0 and jobs["duplicates"] == 0
    assert jobs["central_wait_mean_s"] is not None and jobs["wait_vs_central"] is not None
    assert summary["invariants"]["violations"] == 0
    rows = [json.loads(line) for line in (run_dir / "jobs.jsonl").read_text().splitlines()]
    assert all("ran_on" in r for r in rows if r["outcome"] == "completed")


def test_kims_central_takes_the_fastest_idle_node_else_the_shortest_queue():
    nodes = [(100.0, 512.0, 40.0), (200.0, 4096.0, 40.0)]
    jobs = [
        (0.0, (0.0, 0.0, 0.0), 2000.0),  # the fastest idle: node 1, 10 s
        (0.0, (0.0, 0.0, 0.0), 2000.0),  # node 0 is idle: 20 s
        (1.0, (0.0, 0.0, 0.0), 2000.0),  # both busy, one queued each: the faster, at 10 s
        (1.0, (0.0, 1024.0, 0.0), 2000.0),  # only node 1 has the memory: after the last
        (1.0, (300.0, 0.0, 0.0), 2000.0),  # no node this fast
    ]
    assert kim_central(nodes, jobs) == [0.0, 0.0, 9.0, 19.0, None]
    assert kim_central(nodes, jobs, per_speed=False)[2] == 1999.0  # 2,000 s anywhere
