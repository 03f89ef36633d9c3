# The idealised central FCFS baseline and bounded slowdown.

from __future__ import annotations

from pathlib import Path

import pytest

from node.cluster import static_clustering
from testbed.analysis.slowdown import bounded_slowdown, slowdown_stats
from testbed.models.central import central_fcfs
from testbed.workload import compress, parse_swf, read_swf, select, shortest_slice

LINE = "{job} {submit} -1 {run} {procs} -1 -1 {procs} -1 -1 1 1 1 1 1 -1 -1 -1"


def trace(*rows):
    return parse_swf([LINE.format(job=j, submit=s, run=r, procs=p) for j, s, r, p in rows])


def test_a_newer_job_runs_out_of_order_only_where_it_delays_no_older_one():
    big, small = tuple(range(4)), (4, 5)  # a cluster of four nodes and one of two
    w = trace(
        (1, 0, 100, 4),  # takes the big cluster
        (2, 1, 100, 4),  # waits for it
        (3, 2, 10, 2),  # runs at once on the small cluster, ahead of job 2
        (4, 3, 10, 2),  # small cluster busy; the big one is job 2's: waits for the small one
        (5, 4, 10, 9),  # wider than any cluster: never runs
    )
    placements, unschedulable = central_fcfs(w, [big, small])
    start = {p.job: p.start_s for p in placements}
    assert start == {1: 0, 3: 2, 4: 12, 2: 100}
    assert unschedulable == [5]
    assert {p.job: p.nodes for p in placements}[3] == small


def test_never_more_tasks_than_nodes_and_never_before_submission():
    das = read_swf(Path(__file__).parents[2] / "traces" / "pwa" / "DAS2-fs1-2003-1.swf.gz")
    intense = compress(shortest_slice(select(das, min_size=2), 300), 300)
    groups = ["fs1"] * 64
    for name in ("ACTUAL", "DISJOINT-16", "OVERLAP-16"):
        placements, unschedulable = central_fcfs(intense, static_clustering(name, groups))
        limit = 64 if name == "ACTUAL" else 16
        assert len(placements) + len(unschedulable) == 300
        assert all(len({*p.nodes}) <= limit for p in placements)
        assert all(p.start_s >= p.submit_s for p in placements)
        events = sorted(
            [(p.start_s, len(p.nodes)) for p in placements]
            + [(p.end_s, -len(p.nodes)) for p in placements]
        )
        load = 0
        for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
            load += delta
            assert load <= 64
        busy: dict[int, float] = {}
        for p in sorted(placements, key=lambda p: p.start_s):  # no node runs two tasks at once
            for node in p.nodes:
                assert busy.get(node, -1.0) <= p.start_s
                busy[node] = p.end_s


def test_bounded_slowdown_and_its_statistics():
    assert bounded_slowdown(0, 5) == 1.0
    assert bounded_slowdown(20, 5) == 3.0  # run times below 10 s count as 10 s
    assert bounded_slowdown(100, 50) == 3.0
    stats = slowdown_stats([1.0, 1.0, 1.5, 2.0, 11.0])
    assert stats["jobs"] == 5 and stats["mean"] == pytest.approx(3.3)
    assert stats["median"] == 1.5 and stats["mode"] == 1 and stats["max"] == 11.0
    assert slowdown_stats([])["mean"] is None
