# `testbed up`, `exec`, `clean` and `demo`: networks brought up for a person or a command,
# and what a killed run left behind.

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from testbed.cli._common import cli, handled, hosts_option, run_folder_option, topology_options
from testbed.progress import BringupProgress, console, err_console


@cli.command()
@click.argument("topology")
@topology_options
@click.option(
    "--script",
    type=click.Path(exists=True, dir_okay=False),
    help="Run these Mininet CLI commands instead of an interactive prompt.",
)
@click.option("--no-cli", is_flag=True, help="Bring the network up, print the summary, tear down.")
@click.option(
    "--container",
    "image",
    metavar="IMAGE",
    default=None,
    help="Make hosts Docker containers of this local image (p2p-testbed/debian:bookworm is "
    "built by make); never pulled.",
)
@click.option(
    "--containers",
    "boxes",
    type=click.IntRange(min=1),
    default=None,
    help="How many hosts are containers (the last N; default: all).",
)
@click.option(
    "--cpus", type=float, default=None, help="Each container's CPU limit in cores (0.5: half)."
)
@click.option(
    "--memory-mb", type=click.IntRange(min=6), default=None, help="Each container's memory limit."
)
@handled
def up(
    topology: str,
    hosts: str | None,
    pick: str,
    seed: int,
    scale: float,
    clamp: bool,
    out: Path | None,
    script: str | None,
    no_cli: bool,
    image: str | None,
    boxes: int | None,
    cpus: float | None,
    memory_mb: int | None,
) -> None:
    """Bring the network up and open Mininet's CLI on it (try: h1 ping -c3 h2)."""
    from testbed.errors import InputError
    from testbed.net import open_wan

    if image is None and (boxes or cpus or memory_mb):
        raise InputError(
            "--containers, --cpus and --memory-mb need --container IMAGE", source="<flags>"
        )
    containers = (
        None
        if image is None
        else {"image": image, "hosts": boxes, "cpus": cpus, "memory_mb": memory_mb}
    )
    with open_wan(
        topology,
        hosts=hosts_option(hosts),
        pick=pick,
        seed=seed,
        scale=scale,
        clamp=clamp,
        run_dir=out,
        name="up",
        progress=BringupProgress(),
        containers=containers,
    ) as wan:
        _print_network(wan)
        if not no_cli:
            wan.cli(script=script)
    err_console.print(f"torn down; run folder {wan.run_dir}")


def _print_network(wan: Any) -> None:
    table = Table(title=f"emulated WAN ({len(wan.hosts)} hosts)", show_header=False)
    table.add_row("topology", wan.topology.source)
    stats = wan.topology.stats()
    if "median_ms" in stats:
        table.add_row(
            "RTT ms",
            f"min {stats['min_ms']:.3f}  median {stats['median_ms']:.1f}  max {stats['max_ms']:.1f}",
        )
    cal = wan.calibration
    if cal:
        table.add_row(
            "engine floor",
            f"RTT {cal.floor_rtt_ms:.3f} ms (zero-delay p50 {cal.rtt0_p50_ms:.3f} ms); offset {cal.path_offset_us:.0f} us",
        )
    table.add_row(
        "clamped pairs",
        str(wan.clamped)
        + (f" (raised to {cal.floor_rtt_ms:.3f} ms)" if wan.clamped and cal else ""),
    )
    boxed = [h.name for h in wan.hosts if h.container]
    if boxed:
        table.add_row("containers", f"{len(boxed)}: {boxed[0]}..{boxed[-1]}")
    first, last = wan.hosts[0], wan.hosts[-1]
    table.add_row(
        "hosts", f"{first.name} {first.ip} ({first.node}) ... {last.name} {last.ip} ({last.node})"
    )
    table.add_row("run folder", str(wan.run_dir))
    err_console.print(table)


# -- exec ----------------------------------------------------------------------------------------------


@cli.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("topology")
@topology_options
@click.option("--on", "on", metavar="HOSTS", help="Only these hosts (h1,h3,...).")
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=None,
    help="Stop commands still running after this many seconds.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@handled
def exec_(
    topology: str,
    hosts: str | None,
    pick: str,
    seed: int,
    scale: float,
    clamp: bool,
    out: Path | None,
    on: str | None,
    timeout_s: float | None,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Bring the network up, run COMMAND on every host at once, tear down.

    COMMAND may use {id} (1..N), {name} (h1), {ip}, {peers} (the other hosts'
    IPs, comma-separated), {n}, {index}, {node}, {run}. Put -- before it.
    Each host's output lands in the run folder: hosts/<host>/exec.out|err.
    """
    from testbed.net import open_wan

    argv = list(command)
    with open_wan(
        topology,
        hosts=hosts_option(hosts),
        pick=pick,
        seed=seed,
        scale=scale,
        clamp=clamp,
        run_dir=out,
        name="exec",
        progress=BringupProgress(),
    ) as wan:
        chosen = on.split(",") if on else None
        for h in chosen or []:
            wan.host(h)
        results = wan.exec(argv, hosts=chosen, timeout_s=timeout_s)
    failed = [r for r in results if r.returncode != 0]
    if as_json:
        print(
            json.dumps(
                {
                    "run_dir": str(wan.run_dir),
                    "hosts": len(results),
                    "failed": len(failed),
                    "results": [
                        {
                            "host": r.host.name,
                            "returncode": r.returncode,
                            "timed_out": r.timed_out,
                            "duration_s": round(r.duration_s, 3),
                            "stdout": str(r.stdout_path),
                            "stderr": str(r.stderr_path),
                        }
                        for r in results
                    ],
                }
            )
        )
    else:
        table = Table(title=" ".join(argv))
        for col in ("host", "exit", "seconds", "last line of output"):
            table.add_column(col)
        for r in results:
            lines = (r.stdout() or r.stderr()).strip().splitlines()
            code = "timeout" if r.timed_out else str(r.returncode)
            table.add_row(
                r.host.name,
                code if r.returncode == 0 else f"[red]{code}[/]",
                f"{r.duration_s:.2f}",
                lines[-1][:80] if lines else "",
            )
        console.print(table)
        console.print(f"run folder: {wan.run_dir}")
    sys.exit(1 if failed else 0)


# -- bench -------------------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--force", is_flag=True, help="Also remove runs whose testbed process is still alive."
)
@click.option(
    "--run",
    "run_id",
    metavar="RUN_ID",
    help="Only this run or local cluster (the hex id in tb<id>-h1, tb<id>-m1).",
)
@click.option(
    "--cluster",
    "cluster_id",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[ID]",
    help="Also on every machine of this cluster (default: the only one up).",
)
@click.option("--json", "as_json", is_flag=True)
@handled
def clean(force: bool, run_id: str | None, cluster_id: str | None, as_json: bool) -> None:
    """Remove the namespaces, links, rules and processes of runs that were killed."""
    from testbed.net import clean as do_clean
    from testbed.net import clean_machines, find_cluster

    machines = []
    if cluster_id is not None:  # first: the cluster must still be up to reach its machines
        machines = clean_machines(find_cluster(cluster_id or None), run_id)
    report = do_clean(force=force, run_id=run_id)
    for other in machines:
        label = f"machine {other['machine']}: "
        report.problems += [label + p for p in other["problems"]]
        report.still_alive += other["still_alive"]
        if not as_json:
            console.print(
                f"{label}{len(other['runs'])} run(s), {len(other['netns_removed'])} namespaces, "
                f"{len(other['processes_killed'])} processes removed"
            )
    if as_json:
        print(json.dumps(report.__dict__ | ({"machines": machines} if machines else {})))
    else:
        if report.nothing_done:
            console.print("nothing to clean" + (" here" if machines else ""))
        else:
            console.print(
                f"removed {len(report.runs)} run(s): {len(report.netns_removed)} namespaces, "
                f"{len(report.processes_killed)} processes, "
                f"{len(report.containers_removed)} containers, "
                f"{len(report.clusters_removed)} cluster(s)"
            )
        for rid in report.live_runs_skipped:
            console.print(f"[yellow]run {rid} is still running; left alone (use --force)[/]")
        for cid in report.live_clusters_skipped:
            console.print(
                f"[yellow]cluster {cid} is up; left alone (`testbed cluster down --id {cid}`, "
                "or --force)[/]"
            )
    if report.still_alive:
        err_console.print(f"[red]processes that would not die: {report.still_alive}[/]")
        sys.exit(1)


# -- topology ------------------------------------------------------------------------------------------


@cli.command()
@click.option("--hosts", type=click.IntRange(4), default=32, show_default=True)
@run_folder_option
@handled
def demo(hosts: int, out: Path | None) -> None:
    """32 PlanetLab hosts: fidelity check, a partition and heal, and a report."""
    from testbed.tools.demo import run_demo

    run_demo(hosts=hosts, out=out)
