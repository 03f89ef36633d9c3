# The idealised central FCFS scheduler of seed 002 §4.3.2: the baseline the
# decentralised schedulers are measured against.
#
# Theory of operation
#   One queue in submission order and global, up-to-date knowledge of which
#   nodes are free. A job of k tasks runs on k free nodes of one cluster (any
#   advertised cluster of at least k nodes; clusters may overlap, as OVERLAP-n
#   and dynamic ones do). At every arrival and completion the queue is scanned
#   oldest first: a job that fits starts (on the cluster with the fewest free
#   nodes that still holds it: the large free clusters stay for large jobs);
#   a job that does not fit reserves the nodes of every cluster it could run
#   on, so a newer job may run out of order only where it cannot delay an
#   older one ("it will run a small job on a small cluster though there is a
#   large job waiting ahead of the small job"). Run times are not known in
#   advance (no backfilling on estimates, as the thesis's schedulers).
#
#   A job wider than every cluster can never run: it is reported, not counted
#   (the thesis discounted them: at most 7 of its 1,000).

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from testbed.workload import Workload

__all__ = ["Placement", "central_fcfs"]


@dataclass(frozen=True)
class Placement:
    job: int  # the trace's job id
    submit_s: float
    start_s: float
    end_s: float
    nodes: tuple[int, ...]

    @property
    def wait_s(self) -> float:
        return self.start_s - self.submit_s


def central_fcfs(
    workload: Workload, clusters: Sequence[Sequence[int]]
) -> tuple[list[Placement], list[int]]:
    """Schedule every job of `workload` on `clusters` (node index sets); returns
    (placements in start order, ids of the jobs that fit no cluster)."""
    distinct = sorted({tuple(sorted(c)) for c in clusters if len(c)}, key=lambda c: (len(c), c))
    widest = max((len(c) for c in distinct), default=0)
    of_node: dict[int, list[int]] = {}
    for k, cluster in enumerate(distinct):
        for node in cluster:
            of_node.setdefault(node, []).append(k)
    free_count = [len(c) for c in distinct]
    busy: set[int] = set()
    jobs = sorted(workload.jobs, key=lambda j: (j.submit_s, j.job))
    unschedulable = [j.job for j in jobs if j.size > widest or j.size < 1]
    pending = [j for j in jobs if 1 <= j.size <= widest]
    queue: list = []  # waiting jobs, oldest first
    completions: list[tuple[float, int, tuple[int, ...]]] = []
    placements: list[Placement] = []
    arrival = 0

    def take(nodes: tuple[int, ...], used: bool) -> None:
        for node in nodes:
            if used:
                busy.add(node)
            else:
                busy.discard(node)
            for k in of_node.get(node, ()):
                free_count[k] += -1 if used else 1

    everyone = set(of_node)
    at_least: dict[int, set[int]] = {}  # size -> the nodes of every cluster that large

    def wide(size: int) -> set[int]:
        if size not in at_least:
            at_least[size] = {n for c in distinct if len(c) >= size for n in c}
        return at_least[size]

    def schedule(now: float) -> None:
        reserved: set[int] = set()
        still = []
        for position, job in enumerate(queue):
            if len(busy) + len(reserved) >= len(everyone):
                still.extend(queue[position:])  # every node is busy or held for an older job
                break
            best = None
            for k, cluster in enumerate(distinct):
                if len(cluster) < job.size or free_count[k] < job.size:
                    continue
                free = [n for n in cluster if n not in busy and n not in reserved]
                if len(free) >= job.size and (best is None or len(free) < best[0]):
                    best = (len(free), free)
            if best is None:
                still.append(job)
                reserved |= wide(job.size) - busy  # nobody newer takes what it may need
                continue
            nodes = tuple(best[1][: job.size])
            take(nodes, True)
            end = now + max(job.runtime_s, 0.0)
            heapq.heappush(completions, (end, job.job, nodes))
            placements.append(Placement(job.job, job.submit_s, now, end, nodes))
        queue[:] = still

    while arrival < len(pending) or completions:
        next_arrival = pending[arrival].submit_s if arrival < len(pending) else float("inf")
        next_end = completions[0][0] if completions else float("inf")
        now = min(next_arrival, next_end)
        while completions and completions[0][0] <= now:
            _, _, nodes = heapq.heappop(completions)
            take(nodes, False)
        while arrival < len(pending) and pending[arrival].submit_s <= now:
            queue.append(pending[arrival])
            arrival += 1
        schedule(now)
    return placements, unschedulable
