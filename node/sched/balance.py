# Dynamic balancing of jobs not started yet (seed 002 §4.2, Algorithms 1 and
# 2): every `balance_s` a representative looks at its idle attempts (not
# started, never moved), oldest first, and moves the first one a neighbour
# can take there (a JobRoute at stage PLACED, moved=True), one per period.
#
#   DLB (c0): the neighbour's residue runs the job now (a serial job: an empty
#             queue; a parallel one: `size` free members of its cluster);
#   QB  (c1): no task of the job would queue longer there: its longest queue
#             (a serial job: its queue) is below the job's average queue
#             position here less one.
#
# Rules
#   Neighbours are our direct ones, or with neighbours = "indirect" every peer
#   the CAN knows of; only another cluster's nodes that take jobs and beat us
#   lately count. A moved attempt stays where it was moved. Draws from the
#   peer's rng: the choice among the least capable fitting neighbours.

from __future__ import annotations

import math
from collections.abc import Callable

from node.events import JobMoved
from node.sched.config import STAGE_PLACED, Address
from node.sched.context import Context
from node.sched.liveness import Liveness
from node.sched.matchmaking import Matchmaker
from node.sched.records import Candidate, Heard, Rep, order
from node.sched.representative import RepRole
from node.sched.states import RepState
from node.wire import Endpoint, JobRoute, PeerInfo, TaskCancel

__all__ = ["Balancer"]

Positions = Callable[[], dict[tuple[int, int], int]]


class Balancer:
    """DLB and QB over our representative's idle attempts."""

    def __init__(
        self,
        ctx: Context,
        live: Liveness,
        match: Matchmaker,
        reps: RepRole,
        positions: Positions,
    ) -> None:
        self._ctx = ctx
        self._live = live
        self._match = match
        self._reps = reps
        self._positions = positions
        self.balancers = set(ctx.config.balance.split("+")) - {"none"}

    def balance(self, now: float) -> None:
        """DLB, then QB: the oldest idle job (not started, never moved) that a
        neighbour can take is moved there; one job per period at most."""
        idle = self._idle(now)
        if not idle:
            return
        near = self._near(now)
        for how in ("dlb", "qb"):
            if how not in self.balancers:
                continue
            for rep in idle:
                fits = self._fits(rep, near, how)
                if fits:
                    self._move(rep, self._match.least_capable(fits).addr, how, now)
                    return

    def _idle(self, now: float) -> list[Rep]:
        # Not a job whose entry has been quiet for two beats: moved, it would
        # wait a whole dead_after_s more at its new place before being dropped,
        # and the client, which counts from the entry's loss, submits it again
        # meanwhile.
        lively = now - 2 * self._ctx.config.beat_s
        heard = self._live.heard
        return sorted(
            (
                r
                for r in self._reps.reps.values()
                if r.state == RepState.COLLECTING
                and not r.moved
                and (r.entry == self._ctx.address or heard.get(r.entry, -math.inf) >= lively)
            ),
            key=lambda r: order(r.job),
        )

    def _near(self, now: float) -> list[tuple[PeerInfo, Heard]]:
        """Another cluster's nodes that take jobs and were heard from lately."""
        fresh = now - self._ctx.config.dead_after_s
        near = []
        for info in self._match.reach():
            addr = (info.host, info.port)
            heard = self._live.state_of.get(addr)
            usable = heard is not None and heard.at >= fresh and heard.load >= 0
            if usable and addr not in self._live.members:
                assert heard is not None
                near.append((info, heard))
        return near

    def _fits(self, rep: Rep, near: list[tuple[PeerInfo, Heard]], how: str) -> list[Candidate]:
        job, serial = rep.job, rep.job.size == 1
        average_qp = self._average_qp(rep)
        fits = []
        for info, heard in near:
            if not (self._match.capable(info.point, job) and heard.size >= job.size):
                continue
            if how == "dlb":  # c0: its residue runs the job now
                ok = heard.load == 0 if serial else heard.free >= job.size
            else:  # c1: no task of the job would queue longer there
                ok = (heard.load if serial else heard.maxql) < average_qp - 1
            if ok:
                addr = (info.host, info.port)
                fits.append(Candidate(addr, info.point, heard.load, heard.free, heard.maxql))
        return fits

    def _average_qp(self, rep: Rep) -> float:
        """The mean queue position of the job's tasks, as their members last said."""
        mine = self._positions().get((rep.job.id, rep.attempt), 0)
        me = self._ctx.address
        values = [mine if m == me else rep.positions.get(m, 0) for m in rep.members]
        return sum(values) / len(values)

    def _move(self, rep: Rep, target: Address, how: str, now: float) -> None:
        ctx = self._ctx
        del self._reps.reps[(rep.job.id, rep.attempt)]
        for member in rep.members:
            ctx.send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
        entry = Endpoint(*rep.entry)
        ctx.send(target, JobRoute(rep.job, rep.attempt, entry, 0, STAGE_PLACED, moved=True))
        ctx.count(f"moved_{how}")
        ctx.emit(JobMoved(now, rep.job.id, rep.attempt, target[0], how))
