# MPI-like jobs on emulated hosts: the same job inside a cluster and spread
# over two clusters (issue "Parallel MPI-like jobs", acceptance 3).

from __future__ import annotations

import json
from pathlib import Path

from testbed.emu._clean import netns_of_run
from testbed.mpi import latency_penalty

TOPOLOGY = str(Path(__file__).parents[2] / "topologies" / "sharcnet-emu.toml")


def test_a_job_spread_beyond_its_latency_requirement_runs_slower(tmp_path):
    result = latency_penalty(
        TOPOLOGY,
        ranks=4,
        rounds=10,
        compute_s=0.2,
        diameter_ms=1.0,
        repeat=1,
        run_dir=str(tmp_path / "run"),
    )
    proper, spread = result["proper"], result["spread"]
    assert proper["widest_rtt_ms"] <= 1.0 < spread["widest_rtt_ms"]
    # Each round is a round trip from rank 0 to the farthest rank: the spread
    # job pays the inter-cluster RTT ten times, the proper one ten sub-ms trips.
    floor = 0.2 + 10 * spread["widest_rtt_ms"] / 1e3 * 0.9
    assert spread["wall_s"][0] >= floor, result
    assert proper["wall_s"][0] < 0.2 + 10 * 0.02, result
    assert result["slowdown"] > 2
    # Every rank's result is in the run folder, and nothing is left behind.
    outs = sorted((tmp_path / "run" / "hosts").rglob("proper0-r*.out"))
    assert len(outs) == 4 and all(json.loads(o.read_text())["checksum"] == 10.0 for o in outs)
    assert not netns_of_run()
