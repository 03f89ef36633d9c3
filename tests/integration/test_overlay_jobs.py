# The grid's user in overlay runs (testbed/experiments/overlay_jobs.py): submissions on time through
# live peers, entries followed through hand-overs, jobs submitted again when
# their entry is lost (but not while one of their runs goes on), every job
# accounted for once; and a whole jobs run in the simulator.

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from node.wire import JobInfo
from testbed.errors import InputError
from testbed.experiments.overlay import churn_schedule, run_experiment, select_topology
from testbed.experiments.overlay_jobs import JobClient, JobsRun, cluster_point
from testbed.spec import load_spec


class FakeEngine:
    """Peers 0..n-1 alive unless killed; records are fed by the test."""

    def __init__(self, n: int) -> None:
        self.now = 0.0
        self.alive = dict.fromkeys(range(n), 1)
        self.refuse: set[int] = set()
        self.submitted: list[tuple[float, int, int]] = []  # (t, host, job)
        self.pending: list[dict[str, Any]] = []

    def submit(self, host: int, job: JobInfo) -> bool:
        if host in self.refuse or host not in self.alive:
            return False
        self.submitted.append((self.now, host, job.id))
        return True

    def job_records(self) -> list[dict[str, Any]]:
        out, self.pending = self.pending, []
        return out

    def live(self) -> dict[int, int]:
        return dict(self.alive)

    def advance(self, until: float) -> None:
        self.now = until

    def record(self, host: int, kind: str, job: int, **fields: Any) -> None:
        self.pending.append({"host": host, "kind": kind, "job": job, "t": self.now, **fields})


def client_for(
    n_jobs: int,
    hosts: int = 4,
    scale: float = 1.0,
    refuse: set[int] = frozenset(),
    grace_s: float = 0.0,
) -> tuple[JobClient, FakeEngine]:
    jobs = [(10.0 * k, JobInfo(100 + k, 2, 5.0, 10.0 * k, (2.0, 1.0, 0.5))) for k in range(n_jobs)]
    engine = FakeEngine(hosts)
    engine.refuse = set(refuse)
    names = [f"h{h + 1}" for h in range(hosts)]
    client = JobClient(jobs, names, seed=1, runtime_scale=scale, grace_s=grace_s)
    client.step(engine)  # learns who is alive; submits what is due at 0
    return client, engine


def entry_of(engine: FakeEngine, job: int) -> int:
    return [h for _, h, j in engine.submitted if j == job][-1]


def test_jobs_are_submitted_on_time_through_live_peers_that_take_them():
    client, engine = client_for(3, refuse={0, 1, 2})  # only h4 takes jobs
    for t in (5.0, 10.0, 20.0):
        engine.advance(t)
        client.step(engine)
    assert engine.submitted == [(0.0, 3, 100), (10.0, 3, 101), (20.0, 3, 102)]
    assert client.next_due() is None and client.open_jobs() == 3


def test_a_job_nobody_takes_waits_for_a_peer():
    client, engine = client_for(1, refuse={0, 1, 2, 3})
    assert engine.submitted == [] and client.next_due() == 0.0
    engine.refuse = set()
    engine.advance(1.0)
    client.step(engine)
    assert [(t, j) for t, _, j in engine.submitted] == [(1.0, 100)]
    assert client.summary()["submitted"] == 1


def test_outcomes_count_once_and_slowdown_is_in_trace_seconds():
    client, engine = client_for(2, scale=0.5)
    engine.advance(10.0)
    client.step(engine)
    engine.advance(30.0)
    # Job 100, submitted at 0, ends at 30 after a 4 s run: waited 26 s of run
    # time, 52 s of trace time (x0.5), over max(8 s, 10 s).
    engine.record(2, "job_finished", 100, attempt=9, ok=True, run_s=4.0)
    engine.record(
        entry_of(engine, 100), "job_ended", 100, ok=True, reason="", attempts=1, run_s=4.0
    )
    engine.record(
        entry_of(engine, 101),
        "job_ended",
        101,
        ok=False,
        reason="no capable node near 10.0.0.3 for 2 nodes (after 5 attempts)",
        attempts=5,
        run_s=0.0,
    )
    engine.record(
        entry_of(engine, 101), "job_ended", 101, ok=False, reason="again", attempts=5, run_s=0.0
    )
    client.step(engine)
    summary = client.summary()
    assert summary | {"wait_s": None, "run_s": None} == {
        "submitted": 2,
        "completed": 1,
        "failed": 1,
        "lost": 0,
        "running_at_end": 0,
        "waiting_at_end": 0,
        "resubmitted": 0,
        "duplicates": 1,
        "executed_twice": 0,
        "failure_reasons": {"no capable node near for nodes (after attempts)": 1},
        "wait_s": None,
        "run_s": None,
    }
    assert client.slowdowns() == [pytest.approx(1 + 52.0 / 10.0)]
    rows = {r["job"]: r for r in client.results()}
    assert rows[100]["outcome"] == "completed" and rows[100]["wait_s"] == 26.0
    assert rows[101]["outcome"] == "failed" and rows[101]["reports"] == 2


def test_a_crashed_entrys_job_is_submitted_again_elsewhere():
    client, engine = client_for(1)
    first = entry_of(engine, 100)
    engine.alive[first] = 2  # crashed and came back: a new peer on the same host
    engine.advance(1.0)
    client.step(engine)
    assert len(engine.submitted) == 2 and client.resubmitted == 1
    assert client.results()[0]["entries"] == [f"h{first + 1}", f"h{entry_of(engine, 100) + 1}"]


def test_after_a_lost_entry_the_client_waits_for_a_late_start_before_submitting_again():
    # A representative that had not noticed the entry's crash starts the job:
    # the client follows that run instead of submitting the job a second time.
    client, engine = client_for(1, grace_s=11.0)
    first = entry_of(engine, 100)
    del engine.alive[first]
    engine.advance(1.0)
    client.step(engine)
    assert len(engine.submitted) == 1
    engine.advance(8.0)
    rep = (first + 1) % 4
    engine.record(rep, "job_started", 100, attempt=5, round=1, ranks=[])
    client.step(engine)
    engine.advance(20.0)
    client.step(engine)
    assert len(engine.submitted) == 1
    engine.record(rep, "job_finished", 100, attempt=5, ok=True, reason="", run_s=8.0)
    client.step(engine)
    assert client.summary()["completed"] == 1 and client.resubmitted == 0
    # Nothing starts: submitted again once the grace is over, not before.
    client, engine = client_for(1, grace_s=11.0)
    del engine.alive[entry_of(engine, 100)]
    for t, submissions in ((1.0, 1), (11.5, 1), (12.5, 2)):
        engine.advance(t)
        client.step(engine)
        assert len(engine.submitted) == submissions, t
    assert client.resubmitted == 1


def test_a_job_a_live_peer_still_holds_at_the_end_is_waiting_not_lost():
    client, engine = client_for(2)  # job 101 is due at 10 s
    engine.advance(11.0)
    client.step(engine)
    client.note_waiting([{"sched": {"represented": ["100/7:collecting", "101/3:finished"]}}])
    summary = client.summary()
    assert (summary["waiting_at_end"], summary["lost"]) == (1, 1)
    assert [r["outcome"] for r in client.results()] == ["waiting", "lost"]


def test_a_run_the_end_of_the_run_cut_short_is_still_running_not_lost():
    client, engine = client_for(1)  # run time 5 s
    rep = (entry_of(engine, 100) + 1) % 4
    engine.advance(1.0)
    engine.record(rep, "job_started", 100, attempt=5, round=1, ranks=[])
    engine.advance(3.0)
    client.step(engine)
    summary = client.summary()
    assert (summary["lost"], summary["running_at_end"]) == (0, 1)
    assert client.results()[0]["outcome"] == "running"
    engine.advance(7.0)  # its run time is over and nothing came: lost
    client.step(engine)
    summary = client.summary()
    assert (summary["lost"], summary["running_at_end"]) == (1, 0)
    # A run whose peer is gone is not running either.
    client2, engine2 = client_for(1)
    rep2 = (entry_of(engine2, 100) + 1) % 4
    engine2.record(rep2, "job_started", 100, attempt=5, round=1, ranks=[])
    client2.step(engine2)
    engine2.alive[rep2] = 2  # crashed and came back
    engine2.advance(1.0)
    client2.step(engine2)
    assert client2.summary()["running_at_end"] == 0


def test_a_job_handed_over_by_a_leaving_entry_is_not_submitted_again():
    client, engine = client_for(1)
    first = entry_of(engine, 100)
    adopter = (first + 1) % 4
    engine.record(adopter, "job_adopted", 100, source="x")
    del engine.alive[first]
    engine.advance(1.0)
    client.step(engine)
    assert len(engine.submitted) == 1 and client.resubmitted == 0
    del engine.alive[adopter]  # now the adopter is lost too
    engine.advance(2.0)
    client.step(engine)
    assert len(engine.submitted) == 2 and client.resubmitted == 1


def test_a_job_rerouted_to_a_new_owner_after_its_entry_crashed_is_followed_there():
    # owner_recovery = "reroute": the entry crashes, the representative routes the
    # waiting attempt to the job's point and its owner adopts it within the grace:
    # the client follows the adopter and does not submit the job again.
    client, engine = client_for(1, grace_s=18.0)
    first = entry_of(engine, 100)
    del engine.alive[first]
    engine.advance(1.0)
    client.step(engine)
    adopter = (first + 1) % 4
    engine.advance(9.0)
    engine.record(adopter, "job_adopted", 100, source="h9")
    client.step(engine)
    engine.advance(30.0)
    client.step(engine)
    assert len(engine.submitted) == 1 and client.resubmitted == 0
    engine.record(adopter, "job_ended", 100, ok=True, reason="", attempts=1, run_s=5.0)
    client.step(engine)
    assert client.summary()["completed"] == 1


def test_a_running_job_of_a_lost_entry_reports_itself_or_is_submitted_again():
    # Its run completes: no second submission.
    client, engine = client_for(1)
    entry = entry_of(engine, 100)
    rep = (entry + 1) % 4
    engine.record(rep, "job_started", 100, attempt=5, round=1, ranks=[])
    del engine.alive[entry]
    engine.advance(1.0)
    client.step(engine)
    assert len(engine.submitted) == 1
    engine.advance(9.0)
    engine.record(rep, "job_finished", 100, attempt=5, ok=True, reason="", run_s=8.0)
    client.step(engine)
    assert client.summary()["completed"] == 1 and client.resubmitted == 0
    # Its run fails (or its node goes): submitted again. Also when the failure
    # comes from another representative: the attempt was restarted and moved
    # there by DLB or QB after it started once.
    for moved in (0, 1):
        client, engine = client_for(1)
        entry = entry_of(engine, 100)
        rep = (entry + 1) % 4
        engine.record(rep, "job_started", 100, attempt=5, round=1, ranks=[])
        client.step(engine)
        del engine.alive[entry]
        engine.advance(1.0)
        client.step(engine)
        ended = (rep + moved) % 4
        engine.record(ended, "job_finished", 100, attempt=5, ok=False, reason="x: y", run_s=0.0)
        engine.advance(2.0)
        client.step(engine)
        assert len(engine.submitted) == 2 and client.resubmitted == 1, moved


def test_cluster_points():
    assert cluster_point(16, 0.64) == (16.0, pytest.approx(1 / 0.64))
    assert cluster_point(1, 0.0) == (1.0, 0.0)


SPEC = """
name = "jobs-sim"
engine = "sim"
seed = {seed}
routes_checked = 100

[topology]
ref = "topologies/sharcnet-emu.toml"
hosts = 40

[[phases]]
action = "join"
count = 36
over_s = 10
settle_s = 10

[[phases]]
action = "crash"
count = 3
settle_s = 20

[[phases]]
action = "leave"
count = 3
settle_s = 60

[jobs]
latency_ms = 1.0
start_s = 15.0
drain_s = 200.0

[jobs.workload]
trace = "traces/pwa/DAS2-fs1-2003-1.swf.gz"
max_size = 12
slice = 1000
window_s = 300.0
runtime_scale = 0.2
first = 40
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_a_simulated_jobs_run_accounts_for_every_job_once(tmp_path, seed):
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC.format(seed=seed))
    spec, data = load_spec(spec_path)
    run_dir = run_experiment(spec, data, out=tmp_path / "run").dir
    summary = json.loads((run_dir / "summary.json").read_text())
    jobs = summary["jobs"]
    assert summary["status"] == "complete", summary
    assert jobs["submitted"] == 40 and jobs["lost"] == 0 and jobs["duplicates"] == 0, jobs
    assert jobs["completed"] + jobs["failed"] == 40
    assert jobs["completed"] >= 38, jobs  # crashes and leaves while they run
    rows = [json.loads(line) for line in (run_dir / "jobs.jsonl").read_text().splitlines()]
    assert len(rows) == 40 and all("reason" in r for r in rows if r["outcome"] == "failed")
    assert summary["slowdown"]["sim/ACTUAL"]["jobs"] == jobs["completed"]
    assert 0 < jobs["utilisation"] < 1
    assert summary["slowdown"]["central/ACTUAL"]["jobs"] == 40
    assert (run_dir / "slowdown.png").stat().st_size > 0
    # Parallel jobs ran on one Myrinet cluster each: within 1 ms, as they asked.
    started = [
        json.loads(line)
        for line in (run_dir / "events.jsonl").read_text().splitlines()
        if '"job_started"' in line
    ]
    assert started
    labels = {f"10.0.0.{k + 1}": None for k in range(40)}
    from testbed.topology import load_topology

    topo = load_topology("topologies/sharcnet-emu.toml").select(40)
    for k, lab in enumerate(topo.labels):
        labels[f"10.0.0.{k + 1}"] = lab["cluster"]
    for record in started:
        clusters = {labels[ip] for ip in record["ranks"]}
        assert len(clusters) == 1 and clusters != {"c0"}, record  # c0: the GigE one


@pytest.mark.parametrize("name", ["sched-emu.toml", "sched-serial-emu.toml"])
def test_the_bundled_sched_emu_specs_are_valid(name, monkeypatch):
    root = Path(__file__).parents[2]
    monkeypatch.chdir(root)
    spec, _ = load_spec(root / "scripts" / "experiments" / name)
    assert spec.engine == "emu" and spec.jobs is not None and spec.churn is not None
    topology = select_topology(spec)
    names = [f"h{k + 1}" for k in range(topology.n)]
    schedule = churn_schedule(spec, topology, names)
    assert schedule is not None and any(e.verb == "crash" for e in schedule.events)
    assert any(e.verb == "leave" for e in schedule.events)
    run = JobsRun(spec, topology, names, root)
    assert len(run.client.jobs) == 300
    widest = max(len(c) for c in run.clusters if run.diameter_ms(c) <= spec.jobs.latency_ms)
    assert max(j.info.size for j in run.client.jobs.values()) <= widest


def test_a_speed_dimension_the_jobs_can_lacks_is_refused_before_the_run(monkeypatch):
    root = Path(__file__).parents[2]
    monkeypatch.chdir(root)
    path = root / "scripts" / "experiments" / "sched-emu.toml"
    spec, _ = load_spec(path, ['jobs.matchmaking="can-p"', 'jobs.speed_dimension="cpu"'])
    topology = select_topology(spec)
    names = [f"h{k + 1}" for k in range(topology.n)]
    with pytest.raises(InputError, match=r"jobs.speed_dimension: 'cpu'.*\['size', 'inv_latency'\]"):
        JobsRun(spec, topology, names, root)
    spec, _ = load_spec(path, ['jobs.matchmaking="can-p"', 'jobs.speed_dimension="size"'])
    assert JobsRun(spec, topology, names, root).sched_config().speed_dimension == "size"
