# A flooding host: valid-looking datagrams at a steady rate (the churn verb `flood`).
#
# Theory of operation
#   One process per flooding host, started in the host's namespace by the engine
#   (python -m testbed.net.flooder). It sends `--per-s` datagrams a second in all,
#   round robin over the targets, until SIGTERM or `--seconds`. Each datagram is a
#   well-formed Ping of the peers' protocol from one made-up sender id with a fresh
#   sequence number: it passes the header, the replay window and the decoder (with no
#   grid key; with one it fails the MAC after the per-source limit), and a peer that
#   takes it answers with a Pong, so it costs the peer what a real message costs,
#   short of changing its overlay. The sending is paced in slices of SLICE_S: each
#   slice sends what the clock says is due, so a late slice catches up rather than
#   lowering the rate, and the report says what was sent in how long.
#   On SIGTERM it stops and writes its report (JSON) to `--report`.
#   `--nice N` sets its priority first, the process's and its session's autogroup's:
#   the emulator starts it at -10, so that a flood is what the flooding host asks
#   (up to what one process sends) rather than what is left of two cores beside the
#   peers it floods (a flooding host has a CPU of its own in the world emulated). The
#   delay engine runs SCHED_FIFO, above any nice value, so the WAN still comes first
#   and an overloaded WAN shows in the run's fidelity verdict, not in a slower flood.
#
# Rule: the datagrams come from the host's own address (the WAN core drops others).

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from node.wire import Codec, Ping

__all__ = ["Pings", "flood", "main"]

AUTOGROUP = Path("/proc/self/autogroup")  # the nice value of our session's scheduling group
SLICE_S = 0.002
MAX_BURST = (
    2000  # datagrams one slice may send to catch up (a stall is not made up for all at once)
)


class Pings:
    """Well-formed Pings from one made-up sender id, each with the next sequence number."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(f"{seed}/flood")
        self._codec = Codec(None)
        self.sender = self._rng.getrandbits(48) or 1
        self.seq = 0

    def __call__(self) -> bytes:
        self.seq += 1
        return self._codec.encode(Ping(self._rng.getrandbits(32)), sender=self.sender, seq=self.seq)


def flood(
    targets: Sequence[tuple[str, int]],
    per_s: float,
    *,
    seconds: float | None = None,
    seed: int = 1,
    stopped: Any = None,
) -> dict[str, Any]:
    """Send until `seconds` have passed or `stopped()` is true; returns the report."""
    pings = Pings(seed)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    sent = errors = behind = 0
    t0 = time.monotonic()
    try:
        while not (stopped is not None and stopped()):
            now = time.monotonic()
            elapsed = now - t0
            if seconds is not None and elapsed >= seconds:
                break
            due = int(elapsed * per_s) - sent - errors - behind
            if due > MAX_BURST:
                behind += due - MAX_BURST  # given up: the report's per_s shows it
                due = MAX_BURST
            for _ in range(due):
                data = pings()
                try:
                    sock.sendto(data, targets[pings.seq % len(targets)])
                    sent += 1
                except OSError:  # a full socket buffer, an unreachable target
                    errors += 1
            time.sleep(SLICE_S)
    finally:
        sock.close()
    took = time.monotonic() - t0
    return {
        "targets": len(targets),
        "per_s_asked": per_s,
        "sent": sent,
        "send_errors": errors,
        "seconds": round(took, 3),
        "per_s": round(sent / took, 1) if took > 0 else 0.0,
    }


def _target(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected IP:PORT")
    return host, int(port)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.net.flooder", description=__doc__)
    parser.add_argument("--to", type=_target, nargs="+", required=True, help="IP:PORT targets")
    parser.add_argument("--per-s", type=float, required=True, help="datagrams a second in all")
    parser.add_argument("--seconds", type=float, default=None, help="stop after (default: SIGTERM)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", type=Path, required=True, help="where the JSON report goes")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="nice value of the process and its session, -20..19 (default 0)",
    )
    args = parser.parse_args(argv)
    if not args.per_s > 0:
        parser.error(f"--per-s must be > 0 datagrams a second, not {args.per_s}")
    if not -20 <= args.nice <= 19:
        parser.error(f"--nice must be an integer from -20 to 19, not {args.nice}")
    if args.nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, args.nice)
            # With autogroups (Linux's default), a nice value weighs only inside the
            # process's session, and the emulator starts every program in a session of
            # its own: the session's own nice value is what competes with the peers'.
            if AUTOGROUP.exists():
                AUTOGROUP.write_text(f"{args.nice}\n")
        except OSError as error:  # below 0 needs CAP_SYS_NICE
            parser.error(f"--nice {args.nice}: {error.strerror}")
    stop = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    report = flood(args.to, args.per_s, seconds=args.seconds, seed=args.seed, stopped=lambda: stop)
    tmp = args.report.with_suffix(".tmp")
    tmp.write_text(json.dumps(report) + "\n")
    tmp.replace(args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
