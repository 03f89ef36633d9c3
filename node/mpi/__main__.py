# `python -m node.mpi`: one rank of an MPI-like job (node/mpi/task.py).
#
#   python -m node.mpi --rank 2 --peers 10.0.0.1:7100,10.0.0.2:7100,10.0.0.3:7100 \
#       --rounds 50 --compute-s 0.5 [--collective allreduce] [--payload-bytes 8] [--result r.json]
#
# --rank and --peers default to TESTBED_RANK and TESTBED_PEERS (what the
# testbed gives a job's tasks, a user's own program included). Prints the
# rank's result as one JSON line (and writes it to --result), with the wall-clock
# times the program began and ended (`began_wall`, `ended_wall`). Exit status: 0,
# 1 if the job broke (the reason on stderr), 2 for bad arguments.

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from node.mpi.task import COLLECTIVES, Job, TaskError, run_task


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected host:port, got {text!r}")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    began = time.time()  # against when the peer started us: the interpreter's start-up
    parser = argparse.ArgumentParser(prog="python -m node.mpi", description=__doc__)
    parser.add_argument("--rank", type=int, default=os.environ.get("TESTBED_RANK"))
    parser.add_argument("--peers", default=os.environ.get("TESTBED_PEERS"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--compute-s", type=float, default=1.0)
    parser.add_argument("--collective", choices=COLLECTIVES, default="allreduce")
    parser.add_argument("--payload-bytes", type=int, default=8)
    parser.add_argument("--connect-timeout-s", type=float, default=30.0)
    parser.add_argument(
        "--job",
        default=os.environ.get("TESTBED_JOB", ""),
        help="the job's token: ranks of other jobs are turned away (default TESTBED_JOB)",
    )
    parser.add_argument("--result", type=Path)
    args = parser.parse_args(argv)
    if args.rank is None or args.peers is None:
        parser.error("--rank and --peers (or TESTBED_RANK and TESTBED_PEERS) are required")
    try:
        peers = tuple(_address(p) for p in args.peers.split(","))
        job = Job(
            peers,
            rounds=args.rounds,
            compute_s=args.compute_s,
            collective=args.collective,
            payload_bytes=args.payload_bytes,
            connect_timeout_s=args.connect_timeout_s,
            token=args.job,
        )
        rank = int(args.rank)
        if not 0 <= rank < len(peers):
            raise ValueError(f"--rank {rank} is not in 0..{len(peers) - 1}")
    except (ValueError, argparse.ArgumentTypeError) as exc:
        parser.error(str(exc))
    try:
        result = run_task(rank, job).to_dict()
    except TaskError as exc:
        print(f"rank {rank}: {exc}", file=sys.stderr)
        return 1
    result |= {"began_wall": round(began, 6), "ended_wall": round(time.time(), 6)}
    line = json.dumps(result)
    if args.result is not None:
        args.result.write_text(line + "\n")
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
