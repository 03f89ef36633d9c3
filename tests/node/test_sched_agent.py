# The scheduler in the peer (node/sched/agent.py) on simulated peers: jobs
# routed over the resource CAN to a capable cluster, co-scheduled there, run
# (simulated ranks) and reported exactly once, also when representatives,
# members and ranks crash or leave.

from __future__ import annotations

import itertools
import random
from collections import Counter

import numpy as np
import pytest

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig
from node.peer import NodeConfig
from node.sched.agent import SchedConfig
from node.wire import JobInfo
from testbed.linkmodel import LinkModel
from testbed.sim import Simulator

SPACE = Space(
    [
        Dimension("size", 0.0, 64.0),
        Dimension("inv_latency", 0.0, 4.0),
        Dimension("v", 0.0, 1.0, virtual=True),
    ]
)


class Grid:
    """Clusters of peers (0.5 ms inside one, 30 ms across; the last one slow
    inside, 10 ms) joined into one CAN, each peer told its cluster."""

    def __init__(self, sizes=(8, 6, 4), *, slow_last=False, seed=1, **sched) -> None:
        self.sizes = sizes
        n = sum(sizes)
        self.label = np.repeat(np.arange(len(sizes)), sizes)
        same = self.label[:, None] == self.label[None, :]
        inside = np.full(n, 0.5)
        if slow_last:
            inside[self.label == len(sizes) - 1] = 10.0
        rtt = np.where(same, inside[:, None], 30.0)
        np.fill_diagonal(rtt, 0.0)
        can = CanConfig(SPACE, update_interval_s=1.0, suspect_after_s=3.0, join_timeout_s=4.0)
        config = SchedConfig(**{"beat_s": 1.0, "dead_after_s": 4.0} | sched)
        self.node = NodeConfig(can, sched=config)
        self._log: list[dict] | None = None  # the events since attach()
        self.sim = Simulator(
            LinkModel((rtt / 2e3).tolist()),
            seed=seed,
            ips=[f"10.0.0.{k + 1}" for k in range(n)],
            observer=self._observe,
        )
        rng = random.Random(seed)
        self.hosts = list(range(n))
        for host in self.hosts:
            cluster = self.label[host]
            point = (float(sizes[cluster]), 1.0 / inside[host], rng.random())
            self.sim.start_peer(host, self.node, point)
        self.sim.join(0, [])
        for host in self.hosts[1:]:
            self.sim.at(0.3 * host, lambda h=host: self.sim.join(h, [0]))
        self.sim.run_until(0.3 * n + 20.0)
        assert all(p.member for p in self.sim.peers.values())
        for host in self.hosts:
            members = [h for h in self.hosts if self.label[h] == self.label[host]]
            self.sim.set_sched_cluster(host, members)
        self.jobs = 0

    def submit(self, size: int, runtime_s: float, *, entry: int = 0, latency_ms=1.0) -> int:
        self.jobs += 1
        point = (float(size), 1.0 / latency_ms, random.Random(self.jobs).random())
        job = JobInfo(self.jobs, size, runtime_s, self.sim.now, point)
        self.sim.submit(entry, job)
        return self.jobs

    def events(self, kind: str) -> list[dict]:
        return [e for e in self.log if e["kind"] == kind]

    def run(self, seconds: float) -> None:
        self.sim.run_until(self.sim.now + seconds)

    @property
    def log(self) -> list[dict]:
        assert self._log is not None, "attach() first"
        return self._log

    def attach(self) -> None:
        """Record the events from now on."""
        self._log = []

    def _observe(self, host: int, record: dict) -> None:
        if self._log is not None:
            self._log.append({"host": host, **record})


@pytest.fixture
def grid() -> Grid:
    g = Grid()
    g.attach()
    return g


def ended(g: Grid) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for e in g.events("job_ended"):
        out.setdefault(e["job"], []).append(e)
    return out


def test_a_job_runs_on_a_cluster_big_enough_and_is_reported_once(grid):
    jobs = [grid.submit(size, 3.0, entry=e) for size, e in [(6, 0), (4, 9), (8, 17), (2, 3)]]
    grid.run(60.0)
    results = ended(grid)
    assert sorted(results) == jobs
    assert all(len(r) == 1 and r[0]["ok"] for r in results.values()), results
    started = {e["job"]: e for e in grid.events("job_started")}
    for job, size in zip(jobs, [6, 4, 8, 2], strict=True):
        ranks = started[job]["ranks"]
        assert len(ranks) == size
        clusters = {grid.label[int(ip.rsplit(".", 1)[1]) - 1] for ip in ranks}
        assert len(clusters) == 1  # co-scheduled on one cluster
        assert grid.sizes[clusters.pop()] >= size
    # The 8-node job could only go to the 8-node cluster.
    assert {grid.label[int(ip.rsplit(".", 1)[1]) - 1] for ip in started[jobs[2]]["ranks"]} == {0}


def test_the_latency_requirement_keeps_jobs_off_a_slow_cluster():
    g = Grid((6, 6), slow_last=True)
    g.attach()
    jobs = [g.submit(3, 2.0, entry=k, latency_ms=1.0) for k in range(0, 12, 2)]
    g.run(60.0)
    assert all(r[0]["ok"] for r in ended(g).values()) and len(ended(g)) == len(jobs)
    for e in g.events("job_started"):
        assert {g.label[int(ip.rsplit(".", 1)[1]) - 1] for ip in e["ranks"]} == {0}


def test_a_job_no_cluster_can_take_fails_with_a_reason_after_backing_off(grid):
    job = grid.submit(12, 1.0)
    grid.run(120.0)
    (result,) = ended(grid)[job]
    assert not result["ok"] and "capable" in result["reason"] and result["attempts"] == 5
    # Tries 2 s, 4, 8, 16 and 30 (capped) apart.
    assert 58.0 < result["t"] - grid.events("job_submitted")[0]["t"] < 66.0


def test_queued_jobs_run_in_submit_order_without_double_booking(grid):
    jobs = [grid.submit(size, 2.0, entry=k % 18) for k, size in enumerate([5, 3, 6, 2, 4, 6, 1])]
    grid.run(120.0)
    results = ended(grid)
    assert sorted(results) == jobs and all(r[0]["ok"] for r in results.values())
    # No peer ran two ranks at once: rank intervals per host do not overlap
    # (beyond the TaskDone's way to the representative, which logs the end).
    start = {(e["job"]): e["t"] for e in grid.events("job_started")}
    busy: dict[str, list[tuple[float, float]]] = {}
    for e in grid.events("job_finished"):
        if e["ok"]:
            for ip in next(s for s in grid.events("job_started") if s["job"] == e["job"])["ranks"]:
                busy.setdefault(ip, []).append((start[e["job"]], e["t"]))
    for spans in busy.values():
        spans.sort()
        assert all(a[1] <= b[0] + 0.001 for a, b in itertools.pairwise(spans))


@pytest.mark.parametrize("victim", ["representative", "rank", "queued member"])
def test_every_job_ends_exactly_once_when_peers_crash(victim):
    g = Grid(seed=2)
    g.attach()
    # Entries in the 4-node cluster, jobs too wide for it: no victim is an entry
    # (an entry's crash is the client's to recover, tested below).
    jobs = [g.submit(5, 6.0, entry=17), g.submit(5, 6.0, entry=16), g.submit(6, 6.0, entry=15)]
    g.run(2.0)
    started = g.events("job_started")
    assert started, "the first jobs start within 2 s"
    first = started[0]
    ranks = [int(ip.rsplit(".", 1)[1]) - 1 for ip in first["ranks"]]
    if victim == "representative":
        target = first["host"]
    elif victim == "rank":
        target = next(r for r in ranks if r != first["host"])
    else:
        cluster = g.label[ranks[0]]
        target = next(h for h in g.hosts if g.label[h] == cluster and h not in ranks)
    g.sim.crash(target)
    g.run(120.0)
    results = ended(g)
    assert sorted(results) == jobs
    assert all(len(r) == 1 for r in results.values())
    assert all(r[0]["ok"] for r in results.values()), results
    finished = Counter(e["job"] for e in g.events("job_finished") if e["ok"])
    assert all(finished[j] == 1 for j in jobs)  # each ran to the end once


def test_an_entry_that_leaves_hands_its_jobs_over(grid):
    # Too wide for the entry's own 4-node cluster: the leaver runs no part of them.
    jobs = [grid.submit(5, 6.0, entry=17), grid.submit(6, 6.0, entry=17)]
    grid.run(1.0)
    grid.sim.leave(17)
    grid.run(60.0)
    results = ended(grid)
    assert sorted(results) == jobs
    assert all(len(r) == 1 and r[0]["ok"] and r[0]["host"] != 17 for r in results.values())
    adopted = {e["job"]: e["host"] for e in grid.events("job_adopted")}
    handed = {e["job"]: e["host"] for e in grid.events("job_handed_over")}
    assert sorted(adopted) == sorted(handed) == jobs and set(handed.values()) == {17}
    assert {results[j][0]["host"] for j in jobs} == {adopted[j] for j in jobs}
    # The attempts that were running carried on: each job ran once.
    assert Counter(e["job"] for e in grid.events("job_started")) == Counter(jobs)
    assert grid.sim.peers.get(17) is None or grid.sim.peers[17].status == "left"


def test_a_running_attempt_outlives_its_crashed_entry_and_reports_itself():
    g = Grid(seed=3)
    g.attach()
    job = g.submit(5, 20.0, entry=17)
    g.run(3.0)
    (started,) = g.events("job_started")
    g.sim.crash(17)
    g.run(40.0)
    # The run node's report goes to the client (its event), and nothing stays behind.
    (finished,) = [e for e in g.events("job_finished") if e["job"] == job]
    assert finished["ok"] and finished["host"] == started["host"]
    assert finished["attempt"] == started["attempt"] and finished["run_s"] >= 20.0
    assert not ended(g)  # no entry left to report it
    assert all(not p.sched.reps and not p.sched.tasks for p in g.sim.peers.values())


def test_a_waiting_attempt_of_a_crashed_entry_is_dropped_and_a_resubmission_runs_once():
    g = Grid(seed=3)
    g.attach()
    first = g.submit(7, 30.0, entry=16)  # only the 8-node cluster takes 7 nodes
    g.run(1.0)
    job = g.submit(7, 5.0, entry=17)  # ... so this one waits behind it
    g.run(2.0)
    assert [e["job"] for e in g.events("job_started")] == [first]
    g.sim.crash(17)
    g.run(12.0)  # the representative notices its entry's silence
    (dropped,) = [e for e in g.events("job_finished") if e["job"] == job]
    assert not dropped["ok"] and dropped["reason"] == "its entry went silent"
    # The client submits it again elsewhere: it runs once, after the first, reported once.
    g.sim.submit(3, JobInfo(job, 7, 5.0, 0.0, (7.0, 1.0, 0.5)))
    g.run(60.0)
    (result,) = ended(g)[job]
    assert result["ok"] and result["host"] == 3 and result["run_s"] >= 5.0
    assert Counter(e["job"] for e in g.events("job_started")) == {first: 1, job: 1}
    assert all(not p.sched.tasks for p in g.sim.peers.values())  # nothing left queued


def test_serial_jobs_spread_over_the_least_loaded_nodes(grid):
    jobs = [grid.submit(1, 5.0, entry=k % 18, latency_ms=1e9) for k in range(12)]
    grid.run(60.0)
    results = ended(grid)
    assert sorted(results) == jobs and all(r[0]["ok"] for r in results.values())
    started = grid.events("job_started")
    assert all(len(e["ranks"]) == 1 and e["ranks"][0] == f"10.0.0.{e['host'] + 1}" for e in started)
    assert len({e["host"] for e in started}) >= 6  # not piled on one node


def test_a_leaving_representative_hands_the_job_back_to_its_entry(grid):
    job = grid.submit(4, 8.0, entry=17)
    grid.run(2.0)
    (first,) = grid.events("job_started")
    grid.sim.leave(first["host"])
    grid.run(90.0)
    (result,) = ended(grid)[job]
    assert result["ok"] and result["attempts"] == 2
    reasons = [e["reason"] for e in grid.events("job_finished") if not e["ok"]]
    assert "its representative left" in reasons
