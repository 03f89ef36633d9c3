# Kim's CENTRAL matchmaker (seed 000 §3.1.2, §4.1.2; seed 003 §5.1): the online
# scheduler with free, up-to-date global knowledge that his CAN variants are
# measured against. A cross-check computed beside a run on Kim's grid, not a
# scheduler of the peers (docs/workloads.md).
#
# Theory of operation
#   Jobs arrive at their submission times. Each goes at once to a capable node:
#   the fastest idle one if any is idle (Kim: "under light load it picks the
#   fastest idle node"), else the one with the shortest queue (running + waiting;
#   ties: the fastest, then the lowest index). Each node runs its queue in order
#   of arrival, one job at a time, a job taking work x baseline / speed. Jobs no
#   node can run are left out. With `redistribute_s` (Kim's CENTRAL of the load
#   balancing and large-scale experiments, seed 000 §4.2.2: "without the
#   redistribution, naive Centralized cannot outperform CAN-PULL/CAN-PUSH") every
#   redistribute_s all jobs still waiting are taken off their queues and placed
#   again, oldest first, by the same rule, until none waits.

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["Central", "kim_central"]

Point = Sequence[float]


class Central(NamedTuple):
    waits: list[float | None]  # each job's, in the order given; None: no node can run it
    # The share of the nodes busy when the last job arrives (Kim's Fig. 4.3 regime:
    # his E2 picks the inter-arrival time so that this is high).
    busy_at_last: float


def kim_central(
    nodes: Sequence[Point],
    jobs: Sequence[tuple[float, Point, float]],
    *,
    speed: int = 0,
    per_speed: bool = True,
    redistribute_s: float | None = None,
) -> Central:
    """Each job's wait (submission to start) and the busy share at the last
    arrival. `jobs`: (submit time, requirement, run time); `speed`: the index
    of the speed in a node's point; per_speed: the run time is at speed 1 (work x
    baseline) and a node divides it by its speed, else it is the same anywhere;
    redistribute_s: place the waiting jobs again this often (None: never)."""
    if redistribute_s is not None and not redistribute_s > 0:
        raise ValueError(f"redistribute_s must be positive, not {redistribute_s}")
    n = len(nodes)
    waits: list[float | None] = [None] * len(jobs)
    if n == 0 or not jobs:
        return Central(waits, 0.0)
    caps = np.asarray(nodes, dtype=np.float64)
    speeds = caps[:, speed]
    index = np.arange(n)
    run_end = np.zeros(n)  # when each node's running job ends (<= now: idle)
    waiting = np.zeros(n, dtype=np.int64)  # jobs queued behind it
    queues: list[deque[int]] = [deque() for _ in range(n)]
    starts: list[tuple[float, int]] = []  # (when a queued job may start, node): a heap

    def run_s(job: int, node: int) -> float:
        work = jobs[job][2]
        return work / float(speeds[node]) if per_speed else work

    def start_due(until: float) -> None:
        """Start the queued jobs whose turn comes by `until`."""
        while starts and starts[0][0] <= until:
            at, node = heapq.heappop(starts)
            if not queues[node] or run_end[node] != at:
                continue  # stale: the queue was redistributed or moved on
            job = queues[node].popleft()
            waiting[node] -= 1
            begin = max(at, jobs[job][0])
            waits[job] = begin - jobs[job][0]
            run_end[node] = begin + run_s(job, node)
            if queues[node]:
                heapq.heappush(starts, (float(run_end[node]), node))

    def place(job: int, now: float) -> None:
        capable = masks[job]
        idle = capable & (run_end <= now) & (waiting == 0)
        if idle.any():
            node = int(index[idle][np.argmax(speeds[idle])])  # the fastest, lowest index
            waits[job] = now - jobs[job][0]
            run_end[node] = now + run_s(job, node)
            return
        load = waiting + (run_end > now)
        among = index[capable]
        node = int(among[np.lexsort((among, -speeds[among], load[among]))[0]])
        queues[node].append(job)
        waiting[node] += 1
        if len(queues[node]) == 1:
            heapq.heappush(starts, (float(run_end[node]), node))

    wants = np.asarray([want for _, want, _ in jobs], dtype=np.float64)
    masks = (caps[None, :, :] >= wants[:, None, :]).all(axis=2)  # (jobs, nodes)
    order = sorted(range(len(jobs)), key=lambda k: (jobs[k][0], k))
    last = jobs[order[-1]][0]
    busy_at_last = 0.0
    tick = redistribute_s if redistribute_s is not None else np.inf
    for k in order:
        t = jobs[k][0]
        while tick <= t:
            tick = _redistribute(tick, start_due, queues, waiting, place, jobs, redistribute_s)
        start_due(t)
        if masks[k].any():
            place(k, t)
        if k == order[-1]:
            busy_at_last = float(np.count_nonzero((run_end > last) | (waiting > 0))) / n
    while tick < np.inf and waiting.any():
        tick = _redistribute(tick, start_due, queues, waiting, place, jobs, redistribute_s)
    start_due(np.inf)
    return Central(waits, busy_at_last)


def _redistribute(
    tick: float,
    start_due: Callable[[float], None],
    queues: list[deque[int]],
    waiting: np.ndarray,
    place: Callable[[int, float], None],
    jobs: Sequence[tuple[float, Point, float]],
    period: float | None,
) -> float:
    """At `tick`: every job still waiting placed again, oldest first; the next tick."""
    assert period is not None
    start_due(tick)
    queued = sorted((job for q in queues for job in q), key=lambda k: (jobs[k][0], k))
    for q in queues:
        q.clear()
    waiting[:] = 0
    for job in queued:
        place(job, tick)
    return tick + period
