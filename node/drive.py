# The one step a driver takes after every input it feeds a peer.
#
# Theory of operation
#   A sans-IO peer mutates and enqueues on every input (a datagram, a timer, a command); the
#   driver then pulls what the input produced (STYLE.md §1, aioquic's datagram_received ->
#   _process_events -> transmit). Both drivers, the trio runtime on real sockets
#   (node/runtime.py) and the simulator in virtual time (testbed/sim/), take this step through
#   `drain`, so they see a peer's outputs in the same order:
#
#     1. events, oldest first (the event log; the runtime also wakes its waiters);
#     2. task actions (start or kill an MPI-like rank);
#     3. datagrams, in the order the peer queued them;
#     4. the timer: the one earliest deadline, or None.
#
# Rules
#   1. `drain` is synchronous: no other input reaches the peer between an input and its drain
#      (a trio driver must not await inside the callbacks; it queues instead).
#   2. Outputs that a callback's own calls into the peer produce (a rank reported finished at
#      once) are taken by the next drain, which the driver owes the peer after that call.

from __future__ import annotations

from typing import Any, Protocol

from node.events import event_to_dict
from node.peer import Address, Peer
from node.sched.agent import KillTask, RunTask

__all__ = ["Outputs", "drain"]


class Outputs(Protocol):
    """Where a driver takes a peer's outputs."""

    def on_event(self, record: dict[str, Any]) -> None:
        """An event, as the record written to the event log."""

    def on_action(self, action: RunTask | KillTask) -> None:
        """Start or kill a rank of an MPI-like task."""

    def on_datagram(self, data: bytes, addr: Address) -> None:
        """A datagram to send."""

    def on_timer(self, deadline: float | None) -> None:
        """The peer's earliest deadline on the `now` clock (None: no timer)."""


def drain(peer: Peer, now: float, outputs: Outputs) -> None:
    """Take everything `peer` has for the driver after an input at `now`, in the one order
    above. Mutates the peer (its queues are emptied) and nothing else."""
    while (event := peer.next_event()) is not None:
        outputs.on_event(event_to_dict(event))
    for action in peer.task_actions():
        outputs.on_action(action)
    for data, addr in peer.datagrams_to_send(now):
        outputs.on_datagram(data, addr)
    outputs.on_timer(peer.get_timer())
