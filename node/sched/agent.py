# Jobs in the peer (seed 002 §4.2, seed 000 §2.1 and §3.1), sans-IO like the
# overlay: inputs take `now`, datagrams go out through `send`, events through
# `emit`, and the processes a task needs come out of actions() for the driver
# to run (node/runtime.py starts `python -m node.mpi`; the simulator pretends).
#
# Theory of operation
#   A peer plays three parts, for different jobs at once, one module each:
#
#   Entry (entry.py): where a job is submitted; it is the job's owner in seed
#   000's sense. Each try is an attempt with a random id, routed over the CAN
#   to a representative, tried again after a back-off when it fails or its
#   representative goes silent, up to `max_attempts`; the outcome is reported
#   once (JobEnded). A leaving entry hands its jobs to a neighbour.
#
#   Representative (placement.py, representative.py, balance.py): the owner of
#   the job's requirement point places the job on the least loaded capable
#   node near it, or pushes it upward (Kim's CAN-P); the node it lands on
#   co-schedules it on the members of its cluster, in rounds, and moves idle
#   jobs to neighbours that can take them sooner (DLB, QB).
#
#   Member (member.py): the run node's task queue, in submit order, with the
#   deadlock rule: an older task arriving while the member holds itself for a
#   newer one withdraws that readiness and holds itself for the older one.
#
#   Liveness (beats.py, liveness.py): our load figures ride the overlay's
#   updates to our neighbours (update_load, take_load: the peer puts them on
#   and takes them off); every `beat_s` a SchedBeat to every peer we share an
#   attempt with, naming the shared (job, attempt) pairs; what a side no
#   longer lists was forgotten and is sent again or given up. Any message
#   from a peer is a sign of life.
#
#   Shared pieces: config.py (SchedConfig, bounds, RunTask and KillTask),
#   records.py, states.py (the state tables), view.py (what we read of the
#   overlay), matchmaking.py, context.py.
#
# Rules
#   SchedAgent is a facade: it builds the parts, routes each message through
#   one handler table, runs the timers and answers for the whole. The parts
#   share state only through the objects passed to them (Context, Liveness,
#   and the callables each is given), never through a shared `self`.

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from node.events import Event
from node.sched.balance import Balancer
from node.sched.beats import Beats
from node.sched.config import Action, Address, KillTask, RunTask, SchedConfig
from node.sched.context import Context
from node.sched.entry import EntryRole
from node.sched.liveness import Liveness
from node.sched.matchmaking import Matchmaker
from node.sched.member import MemberRole
from node.sched.placement import Placement
from node.sched.records import Entry, Heard, Rep, Task
from node.sched.representative import RepRole
from node.sched.view import OverlayView
from node.wire import (
    DlbReply,
    DlbRequest,
    JobAck,
    JobCancel,
    JobEnd,
    JobHandover,
    JobInfo,
    JobRehome,
    JobRoute,
    JobTaken,
    JobWatch,
    Message,
    NeighbourLoad,
    SchedBeat,
    TaskCancel,
    TaskDone,
    TaskOffer,
    TaskReady,
    TaskStart,
)

__all__ = ["Action", "KillTask", "RunTask", "SchedAgent", "SchedConfig"]

Handler = Callable[[Address, Any, float], str | None]

# The wire messages the agent takes, in the order of its handler table.
MESSAGE_TYPES: tuple[type, ...] = (
    JobRoute,
    JobAck,
    JobEnd,
    JobCancel,
    JobHandover,
    JobTaken,
    JobWatch,
    TaskOffer,
    TaskReady,
    TaskStart,
    TaskCancel,
    TaskDone,
    SchedBeat,
    DlbRequest,
    DlbReply,
    JobRehome,
)


class SchedAgent:
    """One peer's part in scheduling jobs; see the module comment."""

    def __init__(
        self,
        config: SchedConfig,
        *,
        address: Address,
        can: OverlayView,  # node.can.overlay.CanOverlay: routing, neighbours, our point
        rng: random.Random,
        send: Callable[[Address, Message], None],
        emit: Callable[[Event], None],
    ) -> None:
        self.config = config
        self.address = address
        self.can = can
        self.rng = rng
        ctx = self._ctx = Context(config, address, can, rng, send, emit, self._wake)
        live = self._live = Liveness(config, address, can.config.space.n)
        self.member = MemberRole(
            ctx, live, lambda job: self.match.check_job(job), lambda job: self.match.run_time(job)
        )
        self.match = Matchmaker(ctx, live, self.member.load)
        self.representative = RepRole(
            ctx, live, self.match, lambda rehome, now: self.placement.rehome(rehome, now)
        )
        self.placement = Placement(
            ctx,
            live,
            self.match,
            self.representative.represent,
            lambda rehome, now: self.entry.adopt(rehome, now),
        )
        self.entry = EntryRole(ctx, check_job=self.match.check_job, route=self.placement.route)
        self.balancer = Balancer(
            ctx, live, self.match, self.representative, self.member.positions, self.member.load
        )
        self.beats = Beats(
            ctx, live, self.match, entry=self.entry, rep=self.representative, member=self.member
        )
        self._next_beat = math.inf
        self._next_balance = math.inf
        self._handlers: dict[type, Handler] = {
            JobRoute: self.placement.on_job_route,
            JobAck: self.entry.on_ack,
            JobEnd: self.entry.on_end,
            JobCancel: self._on_cancel,
            JobHandover: self.entry.on_handover,
            JobTaken: self.entry.on_taken,
            JobWatch: self.representative.on_watch,
            TaskOffer: self.member.on_offer,
            TaskReady: self.representative.on_ready,
            TaskStart: self.member.on_start,
            TaskCancel: self.member.on_cancel,
            TaskDone: self.representative.on_done,
            SchedBeat: self.beats.on_beat,
            DlbRequest: self.balancer.on_request,
            DlbReply: self.balancer.on_reply,
            JobRehome: self.placement.on_rehome,
        }
        assert tuple(self._handlers) == MESSAGE_TYPES

    # -- commands ----------------------------------------------------------------------------------

    def set_cluster(self, members: Sequence[Address], now: float) -> None:
        """Our cluster's members (a static clustering; we are added if missing)."""
        self._live.set_cluster([(str(h), int(p)) for h, p in members], now)
        self._wake(now)

    def submit(self, job: JobInfo, now: float) -> None:
        """Take a job as its entry. Raises ValueError for a malformed job, a job
        this peer is already the entry of, or a peer that has left; the state is
        then unchanged."""
        self.entry.submit(job, now)

    def leave(self, now: float) -> None:
        """Going away: our attempts fail over to their entries, our ranks report
        failure, and the jobs we are the entry of are handed to neighbours
        (handing_over() is true until each is taken, or handover_s has passed)."""
        self.representative.leave(now)
        self.member.leave()
        self._ctx.gone = True
        adopters = [(i.host, i.port) for i in self.match.neighbours()]
        self.entry.leave(adopters, now)

    def handing_over(self) -> bool:
        """Leaving, with jobs not yet taken by another entry (and time left to wait)."""
        return self.entry.handing_over()

    def task_finished(self, job: int, attempt: int, ok: bool, reason: str, now: float) -> None:
        """The driver's report: our rank of (job, attempt) ended."""
        self.member.task_finished(job, attempt, ok, reason, now)

    def actions(self) -> list[Action]:
        """Processes to start or kill (mutating, like an iterator)."""
        return self.member.actions()

    # -- inputs ------------------------------------------------------------------------------------

    def _on_cancel(self, source: Address, cancel: JobCancel, now: float) -> str | None:
        """From an entry to its attempt's representative: stop; from a
        representative to an entry: another entry watches the attempt now."""
        self.representative.on_cancel(source, cancel, now)
        return self.entry.on_disowned(source, cancel, now)

    def handle_message(self, source: Address, message: Message, now: float) -> str | None:
        """Apply one message; returns why it was unacceptable, or None."""
        self._live.hear(source, now)
        handler = self._handlers.get(type(message))
        if handler is None:
            return "not a scheduling message"
        return handler(source, message, now)

    def update_load(self, now: float) -> NeighbourLoad:
        """Our load figures for the overlay's next update to its neighbours."""
        return self.beats.figures(now)

    def check_load(self, figures: NeighbourLoad) -> str | None:
        """Why the figures an update carried cannot be believed, or None."""
        return self.beats.check(figures)

    def take_load(self, source: Address, figures: NeighbourLoad, now: float) -> None:
        """The figures an update from `source` carried (check_load()ed first)."""
        self._live.hear(source, now)
        self.beats.take(source, figures, now)

    def handle_timer(self, now: float) -> None:
        self.entry.handle_timer(now)
        if now >= self._next_beat:
            self._next_beat = now + self.config.beat_s
            self.beats.beat(now)
            self.beats.forget(now)
        if now >= self._next_balance:
            self._next_balance = now + self.config.balance_s
            if not self._ctx.gone:
                self.balancer.balance(now)

    def get_timer(self) -> float | None:
        deadline = min(self._next_beat, self.entry.next_handover(), self._next_balance)
        return None if deadline == math.inf else deadline

    def _wake(self, now: float) -> None:
        if self._next_beat == math.inf:
            self._next_beat = now + self.rng.uniform(0, self.config.beat_s)
        if self._next_balance == math.inf and self.balancer.balancers:
            self._next_balance = now + self.rng.uniform(0, self.config.balance_s)

    @classmethod
    def message_types(cls) -> Iterable[type]:
        """The wire messages this agent takes."""
        return MESSAGE_TYPES

    # -- what the parts hold (read-only) -----------------------------------------------------------

    @property
    def members(self) -> list[Address]:
        return self._live.members

    @property
    def lost(self) -> set[Address]:
        return self._live.lost

    @property
    def heard(self) -> dict[Address, float]:
        return self._live.heard

    @property
    def state_of(self) -> dict[Address, Heard]:
        return self._live.state_of

    @property
    def above(self) -> tuple[float, ...]:
        return self._live.above

    @property
    def gone(self) -> bool:
        return self._ctx.gone

    @property
    def counts(self) -> dict[str, int]:
        return self._ctx.counts

    @property
    def entries(self) -> dict[int, Entry]:
        return self.entry.entries

    @property
    def reps(self) -> dict[tuple[int, int], Rep]:
        return self.representative.reps

    @property
    def tasks(self) -> dict[tuple[int, int], Task]:
        return self.member.tasks

    @property
    def holding(self) -> tuple[int, int] | None:
        return self.member.holding

    @property
    def running(self) -> tuple[int, int] | None:
        return self.member.running

    def dump(self) -> dict[str, Any]:
        return {
            "members": len(self.members),
            "lost": sorted(m[0] for m in self.lost),
            "above": [round(x, 2) for x in self.above],
            "load": self.member.load(),
            "entries": sorted(j for j, e in self.entries.items() if not e.ended),
            "represented": sorted(f"{j}/{a}:{r.state}" for (j, a), r in self.reps.items()),
            "tasks": sorted(f"{j}/{a}:{t.state}" for (j, a), t in self.tasks.items()),
            "counts": dict(sorted(self.counts.items())),
        }
