# The scheduler's two state machines, as tables (STYLE.md §1, after
# h11:h11/_state.py). Rule 1, h11's: everything that moves a representative's
# attempt or a member's task from one state to another goes through enter()
# here, which looks the move up in its machine's table and raises a
# RuntimeError naming the machine, the old and the new state when the table
# has no such move. No other module assigns a `state`.
#
# Theory of operation
#   Representative (one per attempt it was placed, seed 000 §3.1):
#     COLLECTING  offers out (TaskOffer), TaskReady answers being counted; a
#                 new round (_offer) starts here again;
#     RUNNING     `size` members ready: a rank started on each (TaskStart);
#     FINISHED    the outcome is known and reported to the entry (JobEnd);
#                 final.
#   A rank that fails or a member lost while running makes a new round
#   (RUNNING -> COLLECTING); a cluster left too small finishes the attempt
#   from either state.
#
#   Member task (one per attempt a member was offered, seed 002 §4.2):
#     QUEUED   waiting its turn (ordered by submit time, ties by a hash);
#     READY    the head of the queue while the member is free: it holds itself
#              for it (TaskReady); the deadlock rule sends it back to QUEUED
#              when an older task arrives;
#     RUNNING  the representative started its rank (TaskStart);
#     DONE     the rank ended; the result is sent until acknowledged. Final.
#
# StrEnum values are the strings the scheduler logged before it had Enums, so
# dumps and event logs stay byte for byte the same.

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Protocol, TypeVar

__all__ = ["REP_MOVES", "TASK_MOVES", "RepState", "TaskState", "enter"]


class RepState(StrEnum):
    COLLECTING = "collecting"
    RUNNING = "running"
    FINISHED = "finished"


class TaskState(StrEnum):
    QUEUED = "queued"
    READY = "ready"
    RUNNING = "running"
    DONE = "done"


REP_MOVES: Mapping[RepState, frozenset[RepState]] = {
    # COLLECTING -> COLLECTING: the first round's offer goes out on creation.
    RepState.COLLECTING: frozenset({RepState.COLLECTING, RepState.RUNNING, RepState.FINISHED}),
    RepState.RUNNING: frozenset({RepState.COLLECTING, RepState.FINISHED}),
    RepState.FINISHED: frozenset(),
}

TASK_MOVES: Mapping[TaskState, frozenset[TaskState]] = {
    TaskState.QUEUED: frozenset({TaskState.READY}),
    TaskState.READY: frozenset({TaskState.QUEUED, TaskState.RUNNING}),
    TaskState.RUNNING: frozenset({TaskState.DONE}),
    TaskState.DONE: frozenset(),
}

_MACHINES: Mapping[type[StrEnum], tuple[str, Mapping[StrEnum, frozenset[StrEnum]]]] = {
    RepState: ("representative", REP_MOVES),  # type: ignore[dict-item]
    TaskState: ("member task", TASK_MOVES),  # type: ignore[dict-item]
}

S = TypeVar("S", RepState, TaskState)


class _Stateful(Protocol[S]):
    state: S


def enter(record: _Stateful[S], new: S) -> None:
    """Move `record` to `new`, if its machine's table has that move."""
    old = record.state
    machine, moves = _MACHINES[type(new)]
    if new not in moves[old]:
        raise RuntimeError(f"{machine}: no transition from {old} to {new}")
    record.state = new
