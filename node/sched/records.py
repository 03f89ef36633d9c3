# What the scheduler's roles remember, one record per thing (seed 000 §2.1 and
# §3.1, seed 002 §4.2): a job at its entry (Entry), an attempt at its
# representative (Rep), a task at a member (Task), a peer's last SchedBeat
# (Heard), and a node a job could be placed on (Candidate).
#
# Rules
#   Records hold data only; the role that owns a table of them changes them.
#   A Rep's or a Task's `state` moves only through node.sched.states.enter().
#   order() is the one queue order of the deadlock rule (seed 002 §4.2):
#   submit time first, a hash of the job id on a tie, the same on every peer.

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from node.sched.config import Address
from node.sched.states import RepState, TaskState
from node.wire import JobInfo

__all__ = ["Candidate", "Entry", "Heard", "Rep", "Task", "order"]


def order(job: JobInfo) -> tuple[float, int]:
    return (job.order, zlib.crc32(job.id.to_bytes(8, "big")))


@dataclass(frozen=True)
class Heard:
    """A peer's last SchedBeat."""

    load: int
    size: int
    free: int
    maxql: int
    above: tuple[float, ...]
    at: float


@dataclass(frozen=True)
class Candidate:
    addr: Address
    point: Sequence[float]
    load: int
    free: int
    maxql: int


@dataclass
class Entry:
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
class Rep:
    job: JobInfo
    attempt: int
    entry: Address
    members: list[Address]
    since: float
    round: int = 1
    state: RepState = RepState.COLLECTING
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
    rehome_until: float | None = None  # its entry is gone: routing it to a new owner until then
    positions: dict[Address, int] = field(default_factory=dict)  # its tasks' queue positions


@dataclass
class Task:
    job: JobInfo
    attempt: int
    round: int
    rep: Address
    since: float
    state: TaskState = TaskState.QUEUED
    ok: bool = False
    reason: str = ""
