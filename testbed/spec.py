# Experiment specs: a TOML file, validated into typed structs, with --set overrides.
#
# Every field is typed and unknown fields are errors naming the field (msgspec
# does the checking; we add the file name and what was expected). --set takes
# dotted paths (topology.hosts=128, phases.0.count=10) and TOML values; a value
# that is not valid TOML is taken as a string.

from __future__ import annotations

import copy
import dataclasses
import math
import re
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec

from node.can.config import CanConfig
from node.can.geometry import Dimension, Space
from node.cluster.agent import ClusterConfig
from node.fields import FieldError
from node.sched.config import SchedConfig
from testbed.errors import InputError

__all__ = [
    "DimensionSpec",
    "CampaignSpec",
    "ClusterSpec",
    "RunClustersSpec",
    "KimProfilesSpec",
    "RunJobsSpec",
    "SchedSpec",
    "WorkloadSpec",
    "ChurnSpec",
    "cluster_address_problem",
    "DtmTechnique",
    "ExperimentSpec",
    "GnpTechnique",
    "NodeSpec",
    "ProgramSpec",
    "NoiseSpec",
    "PhaseSpec",
    "PredictSpec",
    "TopologySpec",
    "VivaldiTechnique",
    "agent_config",
    "apply_overrides",
    "config_fields",
    "crash_repair_s",
    "load_any_spec",
    "load_spec",
]


class TopologySpec(msgspec.Struct, forbid_unknown_fields=True):
    ref: str = "planetlab"
    hosts: int | None = None
    pick: Literal["first", "random"] = "first"
    scale: float = 1.0
    clamp: bool = False


class DimensionSpec(msgspec.Struct, forbid_unknown_fields=True):
    """A CAN dimension and how peers' capabilities are drawn in it."""

    name: str
    lo: float
    hi: float
    values: list[float] | None = None  # each peer draws one of these
    uniform: tuple[float, float] | None = None  # or a value uniform in [a, b)
    virtual: bool = False  # the random virtual dimension (values drawn uniformly)


class WorkloadSpec(msgspec.Struct, forbid_unknown_fields=True):
    """A job trace and what is done to it (docs/workloads.md), in this order."""

    trace: str  # an SWF file (.gz too), path from the current folder
    min_size: int = 2  # 2: parallel jobs only
    max_size: int | None = None
    slice: int | None = None  # the k jobs submitted over the shortest interval
    window_s: float | None = None  # compress submissions into this long ...
    load: float | None = None  # ... or so that the offered load on the grid is this
    runtime_scale: float = 1.0
    first: int | None = None  # last: keep the first k jobs (the thesis's intense set: 1,000)


class KimProfilesSpec(msgspec.Struct, forbid_unknown_fields=True):
    """Kim's synthetic grid instead of a trace (testbed/workload/_kim.py, docs/workloads.md):
    node capabilities (cpu, memory, disk) and a Poisson stream of serial jobs."""

    model: Literal["mixed", "clustered"] = "mixed"  # every item its own, or `classes` of them
    classes: int = 10  # node profiles and job profiles of the clustered model
    constraints: Literal["light", "heavy"] | float = "light"  # resources constrained, of 3
    jobs: int = 1000
    tau_s: float = 17.5  # mean gap between two submissions (Poisson)
    # Instead of tau_s: tau_s = this / the run's hosts (the same load per node at any
    # size: Kim's E3 light load, tau 4 s at 1,000 nodes, is 4,000 s per host)
    tau_per_host_s: float | None = None
    work_s: tuple[float, float] = (1200.0, 3600.0)  # uniform, on a node as fast as asked
    # "normal": the same mean, sigma a third of work_s's range (Kim's E3: 60 +- 20 min)
    work_dist: Literal["uniform", "normal"] = "uniform"
    # Your own grid instead of the generator's (docs/workloads.md, "Kim's grid from files"):
    # CSV files, jobs with submit_s,work_s,cpu_10mhz,memory_mb,disk_gb and nodes (the first
    # `hosts` rows, in host order) with cpu_10mhz,memory_mb,disk_gb.
    jobs_file: str | None = None
    nodes_file: str | None = None
    # How many times shorter this spec's times are than the seed's (kim-sim.toml: 15, updates
    # every 2 s for Kim's 30 s): the seed's per-minute figures (DLB messages a node handles in
    # any minute) are counted over 60 / time_scale s of the run.
    time_scale: float = 1.0


def _embedding(
    name: str,
    config: type,
    extra: list[tuple[str, Any] | tuple[str, Any, Any]],
    *,
    only: frozenset[str] | None = None,
    omit: frozenset[str] = frozenset(),
    defaults: dict[str, Any] | None = None,
    namespace: dict[str, Any] | None = None,
) -> type[msgspec.Struct]:
    """A spec table that embeds a peer config dataclass: its fields (name, type, default) as
    the dataclass declares them, and nowhere else, plus the table's own `extra` fields. `only`
    or `omit` choose the fields; `defaults` replaces a dataclass default where a kind of run
    needs its own (each such replacement says why where it is made). The dataclass checks its
    fields when the spec is checked (`_embedded_config`)."""
    hints = typing.get_type_hints(config)
    defaults = defaults or {}
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = list(extra)
    for field in dataclasses.fields(config):
        chosen = field.name in only if only is not None else field.name not in omit
        if not field.init or field.name in _NOT_EMBEDDED or not chosen:
            continue
        if field.name in defaults:
            fields.append((field.name, hints[field.name], defaults[field.name]))
        elif field.default is not dataclasses.MISSING:
            fields.append((field.name, hints[field.name], field.default))
        elif field.default_factory is not dataclasses.MISSING:
            factory = msgspec.field(default_factory=field.default_factory)
            fields.append((field.name, hints[field.name], factory))
        else:
            fields.append((field.name, hints[field.name]))
    return msgspec.defstruct(
        name,
        fields,
        kw_only=True,
        forbid_unknown_fields=True,
        module=__name__,
        namespace=namespace,
    )


# CanConfig's space comes from [node] dimensions (or a jobs run's resources).
_NOT_EMBEDDED = {"space"}


def config_fields(config: type, table: Any) -> dict[str, Any]:
    """The values a spec table holds for the fields of the peer config dataclass `config`."""
    return {
        f.name: getattr(table, f.name)
        for f in dataclasses.fields(config)
        if f.init and hasattr(table, f.name)
    }


def _embedded_config(
    config: type, table: Any, where: str, fail: Callable[[str, str], None], **given: Any
) -> Any:
    """The peer config a spec table describes (`given` adds what the table does not hold);
    an invalid field fails naming it by its spec path (`where`.field)."""
    try:
        return config(**config_fields(config, table), **given)
    except FieldError as exc:
        fail(f"{where}.{exc.field}" if where else exc.field, exc.reason)


def _default_dimensions() -> list[DimensionSpec]:
    # Seed 000 §3.1's units: CPU in 10 MHz, memory in MB, disk in GB; plus cores.
    return [
        DimensionSpec("cpu", 0, 500, values=[200, 240, 280, 320, 360]),
        DimensionSpec("memory", 0, 65536, values=[1024, 2048, 4096, 8192, 16384]),
        DimensionSpec("disk", 0, 2000, values=[80, 160, 250, 500, 1000]),
        DimensionSpec("cores", 0, 64, values=[1, 2, 4, 8]),
        DimensionSpec("virtual", 0, 1, virtual=True),
    ]


# [node]: the peers' CAN space (dimensions) and every field of their CanConfig (timing and
# limits of the overlay), plus the grid's key and the peers' port.
NodeSpec = _embedding(
    "NodeSpec",
    CanConfig,
    [
        ("dimensions", list[DimensionSpec], msgspec.field(default_factory=_default_dimensions)),
        ("grid_key", str | None, None),  # hex; every datagram is then authenticated
        ("port", int, 7000),
    ],
)


def crash_repair_s(node: Any) -> float:
    """How long after a crash the peers may still be repairing it ([node] fields): the
    silence is noticed at an update tick after suspect_after_s, the probe times out, and
    the takeover takes a proposal round. A check sooner than this may find a hole."""
    return float(
        node.suspect_after_s
        + node.update_interval_s
        + node.probe_timeout_s
        + node.propose_timeout_s
    )


class PhaseSpec(msgspec.Struct, forbid_unknown_fields=True):
    """One step of membership change, then a quiet period and an invariant check."""

    action: Literal["join", "leave", "crash"]
    count: int | None = None  # how many hosts ...
    fraction: float | None = (
        None  # ... or which share of the current members (of all hosts for join)
    )
    over_s: float = 0.0  # spread the events evenly over this long
    burst: int = 0  # > 0: groups of this many peers whose zones are adjacent (joiners: whose points are close)
    settle_s: float = 60.0  # quiet period before the check
    name: str = ""


class ChurnSpec(msgspec.Struct, forbid_unknown_fields=True):
    """Churn and faults from a script (docs/churn.md) or a Splay availability trace."""

    script: str | None = None  # a .churn file (path from the current folder)
    trace: str | None = None  # ... or an on/off availability trace, line k = host k
    trace_down: Literal["leave", "crash"] = "leave"  # what a trace's "down" does
    settle_s: float = 30.0  # this long without events: a quiet period, the invariants checked
    # A check waits up to this long past its planned time for leaves still in progress
    # (and for settle_s of quiet after them); the rest of the script moves by the wait.
    settle_wait_max_s: float = 120.0


class CampaignSpec(msgspec.Struct, forbid_unknown_fields=True):
    """`testbed campaign`: the spec run under each script, with each seed, and in
    each variant (none: the spec as it is)."""

    scripts: list[str] = msgspec.field(default_factory=list)  # .churn files
    seeds: list[int] = msgspec.field(default_factory=lambda: [1])
    # Named sets of overrides, as --set takes them (dotted key = TOML value), e.g.
    # [campaign.variants.CAN-P1] "jobs.matchmaking" = "can-p", "jobs.stopping_factor" = 1.0
    # A name with slashes puts its variant in a case ("uniform/light/PULL": case
    # "uniform/light"); the baseline models are reported per case.
    variants: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    # Which of Kim's CENTRAL models `wait_s[...CENTRAL]` is: "naive" (E2) or
    # "redistributing" (his load-balancing experiments, Table 4.1); both are reported
    # as CENTRAL-NAIVE and CENTRAL-REDIST as well.
    central: Literal["naive", "redistributing"] = "naive"


_VARIANT_PART = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,39}"
_VARIANT_NAME = re.compile(rf"{_VARIANT_PART}(/{_VARIANT_PART}){{0,3}}")
_NOT_VARIED = ("name", "seed", "engine", "kind", "campaign")
_MODELS = ("RNT", "CENTRAL", "CENTRAL-NAIVE", "CENTRAL-REDIST")


def _check_campaign(campaign: CampaignSpec, fail: Callable[[str, str], None]) -> None:
    if not campaign.scripts:
        fail("campaign.scripts", "list at least one .churn script")
    if not campaign.seeds or len(set(campaign.seeds)) != len(campaign.seeds):
        fail("campaign.seeds", f"need distinct seeds, got {campaign.seeds}")
    for name, sets in campaign.variants.items():
        where = f"campaign.variants.{name}"
        if not _VARIANT_NAME.fullmatch(name):
            fail(
                where,
                "a variant's name names run folders: letters, digits, '.', '_', '+', '-', "
                "and up to three '/' between cases",
            )
        if name.split("/")[-1] in _MODELS:
            fail(where, f"{name.split('/')[-1]} names a baseline model's figures")
        if not sets:
            fail(where, "no overrides: a variant sets at least one field")
        for key in sets:
            if key.split(".")[0] in _NOT_VARIED or not all(key.split(".")):
                fail(
                    f"{where}.{key}",
                    f"a dotted field of the spec other than {', '.join(_NOT_VARIED)}",
                )


# [clusters] in an overlay run (docs/clusters.md): every peer runs the cluster agent (seed 002
# §5.1.4); the testbed gives each the peers DTM predicts near it, again whenever peers come
# and go; the checks after quiet periods judge every cluster against the configured matrix.
# Every field of the peers' ClusterConfig (D, N, M, criterion, timing), plus:
RunClustersSpec = _embedding(
    "RunClustersSpec",
    ClusterConfig,
    [
        ("aggregate", int, 2),  # candidates offered: this many times N
        ("trees", int, 9),  # DTM trees behind the prediction (the thesis's forest)
    ],
)


# [jobs] in an overlay run (docs/scheduling.md): every peer runs the scheduler (node/sched/),
# the CAN's dimensions become the cluster's size and inverse latency plus a virtual one
# (node.dimensions is not used), each peer's point comes from its cluster in a static
# clustering of the topology's label, and the testbed submits the trace's jobs at their
# times through random live peers, as their client. Every field of the peers' SchedConfig
# (timing, balancing, over-provisioning, the program every rank runs: the built-in MPI-like
# one of docs/mpi.md or a user's own `command`), plus:
RunJobsSpec = _embedding(
    "RunJobsSpec",
    SchedConfig,
    [
        ("workload", WorkloadSpec | None, None),  # a trace, or ...
        ("profiles", KimProfilesSpec | None, None),  # ... Kim's synthetic grid
        ("clustering", str, "ACTUAL"),  # ACTUAL, DISJOINT-n or OVERLAP-n of the label
        ("label", str, "cluster"),
        ("latency_ms", float, 1.0),  # every parallel job's latency bound (RTT, ms)
        ("start_s", float, 30.0),  # the trace's time 0 is this far into the run
        ("drain_s", float, 600.0),  # after the last submission, wait this long for outcomes
    ],
)


class ExperimentSpec(msgspec.Struct, forbid_unknown_fields=True):
    kind: Literal["can"] = "can"
    name: str = "experiment"
    engine: Literal["sim", "emu"] = "sim"
    seed: int = 1
    # How the emulator starts peer processes: forked from one parent that imported the peer
    # ("fork": ~7 MB private memory each, node/zygote.py) or each its own `python -m node`
    # ("exec": ~28 MB). The simulator runs no processes.
    peers: Literal["fork", "exec"] = "fork"
    topology: TopologySpec = msgspec.field(default_factory=TopologySpec)
    node: NodeSpec = msgspec.field(default_factory=NodeSpec)
    phases: list[PhaseSpec] = msgspec.field(default_factory=list)
    churn: ChurnSpec | None = None  # instead of phases
    campaign: CampaignSpec | None = None  # scripts x seeds, for `testbed campaign`
    routes_checked: int = 2000  # greedy routes the oracle follows at each check
    clusters: RunClustersSpec | None = None  # the peers also form dynamic clusters
    jobs: RunJobsSpec | None = None  # the peers also schedule and run a trace's jobs
    # The emulated network across the machines of this Ray cluster ("auto", HOST:PORT):
    # docs/beyond-one-machine.md. None: this machine alone.
    cluster: str | None = None


class ProgramSpec(msgspec.Struct, forbid_unknown_fields=True):
    """kind = "program": a user's program on every host that joins, under a churn
    script or trace, on the emulator (docs/churn.md, "Churn for any program")."""

    kind: Literal["program"]
    command: str  # what a join starts on a host: {ip}, {peers}, {name}, ... (Wan.popen)
    churn: ChurnSpec
    name: str = "program"
    engine: Literal["emu"] = "emu"  # programs run on the emulator only
    seed: int = 1
    topology: TopologySpec = msgspec.field(default_factory=TopologySpec)
    # After each quiet period: a command whose exit status is the verdict; it may use
    # {members}, {member_ips}, {t}, {run} (and on hosts their own placeholders).
    check: str | None = None
    check_on: Literal["root", "members"] = (
        "root"  # once in the testbed's namespace, or on each member
    )
    check_timeout_s: float = 60.0
    leave: str = "SIGTERM"  # a signal name, or a command run on the leaving host
    leave_grace_s: float = 10.0  # then the program is killed and the leave counted abrupt
    env: dict[str, str] = msgspec.field(default_factory=dict)  # added to the program's environment
    campaign: CampaignSpec | None = None  # scripts x seeds, for `testbed campaign`
    # The emulated network across the machines of this Ray cluster ("auto", HOST:PORT):
    # docs/beyond-one-machine.md. None: this machine alone.
    cluster: str | None = None


def _check_topology(topology: TopologySpec, fail: Callable[[str, str], None]) -> None:
    if topology.hosts is not None and topology.hosts < 1:
        fail("topology.hosts", f"must be at least 1, not {topology.hosts}")
    if not (math.isfinite(topology.scale) and topology.scale > 0):
        fail("topology.scale", "must be a positive number")


def _check_run_clusters(c: Any, fail: Callable[[str, str], None]) -> None:
    _embedded_config(ClusterConfig, c, "clusters", fail)
    # A run's clusters are stricter than an agent's: one of a single peer schedules nothing.
    for field, least in (("size", 2), ("aggregate", 1), ("trees", 1)):
        if getattr(c, field) < least:
            fail(f"clusters.{field}", f"must be at least {least}, not {getattr(c, field)}")


def _check_workload(w: WorkloadSpec, fail: Callable[[str, str], None], where: str) -> None:
    if w.min_size < 1:
        fail(f"{where}.min_size", f"must be at least 1, not {w.min_size}")
    if w.max_size is not None and w.max_size < w.min_size:
        fail(f"{where}.max_size", f"must be at least min_size ({w.min_size}), not {w.max_size}")
    for field in ("slice", "first"):
        if getattr(w, field) is not None and getattr(w, field) < 1:
            fail(f"{where}.{field}", f"must be at least 1 job, not {getattr(w, field)}")
    if w.window_s is not None and w.load is not None:
        fail(where, "give window_s or load, not both")
    for field in ("window_s", "load"):
        value = getattr(w, field)
        if value is not None and not (math.isfinite(value) and value > 0):
            fail(f"{where}.{field}", f"must be a positive number, not {value}")
    if not (math.isfinite(w.runtime_scale) and w.runtime_scale > 0):
        fail(f"{where}.runtime_scale", f"must be a positive number, not {w.runtime_scale}")


def _check_profiles(k: KimProfilesSpec, fail: Callable[[str, str], None]) -> None:
    where = "jobs.profiles"
    if k.classes < 1:
        fail(f"{where}.classes", f"must be at least 1, not {k.classes}")
    if k.jobs < 1:
        fail(f"{where}.jobs", f"must be at least 1, not {k.jobs}")
    if not isinstance(k.constraints, str) and not (
        math.isfinite(k.constraints) and 0 <= k.constraints <= 3
    ):
        fail(
            f"{where}.constraints",
            f'expected "light", "heavy" or resources constrained of 3 (0-3), not {k.constraints}',
        )
    if not (math.isfinite(k.tau_s) and k.tau_s > 0):
        fail(f"{where}.tau_s", f"must be a positive number of seconds, not {k.tau_s}")
    default = KimProfilesSpec()
    if k.jobs_file is not None:  # what the file replaces may not be set as well
        for name in ("jobs", "tau_s", "tau_per_host_s", "work_s", "work_dist", "constraints"):
            if getattr(k, name) != getattr(default, name):
                fail(f"{where}.{name}", "the jobs come from jobs_file; remove this field")
    if k.nodes_file is not None and k.jobs_file is not None:
        for name in ("model", "classes"):
            if getattr(k, name) != getattr(default, name):
                fail(f"{where}.{name}", "nodes and jobs come from files; remove this field")
    if not (math.isfinite(k.time_scale) and 1e-3 <= k.time_scale <= 1e3):
        fail(f"{where}.time_scale", f"must be a number from 0.001 to 1000, not {k.time_scale}")
    per_host = k.tau_per_host_s
    if per_host is not None and not (math.isfinite(per_host) and per_host > 0):
        fail(f"{where}.tau_per_host_s", f"must be a positive number of seconds, not {per_host}")
    lo, hi = k.work_s
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        fail(f"{where}.work_s", f"expected [lo, hi] seconds with 0 < lo <= hi, not {[lo, hi]}")


def _check_run_jobs(j: Any, fail: Callable[[str, str], None]) -> None:
    if (j.workload is None) == (j.profiles is None):
        fail(
            "jobs", "give exactly one of [jobs.workload] (a trace) or [jobs.profiles] (Kim's grid)"
        )
    if j.workload is not None:
        _check_workload(j.workload, fail, "jobs.workload")
        if j.runtime_per_speed:
            fail(
                "jobs.runtime_per_speed",
                "only with [jobs.profiles]: a trace's run times were measured, they are not work",
            )
    if j.profiles is not None:
        _check_profiles(j.profiles, fail)
    if not re.fullmatch(r"ACTUAL|(DISJOINT|OVERLAP)-[1-9][0-9]*", j.clustering.strip().upper()):
        fail("jobs.clustering", f"{j.clustering!r}: expected ACTUAL, DISJOINT-<n> or OVERLAP-<n>")
    if not (math.isfinite(j.latency_ms) and j.latency_ms > 0):
        fail("jobs.latency_ms", f"must be a positive number, not {j.latency_ms}")
    for field in ("start_s", "drain_s"):
        value = getattr(j, field)
        if not (math.isfinite(value) and value >= 0):
            fail(f"jobs.{field}", f"must be a number of seconds >= 0, not {value}")
    _embedded_config(SchedConfig, j, "jobs", fail)


def _check(spec: ExperimentSpec, source: str) -> None:
    def fail(field: str, reason: str) -> None:
        raise InputError(f"{field}: {reason}", source=source)

    _check_topology(spec.topology, fail)
    if spec.cluster is not None:
        if spec.engine != "emu":
            fail("cluster", "an emulated network spans machines; the simulator runs on one")
        _check_network_cluster(spec.cluster, fail)
    if spec.clusters is not None:
        _check_run_clusters(spec.clusters, fail)
    if spec.jobs is not None:
        _check_run_jobs(spec.jobs, fail)
        if spec.jobs.dead_after_s <= spec.node.update_interval_s:
            fail(
                "jobs.dead_after_s",
                f"must be longer than node.update_interval_s ({spec.node.update_interval_s} s): "
                f"the peers' load figures ride the overlay's updates, not {spec.jobs.dead_after_s}",
            )
    if spec.churn is not None:
        churn = spec.churn
        if spec.phases:
            fail("churn", "give either phases or a churn script/trace, not both")
        if (churn.script is None) == (churn.trace is None) and spec.campaign is None:
            fail("churn", 'give exactly one of script = "x.churn" or trace = "x.trace"')
        _check_churn_times(churn, fail)
    if spec.campaign is not None:
        campaign = spec.campaign
        if spec.phases:
            fail("campaign", "a campaign runs churn scripts; remove the phases")
        _check_campaign(campaign, fail)
        if spec.churn is not None and spec.churn.trace is not None:
            fail("churn.trace", "a campaign runs its scripts; remove the trace")
    names = [d.name for d in spec.node.dimensions]
    if not names or len(set(names)) != len(names):
        fail("node.dimensions", f"need distinct names, got {names}")
    if sum(d.virtual for d in spec.node.dimensions) > 1:
        fail("node.dimensions", "at most one virtual dimension")
    for k, d in enumerate(spec.node.dimensions):
        where = f"node.dimensions.{k} ({d.name})"
        if not (math.isfinite(d.lo) and math.isfinite(d.hi) and d.lo < d.hi):
            fail(where, f"need lo < hi, got [{d.lo}, {d.hi})")
        if d.virtual and (d.values or d.uniform):
            fail(where, "a virtual dimension draws its own values; give no values/uniform")
        if not d.virtual and (d.values is None) == (d.uniform is None):
            fail(where, "give exactly one of values = [...] or uniform = [a, b]")
        for v in d.values or []:
            if not d.lo <= v < d.hi:
                fail(where, f"value {v} is outside [{d.lo}, {d.hi})")
        if d.uniform and not (d.lo <= d.uniform[0] < d.uniform[1] <= d.hi):
            fail(where, f"uniform range {list(d.uniform)} must lie within [{d.lo}, {d.hi}]")
    space = Space([Dimension(d.name, d.lo, d.hi, d.virtual) for d in spec.node.dimensions])
    _embedded_config(CanConfig, spec.node, "node", fail, space=space)
    if spec.node.grid_key is not None:
        try:
            key = bytes.fromhex(spec.node.grid_key)
        except ValueError:
            fail("node.grid_key", "must be hex")
        if len(key) < 16:
            fail("node.grid_key", "must be at least 16 bytes (32 hex digits)")
    if not 0 < spec.node.port < 65536:
        fail("node.port", "must be a UDP port number")
    for k, phase in enumerate(spec.phases):
        where = f"phases.{k}"
        if (phase.count is None) == (phase.fraction is None):
            fail(where, "give exactly one of count or fraction")
        if phase.count is not None and phase.count < 0:
            fail(f"{where}.count", "must be >= 0")
        if phase.fraction is not None and not 0 <= phase.fraction <= 1:
            fail(f"{where}.fraction", "must be within 0..1")
        if phase.over_s < 0 or phase.settle_s < 0 or phase.burst < 0:
            fail(where, "over_s, settle_s and burst must be >= 0")


def _check_churn_times(churn: ChurnSpec, fail: Callable[[str, str], None]) -> None:
    if not (math.isfinite(churn.settle_s) and churn.settle_s > 0):
        fail("churn.settle_s", f"must be a positive number of seconds, not {churn.settle_s}")
    wait = churn.settle_wait_max_s
    if not (math.isfinite(wait) and wait >= 0):
        fail("churn.settle_wait_max_s", f"must be a number of seconds >= 0, not {wait}")


def _check_network_cluster(address: str, fail: Callable[[str, str], None]) -> None:
    if address == "local" or (why := cluster_address_problem(address)):
        fail("cluster", why if address != "local" else 'a running cluster: "auto" '
             "or HOST:PORT (`testbed cluster up` starts one)")  # fmt: skip


def _check_program(spec: ProgramSpec, source: str) -> None:
    def fail(field: str, reason: str) -> None:
        raise InputError(f"{field}: {reason}", source=source)

    _check_topology(spec.topology, fail)
    if spec.cluster is not None:
        _check_network_cluster(spec.cluster, fail)
    if not spec.command.strip():
        fail("command", "give the command a join starts on a host")
    churn = spec.churn
    if (churn.script is None) == (churn.trace is None) and spec.campaign is None:
        fail("churn", 'give exactly one of script = "x.churn" or trace = "x.trace"')
    _check_churn_times(churn, fail)
    for field in ("check_timeout_s", "leave_grace_s"):
        value = getattr(spec, field)
        if not (math.isfinite(value) and value > 0):
            fail(field, f"must be a positive number of seconds, not {value}")
    if spec.check is not None and not spec.check.strip():
        fail("check", "an empty command; leave it out for no check")
    if not spec.leave.strip():
        fail("leave", "a signal name (SIGTERM) or a command")
    if spec.campaign is not None:
        _check_campaign(spec.campaign, fail)
        if churn.trace is not None:
            fail("churn.trace", "a campaign runs its scripts; remove the trace")


def _convert(
    data: dict[str, Any], source: str
) -> ExperimentSpec | PredictSpec | ClusterSpec | SchedSpec | ProgramSpec:
    kind = data.get("kind", "can")
    types = {
        "can": (ExperimentSpec, _check),
        "predict": (PredictSpec, _check_predict),
        "cluster": (ClusterSpec, _check_cluster),
        "sched": (SchedSpec, _check_sched),
        "program": (ProgramSpec, _check_program),
    }
    if kind not in types:
        raise InputError(
            "kind: expected 'can' (an overlay experiment), 'predict', 'cluster', 'sched' or "
            f"'program' (your own program under churn), not {kind!r}",
            source=source,
        )
    struct, check = types[kind]
    try:
        spec = msgspec.convert(data, struct)
    except msgspec.ValidationError as exc:
        raise InputError(
            f"invalid spec: {exc}{_expected(struct, str(exc))}", source=source
        ) from None
    check(spec, source)
    return spec


def _expected(struct: type, message: str) -> str:
    """For msgspec's "Invalid enum value 'x' - at `$.a[0].b`": the values field b
    takes (msgspec does not say). Follows the path through lists and the
    structs of a tagged union that have the field; empty when it cannot."""
    where = re.search(r"Invalid enum value .* - at `\$((?:\.\w+|\[\d+\])+)`", message)
    if where is None:
        return ""
    try:
        kinds: list[Any] = [msgspec.inspect.type_info(struct)]
        for name, _index in re.findall(r"\.(\w+)|\[(\d+)\]", where.group(1)):
            step: list[Any] = []
            for one in _members(kinds):
                if name and isinstance(one, msgspec.inspect.StructType):
                    step += [f.type for f in one.fields if f.encode_name == name]
                elif not name and isinstance(one, msgspec.inspect.ListType):
                    step.append(one.item_type)
            kinds = step
        members = _members(kinds)
    except Exception:  # a hint only: never in the way of the error itself
        return ""
    literal = [one for one in members if isinstance(one, msgspec.inspect.LiteralType)]
    values = sorted({repr(value) for one in literal for value in one.values})
    if not values:
        return ""
    other = [
        one
        for one in members
        if not isinstance(one, msgspec.inspect.LiteralType | msgspec.inspect.NoneType)
    ]
    numeric = msgspec.inspect.IntType | msgspec.inspect.FloatType
    if other:
        values.append(
            "or a number" if all(isinstance(one, numeric) for one in other) else "or another type"
        )
    return f" (expected one of {', '.join(values)})"


def _members(kinds: list[Any]) -> list[Any]:
    """The types a union stands for (and the type itself otherwise)."""
    return [
        one
        for kind in kinds
        for one in (kind.types if isinstance(kind, msgspec.inspect.UnionType) else [kind])
    ]


# -- latency prediction specs (kind = "predict") -------------------------------------------------

Filter = Literal["mean", "median", "min", "lowest_quartile"]


class _Technique(msgspec.Struct, forbid_unknown_fields=True, tag_field="kind"):
    name: str = ""  # the row's label (default: the kind)
    samples: int = 1  # RTT samples per measurement ...
    filter: Filter = "mean"  # ... and how they make one figure
    # Another stream of the technique's random choices (DTM's join orders, GNP's
    # landmarks, Vivaldi's samples) for the same seeds and maps (0: the default).
    stream: int = 0


class DtmTechnique(_Technique, tag="dtm"):
    simulated_joins: int = 1
    branch_sample: int = 64
    near_points: int = 8  # places seen from the nearest host measured, on its paths to this many
    round_above_ms: float | None = None  # Round variant: above this, to the nearest power of 2
    rejoin: bool = False  # Rejoin variant: every host leaves and joins again, in join order
    tolerance: float = 0.01  # share of d(base, c) a branch must run further to be followed
    jump: float = 0.0  # jump to where a branch's deepest host says, once within this share of d
    leaf_hosts: int = 0  # then measure this many hosts nearest c's place and refit its leaf
    snap: float = 0.0  # hang c at its edge's nearer end when within this share of its leaf
    leaf_sample: int = 0  # branches to a lone host tried at a vertex (0: branch_sample's)
    trees: int = 1  # a forest: trees built in their own join orders ...
    tree_quantile: float = 0.25  # ... a pair predicted by this quantile of the trees' figures
    # ... or "fit": by the tree that fits both hosts' own measurements best (then
    # tree_quantile is not used; with one tree neither is)
    tree_choice: Literal["quantile", "fit"] = "quantile"


class GnpTechnique(_Technique, tag="gnp"):
    landmarks: int = 6
    dims: int = 5
    landmark_starts: int = 5
    host_starts: int = 3


class VivaldiTechnique(_Technique, tag="vivaldi"):
    dims: int = 5
    height: bool = False
    adaptive: bool = True
    cc: float = 0.25
    ce: float = 0.25
    # Rounds (one sample and one adjustment each): a number, or "n2" (n squared)
    # or "nlogn" (n log2 n): seed 002's VIVALDI-n2 and VIVALDI-n log n.
    rounds: int | Literal["n2", "nlogn"] = "nlogn"
    neighbours: int | None = None  # None: each round samples any host; k: k fixed random ones
    nearby: int = 0  # of those k, how many are the closest hosts (Vivaldi's "half nearby")


Technique = DtmTechnique | GnpTechnique | VivaldiTechnique


class NoiseSpec(msgspec.Struct, forbid_unknown_fields=True):
    """The simulator's measurement error (testbed.experiments.predict.Noise)."""

    sigma: float = 0.0  # relative Gaussian error of every sample
    spike: float = 0.0  # probability that a sample hits a busy host or path ...
    spike_scale: float = 1.0  # ... and is delayed by a Pareto(2) multiple of this x RTT


def _default_techniques() -> list[Technique]:
    return [DtmTechnique(), GnpTechnique(), VivaldiTechnique()]


class PredictSpec(msgspec.Struct, forbid_unknown_fields=True):
    kind: Literal["predict"]
    name: str = "predict"
    engine: Literal["sim", "emu"] = "sim"
    seeds: int | list[int] = 10  # a count (seeds 1..N) or the seeds themselves
    topology: TopologySpec = msgspec.field(default_factory=TopologySpec)
    techniques: list[Technique] = msgspec.field(default_factory=_default_techniques)
    noise: NoiseSpec = msgspec.field(default_factory=NoiseSpec)
    boundary_ms: float | None = None  # Table 5.6's error rates at this cluster diameter
    paper: Literal["5.2", "5.4", "5.5", "5.6"] | None = None  # the thesis's table to print beside
    workers: int = 0  # processes running seeds side by side; 0: one per core
    # A Ray cluster ("local" or an address): the simulator runs the seeds as Ray tasks
    # there, the emulator pings on a network across its machines (a running cluster).
    cluster: str | None = None
    probe_rate: float = 50.0  # emulator: Pings per second per peer (the prober's budget) ...
    ping_concurrency: int = 8  # ... and how many peers measure at a time

    def seed_list(self) -> list[int]:
        return list(range(1, self.seeds + 1)) if isinstance(self.seeds, int) else list(self.seeds)


def _check_dtm(tech: DtmTechnique, where: str, fail: Callable[[str, str], None]) -> None:
    if tech.simulated_joins < 1:
        fail(f"{where}.simulated_joins", "must be at least 1")
    if tech.branch_sample < 2:
        fail(f"{where}.branch_sample", "must be at least 2")
    if tech.near_points < 0:
        fail(f"{where}.near_points", "must be at least 0 (0: off)")
    if not 0 <= tech.tolerance < 0.5:
        fail(f"{where}.tolerance", "must be within [0, 0.5)")
    if not 0 <= tech.jump <= 1:
        fail(f"{where}.jump", "must be within [0, 1] (a share of d(base, c); 0: off)")
    if tech.leaf_hosts < 0:
        fail(f"{where}.leaf_hosts", "must be at least 0 (0: off)")
    if not 0 <= tech.snap <= 1:
        fail(f"{where}.snap", "must be within [0, 1] (a share of c's leaf; 0: off)")
    if tech.leaf_sample < 0:
        fail(f"{where}.leaf_sample", "must be at least 0 (0: as branch_sample allows)")
    if tech.trees < 1:
        fail(f"{where}.trees", "must be at least 1")
    if not 0 <= tech.tree_quantile <= 1:
        fail(f"{where}.tree_quantile", "must be within 0..1 (0.5: the median)")
    if tech.round_above_ms is not None and not tech.round_above_ms > 0:
        fail(f"{where}.round_above_ms", "must be a positive number of ms")


def _check_gnp(tech: GnpTechnique, where: str, fail: Callable[[str, str], None]) -> None:
    if not 1 <= tech.dims <= 16:
        fail(f"{where}.dims", f"must be within 1..16, not {tech.dims}")
    if tech.landmarks < tech.dims + 1:
        fail(f"{where}.landmarks", f"must be at least dims + 1 = {tech.dims + 1}")
    if tech.landmark_starts < 1 or tech.host_starts < 1:
        fail(where, "landmark_starts and host_starts must be at least 1")


def _check_vivaldi(tech: VivaldiTechnique, where: str, fail: Callable[[str, str], None]) -> None:
    if not 1 <= tech.dims <= 64:
        fail(f"{where}.dims", f"must be within 1..64, not {tech.dims}")
    for name in ("cc", "ce"):
        if not 0 < getattr(tech, name) <= 1:
            fail(f"{where}.{name}", "must be within (0, 1]")
    if isinstance(tech.rounds, int) and tech.rounds < 1:
        fail(f"{where}.rounds", 'must be at least 1, or "n2" or "nlogn"')
    if tech.neighbours is not None and tech.neighbours < 1:
        fail(f"{where}.neighbours", "must be at least 1 (or left out: any host)")
    if not 0 <= tech.nearby <= (tech.neighbours or 0):
        fail(f"{where}.nearby", "must be within 0..neighbours")


_TECHNIQUE_CHECKS = {
    DtmTechnique: _check_dtm,
    GnpTechnique: _check_gnp,
    VivaldiTechnique: _check_vivaldi,
}


def _check_predict(spec: PredictSpec, source: str) -> None:
    def fail(field: str, reason: str) -> None:
        raise InputError(f"{field}: {reason}", source=source)

    _check_topology(spec.topology, fail)
    if isinstance(spec.seeds, int) and spec.seeds < 1:
        fail("seeds", f"need at least one seed, not {spec.seeds}")
    if isinstance(spec.seeds, list) and (not spec.seeds or len(set(spec.seeds)) != len(spec.seeds)):
        fail("seeds", f"need distinct seeds, got {spec.seeds}")
    if spec.engine == "emu" and "{seed}" in spec.topology.ref:
        fail("topology.ref", "the emulator runs one map: no {seed} in the ref")
    if spec.ping_concurrency < 1:
        fail("ping_concurrency", "must be at least 1")
    if not (math.isfinite(spec.probe_rate) and spec.probe_rate > 0):
        fail("probe_rate", "must be a positive number of Pings per second")
    if not spec.techniques:
        fail("techniques", "need at least one technique")
    for tech in spec.techniques:
        if not tech.name:
            tech.name = type(tech).__struct_config__.tag
    names = [t.name for t in spec.techniques]
    if len(set(names)) != len(names):
        fail("techniques", f"need distinct names, got {names}")
    for k, tech in enumerate(spec.techniques):
        where = f"techniques.{k} ({tech.name})"
        if tech.samples < 1:
            fail(f"{where}.samples", f"must be at least 1, not {tech.samples}")
        if tech.stream < 0:
            fail(f"{where}.stream", f"must be at least 0 (0: the default), not {tech.stream}")
        _TECHNIQUE_CHECKS[type(tech)](tech, where, fail)  # type: ignore[arg-type]
    for name in ("sigma", "spike", "spike_scale"):
        value = getattr(spec.noise, name)
        if not (math.isfinite(value) and value >= 0):
            fail(f"noise.{name}", "must be a finite number >= 0")
    if spec.noise.spike > 1:
        fail("noise.spike", "is a probability: within 0..1")
    if spec.boundary_ms is not None and not spec.boundary_ms > 0:
        fail("boundary_ms", "must be a positive number of ms")
    if spec.workers < 0:
        fail("workers", "must be >= 0 (0: one per core)")
    if spec.cluster is not None and spec.engine == "emu":
        _check_network_cluster(spec.cluster, fail)
    elif spec.cluster is not None and (why := cluster_address_problem(spec.cluster)):
        fail("cluster", why)


_CLUSTER_ADDRESS_RE = re.compile(r"^(ray://)?[A-Za-z0-9][A-Za-z0-9.-]{0,252}:[0-9]{1,5}$")


def cluster_address_problem(address: str) -> str | None:
    """Why `address` cannot name a Ray cluster, or None: "local" (one started on
    this machine for the command), "auto" (the one `ray start` runs here), or
    HOST:PORT / ray://HOST:PORT."""
    if address in ("local", "auto"):
        return None
    match = _CLUSTER_ADDRESS_RE.match(address)
    if match is None or not 0 < int(address.rsplit(":", 1)[1]) < 65536:
        return (
            f'{address!r} is not a Ray cluster: expected "local", "auto", HOST:PORT '
            "or ray://HOST:PORT"
        )
    return None


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply key=value overrides (dotted keys, list indices as numbers) to a copy of data.

    Raises:
        InputError: a malformed override or a path that goes through a non-table.
    """
    data = copy.deepcopy(data)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise InputError(
                f"--set {item!r}: expected key=value, e.g. topology.hosts=128", source="<--set>"
            )
        parts = key.strip().split(".")
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise InputError(
                        f"--set {key}: {where} is not an index of a list of {len(node)}",
                        source="<--set>",
                    )
                node = node[int(part)]
            elif isinstance(node, dict):
                node = node.setdefault(part, {})
            else:
                raise InputError(f"--set {key}: {where} is not a table", source="<--set>")
        last = parts[-1]
        if isinstance(node, list):
            if not last.isdigit() or int(last) >= len(node):
                raise InputError(
                    f"--set {key}: {last} is not an index of a list of {len(node)}",
                    source="<--set>",
                )
            node[int(last)] = _parse_value(text)
        elif isinstance(node, dict):
            node[last] = _parse_value(text)
        else:
            raise InputError(f"--set {key}: the parent is not a table", source="<--set>")
    return data


def load_spec(
    path: str | Path | None, overrides: list[str] = (), *, defaults: dict[str, Any] | None = None
) -> tuple[ExperimentSpec, dict[str, Any]]:
    """Read, override and validate an overlay experiment spec (kind = "can").
    Returns (spec, the effective data as a dict)."""
    spec, data = load_any_spec(path, overrides, defaults=defaults)
    if not isinstance(spec, ExperimentSpec):
        raise InputError(
            f"kind: expected an overlay experiment ('can'), not {spec.kind!r}", source=str(path)
        )
    return spec, data


def load_any_spec(
    path: str | Path | None, overrides: list[str] = (), *, defaults: dict[str, Any] | None = None
) -> tuple[ExperimentSpec | PredictSpec | ClusterSpec | SchedSpec | ProgramSpec, dict[str, Any]]:
    """Read, override and validate a spec of any kind. Returns (spec, the effective data)."""
    source = str(path) if path is not None else "<spec>"
    data: dict[str, Any] = dict(defaults or {})
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError("no such spec file", source=source) from None
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"not valid TOML: {exc}", source=source) from None
    data = apply_overrides(data, list(overrides))
    spec = _convert(data, source)
    return spec, msgspec.to_builtins(spec)


# -- cluster specs (kind = "cluster") -----------------------------------------------------------------


def _default_prediction() -> DtmTechnique:
    return DtmTechnique(trees=9, tolerance=0.0)


class BalanceSpec(msgspec.Struct, forbid_unknown_fields=True):
    """How the decentralised schedulers balance (seed 002 §4.2; the periods are
    not given by the thesis)."""

    period_s: float = 10.0  # every node runs DLB / QB this often
    update_s: float = 10.0  # CAN maintenance: residue and maxQL are this stale at most
    neighbours: Literal["direct", "indirect"] = "indirect"


class SchedSpec(msgspec.Struct, forbid_unknown_fields=True):
    """A trace scheduled on a grid's clusterings (docs/workloads.md): the
    decentralised schedulers of seed 002 chapter 4 (STATIC, QB, DLB, QB+DLB, at
    each over-provisioning level) beside the idealised central FCFS baseline."""

    kind: Literal["sched"]
    workload: WorkloadSpec
    name: str = "sched"
    seed: int = 1
    topology: TopologySpec = msgspec.field(default_factory=TopologySpec)
    label: str = "cluster"  # the topology label the static clusterings cut up
    clusterings: list[str] = msgspec.field(
        default_factory=lambda: ["ACTUAL", "DISJOINT-64", "OVERLAP-64"]
    )
    schedulers: list[Literal["central", "static", "qb", "dlb", "qb+dlb"]] = msgspec.field(
        default_factory=lambda: ["central", "qb+dlb"]
    )
    overprovision: list[float | Literal["total"]] = msgspec.field(default_factory=lambda: ["total"])
    latency_ms: float = (
        0.2  # every parallel job's latency bound (the SHARCNET interconnects: <= 150 us)
    )
    balance: BalanceSpec = msgspec.field(default_factory=BalanceSpec)
    # DYN-<n> and DYN-SYM-<n>: refined (serialized, seed 002 §5.1) from DTM's predictions
    diameter_ms: float = 0.010
    criterion: Literal["fcfs", "global", "greedy"] = "global"
    aggregate: int = 2
    prediction: DtmTechnique = msgspec.field(default_factory=_default_prediction)
    workers: int = 1  # processes scheduling clusterings side by side; 0: one per core
    cluster: str | None = (
        None  # schedule each clustering as a Ray task there ("local" or an address)
    )


# What D, N, M and the criterion are (top level) and what the agents' timing is
# ([refinement]) both belong to the peers' ClusterConfig, whose fields they embed.
_POLICY = frozenset({"diameter_ms", "size", "memberships", "criterion"})

# [refinement]: how DYN and DYN-SYM are refined: by every peer's agent over the network
# (distributed, seed 002 §5.1.4, in the simulator) or as the serialized reference of §5.1.
# The agents' timing is ClusterConfig's, in seconds of the run, but for two defaults: the
# thesis's 30 s of stability and 5 s of waiting are for candidates that trickle in; here
# every head is given its candidates in the first second, so 5 s and 2 s suffice.
RefinementSpec = _embedding(
    "RefinementSpec",
    ClusterConfig,
    [
        ("mode", Literal["distributed", "serialized"], "distributed"),
        ("limit_s", float, 600.0),  # give up (and say so) if not every peer is STEADY by then
    ],
    omit=_POLICY,
    defaults={"stable_s": 5.0, "wait_s": 2.0},
)


def _clustering_names(self: Any) -> list[str]:
    return [c.replace("{N}", str(self.size)) for c in self.clusterings]


# kind = "cluster": clusterings side by side (docs/clusters.md): DYN and DYN-SYM from DTM's
# predictions and all-pairs measurements (seed 002 §5.1), and the static ones from a topology
# label. D, N, M and the criterion are ClusterConfig's; D defaults to the SHARCNET grid's 10 us.
ClusterSpec = _embedding(
    "ClusterSpec",
    ClusterConfig,
    [
        ("kind", Literal["cluster"]),
        ("name", str, "cluster"),
        ("seed", int, 1),
        ("topology", TopologySpec, msgspec.field(default_factory=TopologySpec)),
        ("label", str, "cluster"),  # the topology label the static clusterings cut up
        ("aggregate", int, 2),  # candidates gathered: this many times N
        (
            "clusterings",
            list[str],
            msgspec.field(
                default_factory=lambda: ["DYN", "DYN-SYM", "DISJOINT-{N}", "OVERLAP-{N}", "ACTUAL"]
            ),
        ),
        ("prediction", DtmTechnique, msgspec.field(default_factory=_default_prediction)),
        ("noise", NoiseSpec, msgspec.field(default_factory=NoiseSpec)),
        ("refinement", RefinementSpec, msgspec.field(default_factory=RefinementSpec)),
    ],
    only=_POLICY,
    defaults={"diameter_ms": 0.010},
    namespace={"clustering_names": _clustering_names},
)


def agent_config(spec: Any) -> ClusterConfig:
    """The peers' ClusterConfig of a cluster spec: its policy and its [refinement] timing."""
    return ClusterConfig(
        **config_fields(ClusterConfig, spec), **config_fields(ClusterConfig, spec.refinement)
    )


def _check_sched(spec: SchedSpec, source: str) -> None:
    def fail(field: str, reason: str) -> None:
        raise InputError(f"{field}: {reason}", source=source)

    _check_topology(spec.topology, fail)
    _check_workload(spec.workload, fail, "workload")
    if not spec.clusterings:
        fail("clusterings", "name at least one clustering")
    for name in spec.clusterings:
        if not re.fullmatch(
            r"ACTUAL|(DISJOINT|OVERLAP|DYN|DYN-SYM)-[1-9][0-9]*", name.strip().upper()
        ):
            fail(
                "clusterings",
                f"{name!r}: expected ACTUAL, DISJOINT-<n>, OVERLAP-<n>, DYN-<n> or DYN-SYM-<n>",
            )
    if not spec.schedulers:
        fail("schedulers", "name at least one scheduler")
    if spec.workers < 0:
        fail("workers", "must be >= 0 (0: one per core)")
    if spec.cluster is not None and (why := cluster_address_problem(spec.cluster)):
        fail("cluster", why)
    if not spec.overprovision:
        fail("overprovision", 'name at least one level ("total" or a factor >= 1)')
    for level in spec.overprovision:
        if level != "total" and not (math.isfinite(level) and level >= 1):
            fail("overprovision", f'{level!r}: expected "total" or a factor >= 1')
    for field in ("latency_ms", "diameter_ms"):
        value = getattr(spec, field)
        if not (math.isfinite(value) and value > 0):
            fail(field, f"must be a positive number of ms, not {value}")
    for field in ("period_s", "update_s"):
        value = getattr(spec.balance, field)
        if not (math.isfinite(value) and value > 0):
            fail(f"balance.{field}", f"must be a positive number of seconds, not {value}")
    if spec.aggregate < 1:
        fail("aggregate", f"must be at least 1, not {spec.aggregate}")


def _check_cluster(spec: Any, source: str) -> None:
    def fail(field: str, reason: str) -> None:
        raise InputError(f"{field}: {reason}", source=source)

    _check_topology(spec.topology, fail)
    policy = {name: getattr(spec, name) for name in _POLICY}
    _embedded_config(ClusterConfig, spec, "", fail)
    _embedded_config(ClusterConfig, spec.refinement, "refinement", fail, **policy)
    # A run's clusters are stricter than an agent's: one of a single peer schedules nothing.
    if spec.size < 2:
        fail("size", f"a cluster holds at least 2 peers, not {spec.size}")
    if spec.aggregate < 1:
        fail("aggregate", f"must be at least 1, not {spec.aggregate}")
    if not (math.isfinite(spec.refinement.limit_s) and spec.refinement.limit_s > 0):
        fail(
            "refinement.limit_s",
            f"must be a positive number of seconds, not {spec.refinement.limit_s}",
        )
    if spec.refinement.samples > 100:
        fail("refinement.samples", f"must be an integer in 1..100, not {spec.refinement.samples}")
    for name in spec.clustering_names():
        if name.upper() in ("DYN", "DYN-SYM"):
            continue
        if not re.fullmatch(r"ACTUAL|(DISJOINT|OVERLAP)-[1-9][0-9]*", name.strip().upper()):
            fail(
                "clusterings",
                f"{name!r}: expected DYN, DYN-SYM, ACTUAL, DISJOINT-<n> or OVERLAP-<n>",
            )
