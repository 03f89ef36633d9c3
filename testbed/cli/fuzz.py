# `testbed fuzz`: random and malformed datagrams against a real peer process.

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.table import Table

from testbed.cli._common import cli, handled, run_folder_option
from testbed.errors import InputError
from testbed.progress import console


@cli.command()
@click.option("--count", type=click.IntRange(1), default=100_000, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--grid-key", metavar="HEX", default=None, help="Run the target in a keyed grid.")
@click.option(
    "--wan/--loopback",
    default=True,
    show_default=True,
    help="Through a two-host emulated WAN with IP-layer packets crafted with scapy (root), "
    "or payloads only, to a peer on loopback.",
)
@run_folder_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
def fuzz(
    count: int, seed: int, grid_key: str | None, wan: bool, out: Path | None, as_json: bool
) -> None:
    """Send random and mutated datagrams to a live peer; check it survives and that every
    datagram is accounted for (counted by the peer, or dropped by a kernel or the WAN)."""
    import os

    from testbed.progress import progress_bar
    from testbed.runs import new_run_dir, write_json
    from testbed.tools.fuzz import fuzz_local_peer
    from testbed.tools.ipfuzz import fuzz_through_wan

    try:
        key = bytes.fromhex(grid_key) if grid_key else None
    except ValueError:
        raise InputError("expected a hex string", source="--grid-key") from None
    if wan and key is not None:
        raise InputError("--grid-key is for --loopback (the WAN fuzz runs an unkeyed grid)")
    if wan and os.geteuid() != 0:
        raise InputError("--wan needs root (namespaces); --loopback does not", source="--wan")
    folder = new_run_dir("fuzz", out)
    with progress_bar("fuzzing", count) as advance:
        if wan:
            result = fuzz_through_wan(folder, count=count, seed=seed, progress=advance)
        else:
            result = fuzz_local_peer(folder, count=count, seed=seed, grid_key=key, progress=advance)
    write_json(folder / "summary.json", result)
    if as_json:
        print(json.dumps(result))
    else:
        table = Table(title=f"fuzz: {count} datagrams, seed {seed}")
        table.add_column("dropped because")
        table.add_column("datagrams", justify="right")
        for reason, n in sorted(result["dropped"].items()):
            table.add_row(reason, str(n))
        table.add_row("(accepted)", str(result["accepted"]))
        for where, n in result.get("dropped_elsewhere", {}).items():
            table.add_row(f"(before the peer) {where}", str(n))
        console.print(table)
        console.print(
            f"received {result['rx_delta']} of {count}, accounted for {result['counted']}, "
            f"uncounted {result['uncounted']}, "
            f"unexplained {result['unexplained']}, peer alive: {result['alive']}, "
            f"{result['datagrams_per_s']} datagrams/s, peer RSS {result['rss_kb']} kB"
        )
        print(folder)
    if not result.ok:
        sys.exit(1)


# -- clean ---------------------------------------------------------------------------------------------
