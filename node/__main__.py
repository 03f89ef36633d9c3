# `python -m node`: one grid peer on a real UDP socket.
#
#   python -m node --name h3 --bind 10.0.0.3:7000 --config node.json \
#       --point 240,4096,250,4,0.37 --seed 7 --log h3.jsonl \
#       --control /run/testbed/<run>/h3.ctl [--join 10.0.0.1:7000,10.0.0.2:7000]
#
# Exit status: 0 after a normal end (left, exit request, signal), 2 on bad
# arguments (the message names the flag).

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import trio

from node.config import ConfigError, load_config
from node.peer import Address, Peer
from node.runtime import main_async


def _address(text: str) -> Address:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return (host, int(port))


def _addresses(text: str) -> list[Address]:
    return [_address(part) for part in text.split(",") if part]


def _point(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m node", description="Run one grid peer.")
    parser.add_argument("--name", required=True, help="host name used in logs and dumps (h1, ...)")
    parser.add_argument("--bind", type=_address, required=True, help="UDP address, HOST:PORT")
    parser.add_argument("--config", type=Path, required=True, help="node configuration (JSON)")
    parser.add_argument(
        "--point", type=_point, required=True, help="the peer's point, one value per dimension"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the peer's randomness")
    parser.add_argument(
        "--log", type=Path, default=None, help="JSON-lines event log (default: none)"
    )
    parser.add_argument("--control", default=None, help="Unix socket path of the control API")
    parser.add_argument(
        "--join",
        type=_addresses,
        default=None,
        help="join at once via these peers (empty: found a new overlay)",
    )
    parser.add_argument(
        "--leave-timeout",
        type=float,
        default=None,
        help="graceful leave bound on SIGTERM, seconds (default: the CAN's leave_timeout_s + 5)",
    )
    args = parser.parse_args(argv)
    if args.leave_timeout is not None and not (0 < args.leave_timeout < math.inf):
        parser.error(f"--leave-timeout: must be > 0 seconds, not {args.leave_timeout}")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        parser.error(str(exc))
    if len(args.point) != config.can.space.n:
        parser.error(
            f"--point: {len(args.point)} values for a {config.can.space.n}-dimensional space"
        )
    rng = random.Random(args.seed)
    try:
        peer = Peer(config, address=args.bind, point=args.point, rng=rng)
    except ValueError as exc:
        parser.error(f"--point: {exc}")
    log = args.log.open("a", encoding="utf-8") if args.log is not None else None
    try:
        trio.run(
            lambda: main_async(
                peer,
                name=args.name,
                bind=args.bind,
                control=args.control,
                log=log,
                bootstraps=args.join,
                leave_timeout_s=(
                    config.can.leave_timeout_s + 5.0
                    if args.leave_timeout is None
                    else args.leave_timeout
                ),
            )
        )
    except OSError as exc:
        print(
            f"python -m node: {args.bind[0]}:{args.bind[1]}: {exc.strerror or exc}", file=sys.stderr
        )
        return 1
    finally:
        if log is not None:
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
