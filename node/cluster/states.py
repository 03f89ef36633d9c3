# The cluster agent's four state machines, as tables (STYLE.md §1, after
# h11:h11/_state.py; seed 002 §5.1.4). Rule 1, h11's: every change of a head's
# or client's state, and of the per-peer records they keep, goes through a
# function here that looks (old -> new) up in its machine's table and raises a
# RuntimeError naming the machine, the old and the new state when the table
# has no such move. No other module assigns these states.
#
# Theory of operation (node/cluster/agent.py has the protocol)
#   Head:   IDLE -> COLLECT (candidates given; every change restarts the
#           stability timer) -> SOLICIT -> FILTER -> STEADY; a STEADY head
#           that lost members or whose candidates changed collects again, and
#           one that verifies solicits again; no candidates: straight to
#           STEADY. leave() makes any state IDLE.
#   Client: IDLE -> WAIT (solicitations) -> MEASURE (answered; measuring what
#           the rosters ask) -> STEADY (every accepted head confirmed or
#           released us); a new suitor brings STEADY back to WAIT, a committed
#           head's new round to MEASURE. leave() makes any state IDLE.
#   A head as a client sees it (SuitorState): SUITOR (not answered) ->
#           ACCEPTED -> COMMITTED (confirmed); a committed head's new round is
#           ACCEPTED again. A Confirm for the head's epoch commits from any
#           state (a suitor whose ACCEPT the head had from an earlier contact
#           with the same epoch, or a repeated Confirm).
#   A client as a head sees it in a round (InviteeState): SOLICITED ->
#           ACCEPTED or DENIED (answer, or silence `retries` times) -> MEMBER
#           (in the filtered cluster); one that withdraws during filtering or
#           after is DENIED, and a DENIED one the others' measurements keep in
#           the clique still becomes a MEMBER.
#
# StrEnum values are the strings the agent used before it had Enums, so
# dumps, ClusterChanged events and logs stay byte for byte the same.

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Protocol, TypeVar

__all__ = [
    "CLIENT_MOVES",
    "HEAD_MOVES",
    "INVITEE_MOVES",
    "SUITOR_MOVES",
    "ClientState",
    "HeadState",
    "InviteeState",
    "SuitorState",
    "client_step",
    "enter_invitee",
    "enter_suitor",
    "head_step",
]


class HeadState(StrEnum):
    IDLE = "IDLE"
    COLLECT = "COLLECT"
    SOLICIT = "SOLICIT"
    FILTER = "FILTER"
    STEADY = "STEADY"


class ClientState(StrEnum):
    IDLE = "IDLE"
    WAIT = "WAIT"
    MEASURE = "MEASURE"
    STEADY = "STEADY"


class SuitorState(StrEnum):
    SUITOR = "suitor"
    ACCEPTED = "accepted"
    COMMITTED = "committed"


class InviteeState(StrEnum):
    SOLICITED = "solicited"
    ACCEPTED = "accepted"
    DENIED = "denied"
    MEMBER = "member"


_H = HeadState
HEAD_MOVES: Mapping[HeadState, frozenset[HeadState]] = {
    _H.IDLE: frozenset({_H.IDLE, _H.COLLECT}),
    _H.COLLECT: frozenset({_H.IDLE, _H.COLLECT, _H.SOLICIT, _H.STEADY}),
    _H.SOLICIT: frozenset({_H.IDLE, _H.FILTER}),
    _H.FILTER: frozenset({_H.IDLE, _H.STEADY}),
    _H.STEADY: frozenset({_H.IDLE, _H.COLLECT, _H.SOLICIT, _H.STEADY}),
}

_C = ClientState
CLIENT_MOVES: Mapping[ClientState, frozenset[ClientState]] = {
    _C.IDLE: frozenset({_C.IDLE, _C.WAIT}),
    _C.WAIT: frozenset({_C.IDLE, _C.WAIT, _C.MEASURE}),
    _C.MEASURE: frozenset({_C.IDLE, _C.STEADY}),
    _C.STEADY: frozenset({_C.IDLE, _C.WAIT, _C.MEASURE}),
}

_S = SuitorState
SUITOR_MOVES: Mapping[SuitorState, frozenset[SuitorState]] = {
    _S.SUITOR: frozenset({_S.ACCEPTED, _S.COMMITTED}),
    _S.ACCEPTED: frozenset({_S.COMMITTED}),
    _S.COMMITTED: frozenset({_S.ACCEPTED, _S.COMMITTED}),
}

_I = InviteeState
INVITEE_MOVES: Mapping[InviteeState, frozenset[InviteeState]] = {
    _I.SOLICITED: frozenset({_I.ACCEPTED, _I.DENIED}),
    _I.ACCEPTED: frozenset({_I.DENIED, _I.MEMBER}),
    _I.DENIED: frozenset({_I.MEMBER}),
    _I.MEMBER: frozenset({_I.DENIED}),
}

S = TypeVar("S", HeadState, ClientState, SuitorState, InviteeState)


def _step(machine: str, moves: Mapping[S, frozenset[S]], old: S, new: S) -> S:
    if new not in moves[old]:
        raise RuntimeError(f"cluster {machine}: no transition from {old} to {new}")
    return new


def head_step(old: HeadState, new: HeadState) -> HeadState:
    """The head's next state, `new`, if the table allows it."""
    return _step("head", HEAD_MOVES, old, new)


def client_step(old: ClientState, new: ClientState) -> ClientState:
    """The client's next state, `new`, if the table allows it."""
    return _step("client", CLIENT_MOVES, old, new)


class _Suitor(Protocol):
    state: SuitorState


class _Invitee(Protocol):
    state: InviteeState


def enter_suitor(record: _Suitor, new: SuitorState) -> None:
    """Move a client's record of a head to `new`."""
    record.state = _step("client's record of a head", SUITOR_MOVES, record.state, new)


def enter_invitee(record: _Invitee, new: InviteeState) -> None:
    """Move a head's record of a client to `new`."""
    record.state = _step("head's record of a client", INVITEE_MOVES, record.state, new)
