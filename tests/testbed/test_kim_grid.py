# Kim's synthetic grid (testbed/workload/_kim.py) and a jobs run on it in the
# simulator: the generator's statistics, the spec's checks, and a run where every
# job a node can run completes on a node as capable as it asks.

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import tomllib

import pytest

from testbed.errors import InputError
from testbed.experiments.campaign import _waits, run_campaign
from testbed.experiments.overlay import run_experiment
from testbed.models.kim_central import kim_central
from testbed.models.kim_rnt import kim_rnt
from testbed.spec import KimProfilesSpec, load_spec
from testbed.workload import RESOURCES, kim_jobs, kim_nodes, read_kim_jobs, read_kim_nodes


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
        (["jobs.profiles.tau_per_host_s=-1.0"], "jobs.profiles.tau_per_host_s"),
        (['jobs.profiles.work_dist="poisson"'], "work_dist"),
        # The load rides the overlay's updates: silent after less than one update period?
        (["node.update_interval_s=7.0"], r"jobs.dead_after_s: must be longer than node.update"),
        (["jobs.profiles.time_scale=0.0"], "jobs.profiles.time_scale"),
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
    assert 0 <= jobs["central_busy_at_last"] <= 1
    assert jobs["rnt_wait_mean_s"] is not None and jobs["rnt_messages_per_job"] >= 1
    # CAN-P's figures from the peers: some jobs pushed, every placement at least one message.
    assert 0 <= jobs["pushed_share"] <= 1 and jobs["matchmaking_messages_per_placement"] >= 1
    assert jobs["route_hops_per_placement"] > 0 and jobs["queue_seen_mean"] >= 0
    assert summary["invariants"]["violations"] == 0
    rows = [json.loads(line) for line in (run_dir / "jobs.jsonl").read_text().splitlines()]
    assert all("ran_on" in r for r in rows if r["outcome"] == "completed")


SMALL_KIM = [
    "topology.hosts=24",
    "jobs.profiles.jobs=40",
    "jobs.profiles.tau_s=1.0",
    "jobs.profiles.work_s=[20.0, 40.0]",
    "jobs.drain_s=300.0",
]


def test_a_campaign_runs_each_variant_on_the_same_jobs_and_reports_the_mean_waits(tmp_path):
    # Kim's E2 and Table 4.1 as campaigns: variants of one spec, each seed's jobs
    # and nodes shared by the variants (so CENTRAL is one figure per seed).
    variants = (
        'campaign.variants={CAN={"jobs.matchmaking"="can"}, '
        '"CAN-P1"={"jobs.matchmaking"="can-p", "jobs.stopping_factor"=1.0}}'
    )
    overrides = [*SMALL_KIM, 'campaign.scripts=["traces/churn/kim.churn"]', variants]
    spec, _ = load_spec("scripts/experiments/kim-sim.toml", [*overrides, "campaign.seeds=[1, 2]"])
    folder, result = run_campaign(spec, out=tmp_path / "e2", jobs=2)
    assert [r["run"] for r in result["rows"]] == [
        "kim-CAN-s1", "kim-CAN-s2", "kim-CAN-P1-s1", "kim-CAN-P1-s2",
    ]  # fmt: skip
    for row in result["rows"]:
        ran = tomllib.loads((folder / row["run"] / "spec.toml").read_text())
        assert ran["jobs"]["matchmaking"] == ("can" if row["variant"] == "CAN" else "can-p")
        assert row["jobs"]["lost"] == row["jobs"]["misplaced"] == 0
    waits = result["wait_s"]
    assert list(waits) == ["CAN", "CAN-P1", "RNT", "CENTRAL-NAIVE", "CENTRAL-REDIST", "CENTRAL"]
    assert len(waits["RNT"]["runs"]) == 2 and waits["CENTRAL"] == waits["CENTRAL-NAIVE"]
    for variant in ("CAN", "CAN-P1"):
        runs = [r["jobs"]["wait_mean_s"] for r in result["rows"] if r["variant"] == variant]
        assert waits[variant]["runs"] == runs
        assert waits[variant]["mean"] == pytest.approx(statistics.fmean(runs), abs=1e-3)
    assert len(waits["CENTRAL"]["runs"]) == 2  # one per seed, whatever the variant
    assert result["violations"] == 0


def test_a_campaigns_baselines_are_reported_per_case_of_its_variants():
    # Table 4.1's shape: variants "<runtime>/<load>/<scheme>"; each case has its own
    # jobs, so its own models, and CENTRAL is the redistributing one when asked.
    def row(variant, seed, wait, central, redist):
        figures = {"wait_mean_s": wait, "central_wait_mean_s": central, "rnt_wait_mean_s": 9.0,
                   "central_redistributing_wait_mean_s": redist}  # fmt: skip
        return {"variant": variant, "script": "k.churn", "seed": seed, "jobs": figures}

    rows = [
        row("uniform/light/PULL", 1, 30.0, 20.0, 10.0),
        row("uniform/light/PUSH", 1, 50.0, 20.0, 10.0),
        row("normal/heavy/PULL", 1, 700.0, 600.0, 500.0),
        row("normal/heavy/PULL", 2, 900.0, 800.0, 700.0),
    ]
    waits = _waits(rows, "redistributing")["wait_s"]
    assert waits["uniform/light/PULL"]["mean"] == 30.0
    assert waits["uniform/light/CENTRAL"] == {"mean": 10.0, "runs": [10.0]}
    assert waits["normal/heavy/CENTRAL"] == {"mean": 600.0, "runs": [500.0, 700.0]}
    assert waits["normal/heavy/CENTRAL-NAIVE"]["mean"] == 700.0
    assert "CENTRAL" not in waits and _waits(rows[:0], "naive") == {}


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ('{X={"jobs.matchmaking"="kim"}}', r"campaign.variants.X: .*matchmaking"),
        ('{X={"seed"=3}}', r"campaign.variants.X.seed: a dotted field"),
        ('{"a b"={"jobs.balance"="pull"}}', "a variant's name names run folders"),
        ('{"x/RNT"={"jobs.balance"="pull"}}', "RNT names a baseline model"),
        ("{X={}}", "no overrides"),
    ],
)
def test_a_bad_variant_is_refused_naming_it(variants, message):
    overrides = ['campaign.scripts=["traces/churn/kim.churn"]', f"campaign.variants={variants}"]

    def plan() -> None:  # a variant's own fields are checked when the campaign starts
        spec, _ = load_spec("scripts/experiments/kim-sim.toml", overrides)
        run_campaign(spec, out="/nonexistent/never-written")

    with pytest.raises(InputError, match=message):
        plan()


def test_a_pull_run_meters_dlbs_messages_per_node_minute(tmp_path):
    overrides = [*SMALL_KIM, 'jobs.balance="pull"', "jobs.balance_s=5.0"]
    spec, data = load_spec("scripts/experiments/kim-sim.toml", overrides)
    summary = json.loads(
        (run_experiment(spec, data, out=tmp_path / "run").dir / "summary.json").read_text()
    )
    dlb = summary["dlb"]
    assert dlb["balance"] == "pull" and dlb["messages"] > 0
    assert 0 < dlb["share_of_messages"] < 0.2
    assert dlb["datagrams"] == pytest.approx(summary["sim"]["datagrams"], rel=0.01)
    assert 1 <= dlb["max_per_node_minute"] <= dlb["messages"]
    # Minutes of Kim's time: kim-sim.toml's times are 15 times shorter, a minute is 4 s here.
    assert spec.jobs.profiles.time_scale == 15.0 and dlb["minute_s"] == 4.0
    minutes = math.ceil(summary["sim"]["virtual_s"] / 4.0)  # the last one partly
    # Every peer in every such minute once it joined (all 24 within the first 30 s).
    assert 24 * (minutes - 8) < dlb["node_minutes"] <= 24 * minutes
    # Every kind of message the peers sent, per node-minute, with its bytes.
    by_kind = summary["sim"]["by_kind"]
    assert {"LoadedUpdate", "SchedBeat", "DlbRequest", "JobRoute"} <= set(by_kind)
    total = sum(k["per_node_minute"] for k in by_kind.values())
    assert total == pytest.approx(summary["sim"]["messages_per_peer_minute"], rel=0.01)
    assert all(k["bytes_per_node_minute"] > 20 * k["per_node_minute"] for k in by_kind.values())


def test_kims_central_takes_the_fastest_idle_node_else_the_shortest_queue():
    nodes = [(100.0, 512.0, 40.0), (200.0, 4096.0, 40.0)]
    jobs = [
        (0.0, (0.0, 0.0, 0.0), 2000.0),  # the fastest idle: node 1, 10 s
        (0.0, (0.0, 0.0, 0.0), 2000.0),  # node 0 is idle: 20 s
        (1.0, (0.0, 0.0, 0.0), 2000.0),  # both busy, one queued each: the faster, at 10 s
        (1.0, (0.0, 1024.0, 0.0), 2000.0),  # only node 1 has the memory: after the last
        (1.0, (300.0, 0.0, 0.0), 2000.0),  # no node this fast
    ]
    assert kim_central(nodes, jobs).waits == [0.0, 0.0, 9.0, 19.0, None]
    assert kim_central(nodes, jobs).busy_at_last == 1.0  # both nodes still run at t = 1
    assert kim_central(nodes, jobs[:1]).busy_at_last == 0.5
    assert kim_central(nodes, jobs, per_speed=False).waits[2] == 1999.0  # 2,000 s anywhere


def test_kims_central_with_redistribution_moves_a_waiting_job_to_a_node_that_fell_idle():
    nodes = [(100.0, 512.0, 40.0), (100.0, 512.0, 40.0)]
    jobs = [
        (0.0, (0.0, 0.0, 0.0), 10_000.0),  # node 0, 100 s
        (0.0, (0.0, 0.0, 0.0), 1000.0),  # node 1, 10 s
        (1.0, (0.0, 0.0, 0.0), 1000.0),  # one each: the lower index, behind the long one
        (2.0, (0.0, 0.0, 0.0), 1000.0),  # node 1 has less: it runs at 10 s, until 20 s
    ]
    assert kim_central(nodes, jobs).waits == [0.0, 0.0, 99.0, 8.0]
    # Every 20 s the waiting jobs are placed again: at 20 s node 1 is idle.
    assert kim_central(nodes, jobs, redistribute_s=20.0).waits == [0.0, 0.0, 19.0, 8.0]
    with pytest.raises(ValueError, match="redistribute_s must be positive"):
        kim_central(nodes, jobs, redistribute_s=0.0)


def test_normal_work_has_kims_mean_and_deviation():
    spec = KimProfilesSpec(jobs=8000, tau_s=1.0, work_s=(120.0, 360.0), work_dist="normal")
    work = [job.work_s for job in kim_jobs(spec, seed=2)]
    assert statistics.fmean(work) == pytest.approx(240.0, rel=0.02)
    assert statistics.stdev(work) == pytest.approx(80.0, rel=0.04)
    assert min(work) > 0


def test_rnt_builds_one_tree_of_logarithmic_height_by_kims_parent_rule():
    from testbed.models.kim_rnt import _tree

    for n in (1, 2, 50, 2000):
        parent = _tree(n, random.Random(n))
        assert parent.count(-1) == 1
        for c in range(n):  # every node reaches the root without a cycle
            seen = set()
            while parent[c] >= 0:
                assert c not in seen
                seen.add(c)
                c = parent[c]
    nodes = [(100.0, 512.0, 40.0)] * 2000
    assert kim_rnt(nodes, [], seed=3).height <= 4 * math.log2(2000)


def test_rnt_finds_every_capable_node_when_fewer_than_k_exist_and_only_capable_ones():
    rng = random.Random(5)
    nodes = [(rng.choice([100.0, 200.0]), 512.0, 40.0) for _ in range(300)]
    nodes[17] = nodes[230] = (350.0, 8192.0, 640.0)  # the only two that can run a big job
    jobs = [(float(t), (350.0, 4096.0, 0.0), 3500.0) for t in range(4)]
    jobs.append((5.0, (400.0, 0.0, 0.0), 10.0))  # nobody is this fast
    result = kim_rnt(nodes, jobs, seed=1)
    # Two capable nodes, 10 s per job: 0, 0, then each queued behind one (9 s and 9 s).
    assert result.waits == [0.0, 0.0, 8.0, 8.0, None]
    # The search is pruned by the subtree maxima: far fewer visits than nodes.
    assert 0 < max(result.messages) < 300 and result.messages[4] == 0
    assert kim_rnt(nodes, jobs, seed=1) == result  # seeded
    with pytest.raises(ValueError, match="k must be at least 1"):
        kim_rnt(nodes, jobs, k=0)


def test_rnt_stops_at_k_capable_nodes_and_takes_the_fastest_free_one():
    nodes = [(100.0 + 10 * (i % 25), 512.0, 40.0) for i in range(500)]
    jobs = [(0.0, (0.0, 0.0, 0.0), 1000.0)]
    result = kim_rnt(nodes, jobs, k=5, seed=2)
    assert result.messages[0] == 5  # every node is capable: the first five visited
    lone = kim_rnt(nodes, jobs, k=1, seed=2)
    assert lone.messages[0] == 1 and lone.waits == [0.0]


def test_a_run_on_kims_grid_from_files_places_every_job_on_a_capable_node(tmp_path):
    files = [
        "jobs.profiles.jobs_file='traces/kim/sample-jobs.csv'",
        "jobs.profiles.nodes_file='traces/kim/sample-nodes.csv'",
        "topology.hosts=24",
        "jobs.drain_s=300.0",
    ]
    # kim-sim.toml's generator fields back at their defaults: the files replace them.
    defaults = [
        "jobs.profiles.jobs=1000",
        "jobs.profiles.tau_s=17.5",
        "jobs.profiles.work_s=[1200.0, 3600.0]",
    ]
    spec, data = load_spec("scripts/experiments/kim-sim.toml", [*files, *defaults])
    summary = json.loads(
        (run_experiment(spec, data, out=tmp_path / "run").dir / "summary.json").read_text()
    )
    jobs = summary["jobs"]
    assert jobs["submitted"] == 60 and jobs["lost"] == 0 and jobs["misplaced"] == 0
    assert jobs["completed"] + jobs["failed"] == 60 and jobs["failed"] == jobs["infeasible"]
    nodes = read_kim_nodes("traces/kim/sample-nodes.csv", 24)
    rows = [json.loads(line) for line in (tmp_path / "run" / "jobs.jsonl").read_text().splitlines()]
    wanted = {j.id: j.requirement for j in read_kim_jobs("traces/kim/sample-jobs.csv")}
    for row in rows:
        if row["outcome"] == "completed":
            have = nodes[int(row["ran_on"][1:]) - 1]
            assert all(h >= w for h, w in zip(have, wanted[row["job"]], strict=True)), row


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("submit_s,work_s,cpu_10mhz,memory_mb\n", "header .*expected submit_s,work_s"),
        ("submit_s,work_s,cpu_10mhz,memory_mb,disk_gb\n1,2,3\n", r":2: 3 values: expected 5"),
        ("submit_s,work_s,cpu_10mhz,memory_mb,disk_gb\n1,0,3,4,5\n", r":2:2: work_s: expected"),
        (
            "submit_s,work_s,cpu_10mhz,memory_mb,disk_gb\n1,2,x,4,5\n",
            r":2:3: cpu_10mhz: 'x' is not",
        ),
        ("# only a comment\n", "empty: expected the header"),
        ("submit_s,work_s,cpu_10mhz,memory_mb,disk_gb\n", "a header and no rows"),
    ],
)
def test_a_bad_jobs_file_is_refused_naming_the_line_and_column(tmp_path, text, message):
    path = tmp_path / "jobs.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        read_kim_jobs(path)


def test_files_and_the_generator_fields_they_replace_are_not_given_together(tmp_path):
    with pytest.raises(InputError, match="jobs.profiles.jobs: the jobs come from jobs_file"):
        load_spec(
            "scripts/experiments/kim-sim.toml",
            ["jobs.profiles.jobs_file='traces/kim/sample-jobs.csv'"],  # kim-sim sets jobs
        )
    with pytest.raises(InputError, match="32 nodes for a run of 40 hosts"):
        read_kim_nodes("traces/kim/sample-nodes.csv", 40)
