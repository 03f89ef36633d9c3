# The MPI-like runtime (node/mpi): ranks over loopback TCP, in threads.

from __future__ import annotations

import socket
import subprocess
import sys
import threading

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
