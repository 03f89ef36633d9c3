# The overlay's membership statuses: one transition table, checked in one
# place (node/can/status.py); an illegal move raises and changes nothing.

from __future__ import annotations

import json

import pytest

from node.can.status import Status, transition
from node.events import Left

from .conftest import overlay

LEGAL = {
    (Status.IDLE, Status.IDLE),
    (Status.IDLE, Status.JOINING),
    (Status.IDLE, Status.LEFT),
    (Status.JOINING, Status.IDLE),
    (Status.JOINING, Status.MEMBER),
    (Status.JOINING, Status.LEFT),
    (Status.MEMBER, Status.IDLE),
    (Status.MEMBER, Status.LEAVING),
    (Status.LEAVING, Status.IDLE),
    (Status.LEAVING, Status.LEFT),
    (Status.LEFT, Status.IDLE),
    (Status.LEFT, Status.JOINING),
}


@pytest.mark.parametrize("old", list(Status))
@pytest.mark.parametrize("new", list(Status))
def test_the_table_allows_exactly_the_legal_moves(old, new):
    if (old, new) in LEGAL:
        assert transition(old, new) is new
    else:
        with pytest.raises(
            RuntimeError, match=rf"^illegal status transition {old.value} -> {new.value}$"
        ):
            transition(old, new)


def test_statuses_are_written_as_the_strings_they_always_were():
    assert [s.value for s in Status] == ["idle", "joining", "member", "leaving", "left"]
    assert json.dumps({"status": Status.MEMBER}) == '{"status": "member"}'
    assert f"{Status.LEAVING}" == "leaving" and Status.LEFT == "left"


def test_an_illegal_command_raises_and_changes_nothing():
    can, wire = overlay()
    can.join([], 0.0)
    before = can.dump()
    wire.sent.clear()
    wire.events.clear()
    with pytest.raises(RuntimeError, match=r"^join\(\) while member$"):
        can.join([("10.0.0.2", 7000)], 1.0)
    assert can.dump() == before and can.status is Status.MEMBER
    assert wire.sent == [] and wire.events == []


def test_a_member_leaves_through_leaving_to_left_and_may_join_again():
    can, wire = overlay()
    can.join([], 0.0)
    can.leave(1.0)  # alone: nobody to merge with
    assert can.status is Status.LEFT
    [left] = [e for e in wire.events if isinstance(e, Left)]
    assert left.graceful
    can.join([], 2.0)
    assert can.status is Status.MEMBER
    can.crash_reset()
    assert can.status is Status.IDLE
