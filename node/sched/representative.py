# The representative's part (seed 000 §3.1, seed 002 §4.2): the node an
# attempt was placed on co-schedules it. A serial job (size 1) runs there.
# For a parallel job it offers a dependent task to the members of its cluster
# (all of them, "total" over-provisioning, or ceil(factor x size)); members
# queue it (node/sched/member.py) and say TaskReady when it reaches the head
# of their queue. With `size` members ready the representative starts the
# job: a rank on each (TaskStart, with every rank's MPI address) and
# TaskCancel to the rest. A failed rank or a member lost while running
# restarts the co-scheduling (a new round, up to `max_rounds`); a cluster left
# with fewer live members than the job needs fails the attempt, and the entry
# tries again elsewhere.
#
# The entry hears JobAck every beat (running or not), then JobEnd until it
# acknowledges it. An entry that goes silent (or came back without the
# attempt) orphans the attempt: with `owner_recovery = "reroute"` it is first
# routed to the job's point every beat for `dead_after_s` (JobRehome, seed 000
# §2.1), and the owner of that zone becomes its entry (JobWatch). An orphan
# that found no new entry: a running one runs to its end, which its
# job_finished event reports to the client (the run node returns results
# directly to the client); any other is dropped. A leaving entry's adopter
# says where to report (JobWatch); an entry replaced by another one is told
# (JobCancel), so that it does not try the job again.
#
# Rules
#   An attempt's state moves only through node.sched.states.enter()
#   (COLLECTING -> RUNNING -> FINISHED, RUNNING -> COLLECTING for a new round).
#   Draws from the peer's rng: the members sampled when over-provisioning.

from __future__ import annotations

import math
from collections.abc import Callable

from node.events import JobFinished, JobStarted
from node.sched.config import MAX_REASON, MAX_SHARED, Address
from node.sched.context import Context
from node.sched.liveness import Liveness
from node.sched.matchmaking import Matchmaker
from node.sched.records import Rep
from node.sched.states import RepState, enter
from node.wire import (
    Endpoint,
    JobAck,
    JobCancel,
    JobEnd,
    JobInfo,
    JobRehome,
    JobWatch,
    SchedBeat,
    TaskCancel,
    TaskDone,
    TaskOffer,
    TaskReady,
    TaskStart,
)

__all__ = ["RepRole"]

Key = tuple[int, int]  # (job, attempt)


class RepRole:
    """The attempts placed on us, and their co-scheduling rounds."""

    def __init__(
        self,
        ctx: Context,
        live: Liveness,
        match: Matchmaker,
        rehome: Callable[[JobRehome, float], None],
    ) -> None:
        """rehome: the first step of a JobRehome's route (Placement.rehome)."""
        self._ctx = ctx
        self._live = live
        self._match = match
        self._rehome_step = rehome
        self.reps: dict[Key, Rep] = {}

    def leave(self, now: float) -> None:
        """Our attempts fail over to their entries."""
        for rep in list(self.reps.values()):
            if rep.state != RepState.FINISHED:
                self._finish(rep, False, "its representative left", now)

    # -- taking an attempt -------------------------------------------------------------------------

    def represent(
        self, job: JobInfo, attempt: int, entry: Address, now: float, *, moved: bool = False
    ) -> None:
        ctx = self._ctx
        key = (job.id, attempt)
        if key in self.reps:
            return  # a duplicate placement
        if not self._match.capable(ctx.view.point, job):
            ctx.send(entry, JobEnd(job.id, attempt, False, "placed on an incapable node", 0.0))
            return
        live = self._live.live()
        if len(live) < job.size:
            reason = f"cluster of {len(live)} live members for {job.size} nodes"
            ctx.send(entry, JobEnd(job.id, attempt, False, reason, 0.0))
            return
        others = live[1:] if job.size > 1 else []  # a serial job runs here
        if ctx.config.overprovision != "total" and others:
            want = min(len(live), math.ceil(ctx.config.overprovision * job.size))
            others = ctx.rng.sample(others, want - 1)
        rep = self.reps[key] = Rep(job, attempt, entry, [ctx.address, *others], now)
        rep.moved = moved
        ctx.count("represented")
        ctx.count("queue_seen", self._match.load())  # Kim's queue length at assignment
        self._offer(rep, now)
        ctx.send(entry, JobAck(job.id, attempt, False))
        ctx.wake(now)

    def _offer(self, rep: Rep, now: float) -> None:
        enter(rep, RepState.COLLECTING)
        rep.offered_at = now
        rep.ready, rep.ranks, rep.done = [], {}, set()
        offer = TaskOffer(rep.job, rep.attempt, rep.round)
        for member in rep.members:
            self._ctx.send(member, offer)

    def report(self, rep: Rep) -> None:
        """Tell the entry where the attempt stands."""
        if rep.state == RepState.FINISHED:
            run_s = round(rep.run_s, 6)
            self._ctx.send(rep.entry, JobEnd(rep.job.id, rep.attempt, rep.ok, rep.reason, run_s))
        else:
            running = rep.state == RepState.RUNNING
            self._ctx.send(rep.entry, JobAck(rep.job.id, rep.attempt, running))

    # -- messages from members ---------------------------------------------------------------------

    def on_ready(self, source: Address, ready: TaskReady, now: float) -> str | None:
        rep = self.reps.get((ready.job, ready.attempt))
        if rep is None or ready.round < rep.round or rep.state == RepState.FINISHED:
            if ready.ready:
                self._ctx.send(source, TaskCancel(ready.job, ready.attempt, ready.round))
            return None
        if ready.round > rep.round or source not in rep.members:
            return "a round or member we do not know"
        if rep.state == RepState.RUNNING:
            if source in rep.ranks and ready.ready:
                self._start_rank(rep, source)  # our TaskStart was lost
            elif source in rep.ranks:
                self._restart(rep, f"the rank on {source[0]} withdrew", now)
            return None
        if ready.ready and source not in rep.ready:
            rep.ready.append(source)
        elif not ready.ready and source in rep.ready:
            rep.ready.remove(source)
        if len(rep.ready) >= rep.job.size:
            self._start(rep, now)
        return None

    def _start(self, rep: Rep, now: float) -> None:
        chosen = sorted(rep.ready[: rep.job.size], key=rep.members.index)
        rep.ranks = {m: rank for rank, m in enumerate(chosen)}
        enter(rep, RepState.RUNNING)
        rep.started_at = now
        for member in chosen:
            self._start_rank(rep, member)
        for member in rep.members:
            if member not in rep.ranks:
                self._ctx.send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
        hosts = tuple(m[0] for m in chosen)
        self._ctx.emit(JobStarted(now, rep.job.id, rep.attempt, rep.round, hosts))

    def _start_rank(self, rep: Rep, member: Address) -> None:
        peers = tuple(Endpoint(m[0], self._ctx.config.mpi_port) for m in rep.ranks)
        start = TaskStart(rep.job.id, rep.attempt, rep.round, rep.ranks[member], peers)
        self._ctx.send(member, start)

    def on_done(self, source: Address, done: TaskDone, now: float) -> str | None:
        rep = self.reps.get((done.job, done.attempt))
        if rep is None or done.round != rep.round or rep.state == RepState.FINISHED:
            self._ctx.send(source, TaskCancel(done.job, done.attempt, done.round))  # acknowledged
            return None
        if source not in rep.members:
            return "a member we do not know"
        if rep.state == RepState.RUNNING and source in rep.ranks:
            if not done.ok:
                self._restart(rep, f"rank {rep.ranks[source]} on {source[0]}: {done.reason}", now)
            else:
                rep.done.add(rep.ranks[source])
                if len(rep.done) == len(rep.ranks):
                    self._finish(rep, True, "", now)
        elif not done.ok:
            self._lose(rep, source, done.reason, now)
        return None

    # -- rounds and outcomes -----------------------------------------------------------------------

    def _restart(self, rep: Rep, reason: str, now: float) -> None:
        self._ctx.count("restarted")
        for member in rep.members:
            self._ctx.send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
        if rep.round >= self._ctx.config.max_rounds:
            self._finish(rep, False, reason, now)
            return
        rep.round += 1
        alive = [m for m in rep.members if m not in self._live.lost]
        rep.members = alive
        if len(alive) < rep.job.size:
            self._finish(rep, False, f"{reason}; {len(alive)} members left", now)
            return
        self._offer(rep, now)

    def _lose(self, rep: Rep, member: Address, reason: str, now: float) -> None:
        """A member of the attempt is gone (silent, left, or forgot its task)."""
        if member not in rep.members or rep.state == RepState.FINISHED:
            return
        if member != self._ctx.address and "forgot" not in reason:
            self._live.lost.add(member)
        if rep.state == RepState.RUNNING:
            if member in rep.ranks:
                self._restart(rep, f"rank {rep.ranks[member]} on {member[0]}: {reason}", now)
            return
        rep.members.remove(member)
        if member in rep.ready:
            rep.ready.remove(member)
        if len(rep.members) < rep.job.size:
            for other in rep.members:
                self._ctx.send(other, TaskCancel(rep.job.id, rep.attempt, rep.round))
            have = len(rep.members)
            self._finish(rep, False, f"{member[0]} {reason}; {have} members left", now)

    def _finish(self, rep: Rep, ok: bool, reason: str, now: float) -> None:
        enter(rep, RepState.FINISHED)
        rep.ok, rep.reason = ok, reason[:MAX_REASON]
        rep.run_s = now - rep.started_at if ok else 0.0
        self.report(rep)
        for member in rep.ranks if ok else rep.members:
            self._ctx.send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
        run_s = round(rep.run_s, 6)
        self._ctx.emit(JobFinished(now, rep.job.id, rep.attempt, ok, rep.reason, run_s))

    # -- the entry ---------------------------------------------------------------------------------

    def _rehome(self, rep: Rep, now: float) -> bool:
        """The entry is gone: route the attempt to the owner of the job's point
        (again), unless rerouting is off, given up, or the attempt completed (its
        job_finished was the report). Returns whether it is being rerouted."""
        ctx = self._ctx
        if ctx.config.owner_recovery != "reroute" or rep.orphan or ctx.gone:
            return False
        if rep.state == RepState.FINISHED and rep.ok:
            return False
        if rep.rehome_until is None:
            rep.rehome_until = now + ctx.config.dead_after_s
            ctx.count("rehoming")
        elif now >= rep.rehome_until:
            rep.rehome_until = None
            ctx.count("rehome_gave_up")
            return False
        self._rehome_step(JobRehome(rep.job, rep.attempt, ctx.me, 0), now)
        return True

    def _orphan(self, key: Key, rep: Rep, reason: str, now: float) -> bool:
        """The entry is gone. A running attempt runs to its end, which its
        job_finished event reports to the client (seed 000 §2.1: the run node
        returns results directly to the client); any other is dropped.
        Returns whether the attempt is gone."""
        if rep.state == RepState.RUNNING:
            rep.orphan = True
            return False
        if rep.orphan and rep.state == RepState.FINISHED:
            del self.reps[key]  # its job_finished was the report
            return True
        self._drop_attempt(key, reason, now)
        return True

    def _drop_attempt(self, key: Key, reason: str, now: float) -> None:
        """Forget an attempt we represent (cancelled, or its entry is gone)."""
        rep = self.reps.pop(key)
        if rep.state != RepState.FINISHED:
            self._ctx.count("cancelled")
            for member in rep.members:
                self._ctx.send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
            self._ctx.emit(JobFinished(now, rep.job.id, rep.attempt, False, reason, 0.0))

    def on_cancel(self, source: Address, cancel: JobCancel, now: float) -> str | None:
        key = (cancel.job, cancel.attempt)
        if key in self.reps and self.reps[key].entry == source:
            self._drop_attempt(key, "cancelled", now)
        return None

    def on_watch(self, source: Address, watch: JobWatch, now: float) -> str | None:
        rep = self.reps.get((watch.job, watch.attempt))
        if rep is None:
            self._ctx.send(source, JobEnd(watch.job, watch.attempt, False, "not known here", 0.0))
            return None
        previous, me = rep.entry, self._ctx.address
        rerouting = self._ctx.config.owner_recovery == "reroute"
        if (
            rerouting
            and previous not in (source, me)
            and not self._live.silent(previous, rep.since, now)
        ):
            # Two entries for one attempt (a JobRehome sent again reached another
            # owner): the newest takes it, the other stops watching.
            self._ctx.send(previous, JobCancel(watch.job, watch.attempt))
        rep.entry, rep.orphan, rep.rehome_until = source, False, None
        self.report(rep)
        return None

    # -- beats -------------------------------------------------------------------------------------

    def heard_beat(self, source: Address, beat: SchedBeat, listed: set[Key], now: float) -> None:
        """A peer's beat: its tasks' queue positions; what it no longer lists it
        forgot (an entry that came back, an offer lost, a rank forgotten)."""
        for job, attempt, position in beat.tasks:
            rep = self.reps.get((job, attempt))
            if rep is not None and source in rep.members and 0 <= position <= MAX_SHARED:
                rep.positions[source] = position
        grace = now - 2 * self._ctx.config.beat_s
        for key, rep in list(self.reps.items()):
            if key in listed:
                continue
            if rep.entry == source and rep.entry != self._ctx.address and rep.since < grace:
                # The entry came back without it.
                if rep.rehome_until is None and not self._rehome(rep, now):
                    self._orphan(key, rep, "its entry forgot it", now)
            elif rep.state == RepState.COLLECTING and source in rep.members:
                if rep.offered_at < grace:  # the offer was lost, or the member forgot it
                    self._ctx.send(source, TaskOffer(rep.job, rep.attempt, rep.round))
            elif (
                rep.state == RepState.RUNNING
                and source in rep.ranks
                and rep.started_at < grace
                and rep.ranks[source] not in rep.done
            ):
                self._lose(rep, source, "forgot its rank", now)

    def beat(self, now: float, shared: dict[Address, list[Key]]) -> None:
        """Our share of a beat: orphan attempts whose entry went silent, report to
        the entries, lose silent members, and list each attempt for its peers."""
        for key, rep in list(self.reps.items()):
            gone = (
                rep.orphan
                or rep.rehome_until is not None
                or (rep.entry != self._ctx.address and self._live.silent(rep.entry, rep.since, now))
            )
            if (
                gone
                and not self._rehome(rep, now)
                and self._orphan(key, rep, "its entry went silent", now)
            ):
                continue
            if rep.rehome_until is None:
                self.report(rep)
                shared.setdefault(rep.entry, []).append(key)
            if rep.state == RepState.FINISHED:
                continue
            # Only the peers holding a task of the attempt beat us about it.
            running = rep.state == RepState.RUNNING
            since = rep.started_at if running else rep.offered_at
            for member in list(rep.ranks if running else rep.members):
                if member != self._ctx.address and self._live.silent(member, since, now):
                    self._lose(rep, member, "went silent", now)
            if _open(rep):  # (losing a member may have finished it)
                for member in rep.ranks if rep.state == RepState.RUNNING else rep.members:
                    shared.setdefault(member, []).append(key)


def _open(rep: Rep) -> bool:
    """Not finished (a function, so that a check after a call that may finish
    the attempt reads its state afresh)."""
    return rep.state != RepState.FINISHED
