# Jobs in overlay runs: the grid's user. A spec with [jobs] has every peer run
# the scheduler (node/sched/agent.py); the testbed submits a trace's jobs at
# their times, each through a random live peer, and judges the outcome.
#
# Theory of operation
#   The client is bookkeeping with no clock of its own: the runner's engine
#   wrapper (Feeding) advances the engine in steps of at most POLL_S, and after
#   each step hands the client the peers' new job records and the hosts that
#   are alive (with their incarnation, so a host that crashed and came back is
#   a new peer). From the records it follows each job's current entry (the
#   peer it was submitted to, or the one that adopted it when that peer left)
#   and its outcome. The first completed run completes the job (the run
#   node's job_finished: seed 000 §2.1, "the run node returns the results
#   directly to the client"); a failure is the entry's job_ended, after its
#   own retries; a second job_ended would be a duplicate, counted (it must
#   never happen). A job whose entry is gone -- crashed, or left without
#   handing it over -- is submitted again through another live peer (seed 000
#   §2.1: "the client must resubmit the job"), unless one of its attempts is
#   running: that run goes on to its end and reports it, and only if it fails
#   or its node goes too is the job submitted again. The client waits
#   `grace_s` before it submits again: a representative that has not noticed
#   the entry's silence yet may still start the waiting attempt (the client
#   then follows that run), and after grace_s every such attempt has started
#   or been dropped, so the job does not run twice; with owner_recovery =
#   "reroute", grace_s is longer by the time a representative spends routing
#   a waiting attempt to a new owner, and a job adopted so (job_adopted) is
#   followed there and not submitted again. Nothing else is ever retried by
#   the client.
#
#   At the end every job is completed, failed with the reason its entry gave,
#   still running (a run of it started on a peer that is alive, and its run
#   time is not over: the run ended first), waiting (a live peer still holds
#   an attempt of it, queued: the run ended first), or lost (no outcome when
#   the run ended and nothing of it going on; there must be none). Bounded
#   slowdown counts in trace seconds: the wait from the trace's submission
#   time to the start of the run that completed, over max(run time, 10 s),
#   both divided by the workload's runtime_scale.
#
# Run folder: jobs.jsonl (one line per job, at the end), and in summary.json
# `jobs.{submitted, completed, failed, lost, running_at_end, waiting_at_end, resubmitted,
# duplicates, executed_twice, utilisation}`, `slowdown.<engine>/<clustering>` and, for reference, the
# idealised central FCFS scheduler on the same trace and clusters.

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import numpy as np

from node.can.geometry import Dimension, Space
from node.cluster import static_clustering
from node.sched.agent import SchedConfig
from node.wire import JobInfo
from testbed.analysis.slowdown import BOUND_S, bounded_slowdown, plot_slowdown, slowdown_stats
from testbed.analysis.stats import quantiles
from testbed.errors import InputError
from testbed.models.central import central_fcfs
from testbed.models.kim_central import kim_central
from testbed.models.kim_rnt import kim_rnt
from testbed.spec import config_fields
from testbed.workload import (
    RESOURCES,
    KimJob,
    Workload,
    describe,
    kim_jobs,
    kim_nodes,
    ladder_top,
    prepare_workload,
    read_kim_jobs,
    read_kim_nodes,
)

__all__ = [
    "Feeding",
    "JobClient",
    "JobEngine",
    "cluster_point",
    "job_points",
    "jobs_from_workload",
]

POLL_S = 1.0  # the client looks at the peers' records at least this often (run time)
ENDED_KINDS = ("job_submitted", "job_adopted", "job_ended", "job_finished", "job_started")


class JobEngine(Protocol):
    """What the client needs from an engine, besides advance()."""

    now: float

    def submit(self, host: int, job: JobInfo) -> bool: ...  # False: the peer is not there
    def job_records(self) -> list[dict[str, Any]]: ...  # new job_* records ("host": index)
    def live(self) -> dict[int, int]: ...  # running peers: host -> incarnation
    def advance(self, until: float) -> None: ...


def cluster_point(size: int, diameter_ms: float) -> tuple[float, float]:
    """A node's resource coordinates (seed 002 §4.2): its cluster's size and
    inverse latency (1 / the diameter in ms); a singleton: size 1, inverse latency 0."""
    if size <= 1 or diameter_ms <= 0:
        return (1.0, 0.0)
    return (float(size), 1.0 / diameter_ms)


def job_points(clusters: Sequence[Sequence[int]], rtt_ms: np.ndarray) -> list[tuple[float, float]]:
    """Every node's (size, inverse latency) from its cluster, judged by the slower
    way of every pair (the clusters' diameter by the matrix)."""
    latency = np.maximum(rtt_ms, rtt_ms.T)
    out = []
    for cluster in clusters:
        members = list(cluster)
        diameter = float(latency[np.ix_(members, members)].max()) if len(members) > 1 else 0.0
        out.append(cluster_point(len(members), diameter))
    return out


@dataclass
class _Job:
    info: JobInfo
    submit_t: float  # when the trace submits it (run time)
    entry: tuple[int, int] | None = None  # (host, incarnation)
    entries: list[str] = field(default_factory=list)  # hosts it was submitted to, in order
    first_t: float | None = None  # the client's first submission
    end_t: float | None = None
    ok: bool | None = None
    reason: str = ""
    run_s: float = 0.0
    attempts: int = 0
    reports: int = 0  # job_ended records (more than one is a duplicate)
    runs_ok: int = 0  # job_finished ok records: completed executions
    running: tuple[int, int, int] | None = None  # (host, incarnation, attempt) of a started run
    started_t: float = 0.0  # when that run started
    ran_on: int | None = None  # the host of the run that completed the job
    orphan: bool = False  # its entry is gone; waiting for the running attempt's own report
    again_at: float | None = None  # its entry is gone and no run started: submit again then


class JobClient:
    """Submits jobs at their times, follows them, submits again when an entry is lost."""

    def __init__(
        self,
        jobs: Sequence[tuple[float, JobInfo]],
        names: Sequence[str],
        *,
        seed: int,
        runtime_scale: float = 1.0,
        grace_s: float = 0.0,
        run_time: Callable[[JobInfo, int], float] | None = None,
    ) -> None:
        """grace_s: how long after an entry is lost a job of it that has not
        started is submitted again (long enough for its representatives to
        notice and drop a waiting attempt). run_time(job, host): how long the
        job runs on a host (default its runtime_s anywhere)."""
        if len({info.id for _, info in jobs}) != len(jobs):
            raise ValueError("job ids must be unique")
        self.grace_s = grace_s
        self.jobs = {info.id: _Job(info, t) for t, info in sorted(jobs, key=lambda j: j[0])}
        self._due = sorted(self.jobs.values(), key=lambda j: (j.submit_t, j.info.id))
        self._next = 0
        self.names = list(names)
        self.rng = random.Random(f"{seed}/jobs")
        self.runtime_scale = runtime_scale
        self.run_time = run_time or (lambda info, host: info.runtime_s)
        self.resubmitted = 0
        self.moved: Counter[int] = Counter()  # jobs each host moved away (DLB, QB, PULL, PUSH)
        self.waiting: set[int] = set()  # jobs a live peer still held when the run ended
        self.refused = 0  # submissions a peer did not take (gone meanwhile): tried elsewhere
        self._live: dict[int, int] = {}
        self._now = 0.0  # the engine's time at the last step
        self._waiting: list[_Job] = []  # to submit again, when a peer takes them

    # -- what the wrapper asks ----------------------------------------------------------------

    def next_due(self) -> float | None:
        return self._due[self._next].submit_t if self._next < len(self._due) else None

    def open_jobs(self) -> int:
        """Submitted and without an outcome yet."""
        return sum(1 for j in self.jobs.values() if j.ok is None and j.first_t is not None)

    def step(self, engine: JobEngine) -> None:
        """After the engine advanced: read the records, notice lost entries,
        submit what is due."""
        self._now = engine.now
        for record in engine.job_records():
            self._record(record)
        live = engine.live()
        gone = {(h, inc) for h, inc in self._live.items() if live.get(h) != inc}
        self._live = dict(live)
        for job in self.jobs.values():
            if job.ok is not None:
                continue
            run_lost = job.running is not None and job.running[:2] in gone
            if job.entry is not None and job.entry in gone:
                job.entry, job.orphan = None, True  # a run reports to us when it ends
                if job.running is None or run_lost:
                    job.running, job.again_at = None, engine.now + self.grace_s
            elif job.orphan and run_lost:
                self._again(job)
            if job.again_at is not None and job.again_at <= engine.now:
                self._again(job)
        # Resubmissions first (they are older), then what the trace submits now;
        # with no live peer taking them they wait for the next step.
        self._waiting = [job for job in self._waiting if not self._submit(job, engine)]
        while self._next < len(self._due) and self._due[self._next].submit_t <= engine.now:
            if not self._submit(self._due[self._next], engine):
                break
            self._next += 1

    def _again(self, job: _Job) -> None:
        """Submit the job again (its entry is gone with it)."""
        self.resubmitted += 1
        job.entry, job.running, job.orphan, job.again_at = None, None, False, None
        self._waiting.append(job)

    def _submit(self, job: _Job, engine: JobEngine) -> bool:
        hosts = sorted(self._live)
        self.rng.shuffle(hosts)
        for host in hosts:
            if engine.submit(host, job.info):
                job.entry = (host, self._live[host])
                job.entries.append(self.names[host])
                if job.first_t is None:
                    job.first_t = engine.now
                return True
            self.refused += 1
        return False

    def _record(self, record: Mapping[str, Any]) -> None:
        job = self.jobs.get(record.get("job"))  # type: ignore[arg-type]
        if job is None:
            return  # not one of ours (or malformed)
        kind, host = record["kind"], record["host"]
        if kind == "job_moved":
            self.moved[host] += 1  # a migration: one message (DLB's overhead, DlbMeter)
        elif kind == "job_adopted":
            # A leaving entry's hand-over, or an attempt of a lost entry that its
            # representative rerouted to a new owner: follow that entry.
            job.entry = (host, self._live.get(host, -1))
            job.orphan, job.again_at = False, None
        elif kind == "job_started":
            job.running = (host, self._live.get(host, -1), int(record["attempt"]))
            job.started_t = float(record["t"])
            job.again_at = None  # an attempt of a lost entry started after all: follow it
        elif kind == "job_finished":
            # The run we follow, wherever it ended: DLB or QB may have moved
            # the attempt to another representative after it started once.
            mine = job.running is not None and job.running[2] == record["attempt"]
            if mine:
                job.running = None
            if record.get("ok"):
                # The run node's report comes straight to the client (seed 000
                # §2.1): the first completed run completes the job.
                job.runs_ok += 1
                if job.ok is None:
                    job.ran_on = host
                    self._outcome(job, True, "", float(record["t"]), float(record["run_s"]))
            elif mine and job.orphan and job.ok is None:
                self._again(job)
        elif kind == "job_ended":
            job.reports += 1
            if job.ok is None:
                self._outcome(
                    job,
                    bool(record["ok"]),
                    str(record.get("reason", "")),
                    float(record["t"]),
                    float(record.get("run_s", 0.0)),
                )
            job.attempts = int(record.get("attempts", 0))

    def _outcome(self, job: _Job, ok: bool, reason: str, t: float, run_s: float) -> None:
        job.ok, job.reason, job.end_t, job.run_s = ok, reason, t, run_s
        if job in self._waiting:
            self._waiting.remove(job)

    # -- results ---------------------------------------------------------------------------------

    def results(self) -> list[dict[str, Any]]:
        """One row per job (for jobs.jsonl)."""
        rows = []
        for job in sorted(self.jobs.values(), key=lambda j: j.info.id):
            row: dict[str, Any] = {
                "job": job.info.id,
                "size": job.info.size,
                "submit_t": round(job.submit_t, 3),
                "entries": job.entries,
                "outcome": self._outcome_of(job),
            }
            if job.ok is not None and job.end_t is not None:
                row |= {"end_t": round(job.end_t, 3), "attempts": job.attempts}
            if job.ok:
                row |= {"run_s": round(job.run_s, 3), "wait_s": round(self.wait_of(job), 3)}
                if job.ran_on is not None:
                    row["ran_on"] = self.names[job.ran_on]
                row["slowdown"] = round(self._slowdown(job), 4)
            elif job.ok is False:
                row["reason"] = job.reason
            if job.reports > 1:
                row["reports"] = job.reports
            rows.append(row)
        return rows

    def _outcome_of(self, job: _Job) -> str:
        if job.ok is not None:
            return "completed" if job.ok else "failed"
        if self._still_running(job):
            return "running"
        return "waiting" if job.info.id in self.waiting else "lost"

    def note_waiting(self, dumps: Sequence[Mapping[str, Any]]) -> None:
        """At the end: the jobs an attempt of which a live peer still holds, not
        finished (queued, or co-scheduling): waiting when the run ended, not lost."""
        for dump in dumps:
            for held in dump.get("sched", {}).get("represented", []):
                job, _, state = held.partition(":")
                if state != "finished":
                    self.waiting.add(int(job.split("/")[0]))

    def _still_running(self, job: _Job) -> bool:
        """A run of the job started on a peer that is still there, and its run
        time is not over yet (the run ended before it could)."""
        if job.ok is not None or job.running is None:
            return False
        host, incarnation, _ = job.running
        alive = self._live.get(host) == incarnation
        return alive and job.started_t + self.run_time(job.info, host) > self._now

    def wait_of(self, job: _Job) -> float:
        """From the trace's submission to the start of the run that completed."""
        assert job.end_t is not None
        return max(0.0, job.end_t - job.submit_t - job.run_s)

    def _slowdown(self, job: _Job) -> float:
        scale = self.runtime_scale
        return bounded_slowdown(self.wait_of(job) / scale, job.run_s / scale, BOUND_S)

    def summary(self) -> dict[str, Any]:
        jobs = list(self.jobs.values())
        done = [j for j in jobs if j.ok]
        failed = [j for j in jobs if j.ok is False]
        reasons = Counter(_reason_kind(j.reason) for j in failed)
        return {
            "submitted": sum(1 for j in jobs if j.first_t is not None),
            "completed": len(done),
            "failed": len(failed),
            "lost": sum(1 for j in jobs if self._outcome_of(j) == "lost"),
            "running_at_end": sum(1 for j in jobs if self._still_running(j)),
            "waiting_at_end": sum(1 for j in jobs if self._outcome_of(j) == "waiting"),
            "resubmitted": self.resubmitted,
            "duplicates": sum(j.reports - 1 for j in jobs if j.reports > 1),
            "executed_twice": sum(1 for j in jobs if j.runs_ok > 1),
            "failure_reasons": dict(reasons.most_common()),
            "wait_s": quantiles([self.wait_of(j) for j in done]),
            "run_s": quantiles([j.run_s for j in done]),
        }

    def slowdowns(self) -> list[float]:
        return [self._slowdown(j) for j in self.jobs.values() if j.ok]

    def slowdown_stats(self) -> dict[str, Any]:
        return slowdown_stats(self.slowdowns())


def _reason_kind(reason: str) -> str:
    """A failure reason without its particulars (addresses, counts), for tallies."""
    words = [w for w in reason.split() if not any(c.isdigit() for c in w)]
    return " ".join(words[:8]) or "(none)"


class Feeding:
    """An engine that also feeds the client: advance() goes in steps of at most
    POLL_S and lets the client read records and submit after each. Every other
    attribute is the engine's own."""

    def __init__(self, engine: Any, client: JobClient, meter: DlbMeter | None = None) -> None:
        self._engine = engine
        self.client = client
        self.meter = meter if hasattr(engine, "peer_counters") else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    @property
    def now(self) -> float:
        return self._engine.now

    def advance(self, until: float) -> None:
        while self._engine.now < until:
            due = self.client.next_due()
            step = min(until, self._engine.now + POLL_S)
            if due is not None and self._engine.now < due < step:
                step = due
            self._engine.advance(step)
            self.client.step(self._engine)
            if self.meter is not None and self._engine.now >= self.meter.next_t:
                self.meter.sample(self._engine.now, self._engine.peer_counters(), self.client.moved)
        self.client.step(self._engine)

    def drain(self, last_s: float, on_step: Any = None) -> float:
        """Advance until every job has an outcome or `last_s` (run time) has
        passed; returns the time it stopped."""
        while (self.client.open_jobs() or self.client.next_due() is not None) and (
            self._engine.now < last_s
        ):
            self.advance(min(last_s, self._engine.now + POLL_S))
            if on_step is not None:
                on_step()
        if self.meter is not None:  # the last part of a minute, and the placements
            self.meter.sample(self._engine.now, self._engine.peer_counters(), self.client.moved)
            self.meter.sched = dict(self._engine.sched_counts())
        if self.client.open_jobs() and hasattr(self._engine, "dumps"):
            self.client.note_waiting(self._engine.dumps())
        return self._engine.now


class DlbMeter:
    """Kim's DLB overhead (seed 000 §4.2.2, Table 4.1's text): the DLB messages
    each node handles per minute -- DlbRequest and DlbReply sent or received,
    plus the jobs it moves away (one JobRoute each) -- and their share of all
    the datagrams the peers send. Sampled from the peers' counters about every
    minute of the seed's time (`period_s`: 60 s over the spec's time_scale; at
    the first job step after it; the emulator asks its peers over their control
    sockets)."""

    KINDS = ("DlbRequest", "DlbReply")

    def __init__(self, balance: str, period_s: float = 60.0) -> None:
        self.balance = balance
        self.period_s = period_s
        self.next_t = period_s
        self._last: dict[int, dict[str, int]] = {}
        self._moved: Counter[int] = Counter()
        self.max_per_node_minute = 0
        self.node_minutes = 0
        self.dlb = 0  # DLB messages sent
        self.sent = 0  # all datagrams sent
        self.sched: dict[str, int] = {}  # the peers' scheduler counters at the end

    def sample(self, now: float, counters: dict[int, dict[str, int]], moved: Counter[int]) -> None:
        for host, now_counts in counters.items():
            before = self._last.get(host, {})
            if now_counts.get("tx", 0) < before.get("tx", 0):
                before = {}  # a new incarnation on the host

            def delta(
                key: str, now_counts: dict[str, int] = now_counts, before: dict[str, int] = before
            ) -> int:
                return now_counts.get(key, 0) - before.get(key, 0)

            moves = moved[host] - self._moved[host]
            sent = sum(delta(f"tx.{k}") for k in self.KINDS) + moves
            handled = sent + sum(delta(f"rx.{k}") for k in self.KINDS)
            self.max_per_node_minute = max(self.max_per_node_minute, handled)
            self.node_minutes += 1
            self.dlb += sent
            self.sent += delta("tx")
        self._last = counters
        self._moved = Counter(moved)
        while self.next_t <= now:
            self.next_t += self.period_s

    def figures(self) -> dict[str, Any]:
        return {
            "balance": self.balance,
            "messages": self.dlb,
            "datagrams": self.sent,
            "share_of_messages": round(self.dlb / self.sent, 6) if self.sent else None,
            "per_node_minute": round(self.dlb / self.node_minutes, 4)
            if self.node_minutes
            else None,
            "max_per_node_minute": self.max_per_node_minute,
            "node_minutes": self.node_minutes,
            "minute_s": round(self.period_s, 6),  # of this run's time: one minute of the seed's
        }


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the values that are not None (None if there are none)."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def jobs_from_workload(
    workload: Workload,
    *,
    start_s: float,
    latency_ms: float,
    dims: int,
    seed: int,
) -> list[tuple[float, JobInfo]]:
    """The trace's jobs as the grid sees them: submitted start_s + their submit
    time into the run; requirement point (size, 1 / latency bound, a random
    virtual value); a serial job asks no latency."""
    rng = random.Random(f"{seed}/job-points")
    out = []
    for job in workload.jobs:
        inverse = 0.0 if job.size <= 1 else 1.0 / latency_ms
        point = (float(job.size), inverse, *(rng.random() for _ in range(dims - 2)))
        t = start_s + job.submit_s
        out.append((t, JobInfo(job.job, job.size, max(0.0, job.run_s), t, point)))
    return out


def kim_trace(
    jobs: Sequence[KimJob], *, start_s: float, per_speed: bool, seed: int
) -> list[tuple[float, JobInfo]]:
    """Kim's jobs as the grid sees them: serial, submitted start_s + their time into
    the run, requirement point (cpu, memory, disk, a random virtual value); runtime_s
    is the work, or with runtime_per_speed the work times the job's baseline speed
    (the node divides by its own)."""
    rng = random.Random(f"{seed}/job-points")
    out = []
    for job in jobs:
        t = start_s + job.submit_s
        runtime = job.work_s * job.baseline_speed if per_speed else job.work_s
        out.append((t, JobInfo(job.id, 1, runtime, t, (*job.requirement, rng.random()))))
    return out


class JobsRun:
    """A spec's [jobs], prepared for one overlay run: the clustering, every
    host's resource point, the CAN space they live in, the client and its
    trace; and, at the end, what goes into the run folder."""

    def __init__(self, spec: Any, topology: Any, names: Sequence[str], run_dir: Any) -> None:
        jobs = spec.jobs
        self.spec = jobs
        self.seed = spec.seed
        self.profiles = jobs.profiles  # Kim's synthetic grid instead of a trace
        if self.profiles is not None and self.profiles.tau_per_host_s is not None:
            per_host = self.profiles.tau_per_host_s  # the same load per node at any size
            self.profiles = msgspec.structs.replace(self.profiles, tau_s=per_host / topology.n)
        rtt = np.asarray(topology.rtt_ms, dtype=np.float64)
        self.latency = np.maximum(rtt, rtt.T)
        self.workload: Workload | None = None
        run_time: Callable[[JobInfo, int], float] | None = None
        if self.profiles is not None:
            self.name = "KIM"
            self.clusters: list[tuple[int, ...]] = [(h,) for h in range(topology.n)]  # no clusters
            nodes_file = self.profiles.nodes_file
            self.base: list[tuple[float, ...]] = list(
                kim_nodes(self.profiles, topology.n, spec.seed)
                if nodes_file is None
                else read_kim_nodes(nodes_file, topology.n)
            )
            jobs_file = self.profiles.jobs_file
            kim = (
                kim_jobs(self.profiles, spec.seed)
                if jobs_file is None
                else read_kim_jobs(jobs_file)
            )
            # Up to the ladder's top, or what a file's node or job has beyond it.
            tops = [
                max(ladder_top(r), *(b[d] for b in self.base), *(j.requirement[d] for j in kim))
                for d, r in enumerate(RESOURCES)
            ]
            self.space = Space(
                [Dimension(r, 0.0, top + 1.0) for r, top in zip(RESOURCES, tops, strict=True)]
                + [Dimension("virtual", 0.0, 1.0, virtual=True)]
            )
            trace = kim_trace(
                kim,
                start_s=jobs.start_s,
                per_speed=jobs.runtime_per_speed,
                seed=spec.seed,
            )
            runtime_scale = 1.0
            if jobs.runtime_per_speed:
                speed = self._speed_index()
                run_time = lambda info, host: info.runtime_s / self.base[host][speed]  # noqa: E731
        else:
            self._trace_grid(jobs, topology)
            assert self.workload is not None
            assert jobs.workload is not None
            trace = jobs_from_workload(
                self.workload,
                start_s=jobs.start_s,
                latency_ms=jobs.latency_ms,
                dims=self.space.n,
                seed=spec.seed,
            )
            runtime_scale = jobs.workload.runtime_scale
        self.last_submit_s = max((t for t, _ in trace), default=jobs.start_s)
        self.meter = (
            DlbMeter(jobs.balance, 60.0 / self.profiles.time_scale)
            if self.profiles is not None
            else None
        )
        self.client = JobClient(
            trace,
            names,
            seed=spec.seed,
            runtime_scale=runtime_scale,
            # A representative drops a waiting attempt at its first beat after
            # dead_after_s of its entry's silence; one beat more for slack. When
            # it reroutes the attempt to a new owner first, that lasts
            # dead_after_s more.
            grace_s=jobs.dead_after_s * (2 if jobs.owner_recovery == "reroute" else 1)
            + 2 * jobs.beat_s,
            run_time=run_time,
        )
        self.engine_name = spec.engine
        self.run_dir = run_dir
        self.started: set[int] = set()  # hosts that ran a peer at some point
        self._check_speed_dimension()

    def _trace_grid(self, jobs: Any, topology: Any) -> None:
        """A trace's grid: the static clustering of the label, each host's point
        from its cluster, and the workload."""
        groups = [lab.get(jobs.label) for lab in topology.labels] if topology.labels else []
        if not groups or any(g is None for g in groups):
            raise InputError(
                f"jobs.label: a static clustering needs every host labelled {jobs.label!r}; "
                f"{topology.source} has {'no labels' if not groups else 'hosts without it'}",
                source="<spec>",
            )
        self.name = jobs.clustering.strip().upper()
        self.clusters = static_clustering(self.name, groups)
        self.base = list(job_points(self.clusters, np.asarray(topology.rtt_ms, dtype=np.float64)))
        widest = max(p[0] for p in self.base)
        quickest = max(p[1] for p in self.base)
        # Half-open boxes: the largest values must lie inside the space.
        self.space = Space(
            [
                Dimension("size", 0.0, widest + 1.0),
                Dimension("inv_latency", 0.0, max(quickest, 1.0 / jobs.latency_ms) * 2 + 1.0),
                Dimension("virtual", 0.0, 1.0, virtual=True),
            ]
        )
        self.workload = prepare_workload(jobs.workload, topology.n)

    def _speed_index(self) -> int:
        """Where a Kim grid's node point holds its speed (speed_dimension, default cpu)."""
        return [d.name for d in self.space.dims].index(self.spec.speed_dimension or "cpu")

    def _check_speed_dimension(self) -> None:
        jobs = self.spec
        real = [d.name for d in self.space.dims if not d.virtual]
        if jobs.speed_dimension and jobs.speed_dimension not in real:
            raise InputError(
                f"jobs.speed_dimension: {jobs.speed_dimension!r} is not a real dimension of"
                f" the jobs' CAN; expected one of {real}",
                source="<spec>",
            )

    def sched_config(self) -> SchedConfig:
        """The peers' SchedConfig: the [jobs] table embeds its every field."""
        return SchedConfig(**config_fields(SchedConfig, self.spec))

    def point(self, host: int, rng: random.Random) -> tuple[float, ...]:
        return (*self.base[host], rng.random())

    def joined(self, engine: Any, host: int) -> None:
        """A peer was started on `host`: tell it its cluster."""
        self.started.add(host)
        engine.set_sched_cluster(host, list(self.clusters[host]))

    def drain(self, feeding: Feeding, progress: Any = None) -> None:
        last = max(self.last_submit_s, feeding.now) + self.spec.drain_s
        feeding.drain(last, on_step=None if progress is None else lambda: progress(self.status()))

    def status(self) -> str:
        c = self.client
        ended = sum(1 for j in c.jobs.values() if j.ok is not None)
        return (
            f"jobs: {ended}/{len(c.jobs)} ended, {c.open_jobs()} open, "
            f"{c.resubmitted} submitted again"
        )

    def results(self) -> dict[str, Any]:
        """Writes jobs.jsonl and slowdown.png; returns the summary's parts."""
        rows = self.client.results()
        with open(self.run_dir / "jobs.jsonl", "w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, separators=(",", ":")) + "\n")
        variant = f"{self.engine_name}/{self.name}"
        curves = {variant: self.client.slowdowns()}
        slowdown = {variant: self.client.slowdown_stats()}
        if self.workload is None:
            return self._kim_results(slowdown)
        # The idealised central FCFS scheduler (seed 002 §4.3.2) on the same
        # trace and on the clusters of the hosts that ran a peer: a reference,
        # not a contest (no network, no churn, no program overhead).
        usable: list[tuple[int, ...]] = []
        for host, cluster in enumerate(self.clusters):
            members = [m for m in cluster if m in self.started]
            if host not in self.started:
                usable.append(())
            elif len(members) > 1 and self.diameter_ms(members) <= self.spec.latency_ms:
                usable.append(tuple(members))
            else:
                usable.append((host,))
        placements, _unfit = central_fcfs(self.workload, usable)
        scale = self.spec.workload.runtime_scale
        central = [
            bounded_slowdown(p.wait_s / scale, (p.end_s - p.start_s) / scale) for p in placements
        ]
        slowdown[f"central/{self.name}"] = slowdown_stats(central)
        curves[f"central/{self.name}"] = central
        plot_slowdown(self.run_dir / "slowdown.png", curves, f"bounded slowdown, {self.name}")
        jobs = self.client.summary()
        ends = [j.end_t for j in self.client.jobs.values() if j.ok and j.end_t is not None]
        span = max(ends, default=self.spec.start_s) - self.spec.start_s
        busy = sum(j.info.size * j.run_s for j in self.client.jobs.values() if j.ok)
        # Node time the completed jobs' ranks ran, over the nodes that ran a
        # peer, from the trace's start to the last completion.
        jobs["utilisation"] = round(busy / (span * len(self.started)), 4) if span > 0 else 0.0
        return {
            "jobs": jobs,
            "slowdown": slowdown,
            "jobs_setup": {
                "clustering": self.name,
                "latency_ms": self.spec.latency_ms,
                "trace": self.spec.workload.trace,
                "workload": describe(self.workload),
            },
        }

    def _placements(self) -> dict[str, Any]:
        """Kim's E2 figures from the peers' counters (the peers still running at the
        end): the share of placed attempts that were pushed at least once, the
        matchmaking messages per placement -- CAN hops towards the job's point, pushes,
        and the hand-over to the run node -- and the mean queue an attempt found where
        it landed."""
        counts = self.meter.sched if self.meter is not None else {}
        placed = counts.get("placed", 0) + counts.get("placed_pushed", 0)
        if not placed:
            return {}
        hops = counts.get("route_hop", 0) + counts.get("pushed", 0)
        represented = counts.get("represented", 0)
        return {
            # Kim's queue length: the tasks ahead where an attempt landed, when it landed.
            "queue_seen_mean": (
                round(counts.get("queue_seen", 0) / represented, 3) if represented else None
            ),
            "pushed_share": round(counts.get("placed_pushed", 0) / placed, 4),
            "route_hops_per_placement": round(counts.get("route_hop", 0) / placed, 3),
            "push_hops_per_placement": round(counts.get("pushed", 0) / placed, 3),
            "matchmaking_messages_per_placement": round(hops / placed + 1, 3),
        }

    def _baselines(self, ours: float | None) -> dict[str, Any]:
        """Kim's models on the same jobs and the nodes that ran a peer (cross-checks,
        not schedulers of the peers): CENTRAL, naive and redistributing every
        balance_s (seed 000 §4.2.2), and RNT over a Chord ring."""
        nodes = [self.base[h] for h in sorted(self.started)]
        jobs = [(j.submit_t, j.info.point[:3], j.info.runtime_s) for j in self.client.jobs.values()]
        how = {"speed": self._speed_index(), "per_speed": self.spec.runtime_per_speed}
        central = kim_central(nodes, jobs, **how)
        redistributed = kim_central(nodes, jobs, redistribute_s=self.spec.balance_s, **how)
        rnt = kim_rnt(nodes, jobs, seed=self.seed, **how)
        mean = _mean(central.waits)
        searched = [m for m, w in zip(rnt.messages, rnt.waits, strict=True) if w is not None]
        return {
            "central_wait_mean_s": None if mean is None else round(mean, 3),
            "wait_vs_central": round(ours / mean, 2) if ours is not None and mean else None,
            "central_busy_at_last": round(central.busy_at_last, 4),
            "central_redistributing_wait_mean_s": _rounded(_mean(redistributed.waits)),
            "rnt_wait_mean_s": _rounded(_mean(rnt.waits)),
            "rnt_messages_per_job": _rounded(_mean(searched), 2),
        }

    def _kim_results(self, slowdown: dict[str, Any]) -> dict[str, Any]:
        """Kim's grid: the jobs' waits (injection to start, seed 000 §3) and how many
        completed on a node less capable than they asked (must be none)."""
        assert self.profiles is not None
        misplaced = 0
        for job in self.client.jobs.values():
            if job.ok and job.ran_on is not None:
                have, want = self.base[job.ran_on], job.info.point[:3]
                misplaced += any(h < w for h, w in zip(have, want, strict=True))
        jobs = self.client.summary()
        jobs["misplaced"] = misplaced
        # Jobs no node of the grid can run (Kim's completeness holds for the others).
        jobs["infeasible"] = sum(
            1
            for job in self.client.jobs.values()
            if not any(
                all(h >= w for h, w in zip(node, job.info.point[:3], strict=True))
                for node in self.base
            )
        )
        waits = [self.client.wait_of(j) for j in self.client.jobs.values() if j.ok]
        jobs["wait_mean_s"] = round(sum(waits) / len(waits), 3) if waits else None
        jobs |= self._baselines(jobs["wait_mean_s"]) | self._placements()
        return {
            "jobs": jobs,
            "slowdown": slowdown,
            "jobs_setup": {"profiles": msgspec.to_builtins(self.profiles), "grid": "KIM"},
        } | (
            {"dlb": self.meter.figures()}
            if self.meter is not None and self.meter.node_minutes
            else {}
        )

    def diameter_ms(self, members: Sequence[int]) -> float:
        """The widest RTT among `members` (each pair counted at its slower way), in ms."""
        return float(self.latency[np.ix_(members, members)].max())
