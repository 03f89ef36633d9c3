# MPI-like jobs on emulated hosts: run a job's ranks (python -m node.mpi, or a
# user's own program) as processes on a set of hosts, and the experiment of
# issue "Parallel MPI-like jobs", acceptance 3: the same job on a proper
# cluster (every pair within the latency requirement D) and on a set that
# violates it (half the ranks in another cluster), side by side.

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from testbed.errors import EmulationError, InputError
from testbed.net import Wan, open_wan
from testbed.topology import Topology, load_topology

__all__ = ["latency_penalty", "run_job"]

MPI_PORT = 7100
JOB_TIMEOUT_S = 600.0


def run_job(
    wan: Wan,
    hosts: Sequence[str],
    *,
    rounds: int,
    compute_s: float,
    collective: str = "allreduce",
    payload_bytes: int = 8,
    command: str | None = None,
    label: str = "mpi",
) -> dict[str, Any]:
    """Run one job, rank k on hosts[k]; returns its wall time (the slowest rank's)
    and every rank's result. `command` replaces the built-in program; it gets
    TESTBED_RANK, TESTBED_SIZE and TESTBED_PEERS (host:port, rank order) and
    must print one JSON object with at least "wall_s" as its last line."""
    peers = ",".join(f"{wan.host(h).ip}:{MPI_PORT}" for h in hosts)
    procs = []
    for rank, host in enumerate(hosts):
        env = {"TESTBED_RANK": str(rank), "TESTBED_SIZE": str(len(hosts)), "TESTBED_PEERS": peers}
        argv = (
            shlex.split(command)
            if command
            else [
                sys.executable,
                "-m",
                "node.mpi",
                "--rounds",
                str(rounds),
                "--compute-s",
                str(compute_s),
                "--collective",
                collective,
                "--payload-bytes",
                str(payload_bytes),
            ]
        )
        procs.append(wan.popen(host, argv, label=f"{label}-r{rank}", env=env))
    started = time.monotonic()
    results = []
    for rank, proc in enumerate(procs):
        left = max(1.0, JOB_TIMEOUT_S - (time.monotonic() - started))
        try:
            code = proc.wait(left)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.terminate()
            raise EmulationError(
                f"the job on {list(hosts)} ran over {JOB_TIMEOUT_S:.0f} s"
            ) from None
        out = proc.stdout_path.read_text().strip().splitlines() if proc.stdout_path.exists() else []
        if code != 0 or not out:
            err = proc.stderr_path.read_text().strip()[-400:] if proc.stderr_path.exists() else ""
            raise EmulationError(f"rank {rank} on {hosts[rank]} failed (status {code}): {err}")
        results.append(json.loads(out[-1]))
    return {
        "hosts": list(hosts),
        "wall_s": max(r["wall_s"] for r in results),
        "ranks": results,
    }


def _sets(topology: Topology, ranks: int, diameter_ms: float) -> tuple[list[str], list[str]]:
    """A proper cluster (one labelled cluster, every pair within D) and a
    violating set (half of it swapped for hosts of another cluster)."""
    if not topology.labels:
        raise InputError(f"{topology.source} has no cluster labels", source="--topology")
    rtt = np.asarray(topology.rtt_ms)
    groups: dict[str, list[int]] = {}
    for k, label in enumerate(topology.labels):
        groups.setdefault(label.get("cluster", ""), []).append(k)
    proper = other = None
    for members in sorted(groups.values(), key=len):
        chosen = members[:ranks]
        block = rtt[np.ix_(chosen, chosen)]
        if len(chosen) == ranks and float(block.max()) <= diameter_ms:
            proper = chosen
            break
    if proper is None:
        raise InputError(
            f"no cluster of {topology.source} has {ranks} hosts within {diameter_ms} ms",
            source="--ranks",
        )
    for members in groups.values():
        if proper[0] not in members and len(members) >= ranks // 2:
            other = members
            break
    if other is None:
        raise InputError(
            f"{topology.source} has no second cluster to spread over", source="--topology"
        )
    spread = proper[: ranks - ranks // 2] + other[: ranks // 2]
    return [topology.names[k] for k in proper], [topology.names[k] for k in spread]


def latency_penalty(
    topology_ref: str,
    *,
    ranks: int = 8,
    rounds: int = 50,
    compute_s: float = 1.0,
    diameter_ms: float = 1.0,
    repeat: int = 3,
    command: str | None = None,
    clamp: bool = True,
    run_dir: str | None = None,
    progress: Any = None,
) -> dict[str, Any]:
    """The same job on a proper cluster and on a set violating D, `repeat`
    times each (alternating); wall times and their ratio.

    Intra-cluster RTTs are often below the delay engine's floor (Myrinet's
    0.05-0.6 ms): with `clamp` they are raised to it, and the result says how
    many pairs were; without, such a topology is refused (FloorError)."""
    topology = load_topology(topology_ref)
    proper, spread = _sets(topology, ranks, diameter_ms)
    rtt = np.asarray(topology.rtt_ms)
    index = {name: k for k, name in enumerate(topology.names)}

    def widest(names: list[str]) -> float:
        k = [index[n] for n in names]
        return float(rtt[np.ix_(k, k)].max())

    walls: dict[str, list[float]] = {"proper": [], "spread": []}
    with open_wan(
        topology, hosts=sorted(set(proper) | set(spread)), name="bench-mpi", run_dir=run_dir,
        clamp=clamp, progress=progress,
    ) as wan:  # fmt: skip
        for k in range(repeat):
            for name, hosts in (("proper", proper), ("spread", spread)):
                job = run_job(
                    wan,
                    hosts,
                    rounds=rounds,
                    compute_s=compute_s,
                    command=command,
                    label=f"{name}{k}",
                )
                walls[name].append(job["wall_s"])
        folder, run_id = str(wan.run_dir), wan.plan.run_id
        floor_ms = wan.calibration.floor_rtt_ms if wan.calibration else 0.0
        clamped = wan.clamped
    median = {name: statistics.median(values) for name, values in walls.items()}
    return {
        "topology": topology.source,
        "ranks": ranks,
        "rounds": rounds,
        "compute_s": compute_s,
        "diameter_ms": diameter_ms,
        "command": command,
        "proper": {
            "hosts": proper,
            "widest_rtt_ms": round(widest(proper), 3),
            "wall_s": walls["proper"],
        },
        "spread": {
            "hosts": spread,
            "widest_rtt_ms": round(widest(spread), 3),
            "wall_s": walls["spread"],
        },
        "slowdown": round(median["spread"] / median["proper"], 3),
        "floor_rtt_ms": floor_ms,
        "clamped_pairs": clamped,
        "run_dir": folder,
        "run_id": run_id,
    }
