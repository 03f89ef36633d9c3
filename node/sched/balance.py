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
# Kim's dynamic load balancing (seed 000 §4.2), balance = "pull" or "push",
# every balance_s over the same neighbours, for the queued (not started) jobs:
#   PULL: with probability 1 / (1 + our queue), ask the most loaded neighbour
#         whose queue is at least two longer than ours (DlbRequest); it moves
#         us the first waiting job, in submit order, that we can run, or says
#         no (DlbReply) and we ask the next.
#   PUSH: with waiting jobs, ask the least loaded neighbour whose queue is at
#         least two shorter than ours and that can run one of them; it accepts
#         with probability 1 / (1 + its queue); accepted, we move it the first
#         waiting job it can run.
#   The owner (the job's entry) learns the new place from its JobAck, as for
#   DLB and QB. Decisions where seed 000 is silent: "at least two" (one would
#   only swap which node waits), the pull's probability applied to starting a
#   pull, one job per period and direction, requests served as they come.
#
# Rules
#   Neighbours are our direct ones, or with neighbours = "indirect" every peer
#   the CAN knows of; only another cluster's nodes that take jobs and beat us
#   lately count. A moved attempt stays where it was moved. Draws from the
#   peer's rng: the choice among the least capable fitting neighbours; Kim's
#   coins and the choice among equally loaded neighbours.

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
from node.wire import DlbReply, DlbRequest, Endpoint, JobRoute, PeerInfo, TaskCancel

__all__ = ["Balancer"]

Positions = Callable[[], dict[tuple[int, int], int]]
PULL, PUSH = 0, 1  # DlbRequest.kind
MAX_QUEUE = 1_000_000  # a queue length on the wire beyond this is nonsense


class Balancer:
    """DLB and QB over our representative's idle attempts."""

    def __init__(
        self,
        ctx: Context,
        live: Liveness,
        match: Matchmaker,
        reps: RepRole,
        positions: Positions,
        load: Callable[[], int] = lambda: 0,
    ) -> None:
        self._ctx = ctx
        self._live = live
        self._match = match
        self._reps = reps
        self._positions = positions
        self._load = load
        self.balancers = set(ctx.config.balance.split("+")) - {"none"}
        self._pulling: list[Address] = []  # PULL: whom to ask next, after a no
        self._asked: Address | None = None  # PULL: whom we asked last
        self._pushing: dict[Address, tuple[float, ...]] = {}  # PUSH asked: their point

    def balance(self, now: float) -> None:
        """DLB, then QB: the oldest idle job (not started, never moved) that a
        neighbour can take is moved there; one job per period at most. Kim's
        PULL or PUSH instead where configured."""
        if "pull" in self.balancers:
            self._pull(now)
            return
        if "push" in self.balancers:
            self._push(now)
            return
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

    # -- Kim's PULL and PUSH (seed 000 §4.2) -------------------------------------------------------

    def _pull(self, now: float) -> None:
        ctx, mine = self._ctx, self._load()
        self._pulling, self._asked = [], None
        if ctx.rng.random() >= 1.0 / (1.0 + mine):
            return
        loaded = [
            (heard.load, ctx.rng.random(), (info.host, info.port))
            for info, heard in self._near(now)
            if heard.load >= mine + 2
        ]
        self._pulling = [addr for _, _, addr in sorted(loaded, reverse=True)]
        self._ask_next_pull()

    def _ask_next_pull(self) -> None:
        self._asked = self._pulling.pop(0) if self._pulling else None
        if self._asked is not None:
            ctx = self._ctx
            ctx.count("dlb_request")
            ctx.send(self._asked, DlbRequest(PULL, self._load(), tuple(ctx.view.point)))

    def _push(self, now: float) -> None:
        ctx, mine = self._ctx, self._load()
        self._pushing = {}
        idle = [r for r in self._idle(now) if r.job.size == 1]
        light = [
            (heard.load, ctx.rng.random(), (info.host, info.port), tuple(info.point))
            for info, heard in self._near(now)
            if heard.load <= mine - 2 and any(self._match.capable(info.point, r.job) for r in idle)
        ]
        if light:
            _, _, target, point = min(light)
            self._pushing = {target: point}
            ctx.count("dlb_request")
            ctx.send(target, DlbRequest(PUSH, mine, tuple(ctx.view.point)))

    def _runnable(self, point: tuple[float, ...], now: float) -> Rep | None:
        """Our first waiting serial job, in submit order, that a node at `point` can run."""
        return next(
            (r for r in self._idle(now) if r.job.size == 1 and self._match.capable(point, r.job)),
            None,
        )

    def on_request(self, source: Address, request: DlbRequest, now: float) -> str | None:
        """A neighbour's PULL (move it a waiting job it can run) or PUSH (take one?)."""
        n = self._ctx.view.config.space.n
        if request.kind not in (PULL, PUSH) or not 0 <= request.queue <= MAX_QUEUE:
            return "bad DLB request"
        if len(request.point) != n or not all(math.isfinite(v) for v in request.point):
            return "bad DLB request point"
        ctx = self._ctx
        if request.kind == PUSH:
            accept = not ctx.gone and ctx.rng.random() < 1.0 / (1.0 + self._load())
            ctx.count("dlb_reply")
            ctx.send(source, DlbReply(PUSH, accept))
            return None
        rep = None
        if not ctx.gone and self._load() >= request.queue + 2:
            rep = self._runnable(request.point, now)
        ctx.count("dlb_reply")
        ctx.send(source, DlbReply(PULL, rep is not None))
        if rep is not None:
            self._move(rep, source, "pull", now)
        return None

    def on_reply(self, source: Address, reply: DlbReply, now: float) -> str | None:
        """The answer to our PULL (no: ask the next) or PUSH (yes: move it a job)."""
        if reply.kind == PULL and source == self._asked:
            if reply.accept:
                self._pulling, self._asked = [], None  # the job follows
            else:
                self._ask_next_pull()
            return None
        point = self._pushing.pop(source, None) if reply.kind == PUSH else None
        if point is None:
            return "unexpected DLB reply"
        if reply.accept and not self._ctx.gone and (rep := self._runnable(point, now)):
            self._move(rep, source, "push", now)
        return None

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
