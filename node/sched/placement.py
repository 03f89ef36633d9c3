# Routing and placement of an attempt (seed 000 §3.1 and §4.1.1, Kim's
# CAN-P): the representative's half that finds where an attempt runs. The
# entry routes the attempt (JobRoute) over the CAN, whose dimensions are the
# cluster's size and inverse latency plus a virtual one, to the owner of the
# job's requirement point. That node places the job on the least loaded
# capable node among itself and its direct neighbours (loads come with every
# SchedBeat), or pushes it on to the neighbour that comes closest to the
# requirement. A JobRoute goes through three stages: ROUTE (towards the
# point), PUSH (upward, looking for room), PLACED (to the node that takes it).
#
# A JobRehome (an attempt whose entry went silent, from its representative)
# is routed the same way, greedily to the job's point, and adopted there by the
# entry role; one that cannot go on is dropped (its representative sends it
# again every beat).
#
# Rules
#   Any failure goes back to the entry as a JobEnd (ok=False) with the reason;
#   the entry decides whether to try again. Every hop counts towards
#   `max_hops`. Draws from the peer's rng: the stopping coin of pushing, and
#   the choice among the least capable candidates with room.

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from msgspec.structs import replace

from node.sched.config import (
    MAX_REASON,
    STAGE_PLACED,
    STAGE_PUSH,
    STAGE_ROUTE,
    STAGES,
    Address,
)
from node.sched.context import Context
from node.sched.liveness import Liveness
from node.sched.matchmaking import Matchmaker
from node.wire import Endpoint, JobEnd, JobInfo, JobRehome, JobRoute, check_endpoint

__all__ = ["Placement", "Represent"]


class Represent(Protocol):
    """The representative's taking of an attempt placed on us (RepRole.represent)."""

    def __call__(
        self, job: JobInfo, attempt: int, entry: Address, now: float, *, moved: bool = False
    ) -> None: ...


class Placement:
    """Routes JobRoute messages and places the attempts that reach us."""

    def __init__(
        self,
        ctx: Context,
        live: Liveness,
        match: Matchmaker,
        represent: Represent,
        adopt: Callable[[JobRehome, float], None],
    ) -> None:
        """adopt: the entry role's taking of a JobRehome that reached the owner
        of its job's point (EntryRole.adopt)."""
        self._ctx = ctx
        self._live = live
        self._match = match
        self._represent = represent
        self._adopt = adopt

    def on_job_route(self, source: Address, route: JobRoute, now: float) -> str | None:
        problem = self._match.check_job(route.job)
        if problem is not None:
            return problem
        if not 0 <= route.hops <= self._ctx.config.max_hops or route.stage not in STAGES:
            return "bad hop count or stage"
        if check_endpoint(route.entry) is not None:
            return "bad entry address"
        self.route(route, now)
        return None

    def on_rehome(self, source: Address, rehome: JobRehome, now: float) -> str | None:
        problem = self._match.check_job(rehome.job)
        if problem is not None:
            return problem
        if not 0 <= rehome.hops <= self._ctx.config.max_hops:
            return "bad hop count"
        if check_endpoint(rehome.rep) is not None:
            return "bad representative address"
        self.rehome(rehome, now)
        return None

    def rehome(self, rehome: JobRehome, now: float) -> None:
        """One step of a JobRehome here (also the representative's first, locally)."""
        ctx = self._ctx
        hop = -1 if ctx.gone else self._match.route_step(rehome.job.point)
        if ctx.gone or hop is None or rehome.hops >= ctx.config.max_hops:
            ctx.count("rehome_dropped")  # sent again by the representative
        elif hop == -1:
            self._adopt(rehome, now)
        else:
            info = ctx.view.known[hop].info
            ctx.send((info.host, info.port), replace(rehome, hops=rehome.hops + 1))

    def route(self, route: JobRoute, now: float) -> None:
        """One step of a JobRoute here (also the entry's first, locally)."""
        ctx = self._ctx
        entry = (route.entry.host, route.entry.port)
        job, attempt = route.job, route.attempt

        def fail(reason: str) -> None:
            ctx.count("route_failed")
            ctx.send(entry, JobEnd(job.id, attempt, False, reason[:MAX_REASON], 0.0))

        if ctx.gone:
            fail(f"routing reached {ctx.address[0]}, which is leaving")
        elif route.stage == STAGE_PLACED:
            self._represent(job, attempt, entry, now, moved=route.moved)
        elif route.hops >= ctx.config.max_hops:
            fail(f"no capable node within {ctx.config.max_hops} hops")
        elif route.stage == STAGE_ROUTE and (hop := self._match.route_step(job.point)) != -1:
            if hop is None:
                fail(f"routing found a hole at {ctx.address[0]}")
            else:
                info = ctx.view.known[hop].info
                ctx.count("route_hop")
                ctx.send((info.host, info.port), replace(route, hops=route.hops + 1))
        else:
            self._place(route, now, fail)

    def _place(self, route: JobRoute, now: float, fail: Callable[[str], None]) -> None:
        """CAN-P matchmaking (seed 000 §4.1.1) at the owner of the job's point or
        a node it was pushed to. Stop at a capable node with room (a serial job:
        an empty queue; a parallel one: `size` free members of its cluster): the
        least capable one that has it ("parsimony") or the fastest ("can-p");
        else push the job upward, to the upper neighbour whose region is lightly
        loaded and large (F = queued / nodes^2 above it), stopping with
        probability 1 / (1 + nodes above)^SF once a capable node was met; then
        the job goes to the best capable node met on the way (shortest queue,
        or maxQL; "can-p": divided by the node's speed, Kim's eq. 4.5).
        "can": Kim's basic matchmaking instead (_place_basic)."""
        ctx, match = self._ctx, self._match
        job = route.job
        mode = ctx.config.matchmaking
        if mode == "can":
            self._place_basic(route, now, fail)
            return
        candidates = match.candidates(job, now)
        room = [c for c in candidates if (c.load == 0 if job.size == 1 else c.free >= job.size)]
        if room:
            ctx.count("placed_pushed" if route.stage == STAGE_PUSH else "placed")
            pick = match.fastest(room) if mode == "can-p" else match.least_capable(room)
            self._hand_to(pick.addr, route, now)
            return
        best, best_load = route.best, route.best_load
        for c in candidates:
            load: float = c.load if job.size == 1 else c.maxql
            if mode == "can-p":
                load /= match.speed(c.point)
            if best is None or load < best_load:
                best, best_load = Endpoint(*c.addr), load
        target, dim = match.push_target(now)
        sf = ctx.config.stopping_factor
        stop = best is not None and (
            target is None
            or route.hops + 1 >= ctx.config.max_hops
            or ctx.rng.random() < 1.0 / (1.0 + self._live.above[2 * dim]) ** sf
        )
        if stop:
            assert best is not None
            ctx.count("placed_pushed" if route.stage == STAGE_PUSH else "placed")
            self._hand_to((best.host, best.port), route, now)
        elif target is not None:
            ctx.count("pushed")
            pushed = replace(
                route, hops=route.hops + 1, stage=STAGE_PUSH, best=best, best_load=best_load
            )
            ctx.send(target, pushed)
        elif (toward := match.closer_neighbour(job, now)) is not None:
            # The top of the space and nothing capable met: towards the requirement.
            ctx.count("pushed")
            ctx.send(toward, replace(route, hops=route.hops + 1, stage=STAGE_PUSH))
        else:
            fail(f"no capable node near {ctx.address[0]} for {job.size} nodes")

    def _place_basic(self, route: JobRoute, now: float, fail: Callable[[str], None]) -> None:
        """Kim's basic CAN matchmaking (seed 000 §3.1): the least loaded of the
        capable neighbours; the owner is never a candidate, unless none is
        capable (the extreme corner: completeness), and nothing is pushed. No
        capable node here at all: on towards the requirement."""
        ctx, match = self._ctx, self._match
        candidates = match.candidates(route.job, now)
        others = [c for c in candidates if c.addr != ctx.address]
        if others or candidates:
            ctx.count("placed")
            self._hand_to(match.least_loaded(others or candidates).addr, route, now)
        elif (toward := match.closer_neighbour(route.job, now)) is not None:
            ctx.count("pushed")
            ctx.send(toward, replace(route, hops=route.hops + 1, stage=STAGE_PUSH))
        else:
            fail(f"no capable node near {ctx.address[0]} for {route.job.size} nodes")

    def _hand_to(self, addr: Address, route: JobRoute, now: float) -> None:
        if addr == self._ctx.address:
            entry = (route.entry.host, route.entry.port)
            self._represent(route.job, route.attempt, entry, now)
        else:
            self._ctx.send(addr, replace(route, hops=route.hops + 1, stage=STAGE_PLACED))
