# The scheduler's and the cluster agent's state tables (node/sched/states.py,
# node/cluster/states.py): every machine's table covers its states, the moves
# the agents make are in it, and a move that is not raises a RuntimeError
# naming the machine and both states.

from __future__ import annotations

import pytest

from node.cluster.states import (
    CLIENT_MOVES,
    HEAD_MOVES,
    INVITEE_MOVES,
    SUITOR_MOVES,
    ClientState,
    HeadState,
    InviteeState,
    SuitorState,
    client_step,
    enter_invitee,
    head_step,
)
from node.sched.records import Rep, Task
from node.sched.states import REP_MOVES, TASK_MOVES, RepState, TaskState, enter
from node.wire import JobInfo

JOB = JobInfo(1, 2, 5.0, 0.0, (2.0, 1.0, 0.5))


@pytest.mark.parametrize(
    ("table", "states"),
    [
        (REP_MOVES, RepState),
        (TASK_MOVES, TaskState),
        (HEAD_MOVES, HeadState),
        (CLIENT_MOVES, ClientState),
        (SUITOR_MOVES, SuitorState),
        (INVITEE_MOVES, InviteeState),
    ],
)
def test_every_state_has_a_row(table, states):
    assert set(table) == set(states)
    assert all(set(moves) <= set(states) for moves in table.values())


def test_states_keep_the_strings_logs_and_dumps_had():
    assert f"{RepState.RUNNING}" == "running" and str(TaskState.DONE) == "done"
    assert HeadState.STEADY == "STEADY" and f"{ClientState.MEASURE}" == "MEASURE"


def test_a_task_goes_queued_ready_running_done_and_no_other_way():
    task = Task(JOB, 7, 1, ("10.0.0.1", 7000), 0.0)
    with pytest.raises(RuntimeError, match="member task: no transition from queued to running"):
        enter(task, TaskState.RUNNING)
    for state in (TaskState.READY, TaskState.RUNNING, TaskState.DONE):
        enter(task, state)
    assert task.state is TaskState.DONE


def test_a_finished_attempt_stays_finished():
    rep = Rep(JOB, 7, ("10.0.0.9", 7000), [("10.0.0.1", 7000)], 0.0)
    enter(rep, RepState.FINISHED)
    with pytest.raises(RuntimeError, match="representative: no transition from finished to"):
        enter(rep, RepState.COLLECTING)


def test_cluster_machines_name_themselves_on_an_illegal_move():
    assert head_step(HeadState.SOLICIT, HeadState.FILTER) is HeadState.FILTER
    with pytest.raises(RuntimeError, match="cluster head: no transition from IDLE to FILTER"):
        head_step(HeadState.IDLE, HeadState.FILTER)
    with pytest.raises(RuntimeError, match="cluster client: no transition from IDLE to STEADY"):
        client_step(ClientState.IDLE, ClientState.STEADY)

    class Record:
        state = InviteeState.MEMBER

    with pytest.raises(RuntimeError, match="record of a client: no transition from member to acc"):
        enter_invitee(Record(), InviteeState.ACCEPTED)
