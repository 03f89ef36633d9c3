# Jobs in the peer (seed 002 §4.2, seed 000 §2.1 and §3.1), sans-IO like the
# overlay: inputs take `now`, datagrams go out through `send`, events through
# `emit`, and the processes a task needs come out of actions() for the driver
# to run (node/runtime.py starts `python -m node.mpi`; the simulator pretends).
#
# Theory of operation
#   A peer plays three parts, for different jobs at once.
#
#   Entry: where a job is submitted; it is the job's owner in seed 000's
#   sense (it watches the job and makes sure its outcome is reported). Each
#   try of the job is an attempt with a random id: the entry routes it
#   (JobRoute) over the CAN, whose dimensions are the cluster's size and
#   inverse latency plus a virtual one, to the owner of the job's requirement
#   point. That node places the job on the least loaded capable node among
#   itself and its direct neighbours (loads come with every SchedBeat), or
#   pushes it on to the neighbour that comes closest to the requirement
#   (seed 000 §3.1). An attempt that fails, or whose representative goes
#   silent for `dead_after_s`, is tried again after a back-off (retry_s,
#   doubling, at most retry_max_s), up to `max_attempts`; then the job is
#   reported failed with the last reason. The outcome is reported once
#   (JobEnded). A leaving entry hands its jobs to a neighbour (JobHandover,
#   JobTaken) and waits up to `handover_s` for each to be taken; the new entry
#   tells the representative where to report (JobWatch). An entry that
#   crashes takes its jobs' bookkeeping with it: its representatives notice
#   the silence and drop their attempts, and the client submits again
#   elsewhere (seed 000 §2.1: "if both fail ... the client must resubmit";
#   here the entry is the client's own peer).
#
#   Representative: the node an attempt was placed on. A serial job (size 1)
#   runs there. For a parallel job it offers a dependent task to the members
#   of its cluster (all of them, "total" over-provisioning, or ceil(factor x
#   size)); each member queues it by submit time (a hash of the id breaks
#   ties) and, when the task reaches the head of its queue and the member is
#   free, holds itself for it and says TaskReady. With `size` members ready the
#   representative starts the job: a rank on each (TaskStart, with every
#   rank's MPI address) and TaskCancel to the rest. A failed rank or a member
#   lost while running restarts the co-scheduling (a new round, up to
#   `max_rounds`); a cluster left with fewer live members than the job needs
#   fails the attempt, and the entry tries again elsewhere.
#
#   Member: the deadlock rule (seed 002 §4.2): an older task arriving while the
#   member holds itself for a newer one withdraws that readiness
#   (TaskReady(ready=False)) and holds itself for the older one instead.
#
#   Liveness: every `beat_s` a SchedBeat goes to the overlay's direct
#   neighbours (load) and to every peer we share an attempt with (entry and
#   representative, representative and members), naming the shared (job,
#   attempt) pairs; a side that no longer lists one has forgotten it (crashed
#   and came back, or lost the message), and what was lost is sent again or
#   given up. Representatives send JobAck (or their JobEnd, until the entry
#   acknowledges it) to the entry every beat; members send TaskDone until
#   acknowledged. Any message from a peer counts as a sign of life.

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from msgspec.structs import replace

from node.can.geometry import next_hop
from node.events import (
    Event,
    JobAdopted,
    JobEnded,
    JobFinished,
    JobHandedOver,
    JobMoved,
    JobStarted,
    JobSubmitted,
)
from node.wire import (
    Endpoint,
    JobAck,
    JobCancel,
    JobEnd,
    JobHandover,
    JobInfo,
    JobRoute,
    JobTaken,
    JobWatch,
    Message,
    SchedBeat,
    TaskCancel,
    TaskDone,
    TaskOffer,
    TaskReady,
    TaskStart,
    check_endpoint,
)

__all__ = ["Action", "KillTask", "RunTask", "SchedAgent", "SchedConfig"]

Address = tuple[str, int]

MAX_JOB_SIZE = 4096
MAX_RUNTIME_S = 1e6
MAX_REASON = 200  # characters of a failure reason on the wire
MAX_SHARED = 10_000  # (job, attempt) pairs one beat may list
STOPPING_FACTOR = 2  # Kim's SF: pushing stops with probability 1 / (1 + nodes above)^SF
BALANCERS = ("none", "dlb", "qb", "qb+dlb")
NEIGHBOURS = ("direct", "indirect")
STAGES = STAGE_ROUTE, STAGE_PUSH, STAGE_PLACED = 0, 1, 2
HANDOVER_RESEND_S = 0.5  # a leaver sends an untaken JobHandover again this often
MAX_AGGREGATE = 1e9  # Kim's aggregates (nodes and tasks above) beyond this are nonsense
FORGET_AFTER = 10  # x dead_after_s: what we heard of a peer, or a job that ended, is dropped


@dataclass(frozen=True)
class SchedConfig:
    beat_s: float = 2.0
    dead_after_s: float = 7.0  # silence after which a representative, member or entry is lost
    max_attempts: int = 5  # tries of one job by its entry
    retry_s: float = 2.0  # the back-off after a failed try; doubles with every try ...
    retry_max_s: float = 30.0  # ... up to this
    max_rounds: int = 3  # co-scheduling rounds of one attempt
    overprovision: float = 0.0  # 0: total (every member); else a factor >= 1
    max_hops: int = 64
    handover_s: float = 3.0  # a leaving entry waits this long at most for its jobs to be taken
    # Dynamic balancing of jobs not started yet (seed 002 §4.2): "none", "dlb",
    # "qb" or "qb+dlb", every balance_s, over our direct neighbours, or also the
    # indirect ones (the CAN's neighbours' neighbours: they get our beats too).
    balance: str = "qb+dlb"
    balance_s: float = 10.0
    neighbours: str = "direct"
    mpi_port: int = 7100  # where a rank listens (one rank per peer at a time)
    rounds: int = 10  # communication rounds of the built-in program
    collective: str = "allreduce"
    payload_bytes: int = 8
    # A user's program instead of the built-in one (shell words); it gets
    # TESTBED_RANK, TESTBED_SIZE, TESTBED_PEERS and TESTBED_COMPUTE_S.
    command: str = ""

    def __post_init__(self) -> None:
        if not 0 < self.beat_s < self.dead_after_s:
            raise ValueError("need 0 < beat_s < dead_after_s")
        if self.max_attempts < 1 or self.max_rounds < 1 or self.max_hops < 1:
            raise ValueError("max_attempts, max_rounds and max_hops must be at least 1")
        if not 0 < self.retry_s <= self.retry_max_s:
            raise ValueError("need 0 < retry_s <= retry_max_s")
        if not self.handover_s > 0:
            raise ValueError("handover_s must be positive")
        if self.balance not in BALANCERS:
            raise ValueError(f"balance {self.balance!r}: expected one of {', '.join(BALANCERS)}")
        if not self.balance_s > 0:
            raise ValueError("balance_s must be positive")
        if self.neighbours not in NEIGHBOURS:
            raise ValueError(f"neighbours {self.neighbours!r}: expected 'direct' or 'indirect'")
        if self.overprovision != 0 and self.overprovision < 1:
            raise ValueError("overprovision is 0 (total) or a factor >= 1")
        if not 0 < self.mpi_port < 65536:
            raise ValueError(f"mpi_port {self.mpi_port} is not a port")
        if self.rounds < 0 or self.collective not in ("allreduce", "barrier"):
            raise ValueError("rounds >= 0, collective 'allreduce' or 'barrier'")
        if self.payload_bytes < 0 or self.payload_bytes % 8:
            raise ValueError("payload_bytes must be a non-negative multiple of 8")


@dataclass(frozen=True)
class RunTask:
    """Start rank `rank` of a job (the driver calls task_finished when it ends)."""

    job: int
    attempt: int
    round: int
    rank: int
    peers: tuple[Address, ...]
    compute_s: float


@dataclass(frozen=True)
class KillTask:
    job: int
    attempt: int


Action = RunTask | KillTask


def _order(job: JobInfo) -> tuple[float, int]:
    return (job.order, zlib.crc32(job.id.to_bytes(8, "big")))


@dataclass(frozen=True)
class _Heard:
    """A peer's last SchedBeat."""

    load: int
    size: int
    free: int
    maxql: int
    above: tuple[float, ...]
    at: float


@dataclass(frozen=True)
class _Candidate:
    addr: Address
    point: Sequence[float]
    load: int
    free: int
    maxql: int


@dataclass
class _Entry:
    job: JobInfo
    tries: int = 0
    attempt: int = 0  # the current try's id (0: none yet)
    rep: Address | None = None
    heard: float = 0.0  # from the representative, or since the route went out
    retry_at: float = math.inf  # the last try failed: the next one is due then
    reason: str = ""
    ended: bool = False
    watching: bool = False  # adopted: tell the representative (JobWatch) until it acks
    handed_to: Address | None = None  # leaving: handed over to this peer, not taken yet
    running: bool = False  # the current try's representative said it runs
    earlier: list[int] = field(default_factory=list)  # the ids of the tries before
    ended_at: float = math.inf  # when it ended (reported, or taken by another entry)
    passed_on: bool = False  # ended by a hand-over, not by an outcome


@dataclass
class _Rep:
    job: JobInfo
    attempt: int
    entry: Address
    members: list[Address]
    since: float
    round: int = 1
    state: str = "collecting"  # running, finished
    offered_at: float = 0.0
    ready: list[Address] = field(default_factory=list)
    ranks: dict[Address, int] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    started_at: float = 0.0
    ok: bool = False
    reason: str = ""
    run_s: float = 0.0
    orphan: bool = False  # its entry is gone: it runs to the end, then goes
    moved: bool = False  # DLB or QB moved it here: it stays
    positions: dict[Address, int] = field(default_factory=dict)  # its tasks' queue positions


@dataclass
class _Task:
    job: JobInfo
    attempt: int
    round: int
    rep: Address
    since: float
    state: str = "queued"  # ready, running, done
    ok: bool = False
    reason: str = ""


class SchedAgent:
    """One peer's part in scheduling jobs; see the module comment."""

    def __init__(
        self,
        config: SchedConfig,
        *,
        address: Address,
        can: Any,  # node.can.overlay.CanOverlay: routing, neighbours, our point
        rng: random.Random,
        send: Callable[[Address, Message], None],
        emit: Callable[[Event], None],
    ) -> None:
        self.config = config
        self.address = address
        self._me = Endpoint(*address)
        self.can = can
        self.rng = rng
        self._send = send
        self._emit = emit
        self._real = [k for k, d in enumerate(can.config.space.dims) if not d.virtual]
        self.members: list[Address] = [address]  # our cluster (static), us first; alone by default
        self.lost: set[Address] = set()  # members that left or went silent (until heard again)
        self.entries: dict[int, _Entry] = {}
        self.reps: dict[tuple[int, int], _Rep] = {}
        self.tasks: dict[tuple[int, int], _Task] = {}
        self.holding: tuple[int, int] | None = None
        self.running: tuple[int, int] | None = None
        self.heard: dict[Address, float] = {}  # any sched message, by sender
        self.state_of: dict[Address, _Heard] = {}  # what neighbours and members last beat us
        dims = can.config.space.n
        self.above: tuple[float, ...] = (0.0,) * (2 * dims)  # Kim's aggregates, ours
        self._member_since = -math.inf  # when our cluster was set: members' silence counts from it
        self.gone = False
        self._handover_until = math.inf
        self._next_handover = math.inf
        self._actions: list[Action] = []
        self._next_beat = math.inf
        self._next_balance = math.inf
        self._balancers = set(config.balance.split("+")) - {"none"}
        self.counts: dict[str, int] = {}

    # -- commands --------------------------------------------------------------------------------------

    def set_cluster(self, members: Sequence[Address], now: float) -> None:
        """Our cluster's members (a static clustering; we are added if missing)."""
        ours = [(str(h), int(p)) for h, p in members]
        self.members = [self.address] + [m for m in dict.fromkeys(ours) if m != self.address]
        self._member_since = now
        self._wake(now)

    def submit(self, job: JobInfo, now: float) -> None:
        """Take a job as its entry. Raises ValueError for a malformed job, a job
        this peer is already the entry of, or a peer that has left; the state is
        then unchanged."""
        problem = self._check_job(job)
        if problem is not None:
            raise ValueError(problem)
        if self.gone:
            raise ValueError("this peer has left")
        if job.id in self.entries and not self.entries[job.id].ended:
            raise ValueError(f"job {job.id} is being scheduled from here already")
        entry = self.entries[job.id] = _Entry(job)
        self._emit(JobSubmitted(now, job.id, job.size))
        self._wake(now)
        self._try(entry, now)

    def leave(self, now: float) -> None:
        """Going away: our attempts fail over to their entries, our ranks report
        failure, and the jobs we are the entry of are handed to neighbours
        (handing_over() is true until each is taken, or handover_s has passed)."""
        for rep in list(self.reps.values()):
            if rep.state != "finished":
                self._finish(rep, False, "its representative left", now)
        for key, task in list(self.tasks.items()):
            if task.state == "running":
                self._actions.append(KillTask(*key))
            if task.state != "done":
                self._send(task.rep, TaskDone(key[0], key[1], task.round, False, "a member left"))
        self.tasks.clear()
        self.holding = self.running = None
        self.gone = True
        adopters = [(i.host, i.port) for i in self._neighbours()]
        for entry in self.entries.values():
            if not entry.ended and adopters:
                entry.handed_to = self.rng.choice(adopters)
                self._hand_over(entry)
        if self.handing_over():
            self._handover_until = now + self.config.handover_s
            self._next_handover = now + HANDOVER_RESEND_S

    def handing_over(self) -> bool:
        """Leaving, with jobs not yet taken by another entry (and time left to wait)."""
        return self._handover_until < math.inf and any(
            e.handed_to is not None for e in self.entries.values()
        )

    def task_finished(self, job: int, attempt: int, ok: bool, reason: str, now: float) -> None:
        """The driver's report: our rank of (job, attempt) ended."""
        key = (job, attempt)
        task = self.tasks.get(key)
        if self.running == key:
            self.running = None
        if task is None or task.state != "running":
            return  # killed meanwhile
        task.state, task.ok, task.reason, task.since = "done", ok, reason[:MAX_REASON], now
        self._send(task.rep, TaskDone(job, attempt, task.round, ok, task.reason))
        self._advance(now)

    def actions(self) -> list[Action]:
        """Processes to start or kill (mutating, like an iterator)."""
        out, self._actions = self._actions, []
        return out

    # -- inputs ----------------------------------------------------------------------------------------

    def handle_message(self, source: Address, message: Message, now: float) -> str | None:
        """Apply one message; returns why it was unacceptable, or None."""
        self.heard[source] = now
        self.lost.discard(source)
        handler = self._handlers.get(type(message))
        if handler is None:
            return "not a scheduling message"
        return handler(self, source, message, now)

    def handle_timer(self, now: float) -> None:
        if now >= self._next_handover:
            if now >= self._handover_until or not self.handing_over():
                # Done, or given up: the client submits untaken jobs again.
                self._handover_until = self._next_handover = math.inf
            else:
                self._next_handover = now + HANDOVER_RESEND_S
                for entry in self.entries.values():
                    if entry.handed_to is not None:
                        self._hand_over(entry)
        if now >= self._next_beat:
            self._next_beat = now + self.config.beat_s
            self._beat(now)
            self._forget(now)
        if now >= self._next_balance:
            self._next_balance = now + self.config.balance_s
            if not self.gone:
                self._balance(now)

    def get_timer(self) -> float | None:
        deadline = min(self._next_beat, self._next_handover, self._next_balance)
        return None if deadline == math.inf else deadline

    def _wake(self, now: float) -> None:
        if self._next_beat == math.inf:
            self._next_beat = now + self.rng.uniform(0, self.config.beat_s)
        if self._next_balance == math.inf and self._balancers:
            self._next_balance = now + self.rng.uniform(0, self.config.balance_s)

    # -- entry ---------------------------------------------------------------------------------------------

    def _try(self, entry: _Entry, now: float) -> None:
        if entry.rep is not None:
            self._send(entry.rep, JobCancel(entry.job.id, entry.attempt))
        entry.retry_at = math.inf
        if entry.tries >= self.config.max_attempts:
            self._end(entry, False, f"{entry.reason} (after {entry.tries} attempts)", 0.0, now)
            return
        entry.tries += 1
        if entry.attempt:
            entry.earlier.append(entry.attempt)
        entry.attempt = self.rng.randrange(1, 2**31)
        entry.rep, entry.heard, entry.watching, entry.running = None, now, False, False
        self._count("routed")
        self._on_route(JobRoute(entry.job, entry.attempt, self._me, 0, STAGE_ROUTE), now)

    def _fail_try(self, entry: _Entry, reason: str, now: float) -> None:
        """This try failed: the next one after the back-off."""
        entry.reason = reason[:MAX_REASON]
        entry.rep = None
        backoff = self.config.retry_s * 2 ** max(0, entry.tries - 1)
        entry.retry_at = now + min(self.config.retry_max_s, backoff)

    def _end(self, entry: _Entry, ok: bool, reason: str, run_s: float, now: float) -> None:
        entry.ended, entry.retry_at, entry.ended_at = True, math.inf, now
        self._emit(JobEnded(now, entry.job.id, ok, reason, entry.tries, run_s))

    def _current(self, job: int, attempt: int) -> _Entry | None:
        entry = self.entries.get(job)
        if entry is None or entry.ended or entry.handed_to is not None or attempt != entry.attempt:
            return None
        return entry

    def _earlier(self, job: int, attempt: int) -> _Entry | None:
        """The job's entry if `attempt` is one of its earlier tries and the job
        is still ours and open."""
        entry = self.entries.get(job)
        if entry is None or entry.ended or entry.handed_to is not None:
            return None
        return entry if attempt in entry.earlier else None

    def _supersede(self, entry: _Entry, attempt: int) -> None:
        """Make the earlier try `attempt` the current one again; the current try
        is cancelled (a representative not known yet hears it when it acks)."""
        if entry.rep is not None:
            self._send(entry.rep, JobCancel(entry.job.id, entry.attempt))
        entry.earlier.remove(attempt)
        entry.earlier.append(entry.attempt)
        entry.attempt, entry.rep, entry.running = attempt, None, False
        entry.retry_at = math.inf

    def _on_ack(self, source: Address, ack: JobAck, now: float) -> str | None:
        entry = self._current(ack.job, ack.attempt)
        if entry is None:
            entry = self._earlier(ack.job, ack.attempt)
            if entry is None or not ack.running or entry.running:
                self._send(source, JobCancel(ack.job, ack.attempt))  # a stale attempt: stop it
                return None
            # A try we gave up on as silent runs after all, and the current one
            # does not yet: take the earlier one back rather than run the job twice.
            self._count("took_back")
            self._supersede(entry, ack.attempt)
        entry.rep, entry.heard, entry.watching = source, now, False
        entry.running = ack.running
        return None

    def _on_end(self, source: Address, end: JobEnd, now: float) -> str | None:
        handing = self.entries.get(end.job)
        if handing is not None and handing.handed_to is not None and not handing.ended:
            return None  # not acknowledged: the representative tells the adopter (JobWatch)
        self._send(source, JobCancel(end.job, end.attempt))  # acknowledged in every other case
        entry = self._current(end.job, end.attempt)
        if entry is None and end.ok and (entry := self._earlier(end.job, end.attempt)):
            # A try we gave up on as silent completed: the first completed run
            # completes the job, and the current try stops.
            self._count("took_back")
            self._supersede(entry, end.attempt)
        if entry is None:
            self._count("late_end")
            return None
        if end.ok:
            self._end(entry, True, "", max(0.0, end.run_s), now)
        else:  # what failed (loads not known yet, a hole being repaired) may pass later
            self._fail_try(entry, end.reason, now)
        return None

    def _hand_over(self, entry: _Entry) -> None:
        assert entry.handed_to is not None
        rep = Endpoint(*entry.rep) if entry.rep is not None else None
        earlier = tuple(entry.earlier)
        self._send(
            entry.handed_to, JobHandover(entry.job, entry.attempt, entry.tries, rep, earlier)
        )

    def _on_handover(self, source: Address, handover: JobHandover, now: float) -> str | None:
        problem = self._check_job(handover.job)
        if problem is not None or not 0 <= handover.tries <= self.config.max_attempts:
            return problem or "bad try count"
        if len(handover.earlier) > self.config.max_attempts:
            return "too many earlier tries"
        if handover.rep is not None and check_endpoint(handover.rep) is not None:
            return "bad representative address"
        job = handover.job.id
        if self.gone:
            return None  # not taken: the leaver gives up on us and the client submits again
        known = self.entries.get(job)
        # A job we ended ourselves is not taken again (a hand-over sent again
        # after our JobTaken was lost); one we passed on may come back.
        if known is None or (known.ended and known.passed_on):
            entry = self.entries[job] = _Entry(handover.job, handover.tries, handover.attempt)
            entry.heard, entry.earlier = now, list(handover.earlier)
            if handover.rep is not None:
                entry.rep, entry.watching = (handover.rep.host, handover.rep.port), True
                self._send(entry.rep, JobWatch(job, entry.attempt))
            self._emit(JobAdopted(now, job, source[0]))
            self._wake(now)
        self._send(source, JobTaken(job))
        return None

    def _on_taken(self, source: Address, taken: JobTaken, now: float) -> str | None:
        entry = self.entries.get(taken.job)
        if entry is not None and entry.handed_to == source:
            entry.handed_to, entry.ended, entry.passed_on = None, True, True
            entry.ended_at = now
            self._emit(JobHandedOver(now, taken.job, source[0]))
        return None

    def _on_watch(self, source: Address, watch: JobWatch, now: float) -> str | None:
        rep = self.reps.get((watch.job, watch.attempt))
        if rep is None:
            self._send(source, JobEnd(watch.job, watch.attempt, False, "not known here", 0.0))
            return None
        rep.entry, rep.orphan = source, False
        self._report(rep)
        return None

    # -- routing and placement -----------------------------------------------------------------------------

    def _on_job_route(self, source: Address, route: JobRoute, now: float) -> str | None:
        problem = self._check_job(route.job)
        if problem is not None:
            return problem
        if not 0 <= route.hops <= self.config.max_hops or route.stage not in STAGES:
            return "bad hop count or stage"
        if check_endpoint(route.entry) is not None:
            return "bad entry address"
        self._on_route(route, now)
        return None

    def _on_route(self, route: JobRoute, now: float) -> None:
        entry = (route.entry.host, route.entry.port)
        job, attempt = route.job, route.attempt

        def fail(reason: str) -> None:
            self._count("route_failed")
            self._send(entry, JobEnd(job.id, attempt, False, reason[:MAX_REASON], 0.0))

        if self.gone:
            fail(f"routing reached {self.address[0]}, which is leaving")
        elif route.stage == STAGE_PLACED:
            self._represent(job, attempt, entry, now, moved=route.moved)
        elif route.hops >= self.config.max_hops:
            fail(f"no capable node within {self.config.max_hops} hops")
        elif route.stage == STAGE_ROUTE and (hop := self._route_step(job.point)) != -1:
            if hop is None:
                fail(f"routing found a hole at {self.address[0]}")
            else:
                info = self.can.known[hop].info
                self._send((info.host, info.port), replace(route, hops=route.hops + 1))
        else:
            self._place(route, now, fail)

    def _route_step(self, point: tuple[float, ...]) -> int | None:
        can = self.can
        if not can.lo:
            return None
        boxes = [(i, can.known[i].info.lo, can.known[i].info.hi) for i in sorted(can.direct)]
        return next_hop(can.config.space, can.lo, can.hi, boxes, point)

    def _place(self, route: JobRoute, now: float, fail: Callable[[str], None]) -> None:
        """Kim's CAN-P matchmaking (seed 000 §4.1.1) at the owner of the job's
        point or a node it was pushed to. Stop at a capable node with room (a
        serial job: an empty queue; a parallel one: `size` free members of its
        cluster), the least capable one that has it; else push the job upward,
        to the upper neighbour whose region is lightly loaded and large (F =
        queued / nodes^2 above it), stopping with probability 1 / (1 + nodes
        above)^2 once a capable node was met; then the job goes to the best
        capable node met on the way (shortest queue, or maxQL)."""
        job = route.job
        candidates = self._candidates(job, now)
        room = [c for c in candidates if (c.load == 0 if job.size == 1 else c.free >= job.size)]
        if room:
            self._count("placed")
            self._hand_to(self._least_capable(room).addr, route, now)
            return
        best, best_load = route.best, route.best_load
        for c in candidates:
            load = c.load if job.size == 1 else c.maxql
            if best is None or load < best_load:
                best, best_load = Endpoint(*c.addr), load
        target, dim = self._push_target(now)
        stop = best is not None and (
            target is None
            or route.hops + 1 >= self.config.max_hops
            or self.rng.random() < 1.0 / (1.0 + self.above[2 * dim]) ** STOPPING_FACTOR
        )
        if stop:
            assert best is not None
            self._count("placed_pushed" if route.stage == STAGE_PUSH else "placed")
            self._hand_to((best.host, best.port), route, now)
        elif target is not None:
            self._count("pushed")
            pushed = replace(
                route, hops=route.hops + 1, stage=STAGE_PUSH, best=best, best_load=best_load
            )
            self._send(target, pushed)
        elif (toward := self._closer_neighbour(job, now)) is not None:
            # The top of the space and nothing capable met: towards the requirement.
            self._count("pushed")
            self._send(toward, replace(route, hops=route.hops + 1, stage=STAGE_PUSH))
        else:
            fail(f"no capable node near {self.address[0]} for {job.size} nodes")

    def _hand_to(self, addr: Address, route: JobRoute, now: float) -> None:
        if addr == self.address:
            self._represent(route.job, route.attempt, (route.entry.host, route.entry.port), now)
        else:
            self._send(addr, replace(route, hops=route.hops + 1, stage=STAGE_PLACED))

    def _candidates(self, job: JobInfo, now: float) -> list[_Candidate]:
        """Us and our direct neighbours, where capable of the job (their
        capabilities, and as many live cluster members as it needs), with what
        they last told us of their load."""
        out = []
        size, free, maxql = self._cluster_view(now)
        if self._capable(self.can.point, job) and size >= job.size:
            out.append(_Candidate(self.address, self.can.point, self._load(), free, maxql))
        fresh = now - self.config.dead_after_s
        for info in self._neighbours():
            addr = (info.host, info.port)
            heard = self.state_of.get(addr)
            if heard is None or heard.at < fresh or heard.load < 0:
                continue  # not heard from yet, silent, or taking no jobs
            if self._capable(info.point, job) and heard.size >= job.size:
                out.append(_Candidate(addr, info.point, heard.load, heard.free, heard.maxql))
        return out

    def _least_capable(self, candidates: list[_Candidate]) -> _Candidate:
        """A random one of those no other is strictly below in every real
        dimension: jobs keep off nodes more capable than they need (parsimony)."""
        pool = [
            c
            for c in candidates
            if not any(
                all(o.point[k] < c.point[k] for k in self._real) for o in candidates if o is not c
            )
        ]
        return self.rng.choice(pool)

    def _push_target(self, now: float) -> tuple[Address | None, int]:
        """The upper neighbour (in any dimension) whose region above is least
        loaded for its size, F = queued / nodes^2, and that dimension."""
        best: tuple[float, Address, int] | None = None
        fresh = now - self.config.dead_after_s
        for d, info, _share in self._uppers():
            heard = self.state_of.get((info.host, info.port))
            if heard is None or heard.at < fresh or heard.load < 0:
                continue
            nodes, queued = heard.above[2 * d], heard.above[2 * d + 1]
            score = queued / nodes**2 if nodes >= 1e-6 else math.inf
            if best is None or score < best[0]:
                best = (score, (info.host, info.port), d)
        return (None, 0) if best is None else (best[1], best[2])

    def _closer_neighbour(self, job: JobInfo, now: float) -> Address | None:
        mine = self._closeness(self.can.point, job)
        fresh = now - self.config.dead_after_s
        best: tuple[float, Address] | None = None
        for info in self._neighbours():
            heard = self.state_of.get((info.host, info.port))
            if heard is not None and (heard.at < fresh or heard.load < 0):
                continue
            score = self._closeness(info.point, job)
            if score > mine and (best is None or score > best[0]):
                best = (score, (info.host, info.port))
        return None if best is None else best[1]

    def _uppers(self) -> Iterable[tuple[int, Any, float]]:
        """(dimension, neighbour, share): the neighbours whose zone begins where
        ours ends in a dimension, with the share of their lower face that
        touches ours (seed 000 eq. 4.2)."""
        can = self.can
        if not can.lo:
            return
        lo, hi = can.lo, can.hi
        for info in self._neighbours():
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

    def _neighbours(self) -> Iterable[Any]:
        can = self.can
        return (can.known[i].info for i in sorted(can.direct) if i in can.known)

    def _reach(self) -> Iterable[Any]:
        """The peers we beat and balance over: our direct neighbours, and with
        neighbours = "indirect" every other peer the CAN knows of (their
        neighbours, learnt from their updates)."""
        if self.config.neighbours == "direct":
            return self._neighbours()
        can = self.can
        return (can.known[i].info for i in sorted(can.known) if can.known[i].info.lo)

    def _capable(self, point: Sequence[float], job: JobInfo) -> bool:
        return bool(point) and all(point[k] >= job.point[k] for k in self._real)

    def _closeness(self, point: Sequence[float], job: JobInfo) -> float:
        return sum(
            min(point[k] / job.point[k], 1.0) if job.point[k] > 0 else 1.0 for k in self._real
        )

    def _load(self) -> int:
        return sum(1 for t in self.tasks.values() if t.state != "done")

    def _live(self) -> list[Address]:
        """Our cluster's members, us first, without those known to be gone."""
        return [m for m in self.members if m not in self.lost]

    def _silent(self, addr: Address, since: float, now: float) -> bool:
        """Nothing from `addr` for dead_after_s, counting from `since` at the earliest."""
        return max(self.heard.get(addr, since), since) < now - self.config.dead_after_s

    # -- representative --------------------------------------------------------------------------------

    def _represent(
        self, job: JobInfo, attempt: int, entry: Address, now: float, *, moved: bool = False
    ) -> None:
        key = (job.id, attempt)
        if key in self.reps:
            return  # a duplicate placement
        if not self._capable(self.can.point, job):
            self._send(entry, JobEnd(job.id, attempt, False, "placed on an incapable node", 0.0))
            return
        live = self._live()
        if len(live) < job.size:
            reason = f"cluster of {len(live)} live members for {job.size} nodes"
            self._send(entry, JobEnd(job.id, attempt, False, reason, 0.0))
            return
        others = live[1:] if job.size > 1 else []  # a serial job runs here
        if self.config.overprovision and others:
            want = min(len(live), math.ceil(self.config.overprovision * job.size))
            others = self.rng.sample(others, want - 1)
        rep = self.reps[key] = _Rep(job, attempt, entry, [self.address, *others], now)
        rep.moved = moved
        self._count("represented")
        self._offer(rep, now)
        self._send(entry, JobAck(job.id, attempt, False))
        self._wake(now)

    def _offer(self, rep: _Rep, now: float) -> None:
        rep.state, rep.offered_at = "collecting", now
        rep.ready, rep.ranks, rep.done = [], {}, set()
        offer = TaskOffer(rep.job, rep.attempt, rep.round)
        for member in rep.members:
            self._send(member, offer)

    def _report(self, rep: _Rep) -> None:
        """Tell the entry where the attempt stands."""
        if rep.state == "finished":
            run_s = round(rep.run_s, 6)
            self._send(rep.entry, JobEnd(rep.job.id, rep.attempt, rep.ok, rep.reason, run_s))
        else:
            self._send(rep.entry, JobAck(rep.job.id, rep.attempt, rep.state == "running"))

    def _on_ready(self, source: Address, ready: TaskReady, now: float) -> str | None:
        rep = self.reps.get((ready.job, ready.attempt))
        if rep is None or ready.round < rep.round or rep.state == "finished":
            if ready.ready:
                self._send(source, TaskCancel(ready.job, ready.attempt, ready.round))
            return None
        if ready.round > rep.round or source not in rep.members:
            return "a round or member we do not know"
        if rep.state == "running":
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

    def _start(self, rep: _Rep, now: float) -> None:
        chosen = sorted(rep.ready[: rep.job.size], key=rep.members.index)
        rep.ranks = {m: rank for rank, m in enumerate(chosen)}
        rep.state, rep.started_at = "running", now
        for member in chosen:
            self._start_rank(rep, member)
        for member in rep.members:
            if member not in rep.ranks:
                self._send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
        self._emit(JobStarted(now, rep.job.id, rep.attempt, rep.round, tuple(m[0] for m in chosen)))

    def _start_rank(self, rep: _Rep, member: Address) -> None:
        peers = tuple(Endpoint(m[0], self.config.mpi_port) for m in rep.ranks)
        self._send(member, TaskStart(rep.job.id, rep.attempt, rep.round, rep.ranks[member], peers))

    def _on_done(self, source: Address, done: TaskDone, now: float) -> str | None:
        rep = self.reps.get((done.job, done.attempt))
        if rep is None or done.round != rep.round or rep.state == "finished":
            self._send(source, TaskCancel(done.job, done.attempt, done.round))  # acknowledged
            return None
        if source not in rep.members:
            return "a member we do not know"
        if rep.state == "running" and source in rep.ranks:
            if not done.ok:
                self._restart(rep, f"rank {rep.ranks[source]} on {source[0]}: {done.reason}", now)
            else:
                rep.done.add(rep.ranks[source])
                if len(rep.done) == len(rep.ranks):
                    self._finish(rep, True, "", now)
        elif not done.ok:
            self._lose(rep, source, done.reason, now)
        return None

    def _restart(self, rep: _Rep, reason: str, now: float) -> None:
        self._count("restarted")
        for member in rep.members:
            self._send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
        if rep.round >= self.config.max_rounds:
            self._finish(rep, False, reason, now)
            return
        rep.round += 1
        alive = [m for m in rep.members if m not in self.lost]
        rep.members = alive
        if len(alive) < rep.job.size:
            self._finish(rep, False, f"{reason}; {len(alive)} members left", now)
            return
        self._offer(rep, now)

    def _lose(self, rep: _Rep, member: Address, reason: str, now: float) -> None:
        """A member of the attempt is gone (silent, left, or forgot its task)."""
        if member not in rep.members or rep.state == "finished":
            return
        if member != self.address and "forgot" not in reason:
            self.lost.add(member)
        if rep.state == "running":
            if member in rep.ranks:
                self._restart(rep, f"rank {rep.ranks[member]} on {member[0]}: {reason}", now)
            return
        rep.members.remove(member)
        if member in rep.ready:
            rep.ready.remove(member)
        if len(rep.members) < rep.job.size:
            for other in rep.members:
                self._send(other, TaskCancel(rep.job.id, rep.attempt, rep.round))
            have = len(rep.members)
            self._finish(rep, False, f"{member[0]} {reason}; {have} members left", now)

    def _finish(self, rep: _Rep, ok: bool, reason: str, now: float) -> None:
        rep.state, rep.ok, rep.reason = "finished", ok, reason[:MAX_REASON]
        rep.run_s = now - rep.started_at if ok else 0.0
        self._report(rep)
        for member in rep.ranks if ok else rep.members:
            self._send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
        self._emit(JobFinished(now, rep.job.id, rep.attempt, ok, rep.reason, round(rep.run_s, 6)))

    def _orphan(self, key: tuple[int, int], rep: _Rep, reason: str, now: float) -> bool:
        """The entry is gone. A running attempt runs to its end, which its
        job_finished event reports to the client (seed 000 §2.1: the run node
        returns results directly to the client); any other is dropped.
        Returns whether the attempt is gone."""
        if rep.state == "running":
            rep.orphan = True
            return False
        if rep.orphan and rep.state == "finished":
            del self.reps[key]  # its job_finished was the report
            return True
        self._drop_attempt(key, reason, now)
        return True

    def _drop_attempt(self, key: tuple[int, int], reason: str, now: float) -> None:
        """Forget an attempt we represent (cancelled, or its entry is gone)."""
        rep = self.reps.pop(key)
        if rep.state != "finished":
            self._count("cancelled")
            for member in rep.members:
                self._send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
            self._emit(JobFinished(now, rep.job.id, rep.attempt, False, reason, 0.0))

    def _on_cancel_job(self, source: Address, cancel: JobCancel, now: float) -> str | None:
        key = (cancel.job, cancel.attempt)
        if key in self.reps and self.reps[key].entry == source:
            self._drop_attempt(key, "cancelled", now)
        return None

    # -- balancing (seed 002 §4.2, Algorithms 1 and 2) -----------------------------------------------

    def _balance(self, now: float) -> None:
        """DLB, then QB: the oldest idle job (not started, never moved) that a
        neighbour can take is moved there; one job per period at most."""
        # Not a job whose entry has been quiet for two beats: moved, it would
        # wait a whole dead_after_s more at its new place before being dropped,
        # and the client, which counts from the entry's loss, submits it again
        # meanwhile.
        lively = now - 2 * self.config.beat_s
        idle = sorted(
            (
                r
                for r in self.reps.values()
                if r.state == "collecting"
                and not r.moved
                and (r.entry == self.address or self.heard.get(r.entry, -math.inf) >= lively)
            ),
            key=lambda r: _order(r.job),
        )
        if not idle:
            return
        fresh = now - self.config.dead_after_s
        near = []
        for info in self._reach():
            addr = (info.host, info.port)
            heard = self.state_of.get(addr)
            # Another cluster's node that takes jobs and was heard from lately.
            usable = heard is not None and heard.at >= fresh and heard.load >= 0
            if usable and addr not in self.members:
                near.append((info, heard))
        for how in ("dlb", "qb"):
            if how not in self._balancers:
                continue
            for rep in idle:
                job, serial = rep.job, rep.job.size == 1
                average_qp = self._average_qp(rep)
                fits = []
                for info, heard in near:
                    if not (self._capable(info.point, job) and heard.size >= job.size):
                        continue
                    if how == "dlb":  # c0: its residue runs the job now
                        ok = heard.load == 0 if serial else heard.free >= job.size
                    else:  # c1: no task of the job would queue longer there
                        ok = (heard.load if serial else heard.maxql) < average_qp - 1
                    if ok:
                        addr = (info.host, info.port)
                        fits.append(
                            _Candidate(addr, info.point, heard.load, heard.free, heard.maxql)
                        )
                if fits:
                    self._move(rep, self._least_capable(fits).addr, how, now)
                    return

    def _average_qp(self, rep: _Rep) -> float:
        """The mean queue position of the job's tasks, as their members last said."""
        mine = self._positions().get((rep.job.id, rep.attempt), 0)
        values = [mine if m == self.address else rep.positions.get(m, 0) for m in rep.members]
        return sum(values) / len(values)

    def _move(self, rep: _Rep, target: Address, how: str, now: float) -> None:
        key = (rep.job.id, rep.attempt)
        del self.reps[key]
        for member in rep.members:
            self._send(member, TaskCancel(rep.job.id, rep.attempt, rep.round))
        entry = Endpoint(*rep.entry)
        self._send(target, JobRoute(rep.job, rep.attempt, entry, 0, STAGE_PLACED, moved=True))
        self._count(f"moved_{how}")
        self._emit(JobMoved(now, rep.job.id, rep.attempt, target[0], how))

    # -- member ---------------------------------------------------------------------------------------

    def _on_offer(self, source: Address, offer: TaskOffer, now: float) -> str | None:
        problem = self._check_job(offer.job)
        if problem is not None or offer.round < 1:
            return problem or "bad round"
        key = (offer.job.id, offer.attempt)
        if self.gone:
            self._send(source, TaskDone(*key, offer.round, False, "a member left"))
            return None
        task = self.tasks.get(key)
        if task is not None and task.round >= offer.round:
            return None  # a duplicate
        if task is not None:
            self._drop(key)
        task = self.tasks[key] = _Task(offer.job, offer.attempt, offer.round, source, now)
        held = self.tasks.get(self.holding) if self.holding is not None else None
        if held is not None and _order(task.job) < _order(held.job):
            # The deadlock rule: an older task withdraws our readiness for a newer one.
            self._count("deadlock_rule")
            held.state = "queued"
            self._send(held.rep, TaskReady(held.job.id, held.attempt, held.round, False))
            self.holding = None
        self._wake(now)
        self._advance(now)
        return None

    def _advance(self, now: float) -> None:
        if self.running is not None or self.holding is not None:
            return
        queued = [t for t in self.tasks.values() if t.state == "queued"]
        if not queued:
            return
        head = min(queued, key=lambda t: _order(t.job))
        head.state = "ready"
        self.holding = (head.job.id, head.attempt)
        self._send(head.rep, TaskReady(head.job.id, head.attempt, head.round, True))

    def _on_start(self, source: Address, start: TaskStart, now: float) -> str | None:
        key = (start.job, start.attempt)
        task = self.tasks.get(key)
        if not 0 <= start.rank < len(start.peers) or len(start.peers) > MAX_JOB_SIZE:
            return "bad rank"
        if any(check_endpoint(p) is not None for p in start.peers):
            return "bad rank address"
        if task is not None and task.round == start.round and task.state in ("running", "done"):
            if task.state == "done":  # a late duplicate: say again how it ended
                self._send(task.rep, TaskDone(*key, task.round, task.ok, task.reason))
            return None
        if task is None or task.round != start.round or self.holding != key:
            self._send(source, TaskReady(start.job, start.attempt, start.round, False))
            return None
        task.state, task.since = "running", now
        self.holding, self.running = None, key
        peers = tuple((p.host, p.port) for p in start.peers)
        self._actions.append(
            RunTask(start.job, start.attempt, start.round, start.rank, peers, task.job.runtime_s)
        )
        return None

    def _on_cancel_task(self, source: Address, cancel: TaskCancel, now: float) -> str | None:
        key = (cancel.job, cancel.attempt)
        task = self.tasks.get(key)
        if task is not None and task.round <= cancel.round and task.rep == source:
            self._drop(key)
            self._advance(now)
        return None

    def _drop(self, key: tuple[int, int]) -> None:
        task = self.tasks.pop(key)
        if self.running == key:
            self.running = None
            if task.state == "running":
                self._actions.append(KillTask(*key))
        if self.holding == key:
            self.holding = None

    # -- beats --------------------------------------------------------------------------------------------

    def _on_beat(self, source: Address, beat: SchedBeat, now: float) -> str | None:
        if len(beat.tasks) > MAX_SHARED:
            return "too many tasks"
        if len(beat.above) != len(self.above) or not all(
            0 <= x <= MAX_AGGREGATE for x in beat.above
        ):
            return "bad aggregates"
        if not (beat.load >= -1 and 0 <= beat.free <= beat.size and beat.maxql >= 0):
            return "bad load figures"
        self.state_of[source] = _Heard(beat.load, beat.size, beat.free, beat.maxql, beat.above, now)
        listed = {(job, attempt) for job, attempt, _ in beat.tasks}
        for job, attempt, position in beat.tasks:
            rep = self.reps.get((job, attempt))
            if rep is not None and source in rep.members and 0 <= position <= MAX_SHARED:
                rep.positions[source] = position
        grace = now - 2 * self.config.beat_s
        for key, rep in list(self.reps.items()):
            if key in listed:
                continue
            if rep.entry == source and rep.entry != self.address and rep.since < grace:
                self._orphan(key, rep, "its entry forgot it", now)  # the entry came back
            elif rep.state == "collecting" and source in rep.members:
                if rep.offered_at < grace:  # the offer was lost, or the member forgot it
                    self._send(source, TaskOffer(rep.job, rep.attempt, rep.round))
            elif (
                rep.state == "running"
                and source in rep.ranks
                and rep.started_at < grace
                and rep.ranks[source] not in rep.done
            ):
                self._lose(rep, source, "forgot its rank", now)
        for key, task in list(self.tasks.items()):
            if task.rep == source and key not in listed and task.since < grace:
                self._drop(key)  # the representative forgot it
                self._advance(now)
        return None

    def _beat(self, now: float) -> None:
        shared: dict[Address, list[tuple[int, int]]] = {}
        for key, rep in list(self.reps.items()):
            gone = rep.orphan or (
                rep.entry != self.address and self._silent(rep.entry, rep.since, now)
            )
            if gone and self._orphan(key, rep, "its entry went silent", now):
                continue
            self._report(rep)
            shared.setdefault(rep.entry, []).append(key)
            if rep.state == "finished":
                continue
            # Only the peers holding a task of the attempt beat us about it.
            running = rep.state == "running"
            since = rep.started_at if running else rep.offered_at
            for member in list(rep.ranks if running else rep.members):
                if member != self.address and self._silent(member, since, now):
                    self._lose(rep, member, "went silent", now)
            if rep.state != "finished":
                for member in rep.ranks if rep.state == "running" else rep.members:
                    shared.setdefault(member, []).append(key)
        for key, task in list(self.tasks.items()):
            if task.rep != self.address and self._silent(task.rep, task.since, now):
                self._count("orphaned")
                self._drop(key)
                continue
            if task.state == "done":
                self._send(task.rep, TaskDone(*key, task.round, task.ok, task.reason))
            elif task.state == "ready":
                self._send(task.rep, TaskReady(*key, task.round, True))
            shared.setdefault(task.rep, []).append(key)
        self._advance(now)
        if not self.gone:
            for entry in self.entries.values():
                if entry.handed_to is not None and not entry.ended and entry.rep is not None:
                    # Still ours to the representative until the adopter's JobWatch.
                    shared.setdefault(entry.rep, []).append((entry.job.id, entry.attempt))
                if entry.ended or entry.handed_to is not None:
                    continue
                if now >= entry.retry_at:
                    self._try(entry, now)
                elif entry.retry_at == math.inf and entry.heard < now - self.config.dead_after_s:
                    where = entry.rep[0] if entry.rep is not None else "the route"
                    self._fail_try(entry, f"{where} went silent", now)
                    self._try(entry, now)
                elif entry.rep is not None:
                    if entry.watching:
                        self._send(entry.rep, JobWatch(entry.job.id, entry.attempt))
                    shared.setdefault(entry.rep, []).append((entry.job.id, entry.attempt))
        # Our cluster's members beat each other: the live view, its residue and maxQL.
        for member in self.members[1:]:
            if member not in self.lost and self._silent(member, self._member_since, now):
                self.lost.add(member)
            shared.setdefault(member, [])
        for info in self._reach():
            shared.setdefault((info.host, info.port), [])
        shared.pop(self.address, None)
        self.above = self._aggregate(now)
        load = -1 if self.gone else self._load()
        size, free, maxql = self._cluster_view(now)
        positions = self._positions()
        for addr, keys in shared.items():
            tasks = tuple((j, a, positions.get((j, a), 0)) for j, a in sorted(set(keys)))
            self._send(addr, SchedBeat(load, size, free, maxql, self.above, tasks[:MAX_SHARED]))

    def _forget(self, now: float) -> None:
        """Drop what we heard of peers long silent, and jobs long ended (so that a
        peer's state stays bounded on a long run; late messages about them are
        answered as about unknown ones)."""
        horizon = now - FORGET_AFTER * self.config.dead_after_s
        for addr in [a for a, at in self.heard.items() if at < horizon]:
            del self.heard[addr]
        for addr in [a for a, h in self.state_of.items() if h.at < horizon]:
            del self.state_of[addr]
        for job in [j for j, e in self.entries.items() if e.ended and e.ended_at < horizon]:
            del self.entries[job]

    def _positions(self) -> dict[tuple[int, int], int]:
        """Each task's queue position here: the runnable tasks ahead of it (a
        running one has position 0; seed 002 §4.2)."""
        waiting = sorted(
            (key for key, t in self.tasks.items() if t.state in ("queued", "ready")),
            key=lambda key: _order(self.tasks[key].job),
        )
        ahead = 1 if self.running is not None else 0
        out = {key: ahead + k for k, key in enumerate(waiting)}
        if self.running is not None:
            out[self.running] = 0
        return out

    def _cluster_view(self, now: float) -> tuple[int, int, int]:
        """Our cluster as its members last told us: live members, how many of
        them have nothing queued (residue), the longest queue (maxQL)."""
        loads = [self._load()]
        for member in self._live()[1:]:
            heard = self.state_of.get(member)
            loads.append(heard.load if heard is not None and heard.load >= 0 else 0)
        return len(loads), sum(1 for q in loads if q == 0), max(loads)

    def _aggregate(self, now: float) -> tuple[float, ...]:
        """Kim's eq. 4.1 for every dimension d: the nodes and the queued tasks
        above us, from each upper neighbour's own figures and its aggregate,
        weighted by the share of its face that touches ours."""
        out = [0.0] * len(self.above)
        fresh = now - self.config.dead_after_s
        for d, info, share in self._uppers():
            heard = self.state_of.get((info.host, info.port))
            if heard is None or heard.at < fresh:
                continue
            out[2 * d] += share * (heard.above[2 * d] + 1)
            out[2 * d + 1] += share * (heard.above[2 * d + 1] + max(0, heard.load))
        return tuple(out)

    # -- helpers ---------------------------------------------------------------------------------------

    def _check_job(self, job: JobInfo) -> str | None:
        if not 0 <= job.id < 2**63 or not 1 <= job.size <= MAX_JOB_SIZE:
            return "bad job id or size"
        if not (math.isfinite(job.runtime_s) and 0 <= job.runtime_s <= MAX_RUNTIME_S):
            return "bad runtime"
        if not math.isfinite(job.order):
            return "bad order"
        if len(job.point) != self.can.config.space.n or not all(
            math.isfinite(v) for v in job.point
        ):
            return "bad requirement point"
        return None

    @classmethod
    def message_types(cls) -> Iterable[type]:
        """The wire messages this agent takes."""
        return cls._handlers.keys()

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def dump(self) -> dict[str, Any]:
        return {
            "members": len(self.members),
            "lost": sorted(m[0] for m in self.lost),
            "above": [round(x, 2) for x in self.above],
            "load": self._load(),
            "entries": sorted(j for j, e in self.entries.items() if not e.ended),
            "represented": sorted(f"{j}/{a}:{r.state}" for (j, a), r in self.reps.items()),
            "tasks": sorted(f"{j}/{a}:{t.state}" for (j, a), t in self.tasks.items()),
            "counts": dict(sorted(self.counts.items())),
        }

    _handlers: ClassVar[dict[type, Callable[[SchedAgent, Address, Any, float], str | None]]] = {
        JobRoute: _on_job_route,
        JobAck: _on_ack,
        JobEnd: _on_end,
        JobCancel: _on_cancel_job,
        JobHandover: _on_handover,
        JobTaken: _on_taken,
        JobWatch: _on_watch,
        TaskOffer: _on_offer,
        TaskReady: _on_ready,
        TaskStart: _on_start,
        TaskCancel: _on_cancel_task,
        TaskDone: _on_done,
        SchedBeat: _on_beat,
    }
