# Latency prediction on a matrix, the simulator's way (seed 002 §5.2.3): each
# technique gets a measurement oracle that reads the matrix, adds the noise
# model's error to every sample, filters the samples of one measurement as a
# peer's prober would, and counts the samples each host sends. The predicted
# matrix is scored against the true one with testbed.analysis.prediction;
# runs with different seeds (join orders, landmark choices, Vivaldi's draws)
# are pooled pair by pair, as the thesis's CDFs are.

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from node.coord.dtm import Dtm, DtmConfig
from node.coord.gnp import GnpConfig, solve_host, solve_landmarks
from node.coord.probe import summarize
from node.coord.vivaldi import VivaldiConfig, embed
from testbed.analysis.prediction import boundary_errors, relative_errors

__all__ = ["PAPER", "Noise", "Oracle", "PredictionResult", "predict"]

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


@dataclass
class PredictionResult:
    technique: str
    p50: float
    p95: float
    p99: float
    max: float
    per_seed: list[dict[str, float]]
    probes_per_host: float  # mean over hosts and seeds
    boundary: dict[str, float] = field(default_factory=dict)

    def as_dict(self, digits: int = 4) -> dict[str, object]:
        return {
            "p50": round(self.p50, digits),
            "p95": round(self.p95, digits),
            "p99": round(self.p99, digits),
            "max": round(self.max, digits),
            "probes_per_host": round(self.probes_per_host, 1),
            "boundary": self.boundary,
            "per_seed": self.per_seed,
        }


def _dtm(n: int, oracle: Oracle, rng: random.Random, config: DtmConfig, rejoin: bool) -> np.ndarray:
    dtm = Dtm(config, rng)
    order = list(range(n))
    rng.shuffle(order)
    for host in order:
        dtm.join(host, oracle)
    if rejoin:
        dtm.rejoin_all(oracle)
    return dtm.predict_all(list(range(n)))


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
    n: int, oracle: Oracle, rng: random.Random, config: VivaldiConfig, rounds: int
) -> np.ndarray:
    coords = embed(n, rounds, oracle, config, rng)
    vec = np.array([c.vec for c in coords])
    height = np.array([c.height for c in coords])
    return (
        np.sqrt(((vec[:, None, :] - vec[None, :, :]) ** 2).sum(-1))
        + height[:, None]
        + height[None, :]
    )


def predict(
    rtt: np.ndarray,
    technique: str,
    seeds: list[int],
    *,
    noise: Noise | None = None,
    samples: int = 1,
    how: str = "mean",
    boundary: float | None = None,
    dtm: DtmConfig | None = None,
    rejoin: bool = False,
    gnp: GnpConfig | None = None,
    vivaldi: VivaldiConfig | None = None,
    rounds: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> PredictionResult:
    """Run `technique` ("dtm", "gnp" or "vivaldi") once per seed on the matrix
    `rtt` (ms) and pool the relative errors of all runs."""
    rtt = np.asarray(rtt, dtype=np.float64)
    n = len(rtt)
    noise = noise or Noise()
    errors = []
    per_seed = []
    probes = 0.0
    rates = []
    upper = np.triu_indices(n, 1)
    truth = ((rtt + rtt.T) / 2)[upper]
    keep = truth > 0
    for k, seed in enumerate(seeds):
        rng = random.Random(f"{technique}/{seed}")
        oracle = Oracle(rtt, noise, samples, how, random.Random(f"noise/{seed}"))
        if technique == "dtm":
            predicted = _dtm(n, oracle, rng, dtm or DtmConfig(), rejoin)
        elif technique == "gnp":
            predicted = _gnp(n, oracle, rng, gnp or GnpConfig())
        elif technique == "vivaldi":
            predicted = _vivaldi(n, oracle, rng, vivaldi or VivaldiConfig(), rounds or n * n)
        else:
            raise ValueError(f"unknown technique {technique!r}; expected dtm, gnp or vivaldi")
        one = relative_errors(rtt, predicted)
        per_seed.append({"seed": seed, **one.as_dict()})
        guess = ((predicted + predicted.T) / 2)[upper]
        errors.append((np.abs(truth[keep] - guess[keep]) / truth[keep]).astype(np.float32))
        probes += float(oracle.probes.mean())
        if boundary is not None:
            rates.append(boundary_errors(rtt, predicted, boundary))
        if progress is not None:
            progress(k + 1)
    pooled = np.concatenate(errors)
    p50, p95, p99 = (float(v) for v in np.percentile(pooled, [50, 95, 99]))
    result = PredictionResult(
        technique, p50, p95, p99, float(pooled.max()), per_seed, probes / len(seeds)
    )
    if rates:
        result.boundary = {
            "positive": float(np.mean([r["positive"] for r in rates])),
            "negative": float(np.mean([r["negative"] for r in rates])),
        }
    return result
