# Vivaldi network coordinates (Dabek, Cox, Kaashoek, Morris, SIGCOMM 2004), as
# seed 002 §2.2 and §5.2.3 use them: a mass-spring system in which each RTT
# sample nudges our coordinate along the line to the sampled peer by the
# absolute error times a timestep.
#
# Defaults are the paper's and the thesis's: 5-D Euclidean, no height,
# cc = ce = 0.25, adaptive timestep delta = cc * w with w = e_i / (e_i + e_j)
# (the thesis's "dampening 0.25" is the constant timestep, `adaptive=False`).
# The height vector (Vivaldi §4.4: |[x, h] - [y, g]| = |x - y| + h + g) is an
# option. Pure Python: the peer process stays light (no numpy).

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Coordinate", "Vivaldi", "VivaldiConfig"]

# Coordinates closer than this are "at the same place": the push goes in a random direction.
_SAME_PLACE = 1e-9


@dataclass(frozen=True, slots=True)
class Coordinate:
    """A point in the embedding and how much its owner trusts it (1.0 = not at all)."""

    vec: tuple[float, ...]
    height: float = 0.0
    error: float = 1.0

    def distance(self, other: Coordinate) -> float:
        """Predicted RTT between the two owners (same unit as the samples)."""
        return math.dist(self.vec, other.vec) + self.height + other.height


@dataclass(frozen=True)
class VivaldiConfig:
    dims: int = 5
    cc: float = 0.25  # timestep: fraction of the error corrected per sample
    ce: float = 0.25  # weight of a new sample in the local error estimate
    adaptive: bool = True  # timestep cc * e_i / (e_i + e_j); False: constant cc
    height: bool = False
    min_height: float = 1e-6  # heights stay positive (Vivaldi §4.4)

    def __post_init__(self) -> None:
        if not (isinstance(self.dims, int) and 1 <= self.dims <= 64):
            raise ValueError(f"vivaldi.dims must be an integer in 1..64, not {self.dims!r}")
        for name in ("cc", "ce"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value <= 1):
                raise ValueError(f"vivaldi.{name} must be in (0, 1], not {value!r}")


class Vivaldi:
    """One node's Vivaldi state. `observe()` is the whole algorithm."""

    def __init__(self, config: VivaldiConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.coord = Coordinate(
            (0.0,) * config.dims, config.min_height if config.height else 0.0, 1.0
        )
        self.samples = 0

    def observe(self, rtt: float, remote: Coordinate) -> Coordinate:
        """Take one RTT sample to a node whose coordinate is `remote`; returns our new coordinate.

        Samples that are not positive and finite, or whose remote coordinate has
        the wrong number of dimensions, are ignored (the caller counts them).
        """
        config = self.config
        me = self.coord
        if not (rtt > 0 and math.isfinite(rtt)) or len(remote.vec) != config.dims:
            return me
        if not all(math.isfinite(v) for v in remote.vec) or not math.isfinite(remote.height):
            return me
        predicted = me.distance(remote)
        weight = me.error / (me.error + remote.error) if me.error + remote.error > 0 else 0.5
        sample_error = abs(predicted - rtt) / rtt
        error = sample_error * config.ce * weight + me.error * (1 - config.ce * weight)
        step = config.cc * weight if config.adaptive else config.cc
        force = step * (rtt - predicted)
        diff = [a - b for a, b in zip(me.vec, remote.vec, strict=True)]
        length = math.hypot(*diff)
        if length < _SAME_PLACE:
            diff = [self.rng.gauss(0.0, 1.0) for _ in diff]
            length = math.hypot(*diff) or 1.0
        # The unit vector of [x_i - x_j, h_i + h_j] under |[x, h]| = |x| + h (Vivaldi §4.4):
        # with heights the spring pushes partly "up".
        total = length + me.height + remote.height
        vec = tuple(a + force * d / total for a, d in zip(me.vec, diff, strict=True))
        height = me.height
        if config.height:
            height = max(config.min_height, me.height + force * (me.height + remote.height) / total)
        self.coord = Coordinate(vec, height, min(error, 1.0))
        self.samples += 1
        return self.coord

    def predict(self, remote: Coordinate) -> float:
        return self.coord.distance(remote)


def embed(
    n: int,
    rounds: int,
    measure: Callable[[int, int], float],
    config: VivaldiConfig,
    rng: random.Random,
    neighbours: Sequence[Sequence[int]] | None = None,
) -> list[Coordinate]:
    """Run Vivaldi over n nodes: each round one random node i samples one peer j
    (random among all, or among `neighbours[i]`) through `measure(i, j)` and
    adjusts. Returns every node's coordinate. Seed 002 counts rounds this way
    (Tables 5.1 and 5.3)."""
    nodes = [Vivaldi(config, random.Random(rng.getrandbits(64))) for _ in range(n)]
    for _ in range(rounds):
        i = rng.randrange(n)
        if neighbours is not None:
            choices = neighbours[i]
            if not choices:
                continue
            j = choices[rng.randrange(len(choices))]
        else:
            j = rng.randrange(n - 1)
            j += j >= i
        nodes[i].observe(measure(i, j), nodes[j].coord)
    return [node.coord for node in nodes]
