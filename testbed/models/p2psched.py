# The decentralised scheduler of seed 002 chapter 4, simulated job by job on a
# grid of thousands of nodes: the CAN over resource coordinates, the
# representative and dependent tasks with over-provisioning, submit-ordered
# queues and the deadlock rule, and the two balancers DLB (Algorithm 1) and QB
# (Algorithm 2). Trace seconds throughout; what a variant is: `Policy`.
#
# Theory of operation
#   The CAN. Every node's point is its resource coordinate: the size of the
#   cluster it advertises, its inverse latency (1 / the cluster's diameter by
#   the matrix; a singleton advertises size 1 and inverse latency 0) and a
#   random virtual value (seed 002 §4.2). Nodes join in a random order; a join
#   splits the zone holding the joiner's point half-way between the two points,
#   across the dimension in which they differ most, so every node owns the zone
#   round its own point. Direct neighbours share a face; indirect ones are the
#   neighbours' neighbours.
#
#   A job. Its requirement is (size, 1 / latency bound, random virtual). It
#   enters at a random node and is routed greedily (the neighbour whose zone is
#   nearest the point) to the owner of the point; an owner that is not capable
#   pushes it on to the minimal capable node of its neighbourhood, or, when it
#   sees none, to the direct neighbour least short of the requirement (Kim's
#   pushing is not restated by the thesis; this is our reading). There a
#   representative task dispatches dependent tasks to the members of the node's
#   cluster: size x over-provisioning of them (all members: "total"), members
#   with the shortest queues first. A dependent task at the head of an idle
#   node is ready and holds the node; when `size` tasks of a job are ready the
#   representative starts those and cancels the rest. Queues are ordered by
#   submit time, a hash of the job breaking ties, so a task of an older job
#   arriving where a newer one is ready takes the head and the newer one loses
#   its ready state (the deadlock rule, in its minimal reading: the newer task
#   stays queued behind). The oldest waiting job therefore always progresses:
#   no deadlock, nothing lost.
#
#   Control messages between a representative and its members travel inside a
#   cluster (microseconds here, against job times of seconds): they take effect
#   at once, in causal order, so no start races a loss of readiness. Routing
#   and a moved job's transfer take the matrix's latency along their hops.
#
#   Balancing. Every `period_s` each node with an idle job (a representative
#   not started) runs DLB and then QB over its direct and indirect neighbours,
#   moving at most one job per node and period. DLB moves a job at most once
#   (the thesis's progress rule); QB may move it again, since its c1 asks every
#   move to shorten the job's queue positions (the thesis leaves open whether
#   the once-rule covers QB; applied to both, a QB move barred the free cluster
#   DLB would find later, and QB+DLB did worse than DLB). Their data are what CAN maintenance carries: every node's residue
#   (free members of its cluster: members with no runnable task) and maxQL (its
#   cluster's longest queue), refreshed every `update_s`, so they are stale
#   by up to that long; averageQP is the job's own tasks' mean queue position
#   (their reports). "Minimum" is a random candidate that no other strictly
#   dominates in (size, inverse latency). A moved job's tasks are cancelled and
#   the new node dispatches again in its own cluster. QB never moves a job back
#   to a cluster it left: its view of maxQL is stale, so c1 alone let jobs
#   ping-pong between two clusters.

from __future__ import annotations

import heapq
import math
import random
import zlib
from bisect import bisect_left, insort
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from testbed.models.central import Placement
from testbed.workload import Job, Workload

__all__ = ["Can", "Outcome", "Policy", "decentralised"]

_EPS = 1e-9
STOPPING = 2  # Kim's stopping factor SF (seed 000 §4.1.1: 2, the most stable)


@dataclass(frozen=True)
class Policy:
    """One decentralised variant: which balancers, how much over-provisioning
    (a factor >= 1, or None for total), which neighbours, how often."""

    dlb: bool = True
    qb: bool = True
    overprovision: float | None = None
    indirect: bool = True
    period_s: float = 10.0
    update_s: float = 10.0

    @property
    def name(self) -> str:
        balance = "+".join(n for n, on in (("QB", self.qb), ("DLB", self.dlb)) if on)
        return balance or "STATIC"


@dataclass
class Outcome:
    placements: list[Placement]
    failed: list[tuple[int, str]]  # (job, reason)
    lost: list[tuple[int, str]]  # jobs neither completed nor failed, with what was left
    messages: Counter = field(default_factory=Counter)
    moves: Counter = field(default_factory=Counter)
    route_hops: list[int] = field(default_factory=list)
    held_idle_s: float = 0.0  # node time spent holding a ready task, idle


class Can:
    """The CAN of the grid's resource coordinates: zones, direct and indirect
    neighbours, greedy routing to a point."""

    def __init__(self, points: np.ndarray, rng: random.Random) -> None:
        n, dims = points.shape
        self.points = points
        lo = np.zeros((n, dims))
        hi = np.ones((n, dims))
        order = list(range(n))
        rng.shuffle(order)
        owner = np.full(n, -1)  # zone k is owned by node owner[k]; zone of node x: zone_of[x]
        zone_of = np.full(n, -1)
        owner[0], zone_of[order[0]] = order[0], 0
        for k, x in enumerate(order[1:], start=1):
            p = points[x]
            inside = np.all((lo[:k] <= p) & (p < hi[:k]), axis=1)
            z = int(np.flatnonzero(inside)[0])
            y = int(owner[z])
            q = points[y]
            d = int(np.argmax(np.abs(p - q)))
            mid = (p[d] + q[d]) / 2
            lo[k], hi[k] = lo[z], hi[z]
            if p[d] < q[d]:
                hi[k, d], lo[z, d] = mid, mid
            else:
                lo[k, d], hi[z, d] = mid, mid
            owner[k], zone_of[x] = x, k
        self.lo = lo[zone_of]  # per node
        self.hi = hi[zone_of]
        self.direct: list[np.ndarray] = []
        for x in range(n):
            overlap = (self.lo[x] < self.hi) & (self.lo < self.hi[x])
            abut = (self.hi[x] == self.lo) | (self.lo[x] == self.hi)
            adjacent = np.zeros(n, dtype=bool)
            for d in range(dims):
                others = np.delete(overlap, d, axis=1).all(axis=1)
                adjacent |= abut[:, d] & others
            adjacent[x] = False
            self.direct.append(np.flatnonzero(adjacent))
        self.around: list[np.ndarray] = []
        for x in range(n):
            near = set(self.direct[x].tolist())
            for m in self.direct[x]:
                near.update(self.direct[m].tolist())
            near.discard(x)
            self.around.append(np.fromiter(sorted(near), dtype=np.int64))
        # Upper neighbours per dimension, with the share of each one's face that
        # abuts (Kim's aggregation, seed 000 §4.1.1): src's zone ends where dst's begins.
        self.upper: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for d in range(dims):
            src, dst, share = [], [], []
            for x in range(n):
                for u in self.direct[x]:
                    if self.hi[x, d] != self.lo[u, d]:
                        continue
                    lo = np.delete(np.maximum(self.lo[x], self.lo[u]), d)
                    hi = np.delete(np.minimum(self.hi[x], self.hi[u]), d)
                    extent = np.delete(self.hi[u] - self.lo[u], d)
                    src.append(x)
                    dst.append(int(u))
                    share.append(float(np.prod(np.maximum(hi - lo, 0) / extent)))
            self.upper.append(
                (np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.array(share))
            )
        self.above = self.aggregate(np.ones(n), rounds=n)  # nodes above, per dimension

    def aggregate(
        self, value: np.ndarray, rounds: int, start: np.ndarray | None = None
    ) -> np.ndarray:
        """Per node and dimension, the sum of `value` over the nodes above it, as
        Kim's periodic updates estimate it: each round every node adds its upper
        neighbours' own values and estimates, weighted by the face they share.
        `rounds` updates from `start` (zeros), stopping early once stable."""
        n, dims = self.points.shape
        out = np.zeros((n, dims)) if start is None else start.copy()
        for _ in range(rounds):
            new = np.empty_like(out)
            for d, (src, dst, share) in enumerate(self.upper):
                new[:, d] = np.bincount(
                    src, weights=share * (out[dst, d] + value[dst]), minlength=n
                )
            if np.allclose(new, out):
                return new
            out = new
        return out

    def owns(self, x: int, p: np.ndarray) -> bool:
        return bool(np.all((self.lo[x] <= p) & (p < self.hi[x])))

    def route(self, start: int, p: np.ndarray) -> list[int]:
        """The hops from `start` to the owner of `p`, both ends included."""
        path = [start]
        x = start
        for _ in range(len(self.points)):
            if self.owns(x, p):
                return path
            near = self.direct[x]
            gap = np.maximum(np.maximum(self.lo[near] - p, p - self.hi[near]), 0.0)
            x = int(near[int(np.argmin((gap**2).sum(axis=1)))])
            path.append(x)
        raise RuntimeError("CAN routing did not converge")  # a partition always has a way


@dataclass(eq=False)
class _Task:
    rep: _Rep
    node: int
    ready: bool = False


@dataclass(eq=False)
class _Rep:
    job: Job
    key: tuple[float, int]
    node: int
    tasks: list[_Task] = field(default_factory=list)
    ready: list[_Task] = field(default_factory=list)
    started_s: float | None = None
    nodes: tuple[int, ...] = ()
    task_nodes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    done: int = 0
    end_s: float = 0.0
    moved: bool = False  # by DLB (once only)
    left: list[int] = field(default_factory=list)  # clusters it was moved from


def _key(job: Job) -> tuple[float, int]:
    """Submit time, ties broken by a hash of the job's properties (seed 002 §4.2)."""
    return (job.submit_s, zlib.crc32(f"{job.job}/{job.size}/{job.runtime_s}".encode()))


def decentralised(
    workload: Workload,
    clusters: Sequence[Sequence[int]],
    latency_ms: np.ndarray,
    policy: Policy,
    *,
    job_latency_ms: float,
    seed: int,
    can: Can | None = None,
) -> tuple[Outcome, Can]:
    """Schedule `workload` on the grid whose node k advertises `clusters[k]`
    (its own index among them; a node alone: size 1), with `latency_ms` the
    symmetric matrix (ms). Every parallel job asks for members within
    `job_latency_ms` of each other. `can` reuses the CAN of an earlier call on
    the same clustering and seed. Returns (outcome, can)."""
    return _Run(workload, clusters, latency_ms, policy, job_latency_ms, seed, can).run()


class _Run:
    def __init__(
        self,
        workload: Workload,
        clusters: Sequence[Sequence[int]],
        latency_ms: np.ndarray,
        policy: Policy,
        job_latency_ms: float,
        seed: int,
        can: Can | None,
    ) -> None:
        self.policy = policy
        self.rng = random.Random(f"{seed}/{policy}")
        n = len(clusters)
        self.n = n
        self.delay_s = np.asarray(latency_ms, dtype=np.float64) / 1000.0
        self.cluster = [
            np.asarray(sorted(set(c) | {k}), dtype=np.int64) for k, c in enumerate(clusters)
        ]
        size = np.array([len(c) for c in self.cluster], dtype=np.float64)
        diameter = np.array(
            [
                self.delay_s[np.ix_(c, c)].max() * 1000.0 if len(c) > 1 else math.inf
                for c in self.cluster
            ]
        )
        inverse = np.where(np.isfinite(diameter), 1.0 / np.maximum(diameter, 1e-6), 0.0)
        self.size, self.inverse = size, inverse
        self.need_inverse = 1.0 / job_latency_ms
        # CAN coordinates: size and inverse latency scaled into [0, 1), log for the latter.
        self.scale = (
            size.max() + 1.0,
            math.log1p(max(inverse.max(), self.need_inverse)) * (1 + 1e-6),
        )
        if can is None:
            layout = random.Random(f"{seed}/can")
            virtual = np.array([layout.random() for _ in range(n)])
            can = Can(np.column_stack([*self._scaled(size, inverse), virtual]), layout)
        self.can = can
        # Distinct clusters as one flat index for the periodic residue / maxQL.
        distinct: dict[tuple[int, ...], int] = {}
        self.cluster_id = np.array(
            [distinct.setdefault(tuple(c.tolist()), len(distinct)) for c in self.cluster]
        )
        members = [np.asarray(c, dtype=np.int64) for c in distinct]
        self.flat = np.concatenate(members)
        self.offsets = np.cumsum([0] + [len(c) for c in members[:-1]])
        self.queue: list[list[tuple[tuple[float, int], int, _Task]]] = [[] for _ in range(n)]
        self.running: list[_Task | None] = [None] * n
        self.qlen = np.zeros(n, dtype=np.int64)  # runnable tasks: running and queued
        self.changed = True  # since balancing last looked
        self.events_done = 0  # events other than balancing, so far
        self.snap_events = -1  # ... when the snapshot was taken
        self.held: list[_Task | None] = [None] * n
        self.held_since = [0.0] * n
        self.events: list = []
        self.seq = 0
        self.dirty: deque[int] = deque()
        self.idle: dict[int, set[_Rep]] = {}  # node -> its representatives not started
        self.snapshot_at = -math.inf
        self.snap_above_load = np.zeros(self.can.points.shape)
        self.jobs = sorted(workload.jobs, key=_key)
        self.out = Outcome([], [], [])
        self.now = 0.0
        self.unfinished = 0

    def _scaled(self, size, inverse):
        return size / self.scale[0], np.log1p(inverse) / self.scale[1]

    # ---- events ----

    def at(self, t: float, fn, *args) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn, args))

    def run(self) -> tuple[Outcome, Can]:
        widest = int(
            max(
                (self.size[k] for k in range(self.n) if self.inverse[k] >= self.need_inverse),
                default=1,
            )
        )
        for job in self.jobs:
            if job.size < 1:
                self.out.failed.append((job.job, f"size {job.size}: not a job size"))
            elif job.size > 1 and job.size > widest:
                self.out.failed.append(
                    (
                        job.job,
                        f"{job.size} nodes: wider than every cluster within the latency bound ({widest})",
                    )
                )
            else:
                self.unfinished += 1
                self.at(job.submit_s, self.arrive, job)
        if self.policy.dlb or self.policy.qb:
            self.at(self.policy.period_s, self.balance)
        while self.events:
            t, _, fn, args = heapq.heappop(self.events)
            self.now = t
            if fn != self.balance:
                self.changed = True
                self.events_done += 1
            fn(*args)
            self.settle()
            if self.unfinished == 0:
                break
        for reps in self.idle.values():
            for rep in reps:
                self.out.lost.append(
                    (
                        rep.job.job,
                        f"never started: {len(rep.ready)} of {rep.job.size} tasks ready",
                    )
                )
        self.out.placements.sort(key=lambda p: (p.start_s, p.job))
        return self.out, self.can

    # ---- a job's way in ----

    def arrive(self, job: Job) -> None:
        serial = job.size == 1
        need = np.array([1.0, 0.0]) if serial else np.array([float(job.size), self.need_inverse])
        p = np.array([*self._scaled(need[0], need[1]), self.rng.random()])
        start = self.rng.randrange(self.n)
        path = self.can.route(start, p)
        end = self.push(path[-1], need, path, serial)
        self.out.route_hops.append(len(path) - 1)
        self.out.messages["route"] += len(path) - 1
        delay = sum(self.delay_s[a, b] for a, b in pairwise(path))
        rep = _Rep(job, _key(job), end)
        self.at(self.now + delay, self.settle_rep, rep, end)

    def capable(self, nodes: np.ndarray, need: np.ndarray) -> np.ndarray:
        return (self.size[nodes] >= need[0]) & (self.inverse[nodes] >= need[1])

    def minimum(self, nodes: np.ndarray) -> int:
        """A random one of the candidates that no other strictly dominates."""
        s, v = self.size[nodes], self.inverse[nodes]
        dominated = np.array([bool(np.any((s < s[i]) & (v < v[i]))) for i in range(len(nodes))])
        pool = nodes[~dominated]
        return int(pool[self.rng.randrange(len(pool))])

    def push(self, owner: int, need: np.ndarray, path: list[int], serial: bool) -> int:
        """Kim's CAN-P matchmaking from the owner of the job's point (seed 000
        §4.1.1), with a cluster's residue for "free" when the job is parallel:
        stop at a free capable node (the minimal one), else push upward towards
        the lightly loaded, large region (F = queued / nodes^2 above), stopping
        with probability 1 / (1 + nodes above)^SF once a capable node was seen;
        the run node is then the best capable one met (shortest maxQL)."""
        self.refresh()
        x, best = owner, None
        load = self.snap_qlen if serial else self.snap_maxql
        for _ in range(self.n):
            seen = np.append(self.can.direct[x], x)
            ok = seen[self.capable(seen, need)]
            if len(ok):
                room = self.snap_qlen[ok] == 0 if serial else self.snap_free[ok] >= need[0]
                if room.any():
                    y = self.minimum(ok[room])
                    if y != x:
                        path.append(y)
                    return y
                here = int(ok[int(np.argmin(load[ok]))])
                if best is None or load[here] < load[best]:
                    best = here
            target, dim, score = None, 0, math.inf
            for d, (src, dst, _) in enumerate(self.can.upper):
                for u in dst[src == x]:
                    nodes = self.can.above[u, d]
                    f = self.snap_above_load[u, d] / nodes**2 if nodes > 0 else math.inf
                    if target is None or f < score:
                        target, dim, score = int(u), d, f
            if target is None:
                break
            if (
                best is not None
                and self.rng.random() < 1.0 / (1.0 + self.can.above[x, dim]) ** STOPPING
            ):
                break
            x = target
            path.append(x)
        if best is None:  # upward led to a corner of incapable nodes: search outward
            best = self.nearest_capable(x, need, path)
        if best != path[-1]:
            path.append(best)
        return best

    def nearest_capable(self, start: int, need: np.ndarray, path: list[int]) -> int:
        """Breadth-first over direct neighbours from `start` to the first capable
        node, its way appended to `path`. Pushing goes upward only, and a
        half-way split can leave an incapable node (a singleton) owning the top
        corner of the space: this is the way out. The grid always holds a
        capable node (wider jobs fail before routing)."""
        parent = {start: start}
        frontier = deque([start])
        while frontier:
            x = frontier.popleft()
            if self.capable(np.array([x]), need)[0]:
                way = [x]
                while way[-1] != start:
                    way.append(parent[way[-1]])
                path.extend(reversed(way[:-1]))
                return x
            for m in self.can.direct[x].tolist():
                if m not in parent:
                    parent[m] = x
                    frontier.append(m)
        raise RuntimeError("no capable node in the grid")  # run() fails such jobs first

    def settle_rep(self, rep: _Rep, node: int) -> None:
        """The representative starts on `node` and dispatches its tasks."""
        rep.node = node
        rep.tasks, rep.ready = [], []
        self.idle.setdefault(node, set()).add(rep)
        job = rep.job
        if job.size == 1:  # a serial job: the owner picks the least-loaded neighbour it knows of
            self.refresh()
            near = np.append(self.can.around[node], node)
            qlen = self.snap_qlen[near]
            best = near[qlen == qlen.min()]
            targets = [int(best[self.rng.randrange(len(best))])]
        else:
            members = self.cluster[node]
            count = len(members)
            if self.policy.overprovision is not None:
                count = min(count, math.ceil(job.size * self.policy.overprovision - _EPS))
            self.refresh()
            order = sorted(members.tolist(), key=lambda m: (self.snap_qlen[m], self.rng.random()))
            targets = order[:count]
        for m in targets:
            task = _Task(rep, m)
            rep.tasks.append(task)
            insort(self.queue[m], (rep.key, id(task), task))
            self.qlen[m] += 1
            self.dirty.append(m)
        rep.task_nodes = np.asarray(targets, dtype=np.int64)
        self.out.messages["dispatch"] += len(targets)

    # ---- nodes ----

    def settle(self) -> None:
        while self.dirty:
            self.head(self.dirty.popleft())

    def head(self, m: int) -> None:
        if self.running[m] is not None:
            return
        top = self.queue[m][0][2] if self.queue[m] else None
        held = self.held[m]
        if held is not None and held is not top:  # an older task came ahead: the deadlock rule
            self.release(m)
            held.ready = False
            held.rep.ready.remove(held)
            self.out.messages["unready"] += 1
        if top is None or top.ready:
            return
        top.ready = True
        self.held[m], self.held_since[m] = top, self.now
        self.out.messages["ready"] += 1
        rep = top.rep
        rep.ready.append(top)
        if len(rep.ready) >= rep.job.size:
            self.start(rep)

    def position(self, task: _Task) -> int:
        return bisect_left(self.queue[task.node], (task.rep.key, id(task)))

    def unqueue(self, task: _Task) -> None:
        del self.queue[task.node][self.position(task)]
        self.qlen[task.node] -= 1

    def release(self, m: int) -> None:
        self.out.held_idle_s += self.now - self.held_since[m]
        self.held[m] = None

    def start(self, rep: _Rep) -> None:
        chosen = rep.ready[: rep.job.size]
        rep.started_s = self.now
        self.idle[rep.node].discard(rep)
        runtime = max(rep.job.runtime_s, 0.0)
        for task in chosen:
            m = task.node
            self.release(m)
            self.unqueue(task)
            self.running[m] = task
            self.qlen[m] += 1
            self.at(self.now + runtime, self.finish, task)
        self.out.messages["start"] += len(chosen)
        rep.nodes = tuple(sorted(t.node for t in chosen))
        picked = {id(t) for t in chosen}
        self.cancel(rep, [t for t in rep.tasks if id(t) not in picked])
        rep.tasks = chosen

    def cancel(self, rep: _Rep, tasks: list[_Task]) -> None:
        for task in tasks:
            m = task.node
            self.unqueue(task)
            if self.held[m] is task:
                self.release(m)
                task.ready = False
            self.dirty.append(m)
        self.out.messages["cancel"] += len(tasks)

    def finish(self, task: _Task) -> None:
        m = task.node
        self.running[m] = None
        self.qlen[m] -= 1
        self.dirty.append(m)
        rep = task.rep
        rep.done += 1
        self.out.messages["done"] += 1
        if rep.done == rep.job.size:
            assert rep.started_s is not None
            job = rep.job
            self.out.placements.append(
                Placement(job.job, job.submit_s, rep.started_s, self.now, rep.nodes)
            )
            self.unfinished -= 1

    # ---- balancing ----

    def refresh(self) -> None:
        """The CAN maintenance data: taken at the first use in each update
        period, so up to `update_s` old; the aggregation runs one round per
        period elapsed (on the loads of now)."""
        tick = math.floor(self.now / self.policy.update_s)
        if tick == self.snapshot_at:
            return
        self.snap_events = self.events_done
        rounds = self.n if self.snapshot_at == -math.inf else min(tick - self.snapshot_at, self.n)
        self.snapshot_at = tick
        qlen = self.qlen.copy()
        self.snap_qlen = qlen
        free = (qlen == 0).astype(np.int64)[self.flat]
        self.snap_free = np.add.reduceat(free, self.offsets)[self.cluster_id]
        self.snap_maxql = np.maximum.reduceat(qlen[self.flat], self.offsets)[self.cluster_id]
        # Queued tasks above every node, one round of updates per period (stale, as Kim's).
        self.snap_above_load = self.can.aggregate(
            qlen.astype(np.float64), int(rounds), self.snap_above_load
        )

    def average_qp(self, rep: _Rep) -> float:
        total = sum(self.position(t) + (self.running[t.node] is not None) for t in rep.tasks)
        return total / max(len(rep.tasks), 1)

    def balance(self) -> None:
        """One period of DLB / QB on every node with idle jobs. Skipped when
        nothing happened since a period that moved nothing and that period's
        views already held every event: the same views give the same (empty)
        answer. With nothing left to happen but this timer, the run ends (and
        reports what never started)."""
        if self.unfinished == 0 or not self.events:
            return
        if self.changed or self.snap_events != self.events_done:
            self.refresh()
            moves = sum(self.out.moves.values())
            nodes = [m for m, reps in self.idle.items() if reps]
            self.rng.shuffle(nodes)
            for n in nodes:
                self.balance_node(n)
            self.changed = sum(self.out.moves.values()) != moves
        self.at(self.now + self.policy.period_s, self.balance)

    def balance_node(self, n: int) -> None:
        reps = sorted(self.idle[n], key=lambda r: r.key)
        near = self.can.around[n] if self.policy.indirect else self.can.direct[n]
        if not reps or not len(near):
            return
        for algorithm in ("dlb", "qb"):
            if not getattr(self.policy, algorithm):
                continue
            for rep in reps:
                if algorithm == "dlb" and rep.moved:
                    continue
                job = rep.job
                need = (1.0, 0.0) if job.size == 1 else (float(job.size), self.need_inverse)
                if algorithm == "dlb":  # c0: m can run it now
                    room = (
                        self.snap_qlen[near] == 0
                        if job.size == 1
                        else self.snap_free[near] >= need[0]
                    )
                    ok = room & (self.inverse[near] >= need[1]) & (self.size[near] >= need[0])
                else:  # c0: m is capable; c1: its longest queue beats the job's positions
                    ok = (self.size[near] >= need[0]) & (self.inverse[near] >= need[1])
                    if not ok.any():
                        continue
                    worst = self.snap_qlen[near] if job.size == 1 else self.snap_maxql[near]
                    if worst[ok].min() >= self.qlen[rep.task_nodes].max() - 2:
                        continue  # no candidate can beat it: averageQP <= max qlen - 1
                    ok &= worst < self.average_qp(rep) - 1
                    ok &= ~np.isin(self.cluster_id[near], rep.left)  # no way back: stale maxQL
                if ok.any():
                    self.move(rep, self.minimum(near[ok]), algorithm)
                    return

    def move(self, rep: _Rep, m: int, algorithm: str) -> None:
        self.idle[rep.node].discard(rep)
        self.cancel(rep, rep.tasks)
        for task in rep.ready:
            task.ready = False
        rep.moved = rep.moved or algorithm == "dlb"
        rep.left.append(int(self.cluster_id[rep.node]))
        self.out.moves[algorithm] += 1
        self.out.messages["move"] += 1
        self.at(self.now + self.delay_s[rep.node, m], self.settle_rep, rep, m)
