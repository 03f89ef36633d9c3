# Matchmaking helpers (seed 000 §3.1 and §4.1.1, Kim's CAN-P; seed 002 §4.2):
# what the representative and the balancer ask of the neighbourhood. The CAN's
# dimensions are resources (a cluster's size and inverse latency, plus a
# virtual one); a node is capable of a job when its point is at least the
# job's requirement in every real dimension.
#
#   candidates()    us and our direct neighbours that are capable and have the
#                   live cluster members the job needs, with their last load;
#   least_capable() parsimony: a random one of the candidates no other is
#                   strictly below in every real dimension;
#   fastest()       Kim's CAN-P: a random one of the fastest candidates (the
#                   speed dimension, `speed_dimension`);
#   least_loaded()  Kim's basic CAN: a random one of the shortest queues;
#   push_target()   the upper neighbour whose region above is least loaded for
#                   its size, F = queued / nodes^2 (seed 000 §3.1);
#   aggregate()     Kim's eq. 4.1: the nodes and queued tasks above us in every
#                   dimension, weighted by the share of each upper neighbour's
#                   face that touches ours (eq. 4.2);
#   cluster_view()  our cluster as its members last beat us: live members,
#                   residue (members with nothing queued) and maxQL.
#
# Rules
#   Read-only: nothing here changes the overlay, the queue or what we heard.
#   The one random draw is least_capable()'s choice, from the peer's rng.

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from node.can.geometry import next_hop
from node.fields import FieldError
from node.sched.config import MAX_JOB_SIZE, MAX_RUNTIME_S, Address
from node.sched.context import Context
from node.sched.liveness import Liveness
from node.sched.records import Candidate
from node.wire import JobInfo, PeerInfo

__all__ = ["Matchmaker"]


class Matchmaker:
    """Matchmaking over the overlay's view and what our neighbours beat us."""

    def __init__(self, ctx: Context, live: Liveness, load: Callable[[], int]) -> None:
        self._ctx = ctx
        self._live = live
        self._load = load
        dims = ctx.view.config.space.dims
        self._real = [k for k, d in enumerate(dims) if not d.virtual]
        name = ctx.config.speed_dimension
        names = [d.name for d in dims if not d.virtual]
        if name and name not in names:
            raise FieldError(
                "sched", "speed_dimension", f"{name!r}: expected a real dimension, one of {names}"
            )
        self._speed = next((k for k in self._real if dims[k].name == name), self._real[0])

    def load(self) -> int:
        """Our own queue: tasks queued or running here."""
        return self._load()

    def speed(self, point: Sequence[float]) -> float:
        """A node's speed: its coordinate in the speed dimension (at least 1e-9)."""
        return max(point[self._speed], 1e-9)

    def run_time(self, job: JobInfo) -> float:
        """How long the job computes here: its runtime_s, or with runtime_per_speed
        its work (speed x seconds) over our speed (seed 000 §1.2: W / relative speed)."""
        if not self._ctx.config.runtime_per_speed:
            return job.runtime_s
        return job.runtime_s / self.speed(self._ctx.view.point)

    def fastest(self, candidates: list[Candidate]) -> Candidate:
        """A random one of the fastest candidates (Kim's CAN-P, seed 000 §4.1.1)."""
        top = max(self.speed(c.point) for c in candidates)
        return self._ctx.rng.choice([c for c in candidates if self.speed(c.point) == top])

    def least_loaded(self, candidates: list[Candidate]) -> Candidate:
        """A random one of the shortest queues (Kim's basic CAN, seed 000 §3.1)."""
        low = min(c.load for c in candidates)
        return self._ctx.rng.choice([c for c in candidates if c.load == low])

    def check_job(self, job: JobInfo) -> str | None:
        """Why a job from the wire or a command is malformed, or None."""
        if not 0 <= job.id < 2**63 or not 1 <= job.size <= MAX_JOB_SIZE:
            return "bad job id or size"
        if not (math.isfinite(job.runtime_s) and 0 <= job.runtime_s <= MAX_RUNTIME_S):
            return "bad runtime"
        if not math.isfinite(job.order):
            return "bad order"
        if len(job.point) != self._ctx.view.config.space.n or not all(
            math.isfinite(v) for v in job.point
        ):
            return "bad requirement point"
        return None

    def route_step(self, point: tuple[float, ...]) -> int | None:
        """The direct neighbour towards `point` (-1: we own it; None: a hole)."""
        view = self._ctx.view
        if not view.lo:
            return None
        boxes = [(i, view.known[i].info.lo, view.known[i].info.hi) for i in sorted(view.direct)]
        return next_hop(view.config.space, view.lo, view.hi, boxes, point)

    def candidates(self, job: JobInfo, now: float) -> list[Candidate]:
        """Us and our direct neighbours, where capable of the job (their
        capabilities, and as many live cluster members as it needs), with what
        they last told us of their load."""
        out = []
        size, free, maxql = self.cluster_view(now)
        point = self._ctx.view.point
        if self.capable(point, job) and size >= job.size:
            out.append(Candidate(self._ctx.address, point, self._load(), free, maxql))
        fresh = now - self._ctx.config.dead_after_s
        for info in self.neighbours():
            addr = (info.host, info.port)
            heard = self._live.state_of.get(addr)
            if heard is None or heard.at < fresh or heard.load < 0:
                continue  # not heard from yet, silent, or taking no jobs
            if self.capable(info.point, job) and heard.size >= job.size:
                out.append(Candidate(addr, info.point, heard.load, heard.free, heard.maxql))
        return out

    def least_capable(self, candidates: list[Candidate]) -> Candidate:
        """A random one of those no other is strictly below in every real
        dimension: jobs keep off nodes more capable than they need (parsimony)."""
        pool = [
            c
            for c in candidates
            if not any(
                all(o.point[k] < c.point[k] for k in self._real) for o in candidates if o is not c
            )
        ]
        return self._ctx.rng.choice(pool)

    def push_target(self, now: float) -> tuple[Address | None, int]:
        """The upper neighbour (in any dimension) whose region above is least
        loaded for its size, F = queued / nodes^2, and that dimension."""
        best: tuple[float, Address, int] | None = None
        fresh = now - self._ctx.config.dead_after_s
        for d, info, _share in self.uppers():
            heard = self._live.state_of.get((info.host, info.port))
            if heard is None or heard.at < fresh or heard.load < 0:
                continue
            nodes, queued = heard.above[2 * d], heard.above[2 * d + 1]
            score = queued / nodes**2 if nodes >= 1e-6 else math.inf
            if best is None or score < best[0]:
                best = (score, (info.host, info.port), d)
        return (None, 0) if best is None else (best[1], best[2])

    def closer_neighbour(self, job: JobInfo, now: float) -> Address | None:
        """The neighbour closest to the job's requirement, if closer than us."""
        mine = self.closeness(self._ctx.view.point, job)
        fresh = now - self._ctx.config.dead_after_s
        best: tuple[float, Address] | None = None
        for info in self.neighbours():
            heard = self._live.state_of.get((info.host, info.port))
            if heard is not None and (heard.at < fresh or heard.load < 0):
                continue
            score = self.closeness(info.point, job)
            if score > mine and (best is None or score > best[0]):
                best = (score, (info.host, info.port))
        return None if best is None else best[1]

    def uppers(self) -> Iterable[tuple[int, PeerInfo, float]]:
        """(dimension, neighbour, share): the neighbours whose zone begins where
        ours ends in a dimension, with the share of their lower face that
        touches ours (seed 000 eq. 4.2)."""
        view = self._ctx.view
        if not view.lo:
            return
        lo, hi = view.lo, view.hi
        for info in self.neighbours():
            if len(info.lo) != len(lo):
                continue
            for d in range(len(lo)):
                if info.lo[d] != hi[d]:
                    continue
                share = 1.0
                for i in range(len(lo)):
                    if i != d:
                        overlap = min(hi[i], info.hi[i]) - max(lo[i], info.lo[i])
                        share *= max(0.0, overlap) / (info.hi[i] - info.lo[i])
                if share > 0:
                    yield d, info, share

    def neighbours(self) -> Iterable[PeerInfo]:
        view = self._ctx.view
        return (view.known[i].info for i in sorted(view.direct) if i in view.known)

    def reach(self) -> Iterable[PeerInfo]:
        """The peers we beat and balance over: our direct neighbours, and with
        neighbours = "indirect" every other peer the CAN knows of (their
        neighbours, learnt from their updates)."""
        if self._ctx.config.neighbours == "direct":
            return self.neighbours()
        view = self._ctx.view
        return (view.known[i].info for i in sorted(view.known) if view.known[i].info.lo)

    def capable(self, point: Sequence[float], job: JobInfo) -> bool:
        return bool(point) and all(point[k] >= job.point[k] for k in self._real)

    def closeness(self, point: Sequence[float], job: JobInfo) -> float:
        return sum(
            min(point[k] / job.point[k], 1.0) if job.point[k] > 0 else 1.0 for k in self._real
        )

    def cluster_view(self, now: float) -> tuple[int, int, int]:
        """Our cluster as its members last told us: live members, how many of
        them have nothing queued (residue), the longest queue (maxQL)."""
        loads = [self._load()]
        for member in self._live.live()[1:]:
            heard = self._live.state_of.get(member)
            loads.append(heard.load if heard is not None and heard.load >= 0 else 0)
        return len(loads), sum(1 for q in loads if q == 0), max(loads)

    def aggregate(self, now: float) -> tuple[float, ...]:
        """Kim's eq. 4.1 for every dimension d: the nodes and the queued tasks
        above us, from each upper neighbour's own figures and its aggregate,
        weighted by the share of its face that touches ours."""
        out = [0.0] * len(self._live.above)
        fresh = now - self._ctx.config.dead_after_s
        for d, info, share in self.uppers():
            heard = self._live.state_of.get((info.host, info.port))
            if heard is None or heard.at < fresh:
                continue
            out[2 * d] += share * (heard.above[2 * d] + 1)
            out[2 * d + 1] += share * (heard.above[2 * d + 1] + max(0, heard.load))
        return tuple(out)
