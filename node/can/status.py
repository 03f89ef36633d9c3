# A peer's membership status and the transitions between statuses.
#
# Theory of operation
#   A peer is IDLE (not a member, not trying), JOINING (a JoinRequest is out,
#   or it waits to retry), MEMBER (it owns a zone), LEAVING (a MERGE is being
#   negotiated, seed 002 §6.2) or LEFT. The values are the strings the event
#   logs and dumps have always carried (a StrEnum writes its value).
#
#       IDLE ----join----> JOINING ----accepted / first node----> MEMBER
#        |  \                 |                                     |
#        |   leave            leave                               leave
#        |     \              v                                     v
#        |      +--------->  LEFT <------MERGE committed / gave up-- LEAVING
#        |                    |
#        +<-----rejoin--------+ (LEFT -> JOINING)
#
#   Any status goes back to IDLE when the process is reset after a crash, and
#   MEMBER or LEAVING go to IDLE when a neighbour says we were evicted (seed
#   002 §6.1; the peer then rejoins at once).
#
# Rules (after h11/_state.py)
#   1. Everything that changes a peer's status goes through transition(); the
#      table below is the whole state machine.
#   2. An illegal transition raises RuntimeError naming both statuses, before
#      anything is changed.

from __future__ import annotations

from enum import StrEnum

__all__ = ["Status", "transition"]


class Status(StrEnum):
    IDLE = "idle"  # not a member, not trying
    JOINING = "joining"
    MEMBER = "member"
    LEAVING = "leaving"  # a MERGE is being negotiated
    LEFT = "left"


# old status -> the statuses it may move to.
_TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.IDLE: frozenset({Status.IDLE, Status.JOINING, Status.LEFT}),
    Status.JOINING: frozenset({Status.IDLE, Status.MEMBER, Status.LEFT}),
    Status.MEMBER: frozenset({Status.IDLE, Status.LEAVING}),
    Status.LEAVING: frozenset({Status.IDLE, Status.LEFT}),
    Status.LEFT: frozenset({Status.IDLE, Status.JOINING}),
}


def transition(old: Status, new: Status) -> Status:
    """Check the move from `old` to `new` against the table; returns `new`.

    Raises:
        RuntimeError: the table has no such move (nothing is changed).
    """
    if new not in _TRANSITIONS[old]:
        raise RuntimeError(f"illegal status transition {old.value} -> {new.value}")
    return new
