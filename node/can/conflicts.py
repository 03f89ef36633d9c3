# The conflict-detection protocol of seed 002 §6.2 (Algorithms 4-9).
#
# Theory of operation
#   A zone change (a SPLIT for a joiner, a MERGE for a leaver) is a command.
#   Its leader asks its neighbourhood first (Alg. 4, `request`): it proposes
#   only while the neighbourhood is quiet (no command of ours or of a
#   neighbour that conflicts, no suspects, no unabsorbed dead region next to
#   us, every face exactly covered by known neighbours), bumps its instance
#   and sends Propose to every target. A target says YES (Alg. 5, `grant`) and
#   holds still (`busy`) until the leader's commit or `busy_timeout_s`, or NO
#   with a reason. The leader commits (Alg. 6-8) when every target said YES,
#   or a NO-OP as soon as any said NO or timed out; the commit tells the whole
#   neighbourhood, whose members apply the news it carries (Alg. 9).
#
#   Crossing commands: a proposal we cannot grant only because of commands
#   it outranks waits here (`deferred`) instead of being refused (wait-die on
#   (-rank, id): waits only ever go from higher to lower rank, so they form no
#   cycle). SPLITs do not conflict with each other: each divides only its own
#   zone, and the neighbour tables catch up through the commits and updates
#   (docs/can.md).
#
#   Who receives a Propose is the config's `propose_scope`: the neighbourhood
#   (direct and indirect neighbours, as seed 002 has it) or the direct
#   neighbours only (docs/can.md).
#
# Rules
#   1. A neighbour that does not answer a Propose in time counts as NO
#      (Alg. 7); the timeout grows with the RTTs we measured to it.
#   2. What a command does to the rest of the peer (the split itself, the
#      join queued again after a NO-OP, the end of a leave) goes through
#      CommandHooks, which the facade provides.

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import msgspec

from node.can.local import Address, LocalNode
from node.can.neighbours import NeighbourTable
from node.can.takeover import Takeover
from node.events import CommandDone
from node.wire import (
    COMMIT_MERGE,
    COMMIT_NOOP,
    COMMIT_SPLIT,
    Commit,
    JoinRequest,
    PeerInfo,
    Propose,
    ProposeOK,
)

__all__ = ["MAX_RANK", "MAX_REASON", "Command", "CommandHooks", "ConflictProtocol"]

# Attempts behind a command; more is a forged or broken message.
MAX_RANK = 1 << 16
# Characters of a NO's reason that we send and log.
MAX_REASON = 40


@dataclass
class Command:
    kind: int  # COMMIT_SPLIT or COMMIT_MERGE
    instance: int
    replies: dict[int, bool | None]
    refused: list[str]
    targets: dict[int, Address]
    deadline: float
    rank: int = 0
    request: JoinRequest | None = None  # the join a SPLIT serves
    serve_by: float = math.inf  # after this the joiner has given up waiting for us


class CommandHooks(Protocol):
    """What a command does beyond the protocol (provided by the facade)."""

    def joiner_pending(self) -> bool:
        """A joiner we split for has not taken its half yet (it could not answer a Propose)."""
        ...

    def execute_split(self, command: Command, now: float) -> Commit:
        """Split our zone for the command's joiner; returns the commit to send."""
        ...

    def split_lost(self, command: Command, now: float) -> None:
        """A SPLIT ended as a NO-OP: keep its join for another try."""
        ...

    def merge_lost(self, now: float) -> None:
        """A MERGE ended as a NO-OP."""
        ...

    def merged(self, now: float) -> None:
        """A MERGE was committed: we have left."""
        ...

    def introduce(self, leader: PeerInfo, joiner: PeerInfo, now: float) -> None:
        """A neighbour split for `joiner`."""
        ...


def _conflict(kind: int, other: int) -> bool:
    """Two commands conflict unless both are SPLITs."""
    return kind != COMMIT_SPLIT or other != COMMIT_SPLIT


_KIND_NAMES = {COMMIT_SPLIT: "split", COMMIT_MERGE: "merge", COMMIT_NOOP: "noop"}


class ConflictProtocol:
    """Our pending command, the neighbours' commands we granted (busy) or hold
    back (deferred), and the messages of Alg. 4-9."""

    def __init__(
        self, local: LocalNode, table: NeighbourTable, takeover: Takeover, hooks: CommandHooks
    ) -> None:
        self.local = local
        self.table = table
        self.takeover = takeover
        self.hooks = hooks
        self.command: Command | None = None
        # sender -> (instance, until, key, kind) of the command we said YES to
        self.busy: dict[int, tuple[int, float, tuple[int, int], int]] = {}
        # sender -> (addr, propose, until): answers held back for an outranking command
        self.deferred: dict[int, tuple[Address, Propose, float]] = {}
        self._proposed_at: dict[int, float] = {}  # our recent instances -> when proposed

    # -- what the neighbour table tells us -------------------------------------------------------------

    def forget(self, ident: int) -> None:
        """A peer was buried: drop what we hold for it; a missing answer of its is a NO."""
        self.busy.pop(ident, None)
        self.deferred.pop(ident, None)
        command = self.command
        if command is not None and ident in command.replies and command.replies[ident] is None:
            command.replies[ident] = False

    def newer(self, ident: int, instance: int) -> None:
        """News of a newer instance of a peer: it closes its outstanding command."""
        if ident in self.busy and instance > self.busy[ident][0]:
            del self.busy[ident]

    # -- timers ----------------------------------------------------------------------------------------

    def next_deadline(self) -> float:
        """The earliest of the protocol's deadlines (inf: none)."""
        earliest = math.inf if self.command is None else self.command.deadline
        for _, _, until in self.deferred.values():
            earliest = min(earliest, until)
        return earliest

    def handle_timer(self, now: float) -> None:
        command = self.command
        if command is not None and now >= command.deadline:
            for ident, reply in command.replies.items():
                if reply is None:
                    command.replies[ident] = False  # Alg. 7: a timeout counts as NO
                    command.refused.append("timeout")
            self._maybe_commit(now)

    def expire(self, now: float) -> None:
        for ident in [i for i, (_, until, _, _) in self.busy.items() if now >= until]:
            del self.busy[ident]

    # -- Alg. 4: starting a command --------------------------------------------------------------------

    def unsettled(
        self, now: float, kind: int = COMMIT_MERGE, *, voting: bool = False
    ) -> str | None:
        """Why a change of `kind` must not start now (Alg. 4 line 1), or None.

        With `voting`, the change is a neighbour's, which our own pending
        command blocks only if the two conflict.
        """
        if self.command is not None and (not voting or _conflict(kind, self.command.kind)):
            return "own command pending"
        if any(_conflict(kind, held[3]) for held in self.busy.values()):
            return "neighbour busy"
        if not voting:
            if any(_conflict(kind, p.kind) for _, p, _ in self.deferred.values()):
                return "neighbour waiting"  # an older proposal waits for us to be free
            if self.hooks.joiner_pending():
                return "joiner not in yet"  # it could not answer our Propose
        if self.table.suspects:
            return "neighbour suspected"
        if self.takeover.dead_regions_nearby():
            return "dead zone nearby"
        return self.takeover.coverage_problem()

    def request(
        self,
        kind: int,
        now: float,
        *,
        rank: int = 0,
        request: JoinRequest | None = None,
        serve_by: float = math.inf,
    ) -> bool:
        """Alg. 4: start a SPLIT or MERGE if the neighbourhood is quiet. Returns False if rejected."""
        if self.unsettled(now, kind) is not None:
            return False
        local, known = self.local, self.table.known
        local.instance += 1
        scope = self.table.direct if local.config.propose_scope == "direct" else known
        targets = {
            ident: (known[ident].info.host, known[ident].info.port) for ident in sorted(scope)
        }
        self.command = Command(
            kind,
            local.instance,
            dict.fromkeys(targets),
            [],
            targets,
            now + self._propose_timeout(targets),
            rank,
            request,
            serve_by,
        )
        if not targets:
            self._commit(kind, now)
            return True
        self._proposed_at[local.instance] = now
        if len(self._proposed_at) > 8:
            del self._proposed_at[min(self._proposed_at)]
        for addr in targets.values():
            local.send(addr, Propose(local.instance, rank, kind))
        return True

    def _propose_timeout(self, targets: Iterable[int]) -> float:
        """propose_timeout_s, or longer for neighbours that answered slowly before.

        Some WAN paths (PlanetLab's slowest) take over a second each way; with a
        fixed timeout every command that involves them would end as a NO-OP.
        """
        slowest = max((self.table.rtt.get(t, 0.0) for t in targets), default=0.0)
        base = self.local.config.propose_timeout_s
        return min(max(base, 1.5 * slowest + base / 2), 10 * base)

    # -- Alg. 5: answering a neighbour's command -------------------------------------------------------

    def on_propose(self, sender: int, addr: Address, propose: Propose, now: float) -> None:
        """Alg. 5, with wait-die between crossing commands (see Propose)."""
        old = self.busy.get(sender)
        if old is not None and old[0] < propose.instance:
            del self.busy[sender]  # its earlier command is over: it has moved on
        self.deferred.pop(sender, None)  # it gave up on that one
        reason = self._unsettled_for(sender, propose, now)
        if reason is None:
            self._grant(sender, addr, propose, now)
        elif self._may_wait(sender, propose, reason):
            # The proposer may wait longer than propose_timeout_s (slow paths);
            # if it has given up, its NO-OP commit withdraws this.
            until = now + 2 * self.local.config.propose_timeout_s
            self.deferred[sender] = (addr, propose, until)
        else:
            self.local.send(addr, ProposeOK(propose.instance, False, reason[:MAX_REASON]))

    def _grant(self, sender: int, addr: Address, propose: Propose, now: float) -> None:
        """Say YES, and hold still until the proposer's commit (or busy_timeout_s)."""
        key = (-propose.rank, sender)
        until = now + self.local.config.busy_for_s
        self.busy[sender] = (propose.instance, until, key, propose.kind)
        self.local.send(addr, ProposeOK(propose.instance, True))

    def _unsettled_for(self, sender: int, propose: Propose, now: float) -> str | None:
        """Why we cannot say YES to this proposal now, or None."""
        reason = self.unsettled(now, propose.kind, voting=True)
        if reason is not None:
            return reason
        key = (-propose.rank, sender)
        for other, (_, waiting, _) in self.deferred.items():
            if (
                other != sender
                and _conflict(propose.kind, waiting.kind)
                and (-waiting.rank, other) < key
            ):
                return "outranked by a waiting proposal"
        return None

    def _may_wait(self, sender: int, propose: Propose, reason: str) -> bool:
        """Whether a proposal we cannot grant now outranks every command that holds us
        (wait-die: waits only ever go from higher to lower rank, so they form no cycle)."""
        if reason not in ("own command pending", "neighbour busy"):
            return False
        key = (-propose.rank, sender)
        holders = [held for _, _, held, kind in self.busy.values() if _conflict(propose.kind, kind)]
        if self.command is not None and _conflict(propose.kind, self.command.kind):
            holders.append((-self.command.rank, self.local.id))
        return all(key < held for held in holders)

    def serve_deferred(self, now: float) -> None:
        """Answer the held-back proposals that we now can, highest rank first."""
        if not self.deferred:
            return
        ranked = sorted(self.deferred.items(), key=lambda kv: (-kv[1][1].rank, kv[0]))
        for sender, (addr, propose, until) in ranked:
            if now >= until:
                del self.deferred[sender]  # the proposer has counted it a NO by now
                continue
            reason = self._unsettled_for(sender, propose, now)
            if reason is None:
                del self.deferred[sender]
                self._grant(sender, addr, propose, now)
            elif not self._may_wait(sender, propose, reason):
                del self.deferred[sender]
                self.local.send(addr, ProposeOK(propose.instance, False, reason[:MAX_REASON]))

    # -- Alg. 6-8: our command's answers and its commit ------------------------------------------------

    def on_propose_ok(self, sender: int, reply: ProposeOK, now: float) -> None:
        """Alg. 6."""
        sent = self._proposed_at.get(reply.instance)
        rtt = self.table.rtt
        if sent is not None and sender in self.table.known:
            sample = now - sent  # late answers count too: they tell us to wait longer
            old = rtt.get(sender)
            rtt[sender] = sample if old is None else 0.75 * old + 0.25 * max(sample, old / 2)
        command = self.command
        if command is None or reply.instance != command.instance or sender not in command.replies:
            return
        command.replies[sender] = reply.yes
        if not reply.yes:
            command.refused.append(reply.reason[:MAX_REASON] or "no reason")
        self._maybe_commit(now)

    def _maybe_commit(self, now: float) -> None:
        command = self.command
        if command is None:
            return
        replies = command.replies.values()
        if all(r is True for r in replies):
            self._commit(command.kind, now)
        elif all(r is not None for r in replies):
            self._commit(COMMIT_NOOP, now)

    def _commit(self, kind: int, now: float) -> None:
        """Alg. 8: execute locally, then tell the whole neighbourhood."""
        command = self.command
        if command is None:
            raise RuntimeError("commit without a pending command")
        self.command = None
        local = self.local
        targets = command.targets
        if kind == COMMIT_SPLIT:
            commit = self.hooks.execute_split(command, now)
        elif kind == COMMIT_MERGE:
            commit = Commit(command.instance, COMMIT_MERGE, local.info(), None, self.table.infos())
        else:
            commit = Commit(command.instance, COMMIT_NOOP, None, None, ())
        for addr in targets.values():
            local.send(addr, commit)
        refused = tuple(sorted(command.refused)) if kind == COMMIT_NOOP else ()
        local.emit(CommandDone(now, _KIND_NAMES[kind], command.instance, len(targets), refused))
        if kind == COMMIT_NOOP:
            if command.kind == COMMIT_SPLIT and command.request is not None:
                self.hooks.split_lost(command, now)  # lost to a crossing command
            elif command.kind == COMMIT_MERGE:
                self.hooks.merge_lost(now)
        elif kind == COMMIT_MERGE:
            self.hooks.merged(now)

    # -- Alg. 9: a neighbour's commit ------------------------------------------------------------------

    def on_commit(self, sender: int, commit: Commit, now: float) -> None:
        """Alg. 9, plus: the news it carries is applied even if we missed the Propose."""
        table = self.table
        busy = self.busy.get(sender)
        if busy is not None and busy[0] <= commit.instance:
            del self.busy[sender]
        held = self.deferred.get(sender)
        if held is not None and held[1].instance <= commit.instance:
            del self.deferred[sender]  # that command is over (it gave up waiting for us)
        if commit.kind == COMMIT_SPLIT and commit.leader is not None and commit.joiner is not None:
            table.learn(commit.leader, now, direct=True)
            table.learn(commit.joiner, now)
            table.recompute_direct(now)
            self.hooks.introduce(commit.leader, commit.joiner, now)
        elif commit.kind == COMMIT_MERGE and commit.leader is not None:
            for info in commit.neighbors:
                if info.id != self.local.id:
                    table.learn(info, now)
            table.bury(commit.leader, now, "left")
            table.recompute_direct(now)
            self.takeover.repair(now)


def requeued(command: Command) -> JoinRequest:
    """The join of a SPLIT that lost to a crossing command, ranked one higher."""
    if command.request is None:
        raise ValueError("requeued() needs a SPLIT command that serves a join")
    return msgspec.structs.replace(command.request, attempt=command.rank + 1)
