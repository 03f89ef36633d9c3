# One peer, sans-IO: the wire codec, replay protection and the CAN overlay
# behind the interface both drivers use (node/runtime.py on real sockets, the
# testbed's simulator in virtual time).
#
# Contract (after aioquic's QuicConnection): inputs are receive_datagram(),
# handle_timer() and commands (join, leave); each takes `now` and mutates.
# After every input the driver drains datagrams_to_send() and next_event()
# and reads get_timer() again. Nothing here does I/O, reads a clock or uses
# global randomness.

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from node.can.overlay import CanConfig, CanOverlay, Status
from node.cluster.agent import ClusterAgent, ClusterConfig
from node.coord.probe import ProbeConfig, Prober
from node.events import ClusterChanged, Event, RttMeasured
from node.fields import FieldError
from node.limits import Contacts, SourceLimiter
from node.sched.agent import Action, SchedAgent, SchedConfig
from node.wire import (
    DROP_REASONS,
    ClusterBeat,
    Codec,
    Confirm,
    JobInfo,
    LoadedUpdate,
    Message,
    Ping,
    Pong,
    Release,
    ReplayWindow,
    Roster,
    RttReport,
    Solicit,
    SolicitAnswer,
    Update,
    WireError,
)

__all__ = ["Address", "NodeConfig", "Peer"]

_CLUSTER_MESSAGES = (Solicit, SolicitAnswer, Roster, RttReport, Confirm, Release, ClusterBeat)
_SCHED_MESSAGES = tuple(SchedAgent.message_types())

Address = tuple[str, int]

# Outgoing datagrams waiting for the driver; a peer that is never drained must
# not grow without bound (the oldest are dropped and counted).
MAX_OUTBOX = 100_000
# Messages a peer sends itself are handled after each input; a chain of them
# longer than this is a loop (dropped and counted).
MAX_LOCAL_PER_INPUT = 10_000


@dataclass(frozen=True)
class NodeConfig:
    """Everything a peer needs to know about the grid it belongs to."""

    can: CanConfig
    grid_key: bytes | None = None  # shared HMAC key; None: unauthenticated grid
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    cluster: ClusterConfig | None = None  # None: the peer takes no part in dynamic clusters
    sched: SchedConfig | None = None  # None: the peer takes no part in scheduling jobs

    def __post_init__(self) -> None:
        if self.sched is not None and self.sched.dead_after_s <= self.can.update_interval_s:
            raise FieldError(
                "sched",
                "dead_after_s",
                f"must be longer than the overlay's update_interval_s ({self.can.update_interval_s})"
                ": the load figures ride its updates",
            )


class Peer:
    """A grid peer. See the module comment for the driving contract."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        address: Address,
        point: Sequence[float],
        rng: random.Random,
        codec: Codec | None = None,
    ) -> None:
        """`codec`: one to share with other peers of the same grid (the simulator's)."""
        self.config = config
        self.address = (str(address[0]), int(address[1]))
        if codec is not None and codec.key != config.grid_key:
            raise ValueError("a shared codec must use the grid's key")
        self._codec = codec if codec is not None else Codec(config.grid_key)
        self._replay = ReplayWindow()
        can = config.can
        self._limiter = SourceLimiter(
            can.per_source_per_s,
            can.per_source_burst,
            can.per_source_table,
            stranger_per_s=can.stranger_per_s,
            stranger_burst=can.stranger_burst,
        )
        self._contacts = Contacts(can.per_source_table)  # hosts we spoke to first
        self._outbox: deque[tuple[bytes, Address]] = deque()
        self._events: deque[Event] = deque()
        self._seq = 0
        self.counters: Counter[str] = Counter()
        self.can = CanOverlay(
            config.can,
            address=self.address,
            point=point,
            rng=rng,
            send=self._send,
            emit=self._events.append,
            dress_update=self._load_update if config.sched is not None else None,
        )
        self._rng = rng
        self._anonymous = 0  # our sender id while we have no overlay id (drawn when first needed)
        self.prober = Prober(
            config.probe,
            rng=lambda: random.Random(rng.getrandbits(64)),
            send=self._send,
            emit=self._probe_event,
        )
        self.cluster: ClusterAgent | None = None
        self._cluster_rtts: deque[RttMeasured] = deque()  # theirs, handed over after each input
        self._cluster_seen: tuple[object, ...] = ()  # what ClusterChanged last said
        self._cluster_changed_at = 0.0
        if config.cluster is not None:
            self.cluster = ClusterAgent(
                config.cluster,
                address=self.address,
                rng=random.Random(rng.getrandbits(64)),
                send=self._send,
                measure=lambda addr, samples, now: self.prober.request(0, addr, now, samples),
            )
        self.sched: SchedAgent | None = None
        if config.sched is not None:
            self.sched = SchedAgent(
                config.sched,
                address=self.address,
                can=self.can,
                rng=random.Random(rng.getrandbits(64)),
                send=self._send,
                emit=self._events.append,
            )
        self._leave_pending = False  # asked to leave; the scheduler is handing over jobs
        self._local: deque[Message] = deque()  # messages to ourselves, not yet handled

    # -- inputs --------------------------------------------------------------------------------------

    def receive_datagram(
        self, data: bytes, addr: Address, now: float, rx_at: float | None = None
    ) -> None:
        """Take one datagram from the network. Never raises on its content:
        anything unacceptable is counted in counters["drop.<reason>"] and dropped.
        `rx_at` is when it reached the socket (the kernel's timestamp, on the
        same clock as now), for RTT samples; default now. Mutates; drain the
        outputs afterwards."""
        self.counters["rx"] += 1
        self.counters["rx_bytes"] += len(data)
        if not self._limiter.allow(addr[0], now, addr[0] in self._contacts):
            self.counters["drop.rate_limited"] += 1
            return
        try:
            sender, seq, message = self._codec.decode_untrusted(data)
        except WireError as exc:
            self.counters[f"drop.{exc.reason}"] += 1
            return
        if not self._replay.accept(sender, seq):
            self.counters["drop.replayed"] += 1
            return
        source = (str(addr[0]), int(addr[1]))
        problem = self._dispatch(sender, source, message, now, rx_at)
        self._after_input(now)
        if problem is not None:
            self.counters["drop.invalid"] += 1
            return
        self.counters["accepted"] += 1
        self.counters[f"rx.{type(message).__name__}"] += 1

    def _dispatch(
        self, sender: int, source: Address, message: Message, now: float, rx_at: float | None
    ) -> str | None:
        """Hand a decoded message to its component; returns why it was unacceptable, or None."""
        handler = _HANDLERS.get(type(message), Peer._to_overlay)
        return handler(self, sender, source, message, now, rx_at)

    # One handler per component, found by the message's type (_HANDLERS, below the class);
    # the overlay takes every type no other component claims.

    def _to_prober(
        self, sender: int, source: Address, message: Message, now: float, rx_at: float | None
    ) -> str | None:
        if isinstance(message, Ping):
            self.prober.handle_ping(source, message, now, rx_at)
        elif isinstance(message, Pong):
            self.prober.handle_pong(message, now, rx_at)
        return None

    def _to_cluster(
        self, sender: int, source: Address, message: Message, now: float, rx_at: float | None
    ) -> str | None:
        if self.cluster is None:
            return "no cluster agent"
        return self.cluster.handle_message(source, message, now)

    def _to_sched(
        self, sender: int, source: Address, message: Message, now: float, rx_at: float | None
    ) -> str | None:
        if self.sched is None:
            return "no scheduler"
        return self.sched.handle_message(source, message, now)

    def _to_overlay(
        self, sender: int, source: Address, message: Message, now: float, rx_at: float | None
    ) -> str | None:
        return self.can.handle_message(sender, source, message, now)

    # A scheduling peer's load figures ride its periodic updates (seed 000 §4.1.1: they
    # add no messages): the overlay's Update goes out as a LoadedUpdate, and one that
    # comes in is checked whole, then the Update goes to the overlay, the figures to the
    # scheduler (a peer without one reads the Update only).

    def _load_update(self, update: Update, now: float) -> Message:
        assert self.sched is not None
        figures = self.sched.update_load(now)
        return LoadedUpdate(
            update.me, update.neighbors, update.tombstones, update.root, update.news, figures
        )

    def _to_overlay_loaded(
        self, sender: int, source: Address, message: Message, now: float, rx_at: float | None
    ) -> str | None:
        assert isinstance(message, LoadedUpdate)
        sched, figures = self.sched, message.load
        if sched is None or figures is None:
            return self.can.handle_message(sender, source, message.update(), now)
        problem = sched.check_load(figures)
        if problem is None:
            problem = self.can.handle_message(sender, source, message.update(), now)
        if problem is None:
            sched.take_load(source, figures, now)
        return problem

    def _after_input(self, now: float) -> None:
        """What every input ends with: messages to ourselves are handled (they
        never cross the network), a pending leave goes on once our jobs are
        handed over, the cluster agent gets its measurements."""
        for _ in range(MAX_LOCAL_PER_INPUT):
            if not self._local:
                break
            message = self._local.popleft()
            self.counters["local"] += 1
            if self._dispatch(self._sender_id(), self.address, message, now, None) is not None:
                self.counters["local_invalid"] += 1
        else:
            self.counters["local_overflow"] += len(self._local)
            self._local.clear()
        if self._leave_pending and not (self.sched is not None and self.sched.handing_over()):
            self._leave_pending = False
            self.can.leave(now)
        self._hand_over_rtts(now)

    def handle_timer(self, now: float) -> None:
        """Run whatever is due at `now` (early or repeated calls are harmless)."""
        self.can.handle_timer(now)
        self.prober.handle_timer(now)
        if self.cluster is not None:
            self.cluster.handle_timer(now)
        if self.sched is not None:
            self.sched.handle_timer(now)
        self._after_input(now)

    def join(self, bootstraps: Sequence[Address], now: float) -> None:
        """Join the overlay through one of `bootstraps` (none: start a new overlay)."""
        self.can.join([(str(h), int(p)) for h, p in bootstraps], now)

    def leave(self, now: float) -> None:
        """Leave gracefully (the overlay merges our zone into our neighbours'; our
        cluster members are released and our heads told)."""
        if self._leave_pending:
            return
        if self.cluster is not None:
            self.cluster.leave(now)
        if self.sched is not None:
            self.sched.leave(now)
            # The CAN leave waits until our jobs are taken (_after_input).
            self._leave_pending = self.sched.handing_over()
        if not self._leave_pending:
            self.can.leave(now)
        self._after_input(now)

    def set_cluster_candidates(self, candidates: Sequence[Address], now: float) -> None:
        """The first approximation of our cluster (DTM's clustering): who to
        solicit, nearest first. Starts the head and the client."""
        if self.cluster is None:
            raise ValueError("this peer has no cluster configuration")
        self.cluster.set_candidates([(str(h), int(p)) for h, p in candidates], now)
        self._after_input(now)

    def set_sched_cluster(self, members: Sequence[Address], now: float) -> None:
        """The cluster our jobs are co-scheduled on (a static clustering)."""
        self._scheduler().set_cluster(members, now)
        self._after_input(now)

    def submit(self, job: JobInfo, now: float) -> None:
        """Take a job as its entry. Raises ValueError for a bad job, or when we
        are not a member of the overlay (nothing changed)."""
        if not self.member:
            raise ValueError(f"this peer is {self.status}, not a member: it cannot route a job")
        self._scheduler().submit(job, now)
        self._after_input(now)

    def task_finished(self, job: int, attempt: int, ok: bool, reason: str, now: float) -> None:
        """The driver's report that a rank this peer ran has ended."""
        self._scheduler().task_finished(job, attempt, ok, reason, now)
        self._after_input(now)

    def task_actions(self) -> list[Action]:
        """Rank processes to start or kill (mutating, like an iterator)."""
        return self.sched.actions() if self.sched is not None else []

    def _scheduler(self) -> SchedAgent:
        if self.sched is None:
            raise ValueError("this peer has no scheduler configuration")
        return self.sched

    def measure_rtt(
        self, target: int, addr: Address, now: float, samples: int | None = None
    ) -> int | None:
        """Measure RTTs to a peer (an RttMeasured event reports them); None: too many pending."""
        return self.prober.request(target, (str(addr[0]), int(addr[1])), now, samples)

    # -- outputs -------------------------------------------------------------------------------------

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Address]]:
        """All datagrams queued since the last call (mutating, like an iterator)."""
        out = list(self._outbox)
        self._outbox.clear()
        return out

    def get_timer(self) -> float | None:
        """The earliest deadline at which handle_timer() must run, or None."""
        timers = (
            self.can.get_timer(),
            self.prober.get_timer(),
            self.cluster.get_timer() if self.cluster is not None else None,
            self.sched.get_timer() if self.sched is not None else None,
        )
        deadlines = [t for t in timers if t is not None]
        return min(deadlines) if deadlines else None

    def next_event(self) -> Event | None:
        """The next event, or None once drained (mutating)."""
        return self._events.popleft() if self._events else None

    def _probe_event(self, event: Event) -> None:
        if (
            isinstance(event, RttMeasured)
            and self.cluster is not None
            and self.cluster.owns(event.request)
        ):
            self._cluster_rtts.append(event)  # not now: the prober may be mid-call for the agent
        else:
            self._events.append(event)

    def _hand_over_rtts(self, now: float) -> None:
        """After every input: the agent's measurements, then whether its clusters changed."""
        agent = self.cluster
        if agent is None:
            return
        while self._cluster_rtts:
            event = self._cluster_rtts.popleft()
            agent.handle_rtt(event.request, event.rtts, now)
        seen = (agent.own, agent.advertised(), agent.head_state, agent.client_state)
        if seen != self._cluster_seen:
            self._cluster_seen = seen
            self._cluster_changed_at = now
            self._events.append(
                ClusterChanged(
                    now, len(seen[0]), len(seen[1]), agent.head_state, agent.client_state
                )
            )

    def _send(self, addr: Address, message: Message) -> None:
        if addr == self.address:
            self._local.append(message)  # handled at the end of the current input
            return
        if not 0 < addr[1] < 65536 or not addr[0]:  # components check what they take from
            self.counters["tx_bad_address"] += 1  # the wire; this is the last line
            return
        self._seq += 1
        try:
            data = self._codec.encode(message, sender=self._sender_id(), seq=self._seq)
        except ValueError:
            self.counters["tx_oversized"] += 1
            return
        if len(self._outbox) >= MAX_OUTBOX:
            self._outbox.popleft()
            self.counters["tx_overflow"] += 1
        self._outbox.append((data, addr))
        if type(message) is not Pong:  # answering a Ping makes no contact (node/limits.py)
            self._contacts.note(addr[0])
        self.counters["tx"] += 1
        self.counters["tx_bytes"] += len(data)
        kind = type(message).__name__
        self.counters[f"tx.{kind}"] += 1
        self.counters[f"tx_bytes.{kind}"] += len(data)

    def _sender_id(self) -> int:
        """The overlay id, or before we have one a random id of our own: receivers
        keep a replay window per sender id, and peers that all said 0 would
        look like one peer replaying itself."""
        if self.can.id:
            return self.can.id
        if not self._anonymous:
            self._anonymous = self._rng.getrandbits(48) | 1
        return self._anonymous

    # -- introspection -----------------------------------------------------------------------------------

    @property
    def member(self) -> bool:
        return self.can.status == Status.MEMBER

    @property
    def status(self) -> str:
        return Status.LEAVING if self._leave_pending else self.can.status

    def dump(self, now: float | None = None) -> dict[str, Any]:
        """State for the oracle and for humans (JSON-ready). With `now`, the
        cluster part says how long its clusters have been as they are."""
        out: dict[str, Any] = {**self.can.dump(), "counters": self.stats()}
        if self.cluster is not None:
            cluster = self.cluster.dump()
            if now is not None:
                cluster["unchanged_s"] = round(now - self._cluster_changed_at, 3)
            out["cluster"] = cluster
        if self.sched is not None:
            out["sched"] = self.sched.dump()
        return out

    def stats(self) -> dict[str, int]:
        """Datagram counters: rx, accepted, drop.<reason> for every reason, tx, bytes, per message type."""
        out = {f"drop.{reason}": 0 for reason in DROP_REASONS}
        out.update(self.counters)
        return dict(sorted(out.items()))


_Handler = Callable[[Peer, int, Address, Message, float, "float | None"], "str | None"]

# Which component takes a message of each type (Peer._dispatch); the overlay takes the rest.
_HANDLERS: dict[type[Message], _Handler] = {
    Ping: Peer._to_prober,
    Pong: Peer._to_prober,
    **dict.fromkeys(_CLUSTER_MESSAGES, Peer._to_cluster),
    **dict.fromkeys(_SCHED_MESSAGES, Peer._to_sched),
    LoadedUpdate: Peer._to_overlay_loaded,
}
