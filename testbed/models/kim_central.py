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
#   node can run are left out. Kim's later CENTRAL also redistributes queued jobs
#   periodically (seed 000 §4.2.2); this one does not (said where it is reported).

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import NamedTuple

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
) -> Central:
    """Each job's wait (submission to start) and the busy share at the last
    arrival. `jobs`: (submit time, requirement, run time); `speed`: the index
    of the speed in a node's point; per_speed: the run time is at speed 1 (work x
    baseline) and a node divides it by its speed, else it is the same anywhere."""
    free_at = [0.0] * len(nodes)  # when each node's queue drains
    ends: list[list[float]] = [[] for _ in nodes]  # heap of its queued jobs' ends
    order = sorted(range(len(jobs)), key=lambda k: (jobs[k][0], k))
    waits: list[float | None] = [None] * len(jobs)
    for k in order:
        t, want, work = jobs[k]
        capable = [
            n
            for n, have in enumerate(nodes)
            if all(h >= w for h, w in zip(have, want, strict=True))
        ]
        if not capable:
            continue
        for n in capable:
            while ends[n] and ends[n][0] <= t:
                heapq.heappop(ends[n])
        idle = [n for n in capable if not ends[n]]
        if idle:
            chosen = max(idle, key=lambda n: (nodes[n][speed], -n))
        else:
            chosen = min(capable, key=lambda n: (len(ends[n]), -nodes[n][speed], n))
        start = max(t, free_at[chosen])
        free_at[chosen] = start + (work / nodes[chosen][speed] if per_speed else work)
        heapq.heappush(ends[chosen], free_at[chosen])
        waits[k] = start - t
    last = max((t for t, _, _ in jobs), default=0.0)
    busy = sum(1 for end in free_at if end > last) / len(nodes) if nodes else 0.0
    return Central(waits, busy)
