# The simulator's output, byte for byte, as it was recorded at d603307 (before issue 19's
# restructuring): the event and check logs of a CAN churn run and of a jobs run, and the
# clusters and summaries (minus wall-clock figures) of a cluster run and of a scheduling run.
# A change that alters them on purpose records the new digests here and says why in its
# commit; one that alters them by accident fails here.
#
# The four runs take about 2-3 minutes side by side on two cores (the specs at smaller
# sizes, below).

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "scripts" / "experiments"

# name -> the arguments of `testbed run`
# The cluster and narrow runs on 500 of SHARCNET's 2,091 nodes (picked at random), the
# narrow run's first 300 jobs of 1,000: at full size they took 10 of the suite's 30 minutes.
SMALL_GRID = ["--set", "topology.hosts=500", "--set", "topology.pick=random"]
RUNS = {
    "can": [str(SPECS / "can-churn-sim.toml"), "--set", "topology.hosts=300"],
    "sched": [str(SPECS / "sched-emu.toml"), "--engine", "sim"],
    "cluster": [str(SPECS / "cluster-sharcnet-sim.toml"), *SMALL_GRID],
    "narrow": [str(SPECS / "sched-narrow-sim.toml"), *SMALL_GRID, "--set", "workload.first=300"],
}
# Two lanes of about equal length, one per core (alone: 136 s; 50 + 29 + 36 s).
LANES = (("can",), ("narrow", "cluster", "sched"))

# sha256 at d603307; can/events and sched/* re-recorded at the probes beyond dead regions
# (docs/can.md): peers now probe the hearsay peers that hold up a takeover, so these runs' crash
# repairs differ (the 300-host CAN run: 0 violations, crash to takeover p50 36.3 s, p99 83.8 s,
# against 36.4 s and 84.1 s before; the scheduling run: 300 of 300 jobs, 0 violations); and
# again at the overlay merge (node/can/reunion.py: updates carry the root's word, buried peers
# are asked again; the CAN run's checks unchanged, the scheduling run 300 of 300 jobs); and
# at the root's heartbeat every half update period with the `cut` mark, the peers out of the
# overlay that say so, and the neighbours learnt from a probe's answer that are now listed
# (docs/can.md): the Reunites to peers whose known zone overlaps ours draw from the shared rng,
# so the CAN run takes another path from t = 1,444 s on (1 violation, a gap at its crash-burst
# check, against 0; crash to takeover p50 35.5 s, p99 84.8 s; seed 2: 0 violations on both
# codes), the scheduling run 300 of 300 jobs, 0 violations; and at the slab held up
# (takeover.py `_unblock`: lookups into slab parts without a tombstone, our word to intruders,
# lookups that meet a hole answered with its tombstones) and the root's size next to dead
# regions (reunion.py): the CAN run 0 violations again (crash to takeover p50 35.5 s, p99 83.7
# s; 59 abrupt leaves of 100, against 89), the scheduling run 300 of 300 jobs, 0 violations;
# and at the leaves that wait for a quiet neighbourhood (only proposed MERGEs count, retried
# soon, 30 of them), the zones left by a MERGE taken at once and the give-back across the
# dropped split after later takeovers (docs/can.md): the CAN run's checks unchanged (0
# violations; crash to takeover p50 35.5 s, p99 83.7 s; 56 abrupt leaves of 100, its last 100
# peers all leaving within 60 s), the scheduling run 300 of 300 jobs, 0 violations; and at
# leaves bounded by 120 s (60 attempts) instead of 60 s: the CAN run's events only (43 abrupt
# leaves of 100), the rest unchanged; and sched/events.jsonl alone at the load figures riding
# the CAN's updates instead of SchedBeats to the neighbours (seed 000 §4.1.1): the scheduling
# run 300 of 300 jobs, 0 lost, 0 violations, wait p50 32.8 s against 31.6 s, 17 % fewer
# datagrams; the CAN, cluster and narrow outputs unchanged. cluster/* and narrow/* recorded
# again at 5915413 for the smaller grid (the code at that commit gave the full-size digests
# recorded before, in a clean clone's suite at 052623c).
RECORDED = {
    "can/events.jsonl": "390878e3fd703b1d3b1097151d6577ad08f2ddb813faea9e6ac245d8d86cd185",
    "can/checks.jsonl": "c24aa9fa71e5cea1fb651d272668b5d154a9b2addb478aa10f62d360c72b02c9",
    "sched/events.jsonl": "3d76fe30f382a040ce29d57379e0d166767a0839928ba245b5064f96b5f57607",
    "sched/checks.jsonl": "250f15dea9f88b19ad806ed97acb2f6de273cb4ebbc1586ea33dfe97ba011f24",
    "cluster/clusters.json": "d8a0469ba6209f0abee9f2063c8a042bee2cad51e9c15a285b777529173381c4",
    "cluster/summary.json": "6d1a554cf73824a5086e92e09c1ba382a0623b2081472b392b48be65f760cbce",
    "narrow/summary.json": "91a2c94ad98ab4c2b0b966e6887247055c160fd79072568edce0aadf1af271bf",
}
# Figures of the wall clock and of the machine, which differ from run to run.
WALL_CLOCK = {"wall_s", "events_per_s", "prediction_s", "refinement_s", "max_rss_kb"}


def _without_wall_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_wall_clock(v) for k, v in value.items() if k not in WALL_CLOCK}
    if isinstance(value, list):
        return [_without_wall_clock(v) for v in value]
    return value


def _digest(path: Path) -> str:
    data = path.read_bytes()
    if path.name == "summary.json":
        summary = _without_wall_clock(json.loads(data))
        data = json.dumps(summary, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def _lane(names: tuple[str, ...], out: Path) -> None:
    for name in names:
        argv = [sys.executable, "-m", "testbed.cli", "run", *RUNS[name], "--out", str(out / name)]
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, f"{name}: {done.stderr[-2000:]}"
        assert done.stdout.strip().splitlines()[-1] == str(out / name)


# The suite's 600 s per test is too short for this one beside a second suite (two clones'
# `make test` at once, each lane sharing a core with the other suite's): it timed out there in
# both suites at 975ef89. Each run has its own 1,200 s bound above; a lane holds up to three.
@pytest.mark.timeout(1800)
def test_the_simulators_output_is_as_recorded(tmp_path: Path) -> None:
    with ThreadPoolExecutor(len(LANES)) as pool:
        for lane in pool.map(lambda names: _lane(names, tmp_path), LANES):
            assert lane is None
    measured = {name: _digest(tmp_path / name) for name in RECORDED}
    changed = {name for name in RECORDED if measured[name] != RECORDED[name]}
    assert not changed, f"changed: {sorted(changed)}; now {[measured[n] for n in sorted(changed)]}"
