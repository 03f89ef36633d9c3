# The decentralised scheduler of seed 002 chapter 4 in the simulator
# (testbed/models/p2psched.py): its CAN, and the invariants every schedule keeps
# (each job once, one task per node at a time, within one advertised cluster),
# the deadlock rule, over-provisioning and the balancers' effect.

from __future__ import annotations

import random
from collections import defaultdict
from itertools import pairwise

import numpy as np
import pytest

from testbed.models.p2psched import Can, Policy, _key, _Rep, _Run, decentralised
from testbed.workload import Job, Workload


def grid(groups: list[int], inside_ms: float = 0.008, across_ms: float = 30.0) -> np.ndarray:
    """A symmetric matrix: `inside_ms` within a group, `across_ms` between groups."""
    g = np.asarray(groups)
    out = np.where(g[:, None] == g[None, :], inside_ms, across_ms).astype(np.float64)
    np.fill_diagonal(out, 0.0)
    return out


def actual(groups: list[int]) -> list[tuple[int, ...]]:
    members: dict[int, list[int]] = defaultdict(list)
    for node, g in enumerate(groups):
        members[g].append(node)
    return [tuple(members[g]) for g in groups]


def jobs(count: int, seed: int, *, sizes=(2, 8), runtime=(10, 300), window=200.0) -> Workload:
    rng = random.Random(seed)
    out = [
        Job(
            job=k + 1,
            submit_s=round(rng.uniform(0, window), 3),
            run_s=rng.randint(*runtime),
            procs=rng.randint(*sizes),
        )
        for k in range(count)
    ]
    return Workload(out)


def check_schedule(workload: Workload, clusters, outcome) -> None:
    """Every job once, within one advertised cluster, no node doing two things at once."""
    done = [p.job for p in outcome.placements]
    assert len(done) == len(set(done))
    assert set(done) | {j for j, _ in outcome.failed} == {j.job for j in workload.jobs}
    assert not outcome.lost
    by_id = {j.job: j for j in workload.jobs}
    busy: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for p in outcome.placements:
        job = by_id[p.job]
        assert len(p.nodes) == job.size and p.start_s >= job.submit_s
        assert p.end_s == pytest.approx(p.start_s + job.run_s)
        assert any(set(p.nodes) <= set(c) | {k} for k, c in enumerate(clusters))
        for node in p.nodes:
            busy[node].append((p.start_s, p.end_s))
    for spans in busy.values():
        spans.sort()
        for (_, end), (start, _) in pairwise(spans):
            assert start >= end - 1e-9


def test_the_can_partitions_the_space_and_routes_to_the_owner():
    rng = random.Random(3)
    points = np.array([[rng.random() for _ in range(3)] for _ in range(300)])
    can = Can(points, random.Random(4))
    volume = np.prod(can.hi - can.lo, axis=1)
    assert volume.sum() == pytest.approx(1.0)
    for x in range(300):  # every node in its own zone; adjacency is symmetric
        assert can.owns(x, points[x])
        for m in can.direct[x]:
            assert x in can.direct[m]
    for _ in range(50):
        p = np.array([rng.random() for _ in range(3)])
        path = can.route(rng.randrange(300), p)
        assert can.owns(path[-1], p)
        assert sum(can.owns(x, p) for x in range(300)) == 1
    # Kim's aggregation counts the nodes above: none at the top of a dimension,
    # at least one below it; counted from the bottom face, every node once.
    top = can.hi == 1.0
    assert np.all(can.above[top] == 0) and np.all(can.above[~top] > 0)
    for d in range(3):
        bottom = can.lo[:, d] == 0.0
        assert (can.above[bottom, d] + 1).sum() == pytest.approx(300)


@pytest.mark.parametrize("variant", ["static", "qb", "dlb", "qb+dlb"])
@pytest.mark.parametrize("overprovision", [None, 1.0, 1.5, 8.0])
def test_every_job_runs_once_on_one_cluster(variant, overprovision):
    groups = [0] * 24 + [1] * 16 + [2] * 12 + [3] * 8
    clusters = actual(groups)
    workload = jobs(150, seed=len(variant) + int(overprovision or 0))
    policy = Policy(dlb="dlb" in variant, qb="qb" in variant, overprovision=overprovision)
    outcome, _ = decentralised(workload, clusters, grid(groups), policy, job_latency_ms=0.2, seed=1)
    check_schedule(workload, clusters, outcome)
    assert len(outcome.placements) == 150
    moves = sum(outcome.moves.values())
    assert (moves > 0) == (variant != "static")
    assert outcome.messages["start"] == sum(j.size for j in workload.jobs)


def test_jobs_wider_than_every_capable_cluster_fail_with_their_reason():
    groups = [0] * 8 + [1] * 4
    clusters = actual(groups)
    # Group 1 is slow inside (1 ms): beyond the jobs' 0.2 ms bound.
    matrix = grid(groups)
    matrix[np.ix_(range(8, 12), range(8, 12))] = 1.0
    np.fill_diagonal(matrix, 0.0)
    workload = Workload([Job(1, 0.0, run_s=5, procs=4), Job(2, 0.0, run_s=5, procs=9)])
    outcome, _ = decentralised(workload, clusters, matrix, Policy(), job_latency_ms=0.2, seed=1)
    assert [p.job for p in outcome.placements] == [1]
    assert set(outcome.placements[0].nodes) <= set(range(8))  # not the slow group
    assert outcome.failed == [(2, "9 nodes: wider than every cluster within the latency bound (8)")]


def test_an_older_task_takes_the_node_from_a_newer_ready_one():
    # One cluster of 4 with one node busy. The newer job (2 nodes) is ready on
    # the idle ones when a task of an older job (all 4) reaches them: the older
    # takes the heads, the newer loses its ready state and waits behind.
    groups = [0] * 4
    older = Job(2, 1.0, run_s=10, procs=4)
    newer = Job(3, 2.0, run_s=10, procs=3)
    blocker = Job(1, 0.0, run_s=100, procs=1)
    run = _Run(
        Workload([blocker, older, newer]),
        actual(groups),
        grid(groups),
        Policy(dlb=False, qb=False, overprovision=1.0),
        0.2,
        1,
        None,
    )
    run.now = 0.0
    run.settle_rep(_Rep(blocker, _key(blocker), 0), 0)
    run.settle()
    busy = next(m for m in range(4) if run.running[m] is not None)
    run.now = 2.0
    late = _Rep(newer, _key(newer), 0)
    run.settle_rep(late, 0)
    run.settle()
    assert len(late.ready) == 3 - (busy in late.task_nodes) and late.started_s is None
    run.now = 3.0  # the older job's tasks arrive (a move, a slow route)
    early = _Rep(older, _key(older), 0)
    run.settle_rep(early, 0)
    run.settle()
    assert run.out.messages["unready"] == len([t for t in late.tasks if t.node != busy])
    assert late.ready == [] and len(early.ready) == 3  # all idle nodes now hold the older job
    assert all(run.held[m].rep is early for m in range(4) if m != busy)
    assert run.out.held_idle_s == pytest.approx(len(late.tasks) - (busy in late.task_nodes))


def test_balancing_beats_static_when_the_load_lands_on_one_cluster():
    # Small jobs route to the minimal capable cluster (the 8-node one); DLB
    # and QB move them to the idle big one.
    groups = [0] * 8 + [1] * 64
    clusters = actual(groups)
    workload = jobs(200, seed=5, sizes=(2, 4), runtime=(50, 100), window=300.0)
    means = {}
    for name, policy in {
        "static": Policy(dlb=False, qb=False),
        "qb+dlb": Policy(),
    }.items():
        outcome, _ = decentralised(
            workload, clusters, grid(groups), policy, job_latency_ms=0.2, seed=1
        )
        check_schedule(workload, clusters, outcome)
        means[name] = np.mean([p.wait_s for p in outcome.placements])
    assert means["qb+dlb"] < means["static"] / 2, means


def test_over_provisioning_sends_size_times_factor_tasks():
    groups = [0] * 32
    clusters = actual(groups)
    workload = Workload([Job(1, 0.0, run_s=10, procs=4)])
    counts = {}
    for factor in (None, 1.0, 1.5, 8.0):
        outcome, _ = decentralised(
            workload,
            clusters,
            grid(groups),
            Policy(dlb=False, qb=False, overprovision=factor),
            job_latency_ms=0.2,
            seed=1,
        )
        counts[factor] = outcome.messages["dispatch"]
        assert outcome.messages["cancel"] == counts[factor] - 4
    assert counts == {None: 32, 1.0: 4, 1.5: 6, 8.0: 32}


@pytest.mark.parametrize("seed", range(6))
def test_serial_jobs_and_singletons_find_their_way(seed):
    # Singletons are never capable of a parallel job; a half-way split can hand
    # one the top corner of the space, where pushing upward ends: the search
    # goes outward then. Serial jobs run anywhere, on one node.
    groups = [0] * 16 + list(range(1, 101))
    clusters = actual(groups)
    rng = random.Random(seed)
    workload = Workload(
        [
            Job(k + 1, float(k), run_s=rng.randint(5, 60), procs=rng.choice((1, 1, 2, 4)))
            for k in range(120)
        ]
    )
    for policy in (Policy(dlb=False, qb=False), Policy()):
        outcome, _ = decentralised(
            workload, clusters, grid(groups), policy, job_latency_ms=0.2, seed=seed
        )
        check_schedule(workload, clusters, outcome)
        assert len(outcome.placements) == 120
        wide = [p for p in outcome.placements if len(p.nodes) > 1]
        assert wide and all(max(p.nodes) < 16 for p in wide)
