# `testbed cluster up | status | down`: machines joined into one Ray cluster, for
# `--ray` campaigns and sweeps (docs/beyond-one-machine.md).

from __future__ import annotations

import json

import click
from rich.table import Table

from testbed.cli._common import cli, handled
from testbed.progress import console, err_console


@cli.group()
def cluster() -> None:
    """Machines in one Ray cluster: campaigns and sweeps run on it with --ray."""


id_option = click.option(
    "--id", "cluster_id", default=None, help="Which cluster (default: the only one up)."
)


@cluster.command()
@click.argument("machines", nargs=-1, metavar="[USER@HOST[:PORT]]...")
@click.option(
    "--local",
    "local",
    type=click.IntRange(1, 16),
    default=None,
    help="Make N machines of this one (network namespaces on a LAN of their own) instead.",
)
@click.option(
    "--ray-on",
    type=click.IntRange(1),
    default=None,
    help="With --local: start Ray on the first N machines only (the rest can join over SSH).",
)
@click.option(
    "--cpus",
    type=click.IntRange(1),
    default=None,
    help="CPUs each machine offers to Ray (default: --local 1, else all of a machine's).",
)
@click.option(
    "--identity",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="SSH private key (default: the SSH agent's keys, then ~/.ssh's).",
)
@click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="Trust machines whose host key is not yet known (as ssh's accept-new).",
)
@id_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
def up(
    machines: tuple[str, ...],
    local: int | None,
    ray_on: int | None,
    cpus: int | None,
    identity: str | None,
    accept_new_host_keys: bool,
    cluster_id: str | None,
    as_json: bool,
) -> None:
    """Start a cluster: --local N, or machines over SSH (checked first: root, kernel
    features, the same project sources and Ray) joined to the cluster that is up, or
    to a new one whose head is this machine. Prints its address for --ray."""
    from testbed.errors import InputError
    from testbed.net import local_cluster_up, parse_target, ssh_cluster_up

    say = err_console.print
    if local is not None:
        if machines:
            raise InputError("--local makes its own machines; name none", source="<machines>")
        made = local_cluster_up(local, cpus=cpus or 1, ray_on=ray_on, say=say)
    else:
        if ray_on is not None:
            raise InputError("--ray-on goes with --local", source="<flag --ray-on>")
        targets = [parse_target(m) for m in machines]
        made = ssh_cluster_up(
            targets,
            identity=identity,
            accept_new_host_keys=accept_new_host_keys,
            cluster_id=cluster_id,
            cpus=cpus,
            say=say,
        )
    result = {"id": made.id, "head": made.head, "machines": [m.name for m in made.machines]}
    if as_json:
        print(json.dumps(result))
        return
    console.print(
        f"cluster {made.id}: head {made.head}, machines {', '.join(result['machines'])}\n"
        f"  testbed campaign SPEC --ray {made.head}    (or --ray auto)"
    )


@cluster.command()
@id_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
def status(cluster_id: str | None, as_json: bool) -> None:
    """The cluster's machines: Ray alive or not, CPUs, memory, load, emulated hosts."""
    from testbed.net import cluster_status, find_cluster

    found = find_cluster(cluster_id)
    rows = cluster_status(found)
    if as_json:
        print(json.dumps({"id": found.id, "head": found.head, "machines": rows}))
        return
    table = Table(title=f"cluster {found.id} (head {found.head})")
    for col in ("machine", "address", "kind", "ray", "cpus", "memory_gb", "load_1m", "hosts"):
        table.add_column(col, justify="left" if col in ("machine", "address", "kind") else "right")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row.values()))
    console.print(table)


@cluster.command()
@id_option
@click.option(
    "--identity",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="SSH private key for the machines (default: the agent's, then ~/.ssh's).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
def down(cluster_id: str | None, identity: str | None, as_json: bool) -> None:
    """Stop Ray on every machine of the cluster and remove what `up` made."""
    from testbed.net import cluster_down, find_cluster

    report = cluster_down(find_cluster(cluster_id), identity=identity, say=err_console.print)
    if as_json:
        print(json.dumps(report))
    for problem in report["problems"]:
        err_console.print(f"[red]{problem}[/]")
    if report["problems"]:
        raise SystemExit(1)
