# Removing what testbed runs left behind, and counting what is left.
#
# Everything a run creates lives in its namespaces ("tb<run>-core",
# "tb<run>-h<k>"): links, addresses, routes, the NFQUEUE rule, and every
# process it starts (engine, shells, user commands). So cleaning a run is:
# kill every process in its namespaces, then unmount the namespaces. Nothing
# is searched for by process name (no killall), and nothing outside our
# namespaces is touched. Container hosts are Docker containers labelled with the
# run's id: those are removed too (docker rm -f), and no other container.

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass, field
from typing import Any

from pyroute2 import IPRoute

from testbed.net._cluster import (
    Cluster,
    cluster_down,
    leftover_local_clusters,
    remove_leftover_cluster,
)
from testbed.net._containers import remove_containers, run_containers
from testbed.net._netns import kill_processes, list_netns, netns_id, pids_in_netns, remove_netns
from testbed.net._plan import NETNS_PREFIX_RE
from testbed.net._registry import list_runs
from testbed.pool import cluster_records, ray_session

__all__ = ["CleanReport", "RootSnapshot", "clean", "clean_machines", "netns_of_run"]


@dataclass
class CleanReport:
    runs: list[str] = field(default_factory=list)
    netns_removed: list[str] = field(default_factory=list)
    processes_killed: list[int] = field(default_factory=list)
    live_runs_skipped: list[str] = field(default_factory=list)
    still_alive: list[int] = field(default_factory=list)
    containers_removed: list[str] = field(default_factory=list)
    clusters_removed: list[str] = field(default_factory=list)
    live_clusters_skipped: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def nothing_done(self) -> bool:
        return not (
            self.runs
            or self.netns_removed
            or self.processes_killed
            or self.containers_removed
            or self.clusters_removed
        )


def netns_of_run(run_id: str | None = None) -> dict[str, list[str]]:
    """Our namespaces on this machine, by run id (only `run_id` if given)."""
    found: dict[str, list[str]] = {}
    for name in list_netns():
        match = NETNS_PREFIX_RE.match(name)
        if match and (run_id is None or match.group(1) == run_id):
            found.setdefault(match.group(1), []).append(name)
    return found


def remove_run(
    netns: list[str], extra_pids: list[int] = ()
) -> tuple[list[int], list[int], list[str]]:
    """Kill every process in `netns` (and `extra_pids`), then remove the namespaces.

    Returns (pids signalled, pids still alive, namespaces removed).
    """
    ids = []
    for name in netns:
        with contextlib.suppress(FileNotFoundError):
            ids.append(netns_id(name))
    pids = sorted(set(pids_in_netns(ids)) | {p for p in extra_pids if _exists(p)})
    alive = kill_processes(pids, grace_s=1.0) if pids else []
    removed = [name for name in netns if remove_netns(name)]
    return pids, alive, removed


def _exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def clean(*, force: bool = False, run_id: str | None = None) -> CleanReport:
    """Remove the namespaces and processes of runs whose owner is gone.

    Args:
        force: also remove runs whose owning testbed process is still alive.
        run_id: only this run (or local cluster: the id in tb<id>-m1).
    """
    report = CleanReport()
    records = {r.run_id: r for r in list_runs() if run_id is None or r.run_id == run_id}
    namespaces = netns_of_run(run_id)
    boxes = run_containers(run_id)
    for rid in sorted(set(records) | set(namespaces) | set(boxes)):
        record = records.get(rid)
        if record is not None and record.owner_alive() and not force:
            report.live_runs_skipped.append(rid)
            continue
        if rid in boxes:  # first: their processes are in the run's namespaces too
            problems = remove_containers(rid)
            report.problems += problems
            if not problems:
                report.containers_removed += boxes[rid]
        netns = sorted(set(namespaces.get(rid, [])) | (set(record.netns) if record else set()))
        pids, alive, removed = remove_run(netns, record.pids if record else [])
        report.runs.append(rid)
        report.processes_killed += pids
        report.still_alive += alive
        report.netns_removed += removed
        if record is not None and not alive:
            record.remove()
    _clean_clusters(report, force, run_id)
    return report


def _clean_clusters(report: CleanReport, force: bool, only: str | None) -> None:
    """Local clusters a killed `testbed cluster up` left (namespaces no record names);
    with force, also the clusters that are up (as `testbed cluster down`). `only`:
    that cluster id alone (a run id names no cluster: nothing)."""
    for cid, netns in sorted(leftover_local_clusters().items()):
        if only is not None and cid != only:
            continue
        report.netns_removed += remove_leftover_cluster(cid, netns)
        report.clusters_removed.append(cid)
    for record in cluster_records():
        if only is not None and record["id"] != only:
            continue
        cluster = Cluster.load(record)
        if cluster.starting_elsewhere() or (cluster.state == "up" and not force):
            report.live_clusters_skipped.append(cluster.id)
            continue
        down = cluster_down(cluster)  # up (with force), or a killed `up`'s
        report.problems += down["problems"]
        report.netns_removed += down["netns_removed"]
        report.clusters_removed.append(cluster.id)


@dataclass(frozen=True)
class RootSnapshot:
    """What the root namespace holds that a run could leak: veth links and NFQUEUE rules."""

    veth_links: frozenset[str]
    nfqueue_rules: int

    @classmethod
    def take(cls) -> RootSnapshot:
        """The veth pairs with both ends in the root namespace (a run never makes one:
        its pairs join a host to the core; one whose other end is in some namespace
        belongs to that namespace, and goes with it: another run's, a container's, a
        local cluster's, none of this run's business) and the NFQUEUE rules."""
        with IPRoute() as ipr:
            veths = frozenset(
                link.get("ifname")
                for link in ipr.get_links()
                if (link.get(("IFLA_LINKINFO", "IFLA_INFO_KIND")) or "") == "veth"
                and link.get("IFLA_LINK_NETNSID") is None
            )
        return cls(veths, _count_nfqueue_rules())


def _count_nfqueue_rules() -> int:
    total = 0
    for tool in ("iptables-save", "iptables-legacy-save"):
        try:
            out = subprocess.run(
                [tool], capture_output=True, text=True, check=False, timeout=10
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        total += sum(1 for line in out.splitlines() if "NFQUEUE" in line)
    return total


def leftovers(
    run_id: str, recorded_pids: list[int], before: RootSnapshot, *, containers: bool = False
) -> dict[str, int]:
    """Count what a finished run left: its namespaces, its processes, new veth links
    or NFQUEUE rules in the root namespace since `before`, and (if it had any) its
    containers."""
    after = RootSnapshot.take()
    namespaces = sum(len(v) for v in netns_of_run(run_id).values())
    processes = sum(1 for pid in recorded_pids if _exists(pid))
    links = len(after.veth_links - before.veth_links)
    rules = max(0, after.nfqueue_rules - before.nfqueue_rules)
    counts = {"netns": namespaces, "links": links, "rules": rules, "processes": processes}
    if containers:
        counts["containers"] = len(run_containers(run_id).get(run_id, []))
    return counts


def clean_machines(cluster: Cluster, run_id: str | None = None) -> list[dict[str, Any]]:
    """`testbed clean` on every machine of the cluster (runs killed there: their
    namespaces, processes, containers); each machine's report, in machine order.
    `run_id`: only the shares of that network across machines (tb<run_id><k>-...)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    shares = None if run_id is None else [f"{run_id}{k:x}" for k in range(len(cluster.machines))]
    with ray_session(cluster.head) as ray:
        nodes = {n["NodeManagerAddress"]: n for n in ray.nodes() if n.get("Alive")}
        task = ray.remote(num_cpus=0)(_clean_here)
        refs = [
            task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            ).remote(shares)
            for node in (nodes.get(m.address) for m in cluster.machines)
            if node is not None
        ]
        reports = ray.get(refs)
    return [
        {"machine": m.name, **report}
        for m, report in zip(
            (m for m in cluster.machines if m.address in nodes), reports, strict=True
        )
    ]


def _clean_here(run_ids: list[str] | None) -> dict[str, Any]:
    if run_ids is None:
        return dict(clean().__dict__)
    report = CleanReport()
    for rid in run_ids:  # which share a machine holds, only its registry knows
        for key, value in clean(run_id=rid).__dict__.items():
            getattr(report, key).extend(value)
    return dict(report.__dict__)
