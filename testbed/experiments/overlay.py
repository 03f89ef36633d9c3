# Running an experiment spec on an engine, and what it leaves in the run folder.
#
# Theory of operation
#   The runner walks the spec's phases in order. A phase picks its hosts
#   (joiners among the hosts not running a member; leavers and crash victims
#   among the members, either at random or in groups of peers whose zones
#   are adjacent), spreads their events evenly over `over_s`, waits
#   `settle_s`, and then checks the CAN invariants on the state dumps of all
#   live peers. The engine does the rest through a handful of verbs (start,
#   join, leave, crash, advance, dumps), so the same spec runs in the
#   simulator and on real processes in the emulator.
#
#   With a churn script or trace instead of phases, the schedule it compiles
#   to is executed (testbed/churn/_execute.py) and the invariants are checked
#   after every quiet period; a check that fails names the events applied to
#   the peers involved since the last clean one.
#
# Run folder: spec.toml (as run, after --set), actions.jsonl (what the runner
# did, when), checks.jsonl (each invariant check), events.jsonl (sim) or
# peers/<host>.jsonl (emu), summary.json; with churn, schedule.jsonl and
# applied.jsonl (each action as applied, with its lateness).

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from node.can.geometry import abutment
from node.cluster.agent import ClusterConfig
from node.cluster.refine import gather
from node.peer import NodeConfig
from testbed.analysis.can_oracle import check_can, merge_reports
from testbed.analysis.cluster_oracle import check_clusters
from testbed.analysis.cluster_quality import cluster_quality
from testbed.analysis.stats import quantiles
from testbed.churn import Executor, Quiet, Schedule, Universe, schedule_for
from testbed.engines import Engine
from testbed.engines.peers import build_node_config, draw_point
from testbed.engines.sim import SimEngine
from testbed.errors import InputError
from testbed.experiments.overlay_jobs import Feeding, JobsRun
from testbed.experiments.predict import Noise, predict_dtm
from testbed.experiments.report import report_quietly
from testbed.experiments.run import Report, Run, RunResult
from testbed.spec import DtmTechnique, ExperimentSpec, NodeSpec, PhaseSpec, crash_repair_s
from testbed.topology import (
    PLANETLAB_FRAMES,
    Topology,
    load_topology,
    planetlab_frame,
    resolve_topology,
    sharcnet_grid,
)

__all__ = ["run_experiment"]


@dataclass
class _Check:
    t: float
    phase: str
    report: dict[str, Any]


def select_topology(spec: ExperimentSpec) -> Topology:
    """The hosts of an overlay experiment (`{seed}` in the ref is the run's seed)."""
    return resolve_topology(spec.topology, spec.seed)


def _adjacent_group(
    dumps: list[dict[str, Any]], size: int, rng: random.Random, exclude: set[str]
) -> list[str]:
    """`size` members whose zones form one connected patch (breadth-first from a random member)."""
    members = [d for d in dumps if d["status"] == "member" and d["lo"] and d["host"] not in exclude]
    if not members:
        return []
    start = members[rng.randrange(len(members))]
    group, frontier = [start], [start]
    while frontier and len(group) < size:
        current = frontier.pop(0)
        for other in members:
            if (
                other not in group
                and abutment(current["lo"], current["hi"], other["lo"], other["hi"]) is not None
            ):
                group.append(other)
                frontier.append(other)
                if len(group) >= size:
                    break
    return [d["host"] for d in group]


def run_experiment(
    spec: ExperimentSpec,
    data: dict[str, Any],
    *,
    out: str | Path | None = None,
    report: Report | None = None,
    make_engine: MakeEngine | None = None,
) -> RunResult:
    """Run an overlay spec: its phases or its churn, checking the CAN invariants after each
    (and the clusters, and the jobs, where the spec asks for them). The engine is chosen by
    spec.engine unless `make_engine` is given. Input errors (topology, churn script) are
    raised before anything starts; once the engine is up, an interrupted run still writes
    its summary (status "interrupted") and tears the engine down."""
    topology = select_topology(spec)
    names = [f"h{k + 1}" for k in range(topology.n)]
    schedule = churn_schedule(spec, topology, names)  # a bad script fails before anything starts
    frames = _frames_used(spec, topology, schedule)  # loaded now: switching must be quick
    with Run(spec.name, data, out) as run:
        overlay = _OverlayRun(spec, topology, names, run, report or Report(), make_engine)
        return overlay.execute(schedule, frames)


MakeEngine = Callable[[ExperimentSpec, Topology, NodeConfig, Path], Engine]


def _engine_for(spec: ExperimentSpec) -> MakeEngine:
    """The spec's engine. The emulator's is imported only for an emulated run: it loads
    Mininet and pyroute2, which a simulated run (and a machine without them) never needs."""
    if spec.engine == "sim":
        return SimEngine
    from testbed.engines.emu import EmuEngine

    return EmuEngine


class _OverlayRun:
    """One overlay run under way: the engine, the hosts that should be members, the checks
    made so far, and the optional clusters (`offers`) and jobs beside the overlay."""

    def __init__(
        self,
        spec: ExperimentSpec,
        topology: Topology,
        names: list[str],
        run: Run,
        report: Report,
        make_engine: MakeEngine | None,
    ) -> None:
        self.spec, self.topology, self.names, self.run, self.report = (
            spec,
            topology,
            names,
            run,
            report,
        )
        self.jobs = JobsRun(spec, topology, names, run.dir) if spec.jobs is not None else None
        jobs = self.jobs
        self.config = build_node_config(
            spec.node,
            spec.clusters,
            space=jobs.space if jobs is not None else None,
            sched=jobs.sched_config() if jobs is not None else None,
        )
        engine = (make_engine or _engine_for(spec))(spec, topology, self.config, run.dir)
        if jobs is not None:
            # submits the trace's jobs as time passes; on Kim's grid, meters DLB's messages
            engine = Feeding(engine, jobs.client, jobs.meter)
        self.engine: Engine = engine
        self.host_of = {name: k for k, name in enumerate(names)}
        self.rng = random.Random(f"{spec.seed}/runner")
        self.point_rng = random.Random(f"{spec.seed}/points")
        self.actions = run.log("actions.jsonl")
        self.checks_log = run.log("checks.jsonl")
        self.expected: set[int] = set()  # hosts that should be members
        self.checks: list[_Check] = []
        self.executor: Executor | None = None  # with a churn schedule
        self.churn_summary: dict[str, Any] | None = None  # what the executor did
        agents = self.config.cluster
        self.offers = _Offers(spec, topology, engine, agents) if agents is not None else None
        self.last_clusters: dict[str, Any] = {}  # DYN and DYN-SYM at the last check
        self.joined_at: dict[int, float] = {}  # churn joins: when each host last joined

    def execute(self, schedule: Schedule | None, frames: dict[int, np.ndarray]) -> RunResult:
        """Churn, then phases, then the jobs' drain; the summary is written however it ends."""
        wall0 = time.monotonic()
        status = "interrupted"
        engine_summary: dict[str, Any] = {}
        try:
            if schedule is not None:
                self._run_churn(schedule, frames)
            self._run_phases()
            if self.jobs is not None:
                assert isinstance(self.engine, Feeding)
                self.jobs.drain(self.engine, self.report.say)
            engine_summary = self.engine.finish()
            status = "complete"
        finally:
            if status != "complete":
                try:
                    engine_summary = self.engine.unfinished()
                except Exception as exc:  # must not hide the error that ended the run
                    engine_summary = {"unfinished_error": f"{type(exc).__name__}: {exc}"}
            self.run.teardown(self.engine.close)
            self.actions.close()
            self.checks_log.close()
            result = self.run.finish(self._summary(status, wall0, engine_summary))
            if self.spec.engine == "emu":  # timeline.png and report.html beside the summary
                problem = report_quietly(self.run.dir)
                if problem:
                    self.report.say(f"no report: {problem}")
        self.run.raise_teardown_error()
        return result

    # -- the two ways a run goes ----------------------------------------------------------------

    def _run_churn(self, schedule: Schedule, frames: dict[int, np.ndarray]) -> None:
        """Execute a churn schedule, checking after every quiet period."""
        (self.run.dir / "schedule.jsonl").write_text(schedule.to_jsonl())
        churn = self.spec.churn
        assert churn is not None
        node = self.spec.node
        room = schedule.room_warnings(
            churn.settle_s, node.propose_timeout_s, crash_s=crash_repair_s(node)
        )
        for warning in room:
            self.report.say(f"warning: {schedule.source}: {warning}")
        applied = self.run.log("applied.jsonl")
        offers = self.offers
        executor = self.executor = Executor(
            schedule,
            self.engine,
            self.names,
            self.topology.one_way_ms() / 1e3,
            join=self._join,
            frames=frames,
            log=applied,
            on_change=None
            if offers is None
            else lambda host: offers.changed(host, executor.expected),
        )
        self.expected = executor.expected
        try:
            executor.run(churn.settle_s, self._quiet, wait_max_s=churn.settle_wait_max_s)
        finally:
            applied.close()
            self.churn_summary = executor.summary()

    def _run_phases(self) -> None:
        """Each phase: its hosts act at their times, then it settles and is checked."""
        spec, engine, jobs = self.spec, self.engine, self.jobs
        for number, phase in enumerate(spec.phases):
            label = phase.name or f"{number}-{phase.action}"
            hosts = _choose(
                phase, engine, self.expected, self.topology.n, self.rng, self.names, self.host_of
            )
            times = _schedule(phase, len(hosts), engine.now)
            points = _points(phase, len(hosts), spec.node, self.point_rng)
            if jobs is not None and phase.action == "join":
                points = [self._point_of(h) for h in hosts]
            for host, when, point in zip(hosts, times, points, strict=True):
                engine.advance(when)
                _act(phase.action, host, engine, self.expected, self.rng, point)
                if jobs is not None and phase.action == "join":
                    jobs.joined(engine, host)
                if self.offers is not None:
                    self.offers.changed(host, self.expected)
                self.actions.write(
                    phase.action, sim_t=round(engine.now, 6), host=self.names[host], phase=label
                )
            # settle_s of quiet after the last action as it was applied, not as it was
            # due: on a loaded machine starting the peers can run late (by 15 s under two
            # test suites), and a check at the planned time found the last joiners still
            # joining. In the simulator an action takes no time: the same instant.
            engine.advance(max(times[-1] if times else engine.now, engine.now) + phase.settle_s)
            self._check(label, number)

    # -- churn's callbacks ----------------------------------------------------------------------

    def _join(self, host: int) -> None:
        # Bootstraps among the hosts that should be members (asking the peers who is one
        # costs the emulator a round trip to each), those that joined a join timeout ago
        # first: a joiner whose bootstraps are all still joining themselves retries them for
        # ever.
        engine = self.engine
        now = engine.now
        settled = now - self.spec.node.join_timeout_s
        others = sorted(self.expected - {host})
        sides = None if self.executor is None else self.executor.sides
        side = next((side for side in sides or () if host in side), None)
        if side is not None:  # as an operator would: bootstraps the joiner can reach
            others = [h for h in others if h in side]
        old = [h for h in others if self.joined_at.get(h, now) <= settled]
        pool = old if len(old) >= 5 else others
        engine.start(host, self._point_of(host))
        engine.join(host, self.rng.sample(pool, min(5, len(pool))))
        self.joined_at[host] = now
        if self.jobs is not None:
            self.jobs.joined(engine, host)
        if self.offers is not None:
            self.offers.changed(host, self.expected | {host})

    def _quiet(self, at: Quiet) -> None:
        executor = self.executor
        assert executor is not None
        extra = {
            "quiet_s": at.quiet_s,
            "settled": at.settled,
            "departing": [self.names[h] for h in at.departing],
            "settle_wait_s": at.settle_wait_s,
        }
        label = f"quiet@{at.t:.1f}s"
        if not self._check(label, len(self.checks), executor.frozen, extra)["violations"]:
            executor.recent.clear()

    # -- checks and summary ---------------------------------------------------------------------

    def _point_of(self, host: int) -> tuple[float, ...]:
        if self.jobs is not None:
            return self.jobs.point(host, self.point_rng)
        return draw_point(self.spec.node, self.point_rng)

    def _one_way_s(self) -> np.ndarray:
        """The latencies now: the churn's current matrix, or the topology's."""
        if self.executor is not None:
            return self.executor.current
        return self.topology.one_way_ms() / 1e3

    def _check(
        self,
        label: str,
        number: int,
        skip: frozenset[int] | set[int] = frozenset(),
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Check the invariants on every live peer's dump; log, keep and report the result."""
        engine, names = self.engine, self.names
        dumps = engine.dumps()
        if skip:  # frozen peers answer nothing real (the emulator does not ask them)
            dumps = [d for d in dumps if self.host_of[d["host"]] not in skip]
        sides = None if self.executor is None else self.executor.sides
        if sides:
            # During a partition each side is an overlay of its own, if it is not too small
            # to rebuild the space alone (docs/churn.md, "Checks during a partition").
            least = max(1, math.ceil(PARTITION_CHECK_SHARE * len(self.expected)))
            size = {k: len(side & self.expected) for k, side in enumerate(sides)}
            extra = {
                **(extra or {}),
                "sides": [size[k] for k in range(len(sides))],
                "sides_unchecked": sum(1 for k in size if size[k] < least),
            }
            sides = [side for k, side in enumerate(sides) if size[k] >= least]
        report = merge_reports(
            [
                check_can(
                    self.config.can.space,
                    [d for d in dumps if side is None or self.host_of[d["host"]] in side],
                    expected_members=[
                        names[h] for h in sorted(self.expected) if side is None or h in side
                    ],
                    routes=max(1, self.spec.routes_checked * len(side) // self.topology.n)
                    if side is not None
                    else self.spec.routes_checked,
                    seed=self.spec.seed + number,
                    hosts_of=lambda ids: {i: names[h] for i, h in engine.hosts_of(ids).items()},
                )
                for side in (sides or [None])
            ]
        )
        if self.offers is not None:
            one_way = self._one_way_s()
            rtt_ms = (one_way + one_way.T) * 1e3
            report.violations.extend(
                self.offers.check(dumps, rtt_ms, names, {names[h] for h in skip})
            )
            extra = {**(extra or {}), **self.offers.figures(dumps, (extra or {}).get("quiet_s"))}
            self.last_clusters.clear()
            self.last_clusters.update(self.offers.quality(dumps, rtt_ms, names))
        result = {"phase": label, "t": round(engine.now, 3), **(extra or {}), **report.to_dict()}
        resources = engine.resources()
        if resources is not None:
            result["resources"] = resources
        if self.executor is not None and report.violations:
            # What happened since the last clean check to the peers involved (and the network).
            result["events"] = self.executor.involved(
                {p for v in report.violations for p in v.peers}
            )
        self.checks.append(_Check(engine.now, label, result))
        self.checks_log.write("check", **result)
        self.report.phase(label, result)
        return result

    def _summary(self, status: str, wall0: float, engine_summary: dict[str, Any]) -> dict[str, Any]:
        jobs_summary: dict[str, Any] = {}
        if self.jobs is not None:
            try:
                jobs_summary = self.jobs.results()
            except Exception as exc:  # a half-run's results must not hide its error
                jobs_summary = {"jobs_error": f"{type(exc).__name__}: {exc}"}
        checks, spec = self.checks, self.spec
        churn = self.churn_summary
        engine_summary = dict(engine_summary)
        merges = engine_summary.pop("merges", [])
        heals = [] if self.executor is None else self.executor.heals
        cuts = [] if self.executor is None else self.executor.cuts
        return {
            "name": spec.name,
            "engine": spec.engine,
            "status": status,
            "seed": spec.seed,
            "hosts": self.topology.n,
            "topology": self.topology.source,
            "invariants": {
                "violations": sum(c.report["violations"] for c in checks),
                "checked_at": [round(c.t, 3) for c in checks],
                "by_check": [c.report for c in checks],
            },
            "members_final": checks[-1].report["members"] if checks else 0,
            **({"churn": churn} if churn is not None else {}),
            "merges": {
                "peers": len(merges),
                "not_rejoined": sum(1 for _, rejoined in merges if rejoined is None),
            },
            **(
                {"partitions": _partitions(cuts, heals, merges, [c.t for c in checks])}
                if heals
                else {}
            ),
            **({"clusters": self.last_clusters} if self.last_clusters else {}),
            **jobs_summary,
            "wall_s": round(time.monotonic() - wall0, 3),
            **engine_summary,
        }


# During a partition, a side is checked as an overlay of its own if it holds at least this
# share of the peers that should be members.
PARTITION_CHECK_SHARE = 0.1


def _partitions(
    cuts: list[float],
    heals: list[float],
    merges: list[list[float | None]],
    checked_at: list[float],
) -> dict[str, Any]:
    """Each heal's time to one overlay: until the last peer whose overlay dissolved, from
    the partition's start to the first check after the heal, had rejoined (0 when no
    overlay had to dissolve: the partition was too short to split it); None if one never
    rejoined. A merge inside a side while it is cut off (an island's peers that each took
    the rest of the space) belongs to the partition it happened in; one after the check
    (a frozen peer that wakes up cut off from the root, say) to none."""
    values: list[float | None] = []
    for heal in heals:
        since = max((cut for cut in cuts if cut <= heal), default=heal)
        until = min(
            min((cut for cut in cuts if cut > heal), default=math.inf),
            min((t for t in checked_at if t > heal), default=math.inf),
        )
        mine = [m for m in merges if m[0] is not None and since <= m[0] < until]
        if any(rejoined is None for _, rejoined in mine):
            values.append(None)
        else:
            values.append(
                round(max((max(0.0, r - heal) for _, r in mine if r is not None), default=0.0), 3)
            )
    done = [v for v in values if v is not None]
    return {
        "healed": len(heals),
        "heal_to_one_s": quantiles(done) | {"values": values},
        "never_one": sum(1 for v in values if v is None),
    }


def churn_schedule(spec: ExperimentSpec, topology: Topology, names: list[str]) -> Schedule | None:
    """The run's churn as a schedule (compiled with the run's seed), or None."""
    churn = spec.churn
    if churn is None:
        return None
    frames, frame = _frames(spec)
    labels = list(topology.labels) if topology.labels else [{} for _ in names]
    universe = Universe(names, labels, frames=frames, frame=frame)
    schedule = schedule_for(churn.script, churn.trace, churn.trace_down, universe, spec.seed)
    if spec.engine == "sim":
        for event in schedule.events:
            if event.verb in EMULATOR_ONLY_VERBS:
                raise InputError(
                    f'`set {event.verb}` needs the emulator (engine = "emu"): the simulator '
                    "models delay, jitter, loss, partitions and reordering, not bandwidth or "
                    "duplication",
                    source=schedule.source,
                    line=event.line,
                )
    return schedule


# Churn verbs the simulator does not model.
EMULATOR_ONLY_VERBS = ("bandwidth", "access", "duplicate")


def _ref(spec: ExperimentSpec) -> str:
    """The run's topology reference, `{seed}` replaced (as resolve_topology does)."""
    return spec.topology.ref.replace("{seed}", str(spec.seed))


def _frames(spec: ExperimentSpec) -> tuple[int | None, int]:
    """How many matrix frames the topology has, and the one the run starts on."""
    ref = _ref(spec)
    name, _, arg = ref.partition(":")
    if Path(ref).exists():
        return None, 1
    if name == "planetlab":
        return len(PLANETLAB_FRAMES), int(arg) if arg.isdigit() else 1
    if name == "sharcnet":  # its inter-cluster latencies come from PlanetLab frame 1
        return len(PLANETLAB_FRAMES), 1
    return None, 1


def _frames_used(
    spec: ExperimentSpec, topology: Topology, schedule: Schedule | None
) -> dict[int, np.ndarray]:
    """The one-way delays (s) of every matrix frame the schedule switches to."""
    events = schedule.events if schedule is not None else []
    wanted = sorted({int(e.value) for e in events if e.verb == "frame" and e.value is not None})
    name, _, arg = _ref(spec).partition(":")
    out = {}
    for frame in wanted:
        if name == "sharcnet":  # the same grid (seed), inter-cluster latencies of that frame
            whole = sharcnet_grid(planetlab_frame(frame), seed=int(arg) if arg else 1)
        else:
            whole = load_topology(f"planetlab:{frame}")
        new = whole.select(hosts=list(topology.names))
        out[frame] = new.scaled(spec.topology.scale).one_way_ms() / 1e3
    return out


def _choose(
    phase: PhaseSpec,
    engine: Engine,
    expected: set[int],
    n: int,
    rng: random.Random,
    names: list[str],
    host_of: dict[str, int],
) -> list[int]:
    if phase.action == "join":
        idle = [h for h in range(n) if h not in expected]
        count = phase.count if phase.count is not None else round(phase.fraction * n)
        return idle[:count] if not expected else rng.sample(idle, min(count, len(idle)))
    members = sorted(expected)
    count = phase.count if phase.count is not None else round(phase.fraction * len(members))
    count = min(count, len(members))
    if phase.burst <= 0:
        return rng.sample(members, count)
    chosen: list[int] = []
    dumps = engine.dumps()
    while len(chosen) < count:
        group = _adjacent_group(
            dumps, min(phase.burst, count - len(chosen)), rng, {names[h] for h in chosen}
        )
        group_hosts = [
            host_of[g] for g in group if host_of[g] in expected and host_of[g] not in chosen
        ]
        if not group_hosts:
            break
        chosen.extend(group_hosts)
    return chosen[:count]


def _schedule(phase: PhaseSpec, count: int, now: float) -> list[float]:
    if count == 0:
        return []
    if phase.burst > 0:
        # Each group at once (50 ms apart inside it); groups spread over over_s.
        groups = (count + phase.burst - 1) // phase.burst
        step = phase.over_s / groups if groups > 1 else 0.0
        return [now + (k // phase.burst) * step + (k % phase.burst) * 0.05 for k in range(count)]
    step = phase.over_s / count
    return [now + k * step for k in range(count)]


def _points(
    phase: PhaseSpec, count: int, node: NodeSpec, rng: random.Random
) -> list[tuple[float, ...] | None]:
    """Joiners' points. In a join burst each group shares its capabilities and
    has virtual coordinates within 1 % of each other, so that its members
    land in the same or adjacent zones at the same moment."""
    if phase.action != "join":
        return [None] * count
    if phase.burst <= 0:
        return [draw_point(node, rng) for _ in range(count)]
    points: list[tuple[float, ...] | None] = []
    for k in range(count):
        if k % phase.burst == 0:
            base = draw_point(node, rng)
        point = list(base)
        for i, d in enumerate(node.dimensions):
            if d.virtual:
                width = (d.hi - d.lo) * 0.01
                start = min(base[i], d.hi - width)
                point[i] = rng.uniform(start, start + width)
        points.append(tuple(point))
    return points


def _act(
    action: str,
    host: int,
    engine: Engine,
    expected: set[int],
    rng: random.Random,
    point: tuple[float, ...] | None,
) -> None:
    if action == "join":
        assert point is not None
        members = engine.members()
        engine.start(host, point)
        # A few live members to try (a joiner picks one at random each attempt).
        bootstraps = rng.sample(members, min(5, len(members)))
        if not bootstraps and expected:
            bootstraps = [min(expected)]  # members still joining: wait for the first
        engine.join(host, bootstraps)
        expected.add(host)
    elif action == "leave":
        engine.leave(host)
        expected.discard(host)
    else:
        engine.crash(host)
        expected.discard(host)


class _Offers:
    """The first approximation of every peer's cluster (seed 002 §5.1): DTM's
    predictions for the whole grid, made once; as peers come and go, each
    running peer near a change is offered the running peers predicted near it
    (testbed-side: the prediction issue measured DTM on real pings; here the
    refinement is what runs on the network)."""

    def __init__(
        self, spec: ExperimentSpec, topology: Topology, engine: Engine, agents: ClusterConfig
    ) -> None:
        assert spec.clusters is not None
        self.c = spec.clusters
        self.memberships = agents.max_memberships  # M, as the agents have it
        self.engine = engine
        rtt = np.asarray(topology.rtt_ms, dtype=np.float64)
        self.predicted, _ = predict_dtm(
            (rtt + rtt.T) / 2, DtmTechnique(trees=self.c.trees, tolerance=0.0), spec.seed, Noise()
        )
        self.host_at = {engine.address_of(k): k for k in range(topology.n)}  # peer address -> host
        self.offered: dict[int, list[int]] = {}
        self.sent = 0  # offers made (control requests in the emulator)

    def changed(self, host: int, running: set[int]) -> None:
        """`host` came or went; `running` are the hosts that should be members now."""
        live = sorted(running)
        near = set(np.flatnonzero(self.predicted[host] <= self.c.diameter_ms).tolist())
        affected = [h for h in live if h in near or h == host]
        if not live or not affected:
            return
        sub = self.predicted[np.ix_(live, live)]
        at = {h: k for k, h in enumerate(live)}
        limit = self.c.aggregate * self.c.size - 1
        for h in affected:
            offer = [live[k] for k in gather(sub, at[h], self.c.diameter_ms, limit)]
            if offer != self.offered.get(h) or h == host:  # (a thawed peer missed its offers)
                self.offered[h] = offer
                self.engine.set_cluster_candidates(h, offer)
                self.sent += 1

    def figures(self, dumps: list[dict[str, Any]], quiet_s: float | None) -> dict[str, Any]:
        """Cluster figures of a check: sizes, and how long after the last event
        the last peer's clusters changed (`reformed_s`, for a quiet check)."""
        states = [d["cluster"] for d in dumps if "cluster" in d]
        unchanged = [s["unchanged_s"] for s in states if "unchanged_s" in s]
        out: dict[str, Any] = {
            "clusters": {
                "own_size": quantiles([len(s["own"]) for s in states]),
                "advertised_size": quantiles([len(s["advertised"]) for s in states]),
                "offers": self.sent,
            }
        }
        if quiet_s is not None and unchanged:
            out["clusters"]["reformed_s"] = round(max(0.0, quiet_s - min(unchanged)), 3)
        return out

    def quality(
        self, dumps: list[dict[str, Any]], rtt_ms: np.ndarray, names: list[str]
    ) -> dict[str, Any]:
        """DYN and DYN-SYM as the running peers have them, judged against `rtt_ms`
        (the figures of a cluster spec's summary)."""
        index = self.host_at
        out = {}
        for key, which in (("DYN", "own"), ("DYN-SYM", "advertised")):
            clusters: list[tuple[int, ...]] = [() for _ in names]  # not running: nothing
            for d in dumps:
                if "cluster" in d:
                    members = (index[tuple(a)] for a in d["cluster"][which] if tuple(a) in index)
                    clusters[index[tuple(d["address"])]] = tuple(members)
            figures = cluster_quality(
                clusters,
                rtt_ms,
                self.c.diameter_ms,
                max_size=self.c.size,
                max_memberships=self.memberships,
            )
            out[key] = {k: v for k, v in figures.items() if k != "violations"}
        return out

    def check(
        self, dumps: list[dict[str, Any]], rtt_ms: np.ndarray, names: list[str], frozen: set[str]
    ) -> list[Any]:
        index = {name: k for k, name in enumerate(names)}
        hosts = {address: names[k] for address, k in self.host_at.items()}
        return check_clusters(
            dumps,
            rtt_ms,
            index,
            hosts,
            diameter_ms=self.c.diameter_ms,
            size=self.c.size,
            memberships=self.memberships,
            frozen=frozen,
        )


def load_checks(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "checks.jsonl").read_text().splitlines()]
