# Running a cluster spec (kind = "cluster"): DTM's predictions for the grid,
# the serialized refinement of seed 002 §5.1 on them (DYN, DYN-SYM), the static
# clusterings of §4.3.4 from a topology label, and the quality of each judged
# against the configured matrix (testbed/analysis/cluster_quality.py).
#
# Run folder: spec.toml, clusters.json (every clustering: what each peer
# advertises), summary.json (`clusters.<name>.{count, size_p50, size_max,
# membership_max, accuracy}`, the violations of N, M and D with their peers,
# measurements per peer).

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from node.can.geometry import Dimension, Space
from node.can.overlay import CanConfig
from node.cluster import static_clustering
from node.cluster.refine import candidate_clusters, refine
from node.coord.probe import ProbeConfig
from node.peer import NodeConfig
from testbed.analysis.cluster_quality import cluster_quality
from testbed.analysis.stats import quantiles
from testbed.errors import InputError
from testbed.experiments.predict import Noise, predict_dtm
from testbed.experiments.run import Report, Run, RunResult
from testbed.linkmodel import LinkModel
from testbed.net import new_run_id, plan_network
from testbed.sim import Simulator
from testbed.spec import ClusterSpec, TopologySpec, agent_config
from testbed.topology import Topology, resolve_topology

__all__ = ["labelled_grid", "refine_distributed", "run_clusters"]

# How often the simulated run looks whether every peer is STEADY.
CONVERGED_POLL_S = 1.0


def labelled_grid(spec: TopologySpec, seed: int, label: str | None) -> tuple[Topology, list[str]]:
    """The spec's grid (`{seed}` in its reference is the run's seed) and each
    host's `label` value, which every host must have (none asked: an empty list)."""
    topology = resolve_topology(spec, seed)
    if label is None:
        return topology, []
    groups = [lab.get(label) for lab in topology.labels] if topology.labels else []
    if not groups or any(g is None for g in groups):
        raise InputError(
            f"label: the static clusterings need every host labelled {label!r}; "
            f"{topology.source} has {'no labels' if not groups else 'hosts without it'}",
            source="<spec>",
        )
    return topology, groups


def run_clusters(
    spec: ClusterSpec,
    data: dict[str, Any],
    *,
    out: str | Path | None = None,
    report: Report | None = None,
) -> RunResult:
    """Build each of the spec's clusterings on its grid and measure them against the
    matrix; writes clusters.json (every clustering's clusters) and summary.json."""
    say = (report or Report()).say
    static = [n for n in spec.clustering_names() if n.upper() not in ("DYN", "DYN-SYM")]
    topology, groups = labelled_grid(spec.topology, spec.seed, spec.label if static else None)
    with Run(spec.name, data, out) as run:
        rtt = np.asarray(topology.rtt_ms, dtype=np.float64)
        truth = (rtt + rtt.T) / 2
        memberships = agent_config(spec).max_memberships
        started = time.monotonic()
        advertised: dict[str, list[tuple[int, ...]]] = {}
        figures: dict[str, Any] = {}
        if len(static) < len(spec.clustering_names()):
            figures = _dynamic(spec, topology, rtt, truth, memberships, advertised, say)
        for name in static:
            advertised[name.upper()] = static_clustering(name, groups)
        clusters = {}
        for name in spec.clustering_names():
            key = name.upper()
            clusters[key] = cluster_quality(
                advertised[key],
                truth,
                spec.diameter_ms,
                max_size=spec.size,
                max_memberships=memberships,
            )
        run.write_json("clusters.json", {k: [list(c) for c in v] for k, v in advertised.items()})
        return run.finish(
            {
                "name": spec.name,
                "kind": "cluster",
                "seed": spec.seed,
                "hosts": topology.n,
                "topology": topology.source,
                "diameter_ms": spec.diameter_ms,
                "size": spec.size,
                "memberships": memberships,
                "criterion": spec.criterion,
                "clusters": clusters,
                **figures,
                "wall_s": round(time.monotonic() - started, 1),
            }
        )


def _dynamic(
    spec: ClusterSpec,
    topology: Topology,
    rtt: np.ndarray,
    truth: np.ndarray,
    memberships: int,
    advertised: dict[str, list[tuple[int, ...]]],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """DYN and DYN-SYM (into `advertised`): DTM's predictions, then refinement, serialized
    or by every peer's agent; returns their figures for the summary."""
    started = time.monotonic()
    figures: dict[str, Any] = {}
    say(f"DTM predictions ({spec.prediction.trees} trees, {topology.n} hosts)")
    noise = Noise(spec.noise.sigma, spec.noise.spike, spec.noise.spike_scale)
    predicted, probes = predict_dtm(rtt, spec.prediction, spec.seed, noise)
    predict_s = time.monotonic() - started
    rng = random.Random(f"{spec.seed}/refine")
    if spec.refinement.mode == "serialized":
        say("refinement (serialized)")
        refined = refine(
            predicted,
            truth,
            spec.diameter_ms,
            spec.size,
            memberships,
            criterion=spec.criterion,
            rng=rng,
            aggregate=spec.aggregate,
        )
        advertised["DYN"] = refined.filtered
        advertised["DYN-SYM"] = refined.symmetric
        filtering = refined.measurements
    else:
        candidates = candidate_clusters(predicted, spec.diameter_ms, spec.size, rng, spec.aggregate)
        dyn = refine_distributed(spec, topology, candidates, say)
        advertised["DYN"], advertised["DYN-SYM"] = dyn.own, dyn.advertised
        filtering = dyn.measured
        figures["distributed"] = dyn.figures
    figures["measurements_per_peer"] = {
        "prediction": quantiles(probes.tolist()),
        "filtering": quantiles(filtering),
    }
    figures["prediction_s"] = round(predict_s, 1)
    figures["refinement_s"] = round(time.monotonic() - started - predict_s, 1)
    return figures


@dataclass
class Distributed:
    own: list[tuple[int, ...]]  # DYN: each peer's own job-ready cluster
    advertised: list[tuple[int, ...]]  # DYN-SYM
    measured: list[int]  # RTT measurements each peer made
    figures: dict[str, Any]


def refine_distributed(
    spec: ClusterSpec,
    topology: Topology,
    candidates: list[tuple[int, ...]],
    say: Callable[[str], None],
) -> Distributed:
    """Every peer's cluster agent (seed 002 §5.1.4) in the simulator, each head
    given its candidate cluster at a random moment of the first second; runs
    until every peer is STEADY (or refinement.limit_s)."""
    ref = spec.refinement
    node = NodeConfig(
        CanConfig(Space([Dimension("v", 0.0, 1.0, virtual=True)])),
        probe=ProbeConfig(rate=2000.0, max_pending=4096),
        cluster=agent_config(spec),
    )
    n = topology.n
    plan = plan_network(n, new_run_id())
    sim = Simulator(
        LinkModel(topology.one_way_ms() / 1e3),
        seed=spec.seed,
        ips=[h.ip for h in plan.hosts],
    )
    rng = random.Random(f"{spec.seed}/agents")
    for host in range(n):
        sim.start_peer(host, node, (rng.random(),))
    for host in range(n):
        sim.at(rng.random(), lambda h=host: sim.set_cluster_candidates(h, candidates[h][1:]))
    wall0 = time.monotonic()

    def settled() -> int:
        return sum(
            1
            for p in sim.peers.values()
            if p.cluster is not None
            and p.cluster.head_state == p.cluster.client_state == "STEADY"
            and not p.cluster.dump()["pending"]
        )

    while sim.now < ref.limit_s:
        sim.run_until(sim.now + CONVERGED_POLL_S)
        done = settled()
        say(f"distributed refinement: t={sim.now:.0f} s, {done}/{n} peers STEADY")
        if done == n and sim.now > 2 * ref.stable_s:
            break
    host = {a: k for k, a in enumerate(sim.addresses)}
    peers = [sim.peers[h] for h in range(n)]
    agents = [p.cluster for p in peers if p.cluster is not None]
    tx = [p.counters["tx"] for p in peers]
    return Distributed(
        own=[tuple(sorted(host[a] for a in a_.own)) for a_ in agents],
        advertised=[tuple(sorted(host[a] for a in a_.advertised())) for a_ in agents],
        measured=[a_.counters["measured"] for a_ in agents],
        figures={
            "converged": settled() == n,
            "steady_at_s": round(sim.now, 1),
            "messages_per_peer": quantiles(tx),
            "rounds_per_head": quantiles([a_.counters["rounds"] for a_ in agents]),
            "datagrams": sim.stats["sent"],
            "wall_s": round(time.monotonic() - wall0, 1),
        },
    )
