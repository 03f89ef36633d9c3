# The member's part (seed 002 §4.2): a run node's task queue. A representative
# offers a dependent task of its attempt (TaskOffer) to members of its
# cluster; each member queues it by submit time (a hash of the id breaks
# ties) and, when the task reaches the head of its queue and the member is
# free, holds itself for it and says TaskReady. TaskStart runs the rank (a
# RunTask for the driver); TaskCancel drops the task (a KillTask if it runs).
# The rank's end comes back through task_finished() and goes to the
# representative as TaskDone, sent again every beat until acknowledged.
#
# The deadlock rule (seed 002 §4.2): an older task arriving while the member
# holds itself for a newer one withdraws that readiness (TaskReady(ready=
# False)) and holds itself for the older one instead. Two representatives
# waiting on each other's members thus always resolve in submit order.
#
# Rules
#   One task held (READY) and one running at a time; a task's state moves only
#   through node.sched.states.enter() (QUEUED -> READY -> RUNNING -> DONE).

from __future__ import annotations

from collections.abc import Callable

from node.sched.config import MAX_JOB_SIZE, MAX_REASON, Action, Address, KillTask, RunTask
from node.sched.context import Context
from node.sched.liveness import Liveness
from node.sched.records import Task, order
from node.sched.states import TaskState, enter
from node.wire import (
    JobInfo,
    SchedBeat,
    TaskCancel,
    TaskDone,
    TaskOffer,
    TaskReady,
    TaskStart,
    check_endpoint,
)

__all__ = ["MemberRole"]

Key = tuple[int, int]  # (job, attempt)


class MemberRole:
    """Our task queue, the task we hold ourselves for, the rank we run."""

    def __init__(
        self,
        ctx: Context,
        live: Liveness,
        check_job: Callable[[JobInfo], str | None],
        run_time: Callable[[JobInfo], float] = lambda job: job.runtime_s,
    ) -> None:
        """`run_time`: how long a rank of the job computes here."""
        self._ctx = ctx
        self._live = live
        self._check_job = check_job
        self._run_time = run_time
        self.tasks: dict[Key, Task] = {}
        self.holding: Key | None = None
        self.running: Key | None = None
        self._actions: list[Action] = []

    # -- commands ----------------------------------------------------------------------------------

    def leave(self) -> None:
        """Our ranks report failure; running ones are killed."""
        for key, task in list(self.tasks.items()):
            if task.state == TaskState.RUNNING:
                self._actions.append(KillTask(*key))
            if task.state != TaskState.DONE:
                self._ctx.send(
                    task.rep, TaskDone(key[0], key[1], task.round, False, "a member left")
                )
        self.tasks.clear()
        self.holding = self.running = None

    def task_finished(self, job: int, attempt: int, ok: bool, reason: str, now: float) -> None:
        key = (job, attempt)
        task = self.tasks.get(key)
        if self.running == key:
            self.running = None
        if task is None or task.state != TaskState.RUNNING:
            return  # killed meanwhile
        enter(task, TaskState.DONE)
        task.ok, task.reason, task.since = ok, reason[:MAX_REASON], now
        self._ctx.send(task.rep, TaskDone(job, attempt, task.round, ok, task.reason))
        self.advance(now)

    def actions(self) -> list[Action]:
        out, self._actions = self._actions, []
        return out

    # -- messages ----------------------------------------------------------------------------------

    def on_offer(self, source: Address, offer: TaskOffer, now: float) -> str | None:
        problem = self._check_job(offer.job)
        if problem is not None or offer.round < 1:
            return problem or "bad round"
        key = (offer.job.id, offer.attempt)
        if self._ctx.gone:
            self._ctx.send(source, TaskDone(*key, offer.round, False, "a member left"))
            return None
        task = self.tasks.get(key)
        if task is not None and task.round >= offer.round:
            return None  # a duplicate
        if task is not None:
            self.drop(key)
        task = self.tasks[key] = Task(offer.job, offer.attempt, offer.round, source, now)
        held = self.tasks.get(self.holding) if self.holding is not None else None
        if held is not None and order(task.job) < order(held.job):
            # The deadlock rule: an older task withdraws our readiness for a newer one.
            self._ctx.count("deadlock_rule")
            enter(held, TaskState.QUEUED)
            self._ctx.send(held.rep, TaskReady(held.job.id, held.attempt, held.round, False))
            self.holding = None
        self._ctx.wake(now)
        self.advance(now)
        return None

    def on_start(self, source: Address, start: TaskStart, now: float) -> str | None:
        key = (start.job, start.attempt)
        task = self.tasks.get(key)
        if not 0 <= start.rank < len(start.peers) or len(start.peers) > MAX_JOB_SIZE:
            return "bad rank"
        if any(check_endpoint(p) is not None for p in start.peers):
            return "bad rank address"
        ended = (TaskState.RUNNING, TaskState.DONE)
        if task is not None and task.round == start.round and task.state in ended:
            if task.state == TaskState.DONE:  # a late duplicate: say again how it ended
                self._ctx.send(task.rep, TaskDone(*key, task.round, task.ok, task.reason))
            return None
        if task is None or task.round != start.round or self.holding != key:
            self._ctx.send(source, TaskReady(start.job, start.attempt, start.round, False))
            return None
        enter(task, TaskState.RUNNING)
        task.since = now
        self.holding, self.running = None, key
        peers = tuple((p.host, p.port) for p in start.peers)
        self._actions.append(
            RunTask(
                start.job, start.attempt, start.round, start.rank, peers, self._run_time(task.job)
            )
        )
        return None

    def on_cancel(self, source: Address, cancel: TaskCancel, now: float) -> str | None:
        key = (cancel.job, cancel.attempt)
        task = self.tasks.get(key)
        if task is not None and task.round <= cancel.round and task.rep == source:
            self.drop(key)
            self.advance(now)
        return None

    # -- the queue ---------------------------------------------------------------------------------

    def advance(self, now: float) -> None:
        """Hold ourselves for the head of the queue, if we are free."""
        if self.running is not None or self.holding is not None:
            return
        queued = [t for t in self.tasks.values() if t.state == TaskState.QUEUED]
        if not queued:
            return
        head = min(queued, key=lambda t: order(t.job))
        enter(head, TaskState.READY)
        self.holding = (head.job.id, head.attempt)
        self._ctx.send(head.rep, TaskReady(head.job.id, head.attempt, head.round, True))

    def drop(self, key: Key) -> None:
        task = self.tasks.pop(key)
        if self.running == key:
            self.running = None
            if task.state == TaskState.RUNNING:
                self._actions.append(KillTask(*key))
        if self.holding == key:
            self.holding = None

    def load(self) -> int:
        """Our tasks not done (queued, held or running)."""
        return sum(1 for t in self.tasks.values() if t.state != TaskState.DONE)

    def positions(self) -> dict[Key, int]:
        """Each task's queue position here: the runnable tasks ahead of it (a
        running one has position 0; seed 002 §4.2)."""
        waiting = sorted(
            (k for k, t in self.tasks.items() if t.state in (TaskState.QUEUED, TaskState.READY)),
            key=lambda key: order(self.tasks[key].job),
        )
        ahead = 1 if self.running is not None else 0
        out = {key: ahead + k for k, key in enumerate(waiting)}
        if self.running is not None:
            out[self.running] = 0
        return out

    # -- beats -------------------------------------------------------------------------------------

    def heard_beat(self, source: Address, beat: SchedBeat, listed: set[Key], now: float) -> None:
        """A representative's beat no longer lists a task of ours: it forgot it."""
        grace = now - 2 * self._ctx.config.beat_s
        for key, task in list(self.tasks.items()):
            if task.rep == source and key not in listed and task.since < grace:
                self.drop(key)  # the representative forgot it
                self.advance(now)

    def beat(self, now: float, shared: dict[Address, list[Key]]) -> None:
        """Our share of a beat: drop tasks whose representative went silent, say
        again what was not acknowledged, and list the rest for their representative."""
        for key, task in list(self.tasks.items()):
            if task.rep != self._ctx.address and self._live.silent(task.rep, task.since, now):
                self._ctx.count("orphaned")
                self.drop(key)
                continue
            if task.state == TaskState.DONE:
                self._ctx.send(task.rep, TaskDone(*key, task.round, task.ok, task.reason))
            elif task.state == TaskState.READY:
                self._ctx.send(task.rep, TaskReady(*key, task.round, True))
            shared.setdefault(task.rep, []).append(key)
        self.advance(now)
