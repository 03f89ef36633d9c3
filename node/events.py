# Events: immutable records of something that happened in a peer, pulled by
# the driver with Peer.next_event() and written to the event log. Each has the
# time it happened (`t`, on the peer's clock) and a stable `kind` name.

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

__all__ = [
    "ClusterChanged",
    "CommandDone",
    "Event",
    "Evicted",
    "Inconsistent",
    "JobAdopted",
    "JobEnded",
    "JobFinished",
    "JobHandedOver",
    "JobMoved",
    "JobStarted",
    "JobSubmitted",
    "JoinRetrying",
    "Joined",
    "Left",
    "Merging",
    "PeerDeclaredDead",
    "RttMeasured",
    "TookOver",
    "ZoneChanged",
    "event_to_dict",
]


@dataclass(frozen=True, slots=True)
class Event:
    kind: ClassVar[str] = "event"
    t: float


@dataclass(frozen=True, slots=True)
class Joined(Event):
    kind: ClassVar[str] = "joined"
    id: int
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    attempts: int
    first: bool


@dataclass(frozen=True, slots=True)
class JoinRetrying(Event):
    kind: ClassVar[str] = "join_retry"
    reason: str
    attempt: int
    delay_s: float


@dataclass(frozen=True, slots=True)
class Left(Event):
    kind: ClassVar[str] = "left"
    id: int
    graceful: bool
    attempts: int


@dataclass(frozen=True, slots=True)
class Evicted(Event):
    kind: ClassVar[str] = "evicted"
    id: int
    by: int


@dataclass(frozen=True, slots=True)
class Merging(Event):
    """Our overlay met another that wins over it (node/can/reunion.py): we rejoin that one."""

    kind: ClassVar[str] = "merging"
    id: int
    root: int  # our overlay's root
    winner: int  # the other overlay's root
    why: str  # "met" (we met a member of it), "dissolve" (a neighbour told us)


@dataclass(frozen=True, slots=True)
class ZoneChanged(Event):
    kind: ClassVar[str] = "zone"
    reason: str  # "split", "takeover"
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    instance: int


@dataclass(frozen=True, slots=True)
class PeerDeclaredDead(Event):
    kind: ClassVar[str] = "peer_dead"
    peer: int
    reason: str


@dataclass(frozen=True, slots=True)
class TookOver(Event):
    kind: ClassVar[str] = "takeover"
    dead: list[int]
    volume: float  # normalised volume gained


@dataclass(frozen=True, slots=True)
class CommandDone(Event):
    kind: ClassVar[str] = "command"
    outcome: str  # "split", "merge", "noop"
    instance: int
    neighbourhood: int
    refused: tuple[str, ...] = ()  # for a noop: each NO's reason ("timeout" for no answer)


@dataclass(frozen=True, slots=True)
class Inconsistent(Event):
    kind: ClassVar[str] = "inconsistent"
    what: str
    peers: list[int]


@dataclass(frozen=True, slots=True)
class RttMeasured(Event):
    """A measurement asked of the prober is complete (node.coord.probe)."""

    kind: ClassVar[str] = "rtt"
    request: int
    target: int
    rtts: tuple[float, ...]  # seconds, in the order the answers came
    lost: int


@dataclass(frozen=True, slots=True)
class ClusterChanged(Event):
    """The peer's own job-ready cluster or the one it advertises changed (node.cluster.agent)."""

    kind: ClassVar[str] = "cluster"
    own: int  # size of our own cluster (DYN)
    advertised: int  # size of the cluster we advertise (DYN-SYM)
    head: str  # the head's state
    client: str  # the client's state


@dataclass(frozen=True, slots=True)
class JobSubmitted(Event):
    """A job was submitted here (this peer is its entry: it reports the outcome)."""

    kind: ClassVar[str] = "job_submitted"
    job: int
    size: int


@dataclass(frozen=True, slots=True)
class JobStarted(Event):
    """As representative: enough dependent tasks were ready, the ranks were started."""

    kind: ClassVar[str] = "job_started"
    job: int
    attempt: int
    round: int
    ranks: tuple[str, ...]  # each rank's host


@dataclass(frozen=True, slots=True)
class JobFinished(Event):
    """As representative: an attempt ended (ok, or why not)."""

    kind: ClassVar[str] = "job_finished"
    job: int
    attempt: int
    ok: bool
    reason: str
    run_s: float


@dataclass(frozen=True, slots=True)
class JobEnded(Event):
    """As entry: the job's outcome, once (completed, or failed with the reason);
    run_s is how long the successful attempt ran (0 for a failure)."""

    kind: ClassVar[str] = "job_ended"
    job: int
    ok: bool
    reason: str
    attempts: int
    run_s: float


@dataclass(frozen=True, slots=True)
class JobMoved(Event):
    """As representative: a job not started yet moved to a neighbour (DLB, QB, PULL, PUSH)."""

    kind: ClassVar[str] = "job_moved"
    job: int
    attempt: int
    to: str
    by: str  # "dlb" or "qb", or Kim's "pull" or "push"


@dataclass(frozen=True, slots=True)
class JobAdopted(Event):
    """We are the job's entry now: a leaving entry handed it over, or a
    representative whose entry went silent routed its attempt to us (JobRehome)."""

    kind: ClassVar[str] = "job_adopted"
    job: int
    source: str  # the leaving entry's host, or the representative's


@dataclass(frozen=True, slots=True)
class JobHandedOver(Event):
    """Leaving, we handed the job over to another entry (it said so)."""

    kind: ClassVar[str] = "job_handed_over"
    job: int
    to: str


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-ready dict: {"t": ..., "kind": ..., field: value, ...}."""
    out: dict[str, Any] = {"t": round(event.t, 6), "kind": event.kind}
    for f in fields(event):
        if f.name == "t":
            continue
        value = getattr(event, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out
