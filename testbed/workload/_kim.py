# Kim's synthetic grid (seed 000 §3, §4; seed 003 §5): node capabilities and job
# requirements in three continuous resources -- CPU speed, memory, disk -- from the
# "clustering model" the seeds cite (most nodes small, a few large), and a Poisson
# stream of independent serial jobs. A spec's [jobs.profiles] (docs/workloads.md).
#
# Theory of operation
#   Each resource has a ladder of values (RESOURCES: CPU in units of 10 MHz, memory
#   in MB, disk in GB, as seed 000 §3.1's example maps them), and a node takes rung k
#   with probability proportional to 2^-k: half the nodes have the least of a resource,
#   one in 2^k more. "mixed" draws every node and every job on its own; "clustered"
#   draws `classes` node profiles and `classes` job profiles and gives each node and
#   each job one of them (Kim's equivalence classes of identical items). A job
#   constrains each resource with probability constrained / 3 (Kim: 1.2-1.3 of 3 for
#   light constraints, 2.4 for heavy); a constrained resource asks for a rung drawn
#   from the nodes' own distribution (so that capable nodes exist), an unconstrained
#   one asks 0 (seed 000 §1.3). Jobs arrive as a Poisson process of mean gap tau_s;
#   a job's work is uniform in work_s = [lo, hi] seconds (or normal, work_dist: the
#   same mean, sigma a third of the range, as Kim's E3) on a node exactly as fast as
#   it asks (the slowest CPU when it asks none): seed 000 §1.2, runtime = W / relative
#   speed.
#
# Rules
#   Decisions where the seeds are silent (the ladders, the 2^-k weights, the class
#   count, how a requirement's value is drawn) are written here and in
#   docs/workloads.md, and nowhere else. Every draw comes from random.Random seeded
#   with (seed, what is drawn): the same spec and seed give the same grid and jobs.

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import InputError

__all__ = [
    "JOB_COLUMNS",
    "NODE_COLUMNS",
    "RESOURCES",
    "KimJob",
    "kim_jobs",
    "kim_nodes",
    "ladder_top",
    "read_kim_jobs",
    "read_kim_nodes",
]

RESOURCES: dict[str, tuple[float, ...]] = {
    "cpu": (100.0, 150.0, 200.0, 250.0, 300.0, 350.0),  # 10 MHz: 1.0-3.5 GHz
    "memory": (512.0, 1024.0, 2048.0, 4096.0, 8192.0),  # MB
    "disk": (40.0, 80.0, 160.0, 320.0, 640.0),  # GB
}
CONSTRAINED = {"light": 1.3, "heavy": 2.4}  # resources a job constrains, on average, of 3


@dataclass(frozen=True)
class KimJob:
    id: int
    submit_s: float  # from the start of the stream
    work_s: float  # on a node exactly as fast as the job's baseline
    requirement: tuple[float, float, float]  # cpu, memory, disk; 0: not constrained

    @property
    def baseline_speed(self) -> float:
        """The CPU speed the work is counted at: what the job asks, else the slowest."""
        return self.requirement[0] or RESOURCES["cpu"][0]


def ladder_top(resource: str) -> float:
    return RESOURCES[resource][-1]


def _rung(rng: random.Random, values: tuple[float, ...]) -> float:
    weights = [2.0**-k for k in range(len(values))]
    return rng.choices(values, weights)[0]


def _node(rng: random.Random) -> tuple[float, float, float]:
    return (
        _rung(rng, RESOURCES["cpu"]),
        _rung(rng, RESOURCES["memory"]),
        _rung(rng, RESOURCES["disk"]),
    )


def _requirement(rng: random.Random, constrained: float) -> tuple[float, float, float]:
    p = constrained / 3.0
    out = [_rung(rng, values) if rng.random() < p else 0.0 for values in RESOURCES.values()]
    return (out[0], out[1], out[2])


def kim_nodes(profiles: Any, n: int, seed: int) -> list[tuple[float, float, float]]:
    """n nodes' (cpu, memory, disk) under `profiles` (a KimProfilesSpec)."""
    rng = random.Random(f"{seed}/kim-nodes")
    if profiles.model == "mixed":
        return [_node(rng) for _ in range(n)]
    classes = [_node(rng) for _ in range(profiles.classes)]
    return [classes[rng.randrange(len(classes))] for _ in range(n)]


def kim_jobs(profiles: Any, seed: int) -> list[KimJob]:
    """The stream of `profiles.jobs` jobs (a KimProfilesSpec), in submission order."""
    rng = random.Random(f"{seed}/kim-jobs")
    constrained = CONSTRAINED.get(profiles.constraints, profiles.constraints)
    classes = [_requirement(rng, constrained) for _ in range(profiles.classes)]
    lo, hi = profiles.work_s
    t = 0.0
    out = []
    for k in range(profiles.jobs):
        t += rng.expovariate(1.0 / profiles.tau_s)
        if profiles.model == "mixed":
            requirement = _requirement(rng, constrained)
        else:
            requirement = classes[rng.randrange(len(classes))]
        out.append(KimJob(k + 1, t, _work(rng, profiles.work_dist, lo, hi), requirement))
    return out


def _work(rng: random.Random, dist: str, lo: float, hi: float) -> float:
    """A job's work: uniform in [lo, hi], or normal with the same mean and a third of
    the range as its deviation (Kim's E3: uniform 30-90 min, or mean 60 and sigma 20),
    drawn again while not positive."""
    if dist == "uniform":
        return rng.uniform(lo, hi)
    while (work := rng.gauss((lo + hi) / 2, (hi - lo) / 3)) <= 0:
        pass
    return work


# -- Kim's grid from files (docs/workloads.md, "Kim's grid from files") -----------------------------

JOB_COLUMNS = ("submit_s", "work_s", "cpu_10mhz", "memory_mb", "disk_gb")
NODE_COLUMNS = ("cpu_10mhz", "memory_mb", "disk_gb")


def read_kim_jobs(path: str | Path) -> list[KimJob]:
    """Jobs from a CSV file with the header submit_s,work_s,cpu_10mhz,memory_mb,disk_gb
    (a requirement of 0: not constrained), in submission order (ties: file order).

    Raises:
        InputError: naming the file, line and column of the first bad value.
    """
    rows = _read_csv(path, JOB_COLUMNS)
    jobs = []
    for line, values in rows:
        submit, work, *want = values
        _check(path, line, 1, submit >= 0, "submit_s: expected seconds >= 0")
        _check(path, line, 2, work > 0, "work_s: expected seconds > 0")
        for k, value in enumerate(want):
            _check(path, line, 3 + k, value >= 0, f"{NODE_COLUMNS[k]}: expected >= 0 (0: any)")
        jobs.append((submit, line, work, (want[0], want[1], want[2])))
    jobs.sort(key=lambda j: (j[0], j[1]))
    return [KimJob(k + 1, t, work, want) for k, (t, _, work, want) in enumerate(jobs)]


def read_kim_nodes(path: str | Path, n: int) -> list[tuple[float, float, float]]:
    """The first n nodes of a CSV file with the header cpu_10mhz,memory_mb,disk_gb.

    Raises:
        InputError: a bad value (file, line, column), or fewer than n nodes.
    """
    rows = _read_csv(path, NODE_COLUMNS)
    for line, values in rows:
        for k, value in enumerate(values):
            _check(path, line, 1 + k, value > 0, f"{NODE_COLUMNS[k]}: expected > 0")
    if len(rows) < n:
        raise InputError(f"{len(rows)} nodes for a run of {n} hosts", source=str(path))
    return [(v[0], v[1], v[2]) for _, v in rows[:n]]


def _check(path: str | Path, line: int, column: int, ok: bool, reason: str) -> None:
    if not ok:
        raise InputError(reason, source=str(path), line=line, column=column)


def _read_csv(path: str | Path, columns: tuple[str, ...]) -> list[tuple[int, list[float]]]:
    """(line, values) per data row; `#` comments and blank lines skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", source=str(path)) from None
    rows: list[tuple[int, list[float]]] = []
    header = None
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        cells = [cell.strip() for cell in next(csv.reader([raw]))]
        if header is None:
            header = cells
            if tuple(header) != columns:
                raise InputError(
                    f"header {','.join(header)!r}: expected {','.join(columns)}",
                    source=str(path),
                    line=line,
                )
            continue
        if len(cells) != len(columns):
            raise InputError(
                f"{len(cells)} values: expected {len(columns)} ({','.join(columns)})",
                source=str(path),
                line=line,
            )
        values = []
        for k, cell in enumerate(cells):
            try:
                value = float(cell)
            except ValueError:
                value = math.nan
            _check(
                path, line, k + 1, math.isfinite(value), f"{columns[k]}: {cell!r} is not a number"
            )
            values.append(value)
        rows.append((line, values))
    if header is None:
        raise InputError(f"empty: expected the header {','.join(columns)}", source=str(path))
    if not rows:
        raise InputError("a header and no rows", source=str(path))
    return rows
