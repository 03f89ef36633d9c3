# The MPI-like runtime (node/mpi): ranks over loopback TCP, in threads.

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from node.mpi import Job, TaskError, run_task


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_ranks(job: Job, ranks: list[int]) -> dict[int, object]:
    out: dict[int, object] = {}

    def one(rank: int) -> None:
        try:
            out[rank] = run_task(rank, job)
        except TaskError as exc:
            out[rank] = exc

    threads = [threading.Thread(target=one, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


@pytest.mark.parametrize("collective", ["allreduce", "barrier"])
def test_every_rank_finishes_and_agrees(collective):
    peers = tuple(("127.0.0.1", p) for p in free_ports(4))
    job = Job(peers, rounds=20, compute_s=0.2, collective=collective, payload_bytes=32)
    results = run_ranks(job, [0, 1, 2, 3])
    assert sorted(results) == [0, 1, 2, 3]
    for result in results.values():
        assert not isinstance(result, Exception), result
        assert len(result.round_s) == 20
        assert 0.2 <= result.wall_s < 5.0  # the compute phases, plus loopback collectives
        # allreduce sums each rank's (rank + 1) over 4 values: 4 x (1 + 2 + 3 + 4).
        assert result.checksum == (40.0 if collective == "allreduce" else 0.0)


def test_a_rank_that_never_comes_is_named():
    peers = tuple(("127.0.0.1", p) for p in free_ports(3))
    job = Job(peers, rounds=1, compute_s=0.0, connect_timeout_s=1.0)
    results = run_ranks(job, [0, 1])  # rank 2 never starts
    assert isinstance(results[0], TaskError) and "ranks [2] never connected" in str(results[0])


def test_bad_jobs_and_arguments_are_refused():
    with pytest.raises(ValueError, match="collective"):
        Job((("127.0.0.1", 1),), collective="gather")
    with pytest.raises(ValueError, match="multiple of 8"):
        Job((("127.0.0.1", 1),), payload_bytes=7)
    run = subprocess.run(
        [sys.executable, "-m", "node.mpi", "--rank", "3", "--peers", "127.0.0.1:7100"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "--rank 3 is not in 0..0" in run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "node.mpi", "--rank", "0", "--peers", "nohost"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "expected host:port" in run.stderr


def test_a_rank_of_another_job_is_turned_away_and_the_mesh_still_forms():
    peers = tuple(("127.0.0.1", p) for p in free_ports(3))
    ours = Job(peers, rounds=3, compute_s=0.0, token="7/1/1", connect_timeout_s=5.0)
    stale = Job(peers, rounds=3, compute_s=0.0, token="5/2/1", connect_timeout_s=1.0)
    out: dict[str, object] = {}

    def stale_rank() -> None:  # rank 2 of an earlier job, dialling rank 0 of ours
        try:
            out["stale"] = run_task(2, stale)
        except TaskError as exc:
            out["stale"] = exc

    intruder = threading.Thread(target=stale_rank)
    intruder.start()
    results = run_ranks(ours, [0, 1, 2])
    intruder.join(10)
    assert all(r.checksum == 6.0 for r in results.values()), results  # 1 + 2 + 3
    assert isinstance(out["stale"], TaskError)  # never welcomed, it gave up


def test_a_port_still_held_by_an_exiting_rank_is_waited_for():
    peers = tuple(("127.0.0.1", p) for p in free_ports(2))
    holder = socket.create_server(peers[0])  # an earlier job's rank 0, still exiting
    threading.Timer(0.5, holder.close).start()
    results = run_ranks(Job(peers, rounds=2, compute_s=0.0, connect_timeout_s=5.0), [0, 1])
    assert all(r.checksum == 3.0 for r in results.values()), results


def test_the_program_says_when_it_began_and_ended():
    # Against the peer's spawned_wall, a rank's start-up and exit (node/runtime.py).
    before = time.time()
    (port,) = free_ports(1)
    run = subprocess.run(
        [sys.executable, "-m", "node.mpi", "--rank", "0", "--peers", f"127.0.0.1:{port}",
         "--rounds", "2", "--compute-s", "0.2"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    after = time.time()
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert before < result["began_wall"] < result["ended_wall"] < after
    assert result["ended_wall"] - result["began_wall"] >= result["wall_s"] >= 0.2
