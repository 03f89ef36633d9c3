# The entry's part (seed 000 §2.1): where a job is submitted; it is the job's
# owner in seed 000's sense (it watches the job and makes sure its outcome is
# reported). Each try of the job is an attempt with a random id: the entry
# routes it (JobRoute, node/sched/placement.py) to a representative. An
# attempt that fails, or whose representative goes silent for `dead_after_s`,
# is tried again after a back-off (retry_s, doubling, at most retry_max_s), up
# to `max_attempts`; then the job is reported failed with the last reason. The
# outcome is reported once (JobEnded).
#
# A try given up on as silent that turns out to run (or to have completed)
# is taken back rather than run the job twice: the current try is cancelled.
#
# A leaving entry hands its jobs to a neighbour (JobHandover, JobTaken) and
# waits up to `handover_s` for each to be taken; the new entry tells the
# representative where to report (JobWatch). An entry that crashes takes its
# jobs' bookkeeping with it: its representatives notice the silence and drop
# their attempts, and the client submits again elsewhere (seed 000 §2.1: "if
# both fail ... the client must resubmit"; here the entry is the client's own
# peer). With `owner_recovery = "reroute"` a representative first routes its
# attempt to the job's point (JobRehome), and the owner of that zone adopts it
# (adopt(): seed 000 §2.1, "the run node ... finds the new owner by re-routing
# to the job's coordinates"); an entry whose representative took a newer
# entry is told so (JobCancel) and stops watching the job.
#
# Rules
#   Draws from the peer's rng: each attempt's id, and the neighbour a leaving
#   entry hands a job to. A job that ended is kept FORGET_AFTER x dead_after_s
#   (late messages about it are acknowledged), then forgotten.

from __future__ import annotations

import math
from collections.abc import Callable

from node.events import JobAdopted, JobEnded, JobHandedOver, JobSubmitted
from node.sched.config import FORGET_AFTER, HANDOVER_RESEND_S, MAX_REASON, STAGE_ROUTE, Address
from node.sched.context import Context
from node.sched.records import Entry
from node.wire import (
    Endpoint,
    JobAck,
    JobCancel,
    JobEnd,
    JobHandover,
    JobInfo,
    JobRehome,
    JobRoute,
    JobTaken,
    JobWatch,
    check_endpoint,
)

__all__ = ["EntryRole"]

Key = tuple[int, int]  # (job, attempt)


class EntryRole:
    """The jobs submitted here (or handed to us), their tries and outcomes."""

    def __init__(
        self,
        ctx: Context,
        *,
        check_job: Callable[[JobInfo], str | None],
        route: Callable[[JobRoute, float], None],
    ) -> None:
        self._ctx = ctx
        self._check_job = check_job
        self._route = route
        self.entries: dict[int, Entry] = {}
        self._handover_until = math.inf
        self._next_handover = math.inf

    # -- commands ----------------------------------------------------------------------------------

    def submit(self, job: JobInfo, now: float) -> None:
        problem = self._check_job(job)
        if problem is not None:
            raise ValueError(problem)
        if self._ctx.gone:
            raise ValueError("this peer has left")
        if job.id in self.entries and not self.entries[job.id].ended:
            raise ValueError(f"job {job.id} is being scheduled from here already")
        entry = self.entries[job.id] = Entry(job)
        self._ctx.emit(JobSubmitted(now, job.id, job.size))
        self._ctx.wake(now)
        self._try(entry, now)

    def leave(self, adopters: list[Address], now: float) -> None:
        """Hand our open jobs to neighbours (`adopters`, drawn at random)."""
        for entry in self.entries.values():
            if not entry.ended and adopters:
                entry.handed_to = self._ctx.rng.choice(adopters)
                self._hand_over(entry)
        if self.handing_over():
            self._handover_until = now + self._ctx.config.handover_s
            self._next_handover = now + HANDOVER_RESEND_S

    def handing_over(self) -> bool:
        return self._handover_until < math.inf and any(
            e.handed_to is not None for e in self.entries.values()
        )

    def next_handover(self) -> float:
        return self._next_handover

    def handle_timer(self, now: float) -> None:
        """Send untaken hand-overs again, until taken or handover_s has passed."""
        if now < self._next_handover:
            return
        if now >= self._handover_until or not self.handing_over():
            # Done, or given up: the client submits untaken jobs again.
            self._handover_until = self._next_handover = math.inf
        else:
            self._next_handover = now + HANDOVER_RESEND_S
            for entry in self.entries.values():
                if entry.handed_to is not None:
                    self._hand_over(entry)

    def forget(self, now: float) -> None:
        """Drop jobs long ended."""
        horizon = now - FORGET_AFTER * self._ctx.config.dead_after_s
        for job in [j for j, e in self.entries.items() if e.ended and e.ended_at < horizon]:
            del self.entries[job]

    # -- tries -------------------------------------------------------------------------------------

    def _try(self, entry: Entry, now: float) -> None:
        ctx = self._ctx
        if entry.rep is not None:
            ctx.send(entry.rep, JobCancel(entry.job.id, entry.attempt))
        entry.retry_at = math.inf
        if entry.tries >= ctx.config.max_attempts:
            self._end(entry, False, f"{entry.reason} (after {entry.tries} attempts)", 0.0, now)
            return
        entry.tries += 1
        if entry.attempt:
            entry.earlier.append(entry.attempt)
        entry.attempt = ctx.rng.randrange(1, 2**31)
        entry.rep, entry.heard, entry.watching, entry.running = None, now, False, False
        ctx.count("routed")
        self._route(JobRoute(entry.job, entry.attempt, ctx.me, 0, STAGE_ROUTE), now)

    def _fail_try(self, entry: Entry, reason: str, now: float) -> None:
        """This try failed: the next one after the back-off."""
        entry.reason = reason[:MAX_REASON]
        entry.rep = None
        backoff = self._ctx.config.retry_s * 2 ** max(0, entry.tries - 1)
        entry.retry_at = now + min(self._ctx.config.retry_max_s, backoff)

    def _end(self, entry: Entry, ok: bool, reason: str, run_s: float, now: float) -> None:
        entry.ended, entry.retry_at, entry.ended_at = True, math.inf, now
        self._ctx.emit(JobEnded(now, entry.job.id, ok, reason, entry.tries, run_s))

    def _current(self, job: int, attempt: int) -> Entry | None:
        entry = self.entries.get(job)
        if entry is None or entry.ended or entry.handed_to is not None or attempt != entry.attempt:
            return None
        return entry

    def _earlier(self, job: int, attempt: int) -> Entry | None:
        """The job's entry if `attempt` is one of its earlier tries and the job
        is still ours and open."""
        entry = self.entries.get(job)
        if entry is None or entry.ended or entry.handed_to is not None:
            return None
        return entry if attempt in entry.earlier else None

    def _supersede(self, entry: Entry, attempt: int) -> None:
        """Make the earlier try `attempt` the current one again; the current try
        is cancelled (a representative not known yet hears it when it acks)."""
        if entry.rep is not None:
            self._ctx.send(entry.rep, JobCancel(entry.job.id, entry.attempt))
        entry.earlier.remove(attempt)
        entry.earlier.append(entry.attempt)
        entry.attempt, entry.rep, entry.running = attempt, None, False
        entry.retry_at = math.inf

    # -- messages from representatives -------------------------------------------------------------

    def on_ack(self, source: Address, ack: JobAck, now: float) -> str | None:
        entry = self._current(ack.job, ack.attempt)
        if entry is None:
            entry = self._earlier(ack.job, ack.attempt)
            if entry is None or not ack.running or entry.running:
                self._ctx.send(source, JobCancel(ack.job, ack.attempt))  # a stale attempt: stop it
                return None
            # A try we gave up on as silent runs after all, and the current one
            # does not yet: take the earlier one back rather than run the job twice.
            self._ctx.count("took_back")
            self._supersede(entry, ack.attempt)
        entry.rep, entry.heard, entry.watching = source, now, False
        entry.running = ack.running
        return None

    def on_end(self, source: Address, end: JobEnd, now: float) -> str | None:
        handing = self.entries.get(end.job)
        if handing is not None and handing.handed_to is not None and not handing.ended:
            return None  # not acknowledged: the representative tells the adopter (JobWatch)
        self._ctx.send(source, JobCancel(end.job, end.attempt))  # acknowledged in every other case
        entry = self._current(end.job, end.attempt)
        if entry is None and end.ok and (entry := self._earlier(end.job, end.attempt)):
            # A try we gave up on as silent completed: the first completed run
            # completes the job, and the current try stops.
            self._ctx.count("took_back")
            self._supersede(entry, end.attempt)
        if entry is None:
            self._ctx.count("late_end")
            return None
        if end.ok:
            self._end(entry, True, "", max(0.0, end.run_s), now)
        else:  # what failed (loads not known yet, a hole being repaired) may pass later
            self._fail_try(entry, end.reason, now)
        return None

    # -- hand-over ---------------------------------------------------------------------------------

    def _hand_over(self, entry: Entry) -> None:
        assert entry.handed_to is not None
        rep = Endpoint(*entry.rep) if entry.rep is not None else None
        earlier = tuple(entry.earlier)
        handover = JobHandover(entry.job, entry.attempt, entry.tries, rep, earlier)
        self._ctx.send(entry.handed_to, handover)

    def on_handover(self, source: Address, handover: JobHandover, now: float) -> str | None:
        ctx = self._ctx
        problem = self._check_job(handover.job)
        if problem is not None or not 0 <= handover.tries <= ctx.config.max_attempts:
            return problem or "bad try count"
        if len(handover.earlier) > ctx.config.max_attempts:
            return "too many earlier tries"
        if handover.rep is not None and check_endpoint(handover.rep) is not None:
            return "bad representative address"
        job = handover.job.id
        if ctx.gone:
            return None  # not taken: the leaver gives up on us and the client submits again
        known = self.entries.get(job)
        # A job we ended ourselves is not taken again (a hand-over sent again
        # after our JobTaken was lost); one we passed on may come back.
        if known is None or (known.ended and known.passed_on):
            entry = self.entries[job] = Entry(handover.job, handover.tries, handover.attempt)
            entry.heard, entry.earlier = now, list(handover.earlier)
            if handover.rep is not None:
                entry.rep, entry.watching = (handover.rep.host, handover.rep.port), True
                ctx.send(entry.rep, JobWatch(job, entry.attempt))
            ctx.emit(JobAdopted(now, job, source[0]))
            ctx.wake(now)
        ctx.send(source, JobTaken(job))
        return None

    def adopt(self, rehome: JobRehome, now: float) -> None:
        """A representative's attempt whose entry is gone reached us, the owner of
        its job's point: we are its entry now, unless the job is open here already
        (submitted here again, or adopted: then only its watch is sent again)."""
        ctx = self._ctx
        job, rep = rehome.job.id, (rehome.rep.host, rehome.rep.port)
        known = self.entries.get(job)
        if known is not None and not (known.ended and known.passed_on):
            if not known.ended and known.attempt == rehome.attempt and known.rep == rep:
                ctx.send(rep, JobWatch(job, rehome.attempt))
            else:
                ctx.count("rehome_refused")
            return
        entry = self.entries[job] = Entry(rehome.job, 1, rehome.attempt)
        entry.heard, entry.rep, entry.watching = now, rep, True
        ctx.count("rehomed")
        ctx.send(rep, JobWatch(job, rehome.attempt))
        ctx.emit(JobAdopted(now, job, rep[0]))
        ctx.wake(now)

    def on_disowned(self, source: Address, cancel: JobCancel, now: float) -> str | None:
        """A JobCancel from the current attempt's representative: it reports to
        another entry now (that entry adopted the attempt after us)."""
        entry = self._current(cancel.job, cancel.attempt)
        if entry is not None and entry.rep == source and source != self._ctx.address:
            entry.ended, entry.passed_on, entry.ended_at = True, True, now
            entry.retry_at = math.inf
            self._ctx.count("disowned")
            self._ctx.emit(JobHandedOver(now, cancel.job, source[0]))
        return None

    def on_taken(self, source: Address, taken: JobTaken, now: float) -> str | None:
        entry = self.entries.get(taken.job)
        if entry is not None and entry.handed_to == source:
            entry.handed_to, entry.ended, entry.passed_on = None, True, True
            entry.ended_at = now
            self._ctx.emit(JobHandedOver(now, taken.job, source[0]))
        return None

    # -- beats -------------------------------------------------------------------------------------

    def beat(self, now: float, shared: dict[Address, list[Key]]) -> None:
        """Our share of a beat: try again what is due or silent, keep telling an
        adopted job's representative where to report, list the rest."""
        for entry in self.entries.values():
            if entry.handed_to is not None and not entry.ended and entry.rep is not None:
                # Still ours to the representative until the adopter's JobWatch.
                shared.setdefault(entry.rep, []).append((entry.job.id, entry.attempt))
            if entry.ended or entry.handed_to is not None:
                continue
            if now >= entry.retry_at:
                self._try(entry, now)
            elif entry.retry_at == math.inf and entry.heard < now - self._ctx.config.dead_after_s:
                where = entry.rep[0] if entry.rep is not None else "the route"
                self._fail_try(entry, f"{where} went silent", now)
                self._try(entry, now)
            elif entry.rep is not None:
                if entry.watching:
                    self._ctx.send(entry.rep, JobWatch(entry.job.id, entry.attempt))
                shared.setdefault(entry.rep, []).append((entry.job.id, entry.attempt))
