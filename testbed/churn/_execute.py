# Executing a schedule on an engine (simulator or emulator), on time.
#
# Theory of operation
#   The schedule's events and the quiet periods (settle_s without events after
#   a burst) form one timeline. For each entry the engine advances to its time
#   (virtual time in the simulator; a sleep in the emulator) and then the event
#   is applied through the engine's verbs, or the invariants are checked. Each
#   applied action is logged as it happens (applied.jsonl) with its lateness:
#   when it completed minus when it was due, so the emulator's figure includes
#   the cost of the action itself (starting a process, a control round trip).
#   Latency changes edit one current matrix (the frame's, plus overrides) and
#   load it whole: one control call however many pairs change.
#
#   Quiet means quiet for the system, not only for the script: a graceful
#   leave is a protocol that may retry for a while (and end abruptly), so a
#   quiet period starts when the last event is applied *and* every peer asked
#   to leave has gone. The check comes settle_s after that, or `reserve_s`
#   before the next event if that is sooner (the room the script leaves).
#   Checks are strict: when departures leave less quiet than that before the
#   check's planned time, the check waits, up to `wait_max_s` beyond it, and
#   the rest of the script is shifted by what the wait ate into its gap
#   (`settle_wait_s` in the check's record, the total in the summary's
#   `shifted_s`). So every check sees the quiet the script planned, and every
#   violation counts; only a check whose wait ran out (a departure still
#   running after wait_max_s) says it is unsettled.
#   `Schedule.room_warnings` tells before a run which quiet periods the
#   script itself left too short.

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from testbed.analysis.stats import quantiles
from testbed.churn._compile import Event, Schedule
from testbed.churn._parse import HOST_VERBS
from testbed.runs import JsonLog

__all__ = ["ChurnEngine", "Executor", "Quiet"]

# How often a quiet period looks whether the peers asked to leave have gone.
DEPARTURE_POLL_S = 0.5


class ChurnEngine(Protocol):
    now: float

    def leave(self, host: int) -> None: ...
    def crash(self, host: int) -> None: ...
    def freeze(self, host: int) -> None: ...
    def thaw(self, host: int) -> None: ...
    def advance(self, until: float) -> None: ...
    def set_matrix(self, one_way_s: np.ndarray, why: str = "") -> int: ...  # pairs clamped
    def partition(self, groups: list[list[int]]) -> None: ...
    def heal(self) -> None: ...
    def set_loss(self, rate: float, src: list[int] | None, dst: list[int] | None) -> None: ...
    def departing(self) -> list[int]: ...  # asked to leave and still running
    # sources send per_s datagrams a second each to targets (0: they stop); port None: the
    # peers' port
    def flood(
        self, sources: list[int], targets: list[int], per_s: float, port: int | None
    ) -> None: ...
    # bandwidth, access links, reordering, duplication: params as in Event.params
    def shape(
        self, verb: str, groups: list[list[int]], value: float | None, params: dict[str, float]
    ) -> None: ...


@dataclass(frozen=True)
class Quiet:
    """A check point: when, how long the system had been quiet, whether that was the
    full settle_s (else a departure outlasted the wait), and how long the check
    waited beyond its planned time."""

    t: float
    quiet_s: float
    settled: bool
    departing: tuple[int, ...] = ()  # still leaving when the check had to happen
    settle_wait_s: float = 0.0


class Executor:
    """Runs one schedule. `join(host)` starts and joins a peer (the runner knows
    how: its point, its bootstraps); `check(t)` checks the invariants."""

    def __init__(
        self,
        schedule: Schedule,
        engine: ChurnEngine,
        names: Sequence[str],
        one_way_s: np.ndarray,
        *,
        join: Callable[[int], None],
        frames: Mapping[int, np.ndarray] | None = None,
        log: JsonLog | None = None,
        on_change: Callable[[int], None] | None = None,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        departure_poll_s: float = DEPARTURE_POLL_S,
    ) -> None:
        """`on_change(host)`: after a host left, crashed, froze or thawed (a join
        is the runner's own `join`; a restart is a crash, then a join).
        `on_record(record)`: every action as it is logged (verb, hosts, due_t,
        applied_t, lateness_ms, line, ...)."""
        self.schedule = schedule
        self.engine = engine
        self.index = {name: k for k, name in enumerate(names)}
        self.base = np.array(one_way_s, dtype=np.float64)  # the current frame's delays
        self.current = self.base.copy()  # ... with `set latency` overrides
        self._join = join
        self._frames = frames or {}
        self._log = log
        self._on_change = on_change
        self._on_record = on_record
        self._departure_poll_s = departure_poll_s
        self.expected: set[int] = set()  # up and not frozen: should be members
        self.frozen: set[int] = set()
        self.lateness_ms: list[float] = []
        self.applied = 0
        self.recent: list[dict[str, Any]] = []  # applied since the last clean check
        # The sides of the partition in force (None: none): checks judge each side as an
        # overlay of its own, and joiners get bootstraps on their side.
        self.sides: list[set[int]] | None = None
        self.heals: list[float] = []  # when each partition was healed
        self.cuts: list[float] = []  # when each partition began
        self.shift_s = 0.0  # what strict checks delayed the rest of the script by
        self.waits_s: list[float] = []

    def run(
        self,
        settle_s: float,
        check: Callable[[Quiet], None],
        reserve_s: float = 1.0,
        wait_max_s: float = 120.0,
    ) -> None:
        timeline: list[tuple[float, int, int, Event | None]] = []
        stop = next((e.t for e in self.schedule.events if e.verb == "stop"), None)
        for k, t in enumerate(self.schedule.quiet_periods(settle_s, reserve_s)):
            if stop is None or t <= stop:
                timeline.append((t, 0, k, None))  # a check before an event due at the same time
        for k, event in enumerate(self.schedule.events):
            timeline.append((event.t, 1, k, event))
        timeline.sort(key=lambda entry: entry[:3])
        last_event_t = 0.0
        for n, (t, _, _, event) in enumerate(timeline):
            if event is None:
                following = next((e.t for _, _, _, e in timeline[n + 1 :] if e is not None), None)
                latest = math.inf if following is None else following + self.shift_s - reserve_s
                at = self._quiet(last_event_t, settle_s, latest, wait_max_s)
                if at.t > latest:  # the wait ate into the gap: what follows moves
                    self.shift_s += at.t - latest
                self.waits_s.append(at.settle_wait_s)
                check(at)
                continue
            self.engine.advance(t + self.shift_s)
            if event.verb == "stop":
                if self._log is not None:  # the end, not an action: not counted
                    self._log.write(
                        "stop", due_t=event.t, applied_t=round(self.engine.now, 6), line=event.line
                    )
                return
            self._apply(event)
            last_event_t = self.engine.now

    def _quiet(
        self, last_event_t: float, settle_s: float, latest: float, wait_max_s: float
    ) -> Quiet:
        """From the last event on, wait until the peers asked to leave have gone,
        then as long a quiet as the script leaves room for (settle_s, or less when
        the next event is due sooner); past the planned time by wait_max_s at most."""
        planned = min(last_event_t + settle_s, latest)
        room_s = planned - last_event_t  # what the script leaves room for
        bound = planned + wait_max_s
        since = last_event_t
        departing = set(self.engine.departing())
        while departing and self.engine.now < bound:
            self.engine.advance(min(self.engine.now + self._departure_poll_s, bound))
            still = set(self.engine.departing())
            if still != departing:
                since = max(since, self.engine.now)  # one went (to within the poll)
            departing = still
        if not departing:
            self.engine.advance(max(self.engine.now, min(since + room_s, bound)))
        quiet_s = self.engine.now - since
        return Quiet(
            round(self.engine.now, 6),
            round(quiet_s, 3),
            not departing and quiet_s >= room_s - 1e-6,
            tuple(sorted(departing)),
            round(max(0.0, self.engine.now - planned), 3),
        )

    def summary(self) -> dict[str, Any]:
        """Actions are counted one per host for host verbs (a join of 8 is 8 actions)."""
        scheduled = sum(max(1, len(e.hosts)) for e in self.schedule.events if e.verb != "stop")
        return {
            "events_scheduled": scheduled,
            "events_applied": self.applied,
            "lateness_ms": quantiles(self.lateness_ms),
            "shifted_s": round(self.shift_s, 3),
            "settle_wait_s": quantiles(self.waits_s),
        }

    def involved(self, peers: set[str], limit: int = 20) -> list[dict[str, Any]]:
        """The events since the last clean check that touched `peers` or the network."""
        out = [r for r in self.recent if not r["hosts"] or peers & set(r["hosts"])]
        return out[-limit:]

    # -- applying ------------------------------------------------------------------------------------

    def _hosts(self, names: Sequence[str]) -> list[int]:
        return [self.index[name] for name in names]

    def _record(self, event: Event, hosts: Sequence[str], **extra: Any) -> None:
        late_ms = max(0.0, (self.engine.now - event.t - self.shift_s) * 1e3)
        self.lateness_ms.append(late_ms)
        self.applied += 1
        record = {
            "due_t": event.t,
            "applied_t": round(self.engine.now, 6),
            "lateness_ms": round(late_ms, 3),
            **({"shifted_s": round(self.shift_s, 3)} if self.shift_s else {}),
            "hosts": list(hosts),
            "line": event.line,
            **extra,
        }
        self.recent.append({"verb": event.verb, **record})
        if self._log is not None:
            self._log.write(event.verb, **record)
        if self._on_record is not None:
            self._on_record({"verb": event.verb, **record})

    def _apply(self, event: Event) -> None:
        verb = event.verb
        if verb in HOST_VERBS:
            for name in event.hosts:
                host = self.index[name]
                if verb == "join":
                    self._join(host)
                    self.expected.add(host)
                elif verb == "restart":
                    self.engine.crash(host)
                    self.frozen.discard(host)
                    if self._on_change is not None:
                        self._on_change(host)
                    self._join(host)
                    self.expected.add(host)
                elif verb == "leave":
                    self.engine.leave(host)
                    self.expected.discard(host)
                elif verb == "crash":
                    self.engine.crash(host)
                    self.expected.discard(host)
                    self.frozen.discard(host)
                elif verb == "freeze":
                    self.engine.freeze(host)
                    self.frozen.add(host)
                    self.expected.discard(host)
                else:
                    self.engine.thaw(host)
                    self.frozen.discard(host)
                    self.expected.add(host)
                if verb not in ("join", "restart") and self._on_change is not None:
                    self._on_change(host)
                self._record(event, [name])
            return
        groups = [self._hosts(group) for group in event.groups]
        extra: dict[str, Any] = {}
        if verb == "partition":
            self.engine.partition(groups)
            self.cuts.append(self.engine.now)
            named = {h for group in groups for h in group}
            rest = set(range(len(self.index))) - named
            self.sides = [set(group) for group in groups] + ([rest] if rest else [])
        elif verb == "heal":
            self.engine.heal()
            self.sides = None
            self.heals.append(self.engine.now)
        elif verb == "latency":
            a, b = (np.array(g, dtype=np.intp) for g in groups)
            for src, dst in ((a, b), (b, a)):
                block = np.ix_(src, dst)
                value = self.base[block] if event.value is None else event.value / 2.0
                self.current[block] = value
            np.fill_diagonal(self.current, 0.0)
            extra["clamped"] = self.engine.set_matrix(self.current, why=f"churn line {event.line}")
        elif verb in ("loss", "cut", "mend"):
            rate = {"cut": 1.0, "mend": 0.0}.get(verb, event.value)
            assert rate is not None
            if not groups:
                self.engine.set_loss(rate, None, None)
            else:
                self.engine.set_loss(rate, groups[0], groups[1])
                self.engine.set_loss(rate, groups[1], groups[0])
        elif verb in ("bandwidth", "access", "reorder", "duplicate"):
            self.engine.shape(verb, groups, event.value, dict(event.params))
            extra.update(event.params)
        elif verb == "flood":
            assert event.value is not None
            port = event.params.get("port")
            self.engine.flood(
                groups[0], groups[1], event.value, None if port is None else int(port)
            )
            extra.update(event.params)
        elif verb == "frame":
            assert event.value is not None
            self.base = np.array(self._frames[int(event.value)], dtype=np.float64)
            self.current = self.base.copy()
            extra["clamped"] = self.engine.set_matrix(self.current, why=f"frame {int(event.value)}")
        else:
            raise ValueError(f"unknown schedule verb {verb!r}")
        self._record(event, [], groups=[len(g) for g in groups], value=event.value, **extra)
