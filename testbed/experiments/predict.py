# Latency prediction on a matrix, the simulator's way (seed 002 §5.2.3): each
# technique gets a measurement oracle that reads the matrix, adds the noise
# model's error to every sample, filters the samples of one measurement as a
# peer's prober would, and counts the samples each host sends. The predicted
# matrix is scored against the true one with testbed.analysis.prediction;
# runs with different seeds (join orders, landmark choices, Vivaldi's draws)
# are pooled pair by pair, as the thesis's CDFs are.

from __future__ import annotations

import functools
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from node.coord.dtm import Dtm, DtmConfig
from node.coord.gnp import GnpConfig, solve_host, solve_landmarks
from node.coord.probe import summarize
from node.coord.vivaldi import VivaldiConfig, embed
from testbed.analysis.prediction import boundary_errors, error_percentiles, pair_errors
from testbed.experiments.run import Report, Run, RunResult
from testbed.pool import run_tasks
from testbed.spec import (
    DtmTechnique,
    GnpTechnique,
    PredictSpec,
    Technique,
    TopologySpec,
    VivaldiTechnique,
)
from testbed.topology import resolve_topology

if TYPE_CHECKING:
    from testbed.topology import Topology

__all__ = [
    "PAPER",
    "PAPER_BOUNDARY",
    "Noise",
    "Oracle",
    "predict",
    "run_prediction",
]

# The thesis's figures (seed 002): relative error p50, p95, p99, max.
PAPER = {
    "5.2": {  # UMIACS, 151 hosts
        "dtm": (0.019, 0.209, 0.492, 21.75),
        "vivaldi": (0.122, 0.467, 0.701, 6.31),
        "gnp": (0.235, 0.891, 0.995, 29.66),
    },
    "5.4": {  # SHARCNET-style, 2,091 hosts
        "dtm": (0.00, 0.11, 0.37, 10_289.74),
        "gnp": (0.19, 1.94, 4.65, 84_287.44),
        "vivaldi-n2": (0.01, 97.00, 238.90, 8_077.81),
        "vivaldi-nlogn": (0.20, 5_031.89, 13_483.07, 89_768.45),
    },
    "5.5": {  # DTM variants on SHARCNET
        "dtm-lowest-quartile": (0.00, 0.089, 0.35, 8_077.81),
        "dtm-rejoin": (0.00, 0.28, 0.50, 2.06179),
        "dtm-round": (0.00, 0.090, 0.31, 9_329.09),
        "dtm": (0.00, 0.11, 0.37, 10_289.7),
    },
}
# Table 5.6: (positive, negative) error rates at the 10 us boundary.
PAPER_BOUNDARY = {
    "dtm-lowest-quartile": (0.99e-5, 0.030),
    "dtm-rejoin": (0.0, 0.022),
    "dtm-round": (1.0e-5, 0.013),
    "dtm": (1.4e-5, 0.022),
}


@dataclass(frozen=True)
class Noise:
    """Error added to every RTT sample: relative Gaussian noise (sigma), and with
    probability `spike` a delay of a Pareto-distributed multiple of the RTT
    (shape 2, scale `spike_scale`: a host or path that was busy)."""

    sigma: float = 0.0
    spike: float = 0.0
    spike_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("sigma", "spike", "spike_scale"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"noise.{name} must be a finite number >= 0, not {value!r}")
        if self.spike > 1:
            raise ValueError(f"noise.spike is a probability, not {self.spike!r}")

    def sample(self, rtt: float, rng: random.Random) -> float:
        value = rtt * max(0.0, 1.0 + rng.gauss(0.0, self.sigma)) if self.sigma else rtt
        if self.spike and rng.random() < self.spike:
            value += rtt * self.spike_scale * (rng.paretovariate(2.0) - 1.0)
        return value


class Oracle:
    """measure(a, b): one measurement of host a to host b, as a prober would make it."""

    def __init__(
        self, rtt: np.ndarray, noise: Noise, samples: int, how: str, rng: random.Random
    ) -> None:
        self.rtt = rtt
        self.noise = noise
        self.samples = samples
        self.how = how
        self.rng = rng
        self.probes = np.zeros(len(rtt), dtype=np.int64)  # samples sent, per host

    def __call__(self, a: int, b: int) -> float:
        self.probes[a] += self.samples
        true = float(self.rtt[a, b] + self.rtt[b, a]) / 2
        if not (self.noise.sigma or self.noise.spike):
            return true
        return summarize([self.noise.sample(true, self.rng) for _ in range(self.samples)], self.how)


def _dtm(
    n: int, oracle: Oracle | MeasuredOracle, rng: random.Random, tech: DtmTechnique
) -> np.ndarray:
    """DTM's prediction; with `tech.trees` > 1 a forest, each tree built in its own
    join order. A pair is predicted by the `tree_quantile` of its trees, or with
    `tree_choice = "fit"` by the tree that fits both hosts' own measurements best
    (_fittest). A host measures each other host once, whichever tree asks (its
    prober caches), so the choice costs no measurement."""
    config = dtm_config(tech)
    cache: dict[tuple[int, int], float] = {}

    def measure(a: int, b: int) -> float:
        value = cache.get((a, b))
        if value is None:
            value = cache[(a, b)] = oracle(a, b)
        return value

    # One tree in float64; a forest's trees in float32, written in place (15
    # trees of 2,091 hosts take 262 MB, and seeds run side by side).
    forest = np.empty((tech.trees, n, n), dtype=np.float64 if tech.trees == 1 else np.float32)
    for k in range(tech.trees):
        dtm = Dtm(config, rng if k == 0 else random.Random(rng.getrandbits(64)))
        order = list(range(n))
        rng.shuffle(order)
        for host in order:
            dtm.join(host, measure)
        if tech.rejoin:
            dtm.rejoin_all(measure)
        forest[k] = dtm.predict_all(list(range(n)))
    if tech.trees == 1:
        return forest[0]
    if tech.tree_choice == "fit":
        return _fittest(forest, cache)
    return np.quantile(forest, tech.tree_quantile, axis=0).astype(np.float64)


# A host's misfit in a tree counts one measurement's relative error up to this:
# a host split from its cluster in a tree is off by 10^3-10^4 towards its
# members, and one such figure should mark the tree, not outweigh all the rest.
_MISFIT_CAP = 10.0


def _fittest(forest: np.ndarray, measured: dict[tuple[int, int], float]) -> np.ndarray:
    """Each pair (a, b) from the tree t with the least misfit(t, a) + misfit(t, b),
    a host's misfit in a tree being the mean relative error (capped) of the tree's
    distances to the hosts it measured itself while joining any of the trees. A
    tree that misplaced a host (a wrong turn at its join, its cluster split, a
    pair of clusters bent) shows it in that host's own measurements, and each
    host can work its misfits out alone: no measurement is added."""
    trees, n, _ = forest.shape
    pairs = np.array(list(measured), dtype=np.int64).reshape(-1, 2)
    a, b = pairs[:, 0], pairs[:, 1]
    values = np.fromiter(measured.values(), dtype=np.float64, count=len(pairs))
    count = np.maximum(np.bincount(a, minlength=n), 1)
    misfit = np.empty((trees, n))
    for t in range(trees):
        error = np.abs(forest[t][a, b] - values) / np.maximum(values, 1e-12)
        misfit[t] = np.bincount(a, np.minimum(error, _MISFIT_CAP), minlength=n) / count
    out = np.empty((n, n))
    columns = np.arange(n)
    for i in range(n):
        best = np.argmin(misfit[:, i : i + 1] + misfit, axis=0)  # the first tree on a tie
        out[i] = forest[best, i, columns]
    return out


def _gnp(n: int, oracle: Oracle, rng: random.Random, config: GnpConfig) -> np.ndarray:
    marks = rng.sample(range(n), config.landmarks)
    among = [[oracle(a, b) if a != b else 0.0 for b in marks] for a in marks]
    landmarks = solve_landmarks(among, config, rng)
    coords = np.empty((n, config.dims))
    for host in range(n):
        if host in marks:
            coords[host] = landmarks[marks.index(host)]
        else:
            coords[host] = solve_host([oracle(host, m) for m in marks], landmarks, config, rng)
    return np.sqrt(((coords[:, None, :] - coords[None, :, :]) ** 2).sum(-1))


def _vivaldi(
    n: int,
    oracle: Oracle,
    rng: random.Random,
    config: VivaldiConfig,
    rounds: int,
    neighbours: list[list[int]] | None = None,
) -> np.ndarray:
    coords = embed(n, rounds, oracle, config, rng, neighbours)
    vec = np.array([c.vec for c in coords])
    height = np.array([c.height for c in coords])
    return (
        np.sqrt(((vec[:, None, :] - vec[None, :, :]) ** 2).sum(-1))
        + height[:, None]
        + height[None, :]
    )


def predict(
    rtt: np.ndarray,
    technique: str | Technique,
    seeds: list[int],
    *,
    noise: Noise | None = None,
    boundary: float | None = None,
) -> dict[str, Any]:
    """Run `technique` ("dtm", "gnp", "vivaldi" with their defaults, or a spec's
    technique) once per seed on the matrix `rtt` (ms) and pool the relative
    errors of all runs, as summary.json's `prediction.<technique>`."""

    if isinstance(technique, str):
        kinds = {"dtm": DtmTechnique, "gnp": GnpTechnique, "vivaldi": VivaldiTechnique}
        if technique not in kinds:
            raise ValueError(f"unknown technique {technique!r}; expected dtm, gnp or vivaldi")
        technique = kinds[technique](name=technique)
    rtt = np.asarray(rtt, dtype=np.float64)
    return _pool(
        [run_technique(rtt, technique, seed, noise or Noise(), boundary) for seed in seeds]
    )


# -- prediction specs (kind = "predict"): testbed run ---------------------------------------------

# Where each of the thesis's tables came from, for the printout beside ours.
PAPER_SOURCE = {
    "5.2": "UMIACS, 151 hosts (MPI all-to-all)",
    "5.4": "SHARCNET-style, 2,091 hosts",
    "5.5": "SHARCNET-style, 2,091 hosts",
    "5.6": "SHARCNET-style, 2,091 hosts, 10 us boundary",
}


def _vivaldi_rounds(rounds: int | str, n: int) -> int:
    if rounds == "n2":
        return n * n
    if rounds == "nlogn":
        return max(1, round(n * math.log2(n)))
    return int(rounds)


def _neighbours(rtt: np.ndarray, k: int, nearby: int, rng: random.Random) -> list[list[int]]:
    """Each host's k fixed Vivaldi neighbours: its `nearby` closest, the rest at random."""
    n = len(rtt)
    out = []
    for i in range(n):
        close = [int(j) for j in np.argsort(rtt[i], kind="stable") if j != i][:nearby]
        others = [j for j in range(n) if j != i and j not in close]
        out.append(close + rng.sample(others, min(k - len(close), len(others))))
    return out


class MeasuredOracle:
    """measure(a, b) from pings measured beforehand (the emulator's): the filter
    of the first `samples` RTTs host a measured to b (b's to a if a's were all lost)."""

    def __init__(self, samples_ms: list[list[list[float]]], samples: int, how: str) -> None:
        self.table = samples_ms
        self.samples = samples
        self.how = how
        self.probes = np.zeros(len(samples_ms), dtype=np.int64)

    def __call__(self, a: int, b: int) -> float:
        self.probes[a] += self.samples
        rtts = self.table[a][b][: self.samples] or self.table[b][a][: self.samples]
        if not rtts:
            raise ValueError(f"no ping between hosts {a} and {b} was answered")
        return summarize(rtts, self.how)


def dtm_config(tech: DtmTechnique) -> DtmConfig:
    return DtmConfig(
        simulated_joins=tech.simulated_joins,
        round_above=tech.round_above_ms,
        branch_sample=tech.branch_sample,
        near_points=tech.near_points,
        tolerance=tech.tolerance,
        jump=tech.jump,
        leaf_hosts=tech.leaf_hosts,
        snap=tech.snap,
        leaf_sample=tech.leaf_sample,
    )


def predict_dtm(
    rtt: np.ndarray, tech: DtmTechnique, seed: int, noise: Noise
) -> tuple[np.ndarray, np.ndarray]:
    """DTM's predicted matrix for `rtt` (measured with `noise`), and the samples each host sent."""
    oracle = Oracle(rtt, noise, tech.samples, tech.filter, random.Random(f"noise/{seed}"))
    predicted = _dtm(len(rtt), oracle, _choices(tech, seed), tech)
    return predicted, oracle.probes


def _choices(tech: Technique, seed: int) -> random.Random:
    """The technique's random choices for a seed: stream 0 is the one specs always had."""
    name = f"{type(tech).__struct_config__.tag}/{seed}"
    return random.Random(f"{name}/stream{tech.stream}" if tech.stream else name)


def run_technique(
    rtt: np.ndarray,
    tech: Technique,
    seed: int,
    noise: Noise,
    boundary: float | None,
    oracle: Oracle | MeasuredOracle | None = None,
) -> dict[str, Any]:
    """One technique, one seed, judged against the matrix `rtt` (ms) and measuring
    through `oracle` (default: `rtt` plus `noise`): the relative errors of all
    unordered pairs (float32), the samples each host sent, Table 5.6's rates."""

    n = len(rtt)
    rng = _choices(tech, seed)
    if oracle is None:
        oracle = Oracle(rtt, noise, tech.samples, tech.filter, random.Random(f"noise/{seed}"))
    started = time.process_time()
    if isinstance(tech, DtmTechnique):
        predicted = _dtm(n, oracle, rng, tech)
    elif isinstance(tech, GnpTechnique):
        config = GnpConfig(
            dims=tech.dims,
            landmarks=tech.landmarks,
            landmark_starts=tech.landmark_starts,
            host_starts=tech.host_starts,
        )
        predicted = _gnp(n, oracle, rng, config)
    else:
        config = VivaldiConfig(
            dims=tech.dims, cc=tech.cc, ce=tech.ce, adaptive=tech.adaptive, height=tech.height
        )
        neighbours = (
            _neighbours(rtt, tech.neighbours, tech.nearby, rng) if tech.neighbours else None
        )
        predicted = _vivaldi(n, oracle, rng, config, _vivaldi_rounds(tech.rounds, n), neighbours)
    errors, skipped = pair_errors(rtt, predicted)
    result: dict[str, Any] = {
        "technique": tech.name,
        "seed": seed,
        "errors": errors.astype(np.float32),
        **error_percentiles(errors, skipped).as_dict(),
        "probes_per_host": float(oracle.probes.mean()),
        "probes_per_host_max": int(oracle.probes.max()),
        "cpu_s": round(time.process_time() - started, 3),
    }
    if boundary is not None:
        result["boundary"] = boundary_errors(rtt, predicted, boundary)
    return result


Job = tuple["Technique", int, Noise, "float | None", "TopologySpec", int]


def _topology(topology: TopologySpec, seed: int, first: int) -> Topology:
    """A seed's map: its own where the ref has `{seed}`, else the first seed's for all."""
    return _map(
        topology.ref,
        topology.hosts,
        topology.pick,
        topology.scale,
        seed if "{seed}" in topology.ref else first,
    )


@functools.lru_cache(maxsize=2)
def _map(ref: str, hosts: int | None, pick: str, scale: float, seed: int) -> Topology:
    """resolve_topology, kept for the last two maps (a worker runs many jobs on one map)."""
    spec = TopologySpec(ref=ref, hosts=hosts, pick=pick, scale=scale)  # type: ignore[arg-type]
    return resolve_topology(spec, seed)


def _work(job: Job) -> dict[str, Any]:
    tech, seed, noise, boundary, topology, first = job
    rtt = np.asarray(_topology(topology, seed, first).rtt_ms, dtype=np.float64)
    return run_technique(rtt, tech, seed, noise, boundary)


def _results(jobs: list[Job], workers: int, ray: str | None) -> Iterator[dict[str, Any]]:
    """Each job's result, in the jobs' order (the pooled figures do not depend on
    which worker ended first)."""
    ended: dict[int, dict[str, Any]] = {}
    following = 0
    for k, result in run_tasks(_work, [(job,) for job in jobs], jobs=workers, ray=ray):
        ended[k] = result
        while following in ended:
            yield ended.pop(following)
            following += 1


def _emulated(
    spec: PredictSpec,
    run_dir: Path,
    noise: Noise,
    seeds: list[int],
    sim: dict[str, list[dict[str, Any]]],
    emu: dict[str, Any],
    on_ping: Callable[[int, int], None] | None,
) -> Iterator[dict[str, Any]]:
    """Ping on the emulator, then yield each technique and seed on those pings;
    the same run on the configured matrix goes to `sim`, the pings' figures to `emu`."""
    from testbed.engines.pings import ping_all_pairs  # pyroute2, Mininet: emulated runs only

    topology = _topology(spec.topology, seeds[0], seeds[0])
    n = len(topology.rtt_ms)
    table = ping_all_pairs(
        topology,
        run_dir,
        samples=max(t.samples for t in spec.techniques),
        rate=spec.probe_rate,
        clamp=spec.topology.clamp,
        seed=seeds[0],
        concurrency=spec.ping_concurrency,
        on_host=None if on_ping is None else lambda done: on_ping(done, n),
        cluster=spec.cluster,  # the pings on a network across the cluster's machines
    )
    emu.update(
        samples=max(t.samples for t in spec.techniques),
        rate_per_peer=spec.probe_rate,
        wall_s=round(table.wall_s, 3),
        lost=int(table.lost.sum()),
        median_measurement_error=round(table.median_error(), 4),
        fidelity=table.fidelity,
    )
    truth = table.configured_ms
    for tech in spec.techniques:
        for seed in seeds:
            sim[tech.name].append(run_technique(truth, tech, seed, noise, spec.boundary_ms))
            measured = MeasuredOracle(table.samples_ms, tech.samples, tech.filter)
            yield run_technique(truth, tech, seed, noise, spec.boundary_ms, oracle=measured)


def _pool(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        **error_percentiles(np.concatenate([r["errors"] for r in runs])).as_dict(),
        "runs": len(runs),
        "probes_per_host": round(float(np.mean([r["probes_per_host"] for r in runs])), 3),
        "probes_per_host_max": max(r["probes_per_host_max"] for r in runs),
    }
    if "boundary" in runs[0]:
        out["boundary"] = {
            side: float(np.mean([r["boundary"][side] for r in runs]))
            for side in ("positive", "negative")
        }
    out["per_seed"] = [
        {k: v for k, v in r.items() if k not in ("errors", "technique")} for r in runs
    ]
    return out


def paper_rows(table: str) -> dict[str, tuple[float, ...]]:
    """The thesis's figures for `table`: (p50, p95, p99, max), or for 5.6 (positive, negative)."""
    if table == "5.6":
        return dict(PAPER_BOUNDARY)
    return dict(PAPER[table])


def write_cdf(path: Path, errors: dict[str, np.ndarray], title: str) -> None:
    """CDF plot of the relative errors, one line per technique (log x: tails reach 1e4)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    for name, values in errors.items():
        q = np.linspace(0, 1, 1001)
        x = np.quantile(values, q)
        ax.step(np.maximum(x, 1e-4), q, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlim(1e-4, None)
    ax.set_xlabel("relative error |actual - predicted| / actual")
    ax.set_ylabel("fraction of pairs")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_prediction(
    spec: PredictSpec,
    data: dict[str, Any],
    *,
    out: str | Path | None = None,
    report: Report | None = None,
) -> RunResult:
    """Run a prediction spec: every technique once per seed on the spec's matrix,
    the seeds side by side on `spec.workers` processes (or as Ray tasks on the
    cluster `spec.cluster` names). Writes spec.toml,
    runs.jsonl (one line per technique and seed, as they finish; `report.result`
    hears each), summary.json (`prediction.<technique>.{p50,p95,p99,max}`, probes
    per host, the thesis's figures if `paper` is set), cdf.png and cdf.csv. An
    interrupted run keeps what finished (status "interrupted").

    On the emulator (engine "emu") every peer first pings every other for real
    (testbed.engines.pings; `report.ping(hosts done, hosts)`), the techniques read
    those pings, and the same techniques and seeds run on the configured
    matrix as well: summary.json's `sim` and `emu_minus_sim`."""
    report = report or Report()
    seeds = spec.seed_list()
    emulated = spec.engine == "emu"
    # A ref with {seed} (e.g. "sharcnet:{seed}") gives each seed its own map; a
    # random pick of hosts follows the seed then, else the first seed.
    sources = list(dict.fromkeys(_topology(spec.topology, seed, seeds[0]).source for seed in seeds))
    hosts = len(_topology(spec.topology, seeds[0], seeds[0]).rtt_ms)
    with Run(spec.name, data, out) as run:
        noise = Noise(spec.noise.sigma, spec.noise.spike, spec.noise.spike_scale)
        jobs = [
            (tech, seed, noise, spec.boundary_ms, spec.topology, seeds[0])
            for tech in spec.techniques
            for seed in seeds
        ]
        workers = 1 if emulated else min(spec.workers or os.cpu_count() or 1, len(jobs))
        log = run.log("runs.jsonl")
        done: dict[str, list[dict[str, Any]]] = {t.name: [] for t in spec.techniques}
        sim: dict[str, list[dict[str, Any]]] = {t.name: [] for t in spec.techniques}
        emu: dict[str, Any] = {}
        status = "interrupted"
        wall0 = time.monotonic()
        try:
            if emulated:
                results = _emulated(spec, run.dir, noise, seeds, sim, emu, report.ping)
            else:
                results = _results(jobs, workers, spec.cluster)
            for result in results:
                done[result["technique"]].append(result)
                log.write("run", **{k: v for k, v in result.items() if k != "errors"})
                report.result(result)
            status = "complete"
        finally:
            log.close()
            summary: dict[str, Any] = {
                "name": spec.name,
                "kind": "predict",
                "engine": spec.engine,
                "status": status,
                "hosts": hosts,
                "topology": sources[0] if len(sources) == 1 else sources,
                "seeds": seeds,
                "workers": workers,
                "wall_s": round(time.monotonic() - wall0, 3),
                "prediction": {name: _pool(runs) for name, runs in done.items() if runs},
            }
            if emulated:
                _emu_minus_sim(summary, emu, sim)
            if spec.paper is not None:
                summary["paper"] = {
                    "table": spec.paper,
                    "source": PAPER_SOURCE[spec.paper],
                    "rows": {k: list(v) for k, v in paper_rows(spec.paper).items()},
                }
            result = run.finish(summary)
            _write_cdfs(run.dir, done, f"{spec.name}: {hosts} hosts, seeds {seeds}")
        return result


def _emu_minus_sim(
    summary: dict[str, Any], pings: dict[str, Any], sim: dict[str, list[dict[str, Any]]]
) -> None:
    """An emulated run's pings, its techniques on the configured matrix, and the gap."""
    summary["wan"] = {"fidelity": pings.pop("fidelity")}  # while the peers pinged
    summary["pings"] = pings
    summary["sim"] = {name: _pool(runs) for name, runs in sim.items() if runs}
    summary["emu_minus_sim"] = {
        name: {
            q: round(summary["prediction"][name][q] - summary["sim"][name][q], 4)
            for q in ("p50", "p95", "p99")
        }
        for name in summary["sim"]
        if name in summary["prediction"]
    }


def _write_cdfs(run_dir: Path, done: dict[str, list[dict[str, Any]]], title: str) -> None:
    """cdf.csv and cdf.png: each technique's relative errors, pooled over its seeds."""
    pooled = {
        name: np.concatenate([r["errors"] for r in runs]) for name, runs in done.items() if runs
    }
    if not pooled:
        return
    q = np.linspace(0, 1, 1001)
    table = np.column_stack([q, *(np.quantile(v, q) for v in pooled.values())])
    np.savetxt(
        run_dir / "cdf.csv",
        table,
        delimiter=",",
        header="fraction," + ",".join(pooled),
        comments="",
        fmt="%.6g",
    )
    write_cdf(run_dir / "cdf.png", pooled, title)


def probe_cost(
    ref: str,
    sizes: list[int],
    seeds: list[int],
    tech: DtmTechnique,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """DTM's measurements per peer as the grid grows (the issue's O(log n) check):
    for each size n, n hosts picked at random from `ref` per seed, DTM as `tech`
    says; the mean and max measurements (distinct peers measured, one sample
    each) per host, and the mean over log2 n."""
    rows = []
    for k, n in enumerate(sizes):
        runs = []
        for seed in seeds:
            topology = _topology(TopologySpec(ref=ref, hosts=n, pick="random"), seed, seed)
            rtt = np.asarray(topology.rtt_ms, dtype=np.float64)
            runs.append(run_technique(rtt, tech, seed, Noise(), None))
        mean = float(np.mean([r["probes_per_host"] for r in runs]))
        rows.append(
            {
                "hosts": n,
                "seeds": len(seeds),
                "trees": tech.trees,
                "tolerance": tech.tolerance,
                "jump": tech.jump,
                "leaf_hosts": tech.leaf_hosts,
                "snap": tech.snap,
                "leaf_sample": tech.leaf_sample,
                "tree_choice": tech.tree_choice,
                "per_host_mean": round(mean, 2),
                "per_host_max": max(r["probes_per_host_max"] for r in runs),
                "per_host_over_log2n": round(mean / math.log2(n), 3),
                "p95": round(float(np.mean([r["p95"] for r in runs])), 4),
            }
        )
        if progress is not None:
            progress(k + 1, len(sizes))
    return rows
