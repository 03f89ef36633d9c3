# Running a cluster spec (kind = "cluster"): DTM's predictions for the grid,
# the serialized refinement of seed 002 §5.1 on them (DYN, DYN-SYM), the static
# clusterings of §4.3.4 from a topology label, and the quality of each judged
# against the configured matrix (testbed/analysis/clusters.py).
#
# Run folder: spec.toml, clusters.json (every clustering: what each peer
# advertises), summary.json (`clusters.<name>.{count, size_p50, size_max,
# membership_max, accuracy}`, the violations of N, M and D with their peers,
# measurements per peer).

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from node.cluster import static_clustering
from node.cluster.refine import refine
from testbed.analysis.clusters import cluster_quality
from testbed.analysis.stats import quantiles
from testbed.errors import InputError
from testbed.predict import Noise, predict_dtm
from testbed.runs import new_run_dir, strip_none, write_json
from testbed.spec import ClusterSpec
from testbed.topology import load_topology

__all__ = ["run_clusters"]


def run_clusters(
    spec: ClusterSpec,
    data: dict[str, Any],
    *,
    out: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Run the spec; returns (run folder, summary)."""
    say = progress or (lambda _: None)
    ref = spec.topology.ref.replace("{seed}", str(spec.seed))
    topology = load_topology(ref)
    pick = spec.topology.pick
    topology = topology.select(
        spec.topology.hosts, pick=pick, seed=spec.seed if pick == "random" else None
    ).scaled(spec.topology.scale)
    groups = [label.get(spec.label) for label in topology.labels] if topology.labels else []
    static = [n for n in spec.clustering_names() if n.upper() not in ("DYN", "DYN-SYM")]
    if static and (not groups or any(g is None for g in groups)):
        raise InputError(
            f"label: the static clusterings need every host labelled {spec.label!r}; "
            f"{topology.source} has {'no labels' if not groups else 'hosts without it'}",
            source="<spec>",
        )
    run_dir = new_run_dir(spec.name, out)
    (run_dir / "spec.toml").write_text(tomli_w.dumps(strip_none(data)))
    rtt = np.asarray(topology.rtt_ms, dtype=np.float64)
    truth = (rtt + rtt.T) / 2
    memberships = spec.memberships if spec.memberships is not None else spec.size
    started = time.monotonic()
    advertised: dict[str, list[tuple[int, ...]]] = {}
    figures: dict[str, Any] = {}
    if len(static) < len(spec.clustering_names()):
        say(f"DTM predictions ({spec.prediction.trees} trees, {topology.n} hosts)")
        noise = Noise(spec.noise.sigma, spec.noise.spike, spec.noise.spike_scale)
        predicted, probes = predict_dtm(rtt, spec.prediction, spec.seed, noise)
        predict_s = time.monotonic() - started
        say("refinement")
        refined = refine(
            predicted,
            truth,
            spec.diameter_ms,
            spec.size,
            memberships,
            criterion=spec.criterion,
            rng=random.Random(f"{spec.seed}/refine"),
            aggregate=spec.aggregate,
        )
        advertised["DYN"] = refined.filtered
        advertised["DYN-SYM"] = refined.symmetric
        figures["measurements_per_peer"] = {
            "prediction": quantiles(probes.tolist()),
            "filtering": quantiles(refined.measurements),
        }
        figures["prediction_s"] = round(predict_s, 1)
        figures["refinement_s"] = round(time.monotonic() - started - predict_s, 1)
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
    write_json(run_dir / "clusters.json", {k: [list(c) for c in v] for k, v in advertised.items()})
    summary = {
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
    write_json(run_dir / "summary.json", summary)
    return run_dir, summary
