# The scheduler's configuration, its named bounds, and the actions it asks the
# driver for (seed 002 §4.2, seed 000 §2.1 and §3.1; see node/sched/agent.py
# for the theory of operation).
#
# Rules
#   Every table a peer can grow from the wire has a named bound here with its
#   unit (STYLE.md §1): job sizes, runtimes, reasons, the pairs one beat lists,
#   Kim's aggregates. SchedConfig rejects a bad field when it is built, naming
#   the field; nothing downstream checks it again.
#   RunTask and KillTask are the only outputs besides datagrams and events: the
#   driver starts or kills a rank (node/runtime.py runs `python -m node.mpi`;
#   the simulator pretends) and reports the end through task_finished().

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from node.fields import FieldError, check_positive

__all__ = [
    "BALANCERS",
    "FORGET_AFTER",
    "HANDOVER_RESEND_S",
    "MAX_AGGREGATE",
    "MAX_JOB_SIZE",
    "MAX_REASON",
    "MAX_RUNTIME_S",
    "MAX_SHARED",
    "NEIGHBOURS",
    "OWNER_RECOVERY",
    "STAGES",
    "STAGE_PLACED",
    "STAGE_PUSH",
    "STAGE_ROUTE",
    "MATCHMAKERS",
    "Action",
    "Address",
    "KillTask",
    "RunTask",
    "SchedConfig",
]

Address = tuple[str, int]

MAX_JOB_SIZE = 4096
MAX_RUNTIME_S = 1e6
MAX_REASON = 200  # characters of a failure reason on the wire
MAX_SHARED = 10_000  # (job, attempt) pairs one beat may list
MATCHMAKERS = ("parsimony", "can", "can-p")
BALANCERS = ("none", "dlb", "qb", "qb+dlb", "pull", "push")
NEIGHBOURS = ("direct", "indirect")
OWNER_RECOVERY = ("client", "reroute")
STAGES = STAGE_ROUTE, STAGE_PUSH, STAGE_PLACED = 0, 1, 2
HANDOVER_RESEND_S = 0.5  # a leaver sends an untaken JobHandover again this often
MAX_AGGREGATE = 1e9  # Kim's aggregates (nodes and tasks above) beyond this are nonsense
FORGET_AFTER = 10  # x dead_after_s: what we heard of a peer, or a job that ended, is dropped


@dataclass(frozen=True)
class SchedConfig:
    """The scheduler's timing and policy. Times in seconds of the `now` clock.

    The only declaration of these fields: a spec's [jobs] table embeds them by name
    (testbed/spec.py), a peer's JSON document carries them as its "sched" section."""

    beat_s: float = 2.0
    dead_after_s: float = 7.0  # silence after which a representative, member or entry is lost
    max_attempts: int = 5  # tries of one job by its entry
    retry_s: float = 2.0  # the back-off after a failed try; doubles with every try ...
    retry_max_s: float = 30.0  # ... up to this
    max_rounds: int = 3  # co-scheduling rounds of one attempt
    # Members a parallel job's task is offered to: "total" (every member of the cluster,
    # seed 002 §4.3.3) or a factor >= 1 of the job's size.
    overprovision: float | Literal["total"] = "total"
    max_hops: int = 64
    # Where the owner of a job's point places it (seed 000 §3.1, §4.1.1; docs/scheduling.md):
    # "parsimony" (CAN-P that stops at the least capable node with room), "can" (Kim's
    # basic matchmaking: the least loaded capable neighbour, never the owner, no pushing)
    # or "can-p" (Kim's CAN-P: the fastest free capable node, else pushing upward and
    # the best queue / speed met on the way).
    matchmaking: Literal["parsimony", "can", "can-p"] = "parsimony"
    # Kim's SF: pushing stops with probability 1 / (1 + nodes above)^SF (he tried 1-3).
    stopping_factor: float = 2.0
    # The CAN dimension that is a node's speed ("fastest", queue / speed); "": the first
    # real one.
    speed_dimension: str = ""
    # A job's runtime_s is its work in speed x seconds: a node runs it in runtime_s / its
    # speed (seed 000 §1.2, Kim's runtime model); False: runtime_s on any node.
    runtime_per_speed: bool = False
    handover_s: float = 3.0  # a leaving entry waits this long at most for its jobs to be taken
    # An entry (the job's owner) that went silent (docs/scheduling.md "When the owner
    # fails"): "client" -- its representatives drop attempts not running and the client
    # submits the job again elsewhere; "reroute" -- each representative routes the
    # attempt to the job's point for `dead_after_s` at most (JobRehome, every beat), and
    # the owner of that zone adopts it (seed 000 §2.1); then as "client".
    owner_recovery: Literal["client", "reroute"] = "client"
    # Dynamic balancing of jobs not started yet (seed 002 §4.2): "none", "dlb",
    # "qb" or "qb+dlb", or Kim's "pull" or "push" (seed 000 §4.2), every balance_s,
    # over our direct neighbours, or also the indirect ones (the CAN's neighbours'
    # neighbours: they get our beats too).
    balance: Literal["none", "dlb", "qb", "qb+dlb", "pull", "push"] = "qb+dlb"
    balance_s: float = 10.0
    neighbours: Literal["direct", "indirect"] = "direct"
    mpi_port: int = 7100  # where a rank listens (one rank per peer at a time)
    rounds: int = 10  # communication rounds of the built-in program
    collective: Literal["allreduce", "barrier"] = "allreduce"
    payload_bytes: int = 8
    # A user's program instead of the built-in one (shell words); it gets
    # TESTBED_RANK, TESTBED_SIZE, TESTBED_PEERS and TESTBED_COMPUTE_S.
    command: str = ""

    def __post_init__(self) -> None:
        check_positive(
            "sched", self, ("beat_s", "dead_after_s", "retry_s", "retry_max_s"), "seconds"
        )
        check_positive("sched", self, ("handover_s", "balance_s"), "seconds")
        if self.dead_after_s <= self.beat_s:
            raise FieldError("sched", "dead_after_s", f"must be longer than beat_s ({self.beat_s})")
        if self.retry_max_s < self.retry_s:
            raise FieldError("sched", "retry_max_s", f"must be at least retry_s ({self.retry_s})")
        for name in ("max_attempts", "max_rounds", "max_hops"):
            if getattr(self, name) < 1:
                raise FieldError("sched", name, f"must be at least 1, not {getattr(self, name)}")
        over = self.overprovision
        if over != "total" and not (
            isinstance(over, int | float) and math.isfinite(over) and over >= 1
        ):
            raise FieldError(
                "sched", "overprovision", f'{over!r}: expected "total" or a factor >= 1'
            )
        if self.matchmaking not in MATCHMAKERS:
            raise FieldError(
                "sched", "matchmaking", f"{self.matchmaking!r}: expected one of {MATCHMAKERS}"
            )
        sf = self.stopping_factor
        if not (isinstance(sf, int | float) and math.isfinite(sf) and sf >= 0):
            raise FieldError("sched", "stopping_factor", f"must be a number >= 0, not {sf!r}")
        if self.balance not in BALANCERS:
            raise FieldError("sched", "balance", f"{self.balance!r}: expected one of {BALANCERS}")
        if self.owner_recovery not in OWNER_RECOVERY:
            raise FieldError(
                "sched",
                "owner_recovery",
                f"{self.owner_recovery!r}: expected one of {OWNER_RECOVERY}",
            )
        if self.neighbours not in NEIGHBOURS:
            raise FieldError("sched", "neighbours", f"{self.neighbours!r}: expected {NEIGHBOURS}")
        if self.collective not in ("allreduce", "barrier"):
            raise FieldError(
                "sched", "collective", f"{self.collective!r}: expected 'allreduce' or 'barrier'"
            )
        if not 0 < self.mpi_port < 65536:
            raise FieldError("sched", "mpi_port", f"must be a TCP port number, not {self.mpi_port}")
        if self.rounds < 0:
            raise FieldError("sched", "rounds", f"must be >= 0, not {self.rounds}")
        if self.payload_bytes < 0 or self.payload_bytes % 8:
            raise FieldError(
                "sched",
                "payload_bytes",
                f"must be a multiple of 8 (float64s), not {self.payload_bytes}",
            )


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
