# Compiling a churn script into a schedule: timed events on named hosts.
#
# Theory of operation
#   Statements say what happens to how many hosts, or to which; the schedule
#   says exactly which host does what when, so that both engines (and every
#   rerun) execute the same thing. The compiler replays the script in time
#   order against a model of the hosts (idle, up, frozen; when each joined)
#   and resolves every selector at the moment it acts, with one seeded rng.
#   A _Player acts out each statement: a handler per verb (the _START table)
#   at the statement's start, which may schedule more steps (the spread
#   events, a span's undo) on the compiler's queue.
#
#   Counts are spread, states are held: `from A to B join 10` spreads ten
#   joins evenly over [A, B) (each picks its host when it happens), while
#   `from A to B freeze 3` freezes three hosts at A and thaws them at B (so
#   do partition, set latency/loss and frame: undone at B). `flap` cuts a
#   pair at A and mends and cuts it every T until B; `flood` starts at A and
#   ends at B (a flood needs a span). A percentage is of the
#   hosts up at the statement's start, except for join (of all the run's
#   hosts, so that `from 0s to 40s join 80%` builds the same share of any
#   topology: one script for 64 emulated peers and 1,000 simulated ones).
#   Anything impossible (a named host that is not up, more leavers than
#   members, a label no host has, overlapping partitions, an event at or after
#   `stop`) is an error naming the statement's line, not a silent skip.

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from testbed.churn._parse import Count, Group, Islands, Selector, Statement
from testbed.errors import InputError
from testbed.linkmodel import MAX_ONE_WAY_S

__all__ = ["Event", "Schedule", "Universe", "compile_churn"]


class Event(msgspec.Struct, frozen=True, omit_defaults=True):
    """One thing the executor does: at `t` seconds after the run's start.

    verb: join, leave, crash, freeze, thaw, restart (on `hosts`); partition (`groups`,
    the hosts not named form one more side), heal; latency (RTT `value` in
    seconds between groups[0] and groups[1], None: back to the matrix); loss
    (rate `value`, between groups[0] and groups[1], or everywhere with no
    groups); cut and mend (all traffic of a pair of groups); frame (switch to
    matrix frame `value`); flood (groups[0] send `value` datagrams a second each to
    groups[1], round robin, at params["port"] or the peers' port; 0: they stop); stop
    (the end of the run).
    """

    t: float
    verb: str
    hosts: tuple[str, ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()
    value: float | None = None
    line: int = 0
    # bandwidth (between groups[0] and groups[1], or all pairs): rate_mbit and
    # queue_bytes or queue_packets, empty = removed; access (on groups[0]): up_mbit,
    # down_mbit, queue_*; reorder: gap_s (value = rate); duplicate: value = rate.
    params: dict[str, float] = msgspec.field(default_factory=dict)


@dataclass(frozen=True)
class Universe:
    """The hosts a script may name: their names and labels, and the matrix frames."""

    names: Sequence[str]
    labels: Sequence[Mapping[str, str]] = ()
    frames: int | None = None  # how many frames the topology has (None: no frames)
    frame: int = 1  # the frame the run starts on


@dataclass
class Schedule:
    events: list[Event]
    end: float  # when the last event happens, or `stop`'s time
    source: str = "<churn>"
    hosts: Sequence[str] = ()  # the run's hosts (a partition's unnamed side is the rest of them)

    def to_jsonl(self) -> str:
        """One JSON object per event, every unit in its field's name and every
        side of a partition listed (schedule.jsonl, `testbed churn --json`)."""
        encoder = msgspec.json.Encoder()
        return "".join(encoder.encode(self.record(e)).decode() + "\n" for e in self.events)

    def record(self, event: Event) -> dict[str, Any]:
        out: dict[str, Any] = {"t_s": event.t, "verb": event.verb, "line": event.line}
        if event.hosts:
            out["hosts"] = list(event.hosts)
        if event.verb == "partition":
            named = {h for side in event.groups for h in side}
            rest = [h for h in self.hosts if h not in named]
            out["sides"] = [list(side) for side in event.groups] + ([rest] if rest else [])
        elif event.verb == "access":
            out["hosts"] = list(event.groups[0])
        elif event.groups:
            out["between"] = [list(side) for side in event.groups]
        if event.verb == "latency":
            out["rtt_ms"] = None if event.value is None else round(event.value * 1e3, 6)
            if event.value is None:
                out["rtt_from"] = "matrix"
        elif event.verb in ("loss", "cut", "mend"):
            out["loss_rate"] = {"cut": 1.0, "mend": 0.0}.get(event.verb, event.value)
        elif event.verb == "frame":
            out["frame"] = None if event.value is None else int(event.value)
        elif event.verb in ("bandwidth", "access"):
            out.update(event.params or {"removed": True})
        elif event.verb == "reorder":
            out["reorder_rate"] = event.value
            if event.params:
                out["gap_ms"] = round(event.params["gap_s"] * 1e3, 6)
        elif event.verb == "duplicate":
            out["duplicate_rate"] = event.value
        elif event.verb == "flood":
            out["flood_per_s"] = event.value  # 0: the flood ends
            if "port" in event.params:
                out["port"] = int(event.params["port"])
        return out

    def room_warnings(
        self,
        settle_s: float,
        leave_s: float = 0.0,
        reserve_s: float = 1.0,
        crash_s: float = 0.0,
    ) -> list[str]:
        """Where the script leaves the system too little room, said before a run: a
        quiet period after leaves shorter than settle_s plus `leave_s` (how long a
        leave may take), which a strict check then waits out, moving the rest of the
        script; a check sooner after a crash than `crash_s` (how long the repair of a
        crash may take: a check before it finds the hole, as no leave is in progress to
        wait for); a long stretch of events with no quiet period, where nothing is
        checked on its own."""
        out: list[str] = []
        events = [e for e in self.events if e.verb != "stop"]
        times = sorted({e.t for e in events})
        stop = min((e.t for e in self.events if e.verb == "stop"), default=None)
        leaves_since = None  # the first leave since the last quiet period
        crash_last = None  # the last crash since the last quiet period
        stretch_from = times[0] if times else 0.0
        for k, t in enumerate(times):
            here = [e for e in events if e.t == t]
            leave = next((e for e in here if e.verb == "leave"), None)
            if leave is not None and leaves_since is None:
                leaves_since = leave
            crash_last = next((e for e in here if e.verb == "crash"), crash_last)
            following = times[k + 1] if k + 1 < len(times) else stop
            if following is None or following - t < settle_s:
                continue  # no quiet period here
            check_t = min(t + settle_s, following - reserve_s)  # as quiet_periods() has it
            if crash_last is not None and check_t - crash_last.t < crash_s:
                out.append(
                    f"line {crash_last.line}: a crash at t={crash_last.t:g} s, checked at "
                    f"t={check_t:g} s: sooner than its repair may take ({crash_s:g} s: "
                    "suspect_after_s, an update tick, the probe and the takeover); the "
                    "check may find its zone unowned"
                )
            crash_last = None
            if leaves_since is not None and following - reserve_s - t < settle_s + leave_s:
                out.append(
                    f"line {leaves_since.line}: leaves at t={leaves_since.t:g} s, then "
                    f"{following - t:g} s until the next event: less than settle_s + a leave "
                    f"({settle_s:g} + {leave_s:g} s); the check waits for the leavers and "
                    "moves the rest of the script"
                )
            leaves_since = None
            if t - stretch_from > 10 * settle_s:
                out.append(
                    f"no quiet period from t={stretch_from:g} s to t={t:g} s: the events "
                    "in between are checked only together, after it"
                )
            stretch_from = following
        return out

    def quiet_periods(self, settle_s: float, reserve_s: float = 1.0) -> list[float]:
        """When the system should be quiet: settle_s after each event that is
        followed by at least that long without events (`stop` counts as one);
        but `reserve_s` before the next event at the latest, so that a check
        (a round trip to every peer in the emulator) never delays the schedule."""
        times = sorted({e.t for e in self.events if e.verb != "stop"})
        stop = min((e.t for e in self.events if e.verb == "stop"), default=None)
        out = []
        for k, t in enumerate(times):
            following = times[k + 1] if k + 1 < len(times) else stop
            if following is None:
                out.append(t + settle_s)
            elif following - t >= settle_s:
                latest = following - reserve_s
                out.append(min(t + settle_s, latest) if latest > t else t + settle_s)
        return out


class _Model:
    """Who is idle, up or frozen as the script runs (in time order)."""

    def __init__(self, universe: Universe, source: str) -> None:
        self.universe = universe
        self.source = source
        self.index = {name: k for k, name in enumerate(universe.names)}
        self.up: dict[str, float] = {}  # name -> when it joined (insertion order = join order)
        self.frozen: dict[str, int] = {}  # name -> the freeze that holds it (a token)
        self.frame = universe.frame
        self.held: dict[str, list[tuple[float, float, int]]] = {}  # verb -> spans held
        self.floods: list[tuple[float, float, int, tuple[str, ...]]] = []  # span, line, sources

    def fail(self, statement: Statement, reason: str, column: int | None = None) -> InputError:
        return InputError(
            f"`{statement.text}`: {reason}",
            source=self.source,
            line=statement.line,
            column=column or statement.column,
        )

    def pool(self, verb: str) -> list[str]:
        names = self.universe.names
        if verb == "join":
            return [h for h in names if h not in self.up]
        if verb == "thaw":
            return [h for h in self.up if h in self.frozen]
        if verb in ("crash", "restart"):
            return list(self.up)
        return [h for h in self.up if h not in self.frozen]  # leave, freeze

    def members_of(self, group: Group, statement: Statement) -> list[str]:
        """The hosts of a group, in the topology's order (whatever their state)."""
        if group.everyone:
            return list(self.universe.names)
        if group.label is not None:
            key, value = group.label
            labels = self.universe.labels
            hosts = [
                name
                for name, lab in zip(self.universe.names, labels, strict=False)
                if lab.get(key) == value
            ]
            if not hosts:
                known = sorted({f"{k}={v}" for lab in labels for k, v in lab.items()})
                shown = ", ".join(known[:12]) + (" ..." if len(known) > 12 else "")
                raise self.fail(
                    statement,
                    f"no host has the label {key}={value}"
                    + (f" (labels: {shown})" if known else " (the hosts have no labels)"),
                )
            return hosts
        for name in group.names:
            if name not in self.index:
                examples = ", ".join(self.universe.names[:3])
                raise self.fail(
                    statement,
                    f"no host is named {name!r} (the hosts are {examples}, ... "
                    f"{len(self.universe.names)} in all)",
                )
        return list(dict.fromkeys(group.names))

    def how_many(self, count: Count, base: int) -> int:
        if not count.percent:
            return int(count.value)
        return math.floor(count.value / 100.0 * base + 0.5)


def _when(t: float) -> str:
    return f"{t:g}s"


def compile_churn(
    statements: Sequence[Statement],
    universe: Universe,
    seed: int,
    source: str = "<churn>",
) -> Schedule:
    """Resolve a parsed script against `universe` into a deterministic schedule.

    Raises InputError (file:line:column) for anything the hosts cannot do.
    """
    if not universe.names:
        raise InputError("the run has no hosts for the churn script to act on", source=source)
    model = _Model(universe, source)
    rng = random.Random(f"{seed}/churn")
    events: list[Event] = []
    queue: list[tuple[float, int, int, Callable[[float], None]]] = []
    order = 0

    def later(t: float, line: int, action: Callable[[float], None]) -> None:
        nonlocal order
        order += 1
        heapq.heappush(queue, (t, line, order, action))

    stop: Statement | None = None
    for statement in statements:
        if statement.verb == "stop" and (stop is None or statement.start < stop.start):
            stop = statement
    for statement in statements:
        if stop is not None and statement is not stop:
            last = statement.end if statement.end is not None else statement.start
            if last >= stop.start:
                raise model.fail(
                    statement,
                    f"it runs until {_when(last)}, not before `stop` at {_when(stop.start)} "
                    f"(line {stop.line})",
                )
        _check_when(statement, model)
        later(statement.start, statement.line, _Player(statement, model, rng, events, later).start)

    while queue:
        t, line, _, action = heapq.heappop(queue)
        try:
            action(t)
        except _TooMany as exc:
            statement = next(s for s in statements if s.line == line)
            raise model.fail(
                statement, f"it makes {exc.args[0]:,} events, more than {MAX_EVENTS:,}"
            ) from None
    events.sort(key=lambda e: e.t)  # stable: equal times keep the script's order
    end = stop.start if stop is not None else max((e.t for e in events), default=0.0)
    return Schedule(events, end, source, tuple(universe.names))


_AT_ONLY = {"thaw", "heal", "stop"}


# Events one statement may make (a churn rate or flap period gone wrong).
MAX_EVENTS = 200_000


class _TooMany(Exception):
    """A statement would make more than MAX_EVENTS events (args[0]: how many)."""


def _check_when(statement: Statement, model: _Model) -> None:
    if statement.verb in _AT_ONLY and statement.end is not None:
        raise model.fail(statement, f"`{statement.verb}` happens at one time: write `at T`")
    if statement.verb == "flap" and statement.end is None:
        raise model.fail(statement, "`flap` needs a span: `from T to T flap A -- B every T`")
    if statement.verb == "flood" and statement.end is None:
        raise model.fail(statement, "`flood` needs a span: `from T to T flood A -- B at N/s`")
    if statement.verb == "churn" and statement.period is not None and statement.end is None:
        raise model.fail(statement, "`churn X% per T` needs a span: `from T to T churn ...`")
    rtt = statement.value if statement.verb == "latency" else None
    if rtt is not None and rtt / 2 > MAX_ONE_WAY_S:
        raise model.fail(statement, f"an RTT of {rtt:g} s is beyond {2 * MAX_ONE_WAY_S:g} s")
    flaps = (
        (statement.end - statement.start) / statement.period
        if statement.verb == "flap" and statement.end is not None and statement.period
        else 0
    )
    if flaps > MAX_EVENTS:
        raise model.fail(statement, f"more than {MAX_EVENTS:,} cuts and mends: a longer period")
    if statement.verb in ("partition", "frame"):
        # They replace each other (and a span's end undoes whatever is in place),
        # so two of them may not overlap.
        for start, end, line in model.held.get(statement.verb, []):
            if start <= statement.start < end or (
                statement.end is not None and statement.start < start < statement.end
            ):
                raise model.fail(
                    statement,
                    f"it overlaps the {statement.verb} of line {line} "
                    f"({_when(start)} to {_when(end)}); they replace each other",
                )
        if statement.end is not None:
            model.held.setdefault(statement.verb, []).append(
                (statement.start, statement.end, statement.line)
            )
    if statement.verb == "frame":
        frame = statement.value
        frames = model.universe.frames
        assert frame is not None
        if frames is None:
            raise model.fail(statement, "this topology has no matrix frames to switch to")
        if not 1 <= frame <= frames:
            raise model.fail(statement, f"frame {frame:g} does not exist (frames 1..{frames})")


class _Player:
    """Acts out one statement against the model: `start` at its start time,
    by a handler per verb (_START), which may schedule more through `later`."""

    def __init__(
        self,
        statement: Statement,
        model: _Model,
        rng: random.Random,
        events: list[Event],
        later: Callable[[float, int, Callable[[float], None]], None],
    ) -> None:
        self.statement = statement
        self.model = model
        self.rng = rng
        self.events = events
        self.later = later
        self.verb, self.line = statement.verb, statement.line
        self.universe_names = list(model.universe.names)
        self.token = id(statement)  # a timed freeze thaws only what it froze itself

    def start(self, t: float) -> None:
        handler = _START.get(self.verb)
        if handler is not None:
            handler(self, t)

    # -- what the statement does ----------------------------------------------------------------

    def emit(self, t: float, verb: str, **fields: Any) -> None:
        self.events.append(Event(t=round(t, 6), verb=verb, line=self.line, **fields))

    def apply_hosts(self, t: float, verb: str, hosts: list[str]) -> None:
        model = self.model
        for host in hosts:
            if verb == "join":
                model.up[host] = t
            elif verb in ("leave", "crash"):
                model.up.pop(host, None)
                model.frozen.pop(host, None)
            elif verb == "freeze":
                model.frozen[host] = self.token
            elif verb == "thaw":
                model.frozen.pop(host, None)
            elif verb == "restart":  # killed and started again: as if it had just joined
                model.up.pop(host, None)
                model.up[host] = t
                model.frozen.pop(host, None)
        if hosts:
            self.emit(t, verb, hosts=tuple(hosts))

    def select(self, t: float, verb: str, selector: Selector, count: int | None) -> list[str]:
        model, statement = self.model, self.statement
        pool = model.pool(verb)
        if selector.group is not None:
            wanted = set(model.members_of(selector.group, statement))
            if selector.how == "group":
                missing = [h for h in model.members_of(selector.group, statement) if h not in pool]
                named = selector.group.names and not selector.group.everyone
                if named and missing:
                    raise model.fail(
                        statement,
                        f"at {_when(t)} {missing[0]} cannot {verb}: {_state(model, missing[0])}",
                    )
            pool = [h for h in pool if h in wanted]
        if selector.how == "group":
            if not pool:
                raise model.fail(statement, f"at {_when(t)} no host of {selector.group} can {verb}")
            return pool
        assert count is not None
        if count > len(pool):
            raise model.fail(
                statement,
                f"at {_when(t)} {count} host(s) should {verb} but only {len(pool)} can "
                f"({_pool_words(verb)})",
            )
        if selector.how == "random":
            return sorted(self.rng.sample(pool, count), key=model.index.__getitem__)
        if verb == "join":  # newest/oldest of idle hosts: by the topology's order
            return pool[-count:] if selector.how == "newest" and count else pool[:count]
        by_age = sorted(pool, key=lambda h: model.up[h])
        return by_age[-count:][::-1] if selector.how == "newest" and count else by_age[:count]

    # -- one handler per verb ---------------------------------------------------------------------

    def start_hosts(self, t: float) -> None:
        """join, leave, crash, freeze, thaw: at once, or a count spread over the span."""
        model, statement, verb, line = self.model, self.statement, self.verb, self.line
        selector = statement.selector
        assert selector is not None
        # A percentage: of the hosts up (for join: of all the run's hosts, as
        # phases do); `k% of G`: of G's hosts up (for join: of all of G's hosts).
        scope = (
            model.members_of(selector.group, statement)
            if selector.group is not None
            else self.universe_names
        )
        base = len(scope) if verb == "join" else sum(1 for h in scope if h in model.up)
        count = model.how_many(selector.count, base) if selector.count is not None else None
        if statement.end is None or verb in ("freeze", "thaw"):
            hosts = self.select(t, verb, selector, count)
            self.apply_hosts(t, verb, hosts)
            if verb == "freeze" and statement.end is not None:
                end = statement.end

                def thaw(t: float, hosts: list[str] = hosts) -> None:
                    mine = [h for h in hosts if model.frozen.get(h) == self.token]
                    self.apply_hosts(t, "thaw", mine)

                self.later(end, line, thaw)
            return
        # A count spread over the span: each event picks its host when it happens.
        if selector.how == "group":
            hosts = self.select(t, verb, selector, None)
            steps = _spread(t, statement.end, len(hosts))
            for host, when in zip(hosts, steps, strict=True):
                self.later(when, line, lambda t, host=host: self.one(t, host))
            return
        assert count is not None
        single = Selector(selector.how, Count(1), selector.group)
        for when in _spread(t, statement.end, count):
            self.later(
                when, line, lambda t: self.apply_hosts(t, verb, self.select(t, verb, single, 1))
            )

    def start_churn(self, t: float) -> None:
        statement, model = self.statement, self.model
        share = statement.value
        assert share is not None
        if statement.end is None:
            count = math.floor(share * len(model.up) + 0.5)
            self.replace(t, count)
            return
        span = statement.end - t
        total = share * len(model.up) * (span / statement.period if statement.period else 1.0)
        for when in _spread(t, statement.end, math.floor(total + 0.5)):
            self.later(when, self.line, lambda t: self.replace(t, 1))

    def start_partition(self, t: float) -> None:
        statement, model, universe_names = self.statement, self.model, self.universe_names
        sides: list[list[str]] = []
        named = {
            h
            for g in statement.groups
            if isinstance(g, Group)
            for h in model.members_of(g, statement)
        }
        for side in statement.groups:
            if isinstance(side, Islands):  # k (%) of the hosts up, in small groups
                free = [h for h in model.up if h not in named and not any(h in s for s in sides)]
                count = model.how_many(side.count, len(model.up))
                if count > len(free) or count < side.smallest:
                    raise model.fail(
                        statement,
                        f"islands of {count} host(s) in all, but {len(free)} are up on no other "
                        f"side, and an island has at least {side.smallest}",
                    )
                chosen = self.rng.sample(free, count)
                while chosen:
                    size = self.rng.randint(side.smallest, side.largest)
                    if len(chosen) - size < side.smallest:
                        size = len(chosen)  # the rest, rather than an island too small
                    island, chosen = chosen[:size], chosen[size:]
                    sides.append(sorted(island, key=model.index.__getitem__))
                continue
            if isinstance(side, Selector):  # random k (%) of the hosts on no other side
                free = [
                    h for h in universe_names if h not in named and not any(h in s for s in sides)
                ]
                assert side.count is not None
                count = model.how_many(side.count, len(universe_names))
                if count > len(free):
                    raise model.fail(
                        statement,
                        f"{count} host(s) for a side, but only {len(free)} are on no other side",
                    )
                sides.append(sorted(self.rng.sample(free, count), key=model.index.__getitem__))
            else:
                sides.append(model.members_of(side, statement))
        for k, side in enumerate(sides, start=1):
            if not side:
                raise model.fail(statement, f"side {k} of the partition has no host")
        if len(sides) == 1 and len(sides[0]) == len(universe_names):
            raise model.fail(statement, "one side holding every host is no partition")
        seen: dict[str, int] = {}
        for k, side in enumerate(sides):
            for host in side:
                if host in seen and seen[host] != k:
                    raise model.fail(statement, f"{host} is on two sides of the partition")
                seen[host] = k
        self.emit(t, "partition", groups=tuple(tuple(s) for s in sides))
        if statement.end is not None:
            self.later(statement.end, self.line, lambda t: self.emit(t, "heal"))

    def start_heal(self, t: float) -> None:
        self.emit(t, "heal")

    def start_link(self, t: float) -> None:
        """latency and loss between groups (undone at the span's end)."""
        statement, verb = self.statement, self.verb
        groups = tuple(tuple(self.model.members_of(g, statement)) for g in statement.groups)
        self.emit(t, verb, groups=groups, value=statement.value)
        if statement.end is not None:
            undo = None if verb == "latency" else 0.0
            self.later(
                statement.end, self.line, lambda t: self.emit(t, verb, groups=groups, value=undo)
            )

    def start_shape(self, t: float) -> None:
        """bandwidth, access, reorder, duplicate (removed at the span's end)."""
        statement, verb = self.statement, self.verb
        groups = tuple(tuple(self.model.members_of(g, statement)) for g in statement.groups)
        params = {k: float(v) for k, v in statement.extra.items()}  # type: ignore[arg-type]
        self.emit(t, verb, groups=groups, value=statement.value, params=params)
        if statement.end is not None:
            undo_value = None if statement.value is None else 0.0
            self.later(
                statement.end,
                self.line,
                lambda t: self.emit(t, verb, groups=groups, value=undo_value),
            )

    def start_frame(self, t: float) -> None:
        statement, model = self.statement, self.model
        assert statement.value is not None
        before, model.frame = model.frame, int(statement.value)
        self.emit(t, "frame", value=statement.value)
        if statement.end is not None:

            def back(t: float) -> None:
                model.frame = before
                self.emit(t, "frame", value=float(before))

            self.later(statement.end, self.line, back)

    def start_flap(self, t: float) -> None:
        statement = self.statement
        groups = tuple(tuple(self.model.members_of(g, statement)) for g in statement.groups)
        assert statement.period is not None
        assert statement.end is not None
        k, when = 0, t
        while when < statement.end - 1e-9:
            self.emit(when, "cut" if k % 2 == 0 else "mend", groups=groups)
            k += 1
            when = t + k * statement.period
        if k % 2 == 1:
            self.emit(statement.end, "mend", groups=groups)

    def start_flood(self, t: float) -> None:
        """Each source host sends the rate to the targets (round robin) until the end."""
        statement, model = self.statement, self.model
        assert statement.end is not None
        sources, named = (tuple(model.members_of(g, statement)) for g in statement.groups)
        targets = tuple(h for h in named if h not in sources)  # a host does not flood itself
        if not targets:
            raise model.fail(statement, "the flood has no target but its own sources")
        for start, end, line, others in model.floods:
            busy = sorted(set(others) & set(sources), key=model.index.__getitem__)
            if busy and start < statement.end and t < end:
                raise model.fail(
                    statement,
                    f"{busy[0]} already floods from {_when(start)} to {_when(end)} (line {line})",
                )
        model.floods.append((t, statement.end, self.line, sources))
        params = {k: float(v) for k, v in statement.extra.items()}  # type: ignore[arg-type]
        groups = (sources, targets)
        self.emit(t, "flood", groups=groups, value=statement.value, params=params)
        self.later(
            statement.end,
            self.line,
            lambda t: self.emit(t, "flood", groups=groups, value=0.0, params=params),
        )

    def start_stop(self, t: float) -> None:
        self.emit(t, "stop")

    # -- steps scheduled for later ----------------------------------------------------------------

    def one(self, t: float, host: str) -> None:
        """One named host of a group spread over a span does the statement's verb."""
        model, verb = self.model, self.verb
        if host not in model.pool(verb):
            raise model.fail(
                self.statement, f"at {_when(t)} {host} cannot {verb}: {_state(model, host)}"
            )
        self.apply_hosts(t, verb, [host])

    def replace(self, t: float, count: int) -> None:
        """Churn: `count` random hosts up leave and as many idle ones join."""
        model, statement = self.model, self.statement
        if count == 0:
            return
        leavers = model.pool("leave")
        joiners = model.pool("join")
        if count > len(leavers):
            raise model.fail(
                statement, f"at {_when(t)} churn replaces {count} host(s) but {len(leavers)} are up"
            )
        if count > len(joiners):
            raise model.fail(
                statement,
                f"at {_when(t)} churn replaces {count} host(s) but only {len(joiners)} are idle "
                "to take their place (the topology needs more hosts than the run keeps up)",
            )
        out = sorted(self.rng.sample(leavers, count), key=model.index.__getitem__)
        new = sorted(self.rng.sample(joiners, count), key=model.index.__getitem__)
        self.apply_hosts(t, "leave", out)
        self.apply_hosts(t, "join", new)


# What a statement does at its start, by verb (a verb not listed does nothing).
_START: dict[str, Callable[[_Player, float], None]] = {
    "join": _Player.start_hosts,
    "leave": _Player.start_hosts,
    "crash": _Player.start_hosts,
    "freeze": _Player.start_hosts,
    "thaw": _Player.start_hosts,
    "restart": _Player.start_hosts,
    "churn": _Player.start_churn,
    "partition": _Player.start_partition,
    "heal": _Player.start_heal,
    "latency": _Player.start_link,
    "loss": _Player.start_link,
    "frame": _Player.start_frame,
    "bandwidth": _Player.start_shape,
    "access": _Player.start_shape,
    "reorder": _Player.start_shape,
    "duplicate": _Player.start_shape,
    "flap": _Player.start_flap,
    "flood": _Player.start_flood,
    "stop": _Player.start_stop,
}


def _spread(start: float, end: float, count: int) -> list[float]:
    if count <= 0:
        return []
    if count > MAX_EVENTS:
        raise _TooMany(count)
    step = (end - start) / count
    return [start + k * step for k in range(count)]


def _state(model: _Model, host: str) -> str:
    if host not in model.up:
        return "it is not up"
    if host in model.frozen:
        return "it is frozen"
    return "it is up"


def _pool_words(verb: str) -> str:
    return {
        "join": "hosts not up",
        "thaw": "frozen hosts",
        "crash": "hosts up",
        "restart": "hosts up",
    }.get(verb, "hosts up and not frozen")
