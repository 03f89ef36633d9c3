# `testbed workload`, `churn` and `topology ...`: look at an input before running it.

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from testbed.cli._common import cli, handled, hosts_option
from testbed.errors import InputError
from testbed.progress import console, err_console


@cli.command(name="workload")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option(
    "--min-size",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="2: parallel jobs only.",
)
@click.option("--max-size", type=click.IntRange(1), default=None, help="Drop jobs wider than this.")
@click.option("--completed", is_flag=True, help="Keep completed jobs (status 1) only.")
@click.option(
    "--slice",
    "slice_k",
    type=click.IntRange(1),
    default=None,
    help="The K jobs submitted over the shortest interval.",
)
@click.option(
    "--head", "head_k", type=click.IntRange(1), default=None, help="Then the first K jobs."
)
@click.option(
    "--window",
    type=click.FloatRange(0),
    default=None,
    help="Compress submissions into this many seconds.",
)
@click.option(
    "--runtime-scale",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Multiply run times.",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the result as SWF.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
def workload_command(
    path: str,
    min_size: int,
    max_size: int | None,
    completed: bool,
    slice_k: int | None,
    head_k: int | None,
    window: float | None,
    runtime_scale: float | None,
    out_path: str | None,
    as_json: bool,
) -> None:
    """Read an SWF trace, filter, slice and compress it; print its figures (and save it)."""
    from testbed import workload as wl

    trace = wl.select(
        wl.read_swf(path), min_size=min_size, max_size=max_size, completed_only=completed
    )
    if slice_k is not None:
        trace = wl.shortest_slice(trace, slice_k)
    if head_k is not None:
        trace = wl.head(trace, head_k)
    if window is not None:
        trace = wl.compress(trace, window)
    if runtime_scale is not None:
        trace = wl.scale_runtime(trace, runtime_scale)
    if out_path is not None:
        wl.write_swf(trace, out_path)
    figures = wl.describe(trace)
    if as_json:
        print(json.dumps(figures))
        return
    table = Table(title=f"{path}: {figures['jobs']:,} jobs")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        if key not in ("notes", "source"):
            table.add_row(key, f"{value:,.6g}" if isinstance(value, float) else str(value))
    console.print(table)
    for note in figures["notes"]:
        err_console.print(f"  {note}")


@cli.command(name="churn")
@click.argument("script", type=click.Path(dir_okay=False))
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The experiment spec whose hosts the script acts on (default: 64 PlanetLab hosts).",
)
@click.option(
    "--seed", type=int, default=None, help="Compile with this seed (default: the spec's)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON lines.")
@handled
def churn_command(script: str, spec_path: str | None, seed: int | None, as_json: bool) -> None:
    """Check a churn script and print the schedule it compiles to (nothing runs)."""
    import msgspec

    from testbed.experiments.overlay import churn_schedule, select_topology
    from testbed.experiments.program import program_schedule
    from testbed.spec import ChurnSpec, ProgramSpec, crash_repair_s, load_any_spec, load_spec
    from testbed.topology import resolve_topology

    defaults = {"topology": {"ref": "planetlab", "hosts": 64, "pick": "first"}}
    if spec_path is not None and isinstance(load_any_spec(spec_path)[0], ProgramSpec):
        program, _ = load_any_spec(spec_path)
        assert isinstance(program, ProgramSpec)
        program = msgspec.structs.replace(
            program,
            seed=program.seed if seed is None else seed,
            churn=ChurnSpec(script=script),
            campaign=None,
        )
        schedule = program_schedule(program, resolve_topology(program.topology, program.seed))
        spec_seed = program.seed
        warnings = schedule.room_warnings(program.churn.settle_s, program.leave_grace_s)
    else:
        spec, _ = load_spec(spec_path, [], defaults=None if spec_path else defaults)
        spec = msgspec.structs.replace(
            spec,
            seed=spec.seed if seed is None else seed,
            churn=ChurnSpec(script=script),
            phases=[],
            campaign=None,
        )
        topology = select_topology(spec)
        compiled = churn_schedule(spec, topology, [f"h{k + 1}" for k in range(topology.n)])
        assert compiled is not None
        schedule, spec_seed = compiled, spec.seed
        assert spec.churn is not None
        warnings = schedule.room_warnings(
            spec.churn.settle_s, spec.node.propose_timeout_s, crash_s=crash_repair_s(spec.node)
        )
    for warning in warnings:  # on stderr, also with --json
        err_console.print(f"[yellow]warning:[/] {script}: {warning}")
    if as_json:
        print(schedule.to_jsonl(), end="")
        return
    table = Table(title=f"{script}: {len(schedule.events)} events, seed {spec_seed}")
    for col in ("t (s)", "verb", "hosts / sides", "value", "line"):
        table.add_column(col, justify="right" if col in ("t (s)", "line") else "left")
    for event in schedule.events:
        record = schedule.record(event)
        if event.hosts:
            who = ", ".join(event.hosts[:6]) + (
                f" (+{len(event.hosts) - 6})" if len(event.hosts) > 6 else ""
            )
        else:
            sides = record.get("sides") or record.get("between") or []
            who = " | ".join(f"{len(g)} hosts" for g in sides)
        value = next(
            (
                f"{record[key]:g}{unit}"
                for key, unit in (("rtt_ms", " ms RTT"), ("loss_rate", " loss"), ("frame", ""))
                if record.get(key) is not None
            ),
            "matrix RTT" if record.get("rtt_from") else "",
        )
        table.add_row(f"{event.t:.3f}", event.verb, who, value, str(event.line))
    console.print(table)


@cli.group()
def topology() -> None:
    """Inspect and generate latency matrices."""


@topology.command(name="show")
@click.argument("ref")
@click.option("--hosts", "hosts", metavar="N|NAMES")
@click.option("--pick", type=click.Choice(["first", "random"]), default="first")
@click.option("--seed", type=int, default=0)
@click.option("--scale", type=float, default=1.0)
@click.option(
    "--floor", "floor_ms", type=float, default=None, help="Count pairs below this RTT (ms)."
)
@click.option(
    "--pair",
    "pairs",
    multiple=True,
    metavar="A,B",
    help="Print this pair's RTT: node names (n0,n17) or a run's host names (h1,h18: the "
    "selected hosts in order); repeatable.",
)
@click.option("--json", "as_json", is_flag=True)
@handled
def topology_show(
    ref: str,
    hosts: str | None,
    pick: str,
    seed: int,
    scale: float,
    floor_ms: float | None,
    pairs: tuple[str, ...],
    as_json: bool,
) -> None:
    """Validate a topology and print its figures (or, with --pair, pairs' RTTs)."""
    from testbed.topology import load_topology

    topo = load_topology(ref)
    host_arg = hosts_option(hosts)
    if isinstance(host_arg, list):
        topo = topo.select(hosts=host_arg)
    else:
        topo = topo.select(host_arg, pick=pick, seed=seed if pick == "random" else None)
    topo = topo.scaled(scale)
    if pairs:
        rows = [_pair(topo, text) for text in pairs]
        if as_json:
            print(json.dumps({"source": topo.source, "pairs": rows}))
            return
        table = Table(title=topo.source)
        for col in ("a", "b", "hosts", "RTT (ms)", "one-way (ms)"):
            table.add_column(col, justify="right" if "ms" in col else "left")
        for row in rows:
            table.add_row(
                row["a"],
                row["b"],
                f"{row['host_a']}, {row['host_b']}",
                f"{row['rtt_ms']:.3f}",
                f"{row['one_way_ms']:.3f}",
            )
        console.print(table)
        return
    stats: dict[str, Any] = {"source": topo.source, **topo.stats()}
    labels = sorted({f"{k}={v}" for lab in topo.labels for k, v in lab.items()})
    if labels:
        stats["labels"] = len(labels)
    if floor_ms is not None:
        stats["pairs_below_floor"] = len(topo.pairs_below(floor_ms))
    if as_json:
        print(json.dumps(stats))
        return
    table = Table(show_header=False)
    for key, value in stats.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)


def _pair(topo: Any, text: str) -> dict[str, Any]:
    """One --pair A,B: each a node name or a host name (hK: the K-th selected host)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts):
        raise InputError(f"expected two names A,B, not {text!r}", source="<flag --pair>")
    index = {name: k for k, name in enumerate(topo.names)}
    found = []
    for name in parts:
        if name in index:
            found.append(index[name])
        elif name[:1] == "h" and name[1:].isdigit() and 1 <= int(name[1:]) <= topo.n:
            found.append(int(name[1:]) - 1)
        else:
            raise InputError(
                f"no node or host named {name!r} (nodes {topo.names[0]}..{topo.names[-1]}, "
                f"hosts h1..h{topo.n})",
                source="<flag --pair>",
            )
    a, b = found
    rtt = float(topo.rtt_ms[a, b])
    return {
        "a": topo.names[a],
        "b": topo.names[b],
        "host_a": f"h{a + 1}",
        "host_b": f"h{b + 1}",
        "rtt_ms": round(rtt, 6),
        "one_way_ms": round(rtt / 2, 6),
    }


@topology.command(name="generate")
@click.argument("kind", type=click.Choice(["sharcnet"]))
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--inter",
    default="planetlab:1",
    show_default=True,
    help="Matrix the inter-cluster latencies come from.",
)
@click.option(
    "--clusters",
    default=None,
    help="Comma-separated cluster sizes (default: 10 clusters, 2,091 nodes).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Matrix file to write (.txt, .txt.gz or .npy); hosts go to <output>.hosts.csv.",
)
@handled
def topology_generate(kind: str, seed: int, inter: str, clusters: str | None, output: Path) -> None:
    """Generate a SHARCNET-style grid matrix (seed 002 §5.2.2)."""
    import numpy as np

    from testbed.topology import DEFAULT_CLUSTERS, load_topology, sharcnet_grid, write_matrix

    sizes = DEFAULT_CLUSTERS
    if clusters:
        try:
            sizes = tuple(int(x) for x in clusters.split(","))
        except ValueError:
            raise InputError(
                f"--clusters must be comma-separated integers, not {clusters!r}",
                source="<--clusters>",
            ) from None
    topo = sharcnet_grid(load_topology(inter), seed=seed, clusters=sizes)
    if output.suffix == ".npy":
        np.save(output, topo.rtt_ms)
    else:
        write_matrix(topo, output)
    hosts_path = output.with_name(output.name + ".hosts.csv")
    with hosts_path.open("w") as stream:
        stream.write("index,name,cluster,interconnect\n")
        for k, (name, labels) in enumerate(zip(topo.names, topo.labels, strict=True)):
            stream.write(f"{k},{name},{labels['cluster']},{labels['interconnect']}\n")
    console.print(f"wrote {output} ({topo.n} nodes) and {hosts_path}")


# -- demo ----------------------------------------------------------------------------------------------
