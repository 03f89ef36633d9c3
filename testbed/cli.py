# The `testbed` command.
#
# Every subcommand validates its input before it touches the machine, shows
# progress on stderr for long steps, prints results as a table (or one JSON
# object with --json on stdout), and tears down whatever it brought up on
# exit, error, Ctrl-C or SIGTERM. Exit codes: 0 ok, 1 runtime failure,
# 2 bad input, 130 interrupted.

from __future__ import annotations

import contextlib
import functools
import json
import math
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from testbed.errors import InputError, TestbedError
from testbed.progress import BringupProgress, console, err_console

__all__ = ["main"]


def _fail(exc: BaseException) -> int:
    # escape: messages quote user input ("[campaign]", "cluster=[...]"), not markup
    err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    return 2 if isinstance(exc, InputError) else 1


def _handled(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn testbed errors into a one-line message and an exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except TestbedError as exc:
            sys.exit(_fail(exc))
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted; torn down[/]")
            sys.exit(130)

    return wrapper


def _hosts_option(value: str | None) -> int | list[str] | None:
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise click.BadParameter(
            "expected a host count (32) or a comma-separated list of node names (n3,n17)"
        )
    return names


def topology_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--hosts, --pick, --seed, --scale, --clamp, --out: how a topology becomes a network."""
    options = [
        click.option(
            "--hosts",
            "hosts",
            metavar="N|NAMES",
            help="Host count (the first N nodes, or a sample with --pick random), or a comma-separated list of node names.",
        ),
        click.option(
            "--pick",
            type=click.Choice(["first", "random"]),
            default="first",
            show_default=True,
            help="Which N nodes to emulate.",
        ),
        click.option(
            "--seed",
            type=int,
            default=0,
            show_default=True,
            help="Seed for --pick random, loss and jitter.",
        ),
        click.option(
            "--scale",
            type=float,
            default=1.0,
            show_default=True,
            help="Multiply every latency by this.",
        ),
        click.option(
            "--clamp",
            is_flag=True,
            help="Raise latencies below the engine's measured floor to it (else they are an error).",
        ),
        click.option(
            "--out",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Run folder (default runs/<name>-<timestamp>).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


# The benchmarks raise RTTs below the floor to it by default (and count them).
no_clamp_option = click.option(
    "--no-clamp",
    is_flag=True,
    help="Refuse RTTs below the delay engine's floor instead of raising them to it "
    "(clamping is the default here; the result counts clamped pairs).",
)


run_folder_option = click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run folder (default runs/<name>-<timestamp>).",
)


def overrides_option(example: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--set KEY=VALUE (repeatable): a spec field by dotted path, a TOML value."""
    return click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help=f"Override a spec field (dotted path; TOML value), {example}.",
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="p2p-grid-testbed")
def cli() -> None:
    """P2P Grid Testbed: real peers in network namespaces on a WAN core that
    delays every packet by its pair's latency from a real matrix.

    TOPOLOGY is planetlab, planetlab:<frame 1-18>, sharcnet[:<seed>], a matrix
    file (N x N RTT in ms) or a topology .toml.
    """


# -- up ----------------------------------------------------------------------------------------------


@cli.command()
@click.argument("topology")
@topology_options
@click.option(
    "--script",
    type=click.Path(exists=True, dir_okay=False),
    help="Run these Mininet CLI commands instead of an interactive prompt.",
)
@click.option("--no-cli", is_flag=True, help="Bring the network up, print the summary, tear down.")
@_handled
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
) -> None:
    """Bring the network up and open Mininet's CLI on it (try: h1 ping -c3 h2)."""
    from testbed.net import open_wan

    with open_wan(
        topology,
        hosts=_hosts_option(hosts),
        pick=pick,
        seed=seed,
        scale=scale,
        clamp=clamp,
        run_dir=out,
        name="up",
        progress=BringupProgress(),
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
@_handled
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
        hosts=_hosts_option(hosts),
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


@cli.group()
def bench() -> None:
    """Benchmarks of the emulator itself."""


@bench.command(name="delay")
@click.option("--topology", default="planetlab", show_default=True)
@topology_options
@no_clamp_option
@click.option(
    "--samples",
    type=click.IntRange(1, 10_000),
    default=20,
    show_default=True,
    help="Probes per pair.",
)
@click.option(
    "--rate",
    type=click.FloatRange(1, 100_000),
    default=4000,
    show_default=True,
    help="Probes per second (2 packets each through the engine).",
)
@click.option(
    "--max-pairs",
    type=click.IntRange(1),
    default=2000,
    show_default=True,
    help="Probe a seeded sample of pairs beyond this.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_handled
def bench_delay(
    topology: str,
    hosts: str | None,
    pick: str,
    seed: int,
    scale: float,
    clamp: bool,
    out: Path | None,
    no_clamp: bool,
    samples: int,
    rate: float,
    max_pairs: int,
    as_json: bool,
) -> None:
    """Measure achieved RTT on host pairs against the configured matrix.

    Pairs below the engine's floor are clamped to it (see --no-clamp) and
    compared with the clamped value, which is what the engine was asked for.
    """
    clamp = not no_clamp
    from rich.progress import Progress

    from testbed.net import open_wan
    from testbed.runs import write_json
    from testbed.tools.bench import delay_fidelity

    host_arg = _hosts_option(hosts) or 32
    with open_wan(
        topology,
        hosts=host_arg,
        pick=pick,
        seed=seed,
        scale=scale,
        clamp=clamp,
        run_dir=out,
        name="bench-delay",
        mininet=False,
        progress=BringupProgress(),
    ) as wan:
        n = len(wan.hosts)
        total = min(n * (n - 1) // 2, max_pairs) * samples
        with Progress(
            console=err_console, transient=True, disable=not err_console.is_terminal
        ) as progress:
            task = progress.add_task("probing", total=total)
            result = delay_fidelity(
                wan,
                samples=samples,
                rate_per_s=rate,
                max_pairs=max_pairs,
                seed=seed,
                on_sent=lambda k: progress.advance(task, k),
            )
        result["run_dir"] = str(wan.run_dir)
        write_json(wan.run_dir / "summary.json", result)
    if as_json:
        print(json.dumps(result))
        return
    table = Table(
        title=f"delay fidelity: {result['hosts']} hosts, {result['pairs']} pairs x {samples}"
    )
    table.add_column("figure")
    table.add_column("value", justify="right")
    err = result["rtt_error_ms"]
    rel = result["rtt_rel_error"]
    table.add_row("engine packets/s", f"{result['pps']:.0f}")
    table.add_row(
        "|RTT error| p50 / p99 / max (ms)",
        f"{err['p50']:.3f} / {err['p99']:.3f} / {err['max']:.3f}",
    )
    table.add_row("relative error p50 / p99", f"{rel['p50']:.4f} / {rel['p99']:.4f}")
    table.add_row(f"p99 of error / bound {result['bound']}", f"{result['bound_ratio_p99']:.3f}")
    table.add_row("samples within bound", f"{result['within_bound']:.2%}")
    table.add_row("lost probes", f"{result['lost']} of {result['probes']}")
    table.add_row(
        "floor RTT (ms), clamped pairs", f"{result['floor_rtt_ms']}, {result['clamped_pairs']}"
    )
    console.print(table)


@bench.command(name="probes")
@click.option(
    "--topology", default="sharcnet", show_default=True, help="Matrix to draw hosts from."
)
@click.option(
    "--hosts",
    default="128,512,2048",
    show_default=True,
    help="Grid sizes, comma-separated (hosts drawn at random from the topology).",
)
@click.option("--seeds", type=click.IntRange(1), default=3, show_default=True)
@click.option("--trees", type=click.IntRange(1), default=9, show_default=True, help="DTM trees.")
@click.option(
    "--tolerance",
    type=click.FloatRange(0, 0.5, max_open=True),
    default=0.0,
    show_default=True,
    help="DTM walk tolerance (0: a noise-free matrix).",
)
@click.option(
    "--jump",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="DTM's jump: a share of d(base, c) (0: walks take one edge at a time; try 0.1).",
)
@click.option(
    "--leaf-hosts",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="DTM's leaf_hosts (try 4 with --jump).",
)
@click.option(
    "--snap",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="DTM's snap: a share of c's leaf (0: off; try 0.5 with --leaf-sample 4).",
)
@click.option(
    "--leaf-sample",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="DTM's leaf_sample: lone hosts tried at a vertex (0: as branch_sample allows).",
)
@click.option(
    "--tree-choice",
    type=click.Choice(["quantile", "fit"]),
    default="quantile",
    show_default=True,
    help="How a forest predicts a pair (fit: the tree fitting both hosts best; same samples).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_handled
def bench_probes(
    topology: str,
    hosts: str,
    seeds: int,
    trees: int,
    tolerance: float,
    jump: float,
    leaf_hosts: int,
    snap: float,
    leaf_sample: int,
    tree_choice: str,
    as_json: bool,
) -> None:
    """DTM's measurements per peer as the grid grows (simulator): O(log n)?"""
    from testbed.experiments.predict import probe_cost
    from testbed.spec import DtmTechnique

    options = {"jump": jump, "leaf_hosts": leaf_hosts, "snap": snap, "leaf_sample": leaf_sample}
    tech = DtmTechnique(
        name="dtm", trees=trees, tolerance=tolerance, tree_choice=tree_choice, **options
    )

    try:
        sizes = [int(x) for x in hosts.split(",") if x.strip()]
    except ValueError:
        raise InputError(
            f"expected sizes like 128,512,2048, not {hosts!r}", source="--hosts"
        ) from None
    if not sizes or min(sizes) < 2:
        raise InputError("need sizes of at least 2 hosts", source="--hosts")
    with err_console.status("DTM joins") as status:
        rows = probe_cost(
            topology,
            sizes,
            list(range(1, seeds + 1)),
            tech,
            progress=lambda done, total: status.update(f"DTM joins: {done}/{total} sizes"),
        )
    if as_json:
        print(json.dumps({"topology": topology, "rows": rows}))
        return
    how = "".join(f", {name} {value:g}" for name, value in options.items() if value)
    how += ", fit" if tree_choice == "fit" and trees > 1 else ""
    table = Table(
        title=f"DTM measurements per peer ({topology}, {trees} tree(s){how}, {seeds} seeds)"
    )
    for col in ("hosts", "mean", "max", "mean / log2 n", "p95 rel. error"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(
            f"{row['hosts']:,}",
            f"{row['per_host_mean']:.1f}",
            str(row["per_host_max"]),
            f"{row['per_host_over_log2n']:.2f}",
            f"{row['p95']:.3f}",
        )
    console.print(table)


@bench.command(name="bringup")
@click.option("--topology", default="planetlab", show_default=True)
@click.option("--hosts", type=click.IntRange(1), default=200, show_default=True)
@run_folder_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_handled
def bench_bringup(topology: str, hosts: int, out: Path | None, as_json: bool) -> None:
    """Bring N hosts up and down once; report times and leftovers."""
    from testbed.runs import write_json
    from testbed.tools.bench import bringup_cost

    result = bringup_cost(topology, hosts, run_dir=out, progress=BringupProgress())
    write_json(Path(result["run_dir"]) / "summary.json", result)
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bring-up of {hosts} hosts")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key in ("up_s", "down_s", "leftovers", "floor_rtt_ms", "clamped_pairs"):
        table.add_row(key, str(result[key]))
    console.print(table)


@bench.command(name="mpi")
@click.option("--topology", default="topologies/sharcnet-emu.toml", show_default=True)
@click.option("--ranks", type=click.IntRange(2, 256), default=8, show_default=True)
@click.option("--rounds", type=click.IntRange(1, 100_000), default=50, show_default=True)
@click.option(
    "--compute-s",
    type=click.FloatRange(0, 3600),
    default=1.0,
    show_default=True,
    help="All compute phases together.",
)
@click.option(
    "--diameter-ms",
    type=click.FloatRange(0, min_open=True),
    default=1.0,
    show_default=True,
    help="The job's latency requirement D (RTT).",
)
@click.option("--repeat", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option(
    "--command",
    default=None,
    help="Your own program instead of the built-in one: it gets TESTBED_RANK, TESTBED_SIZE and "
    "TESTBED_PEERS and prints a JSON object with wall_s as its last line.",
)
@no_clamp_option
@run_folder_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_handled
def bench_mpi(
    topology: str,
    ranks: int,
    rounds: int,
    compute_s: float,
    diameter_ms: float,
    repeat: int,
    command: str | None,
    no_clamp: bool,
    out: Path | None,
    as_json: bool,
) -> None:
    """The same MPI-like job on a proper cluster (every pair within D) and on a
    set that violates D (half its ranks in another cluster): wall times and the
    slowdown. Real processes over TCP on the emulated WAN (root)."""
    from testbed.runs import write_json
    from testbed.tools.mpi import latency_penalty

    with err_console.status(f"{ranks}-rank job, {rounds} rounds, twice x {repeat}"):
        result = latency_penalty(
            topology,
            ranks=ranks,
            rounds=rounds,
            compute_s=compute_s,
            diameter_ms=diameter_ms,
            repeat=repeat,
            command=command,
            clamp=not no_clamp,
            run_dir=None if out is None else str(out),
            progress=BringupProgress(),
        )
    write_json(Path(result["run_dir"]) / "summary.json", result)
    if as_json:
        print(json.dumps(result))
        return
    table = Table(
        title=f"{ranks} ranks, {rounds} rounds, {compute_s:g} s of compute, D = {diameter_ms:g} ms"
    )
    for col in ("hosts", "widest RTT ms", "wall s (each run)"):
        table.add_column(col, justify="left" if col == "hosts" else "right")
    for name in ("proper", "spread"):
        row = result[name]
        table.add_row(
            f"{name}: {', '.join(row['hosts'])}",
            f"{row['widest_rtt_ms']:g}",
            " ".join(f"{w:.3f}" for w in row["wall_s"]),
        )
    console.print(table)
    console.print(f"slowdown (median spread / median proper): [bold]{result['slowdown']:g}[/]")
    if result["clamped_pairs"]:
        console.print(
            f"{result['clamped_pairs']} ordered pair(s) below the engine's floor were raised to "
            f"{result['floor_rtt_ms']:g} ms"
        )


# -- run -------------------------------------------------------------------------------------------------


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
@_handled
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


engine_option = click.option(
    "--engine", type=click.Choice(["sim", "emu"]), default=None, help="Override the spec's engine."
)


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
@_handled
def churn_command(script: str, spec_path: str | None, seed: int | None, as_json: bool) -> None:
    """Check a churn script and print the schedule it compiles to (nothing runs)."""
    import msgspec

    from testbed.experiments.overlay import churn_schedule, select_topology
    from testbed.spec import ChurnSpec, load_spec

    defaults = {"topology": {"ref": "planetlab", "hosts": 64, "pick": "first"}}
    spec, _ = load_spec(spec_path, [], defaults=None if spec_path else defaults)
    spec = msgspec.structs.replace(
        spec,
        seed=spec.seed if seed is None else seed,
        churn=ChurnSpec(script=script),
        phases=[],
        campaign=None,
    )
    topology = select_topology(spec)
    schedule = churn_schedule(spec, topology, [f"h{k + 1}" for k in range(topology.n)])
    assert schedule is not None
    if as_json:
        print(schedule.to_jsonl(), end="")
        return
    table = Table(title=f"{script}: {len(schedule.events)} events, seed {spec.seed}")
    for col in ("t (s)", "verb", "hosts / groups", "value", "line"):
        table.add_column(col, justify="right" if col in ("t (s)", "line") else "left")
    for event in schedule.events:
        if event.hosts:
            who = ", ".join(event.hosts[:6]) + (
                f" (+{len(event.hosts) - 6})" if len(event.hosts) > 6 else ""
            )
        else:
            who = " | ".join(f"{len(g)} hosts" for g in event.groups)
        value = "" if event.value is None else f"{event.value:g}"
        table.add_row(f"{event.t:.3f}", event.verb, who, value, str(event.line))
    console.print(table)


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@engine_option
@overrides_option("e.g. --set campaign.seeds=[1,2] --set topology.hosts=128")
@run_folder_option
@click.option(
    "--jobs",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Simulated runs side by side (one process each).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_handled
def campaign(
    spec_path: str,
    engine: str | None,
    overrides: tuple[str, ...],
    out: Path | None,
    jobs: int,
    as_json: bool,
) -> None:
    """Run a spec under each of its [campaign] churn scripts x seeds; one table of
    what broke (invariant violations after each quiet period) and how fast it repaired."""
    from testbed.experiments.campaign import run_campaign
    from testbed.spec import load_spec

    extra = [*overrides, *([f'engine="{engine}"'] if engine else [])]
    spec, _ = load_spec(spec_path, extra)
    if spec.campaign is None:
        raise InputError(
            "no [campaign] table (scripts = [...], seeds = [...]); `testbed run` runs one spec",
            source=spec_path,
        )
    with err_console.status(f"campaign {spec.name}") as status:

        def on_run(k: int, total: int, script: str, seed: int, row: dict | None) -> None:
            if row is None:
                status.update(f"campaign {spec.name}: run {k + 1}/{total}, {script} seed {seed}")
                return
            err_console.print(
                f"  {row['run']}: {row['status']}, {row['events_applied']} events, "
                f"{row['violations']} violation(s) after quiet periods, "
                f"{row['violations_unsettled']} in unsettled checks, {row['wall_s']:.0f} s"
            )

        folder, result = run_campaign(spec, out=out, on_run=on_run, jobs=jobs)
    if as_json:
        print(json.dumps(result | {"folder": str(folder)}))
        return

    def pq(figures: dict, key: str, unit: str = "") -> str:
        value = figures.get(key)
        return "-" if value is None else f"{value:g}{unit}"

    table = Table(title=f"campaign {spec.name} ({spec.engine})")
    columns = ("run", "status", "events", "violations", "unsettled", "repair p50/p99 s")
    for col in (*columns, "late p50/p99 ms"):
        table.add_column(col, justify="left" if col in ("run", "status") else "right")
    for row in result["rows"]:
        table.add_row(
            row["run"],
            row["status"],
            str(row["events_applied"]),
            str(row["violations"]),
            f"{row['violations_unsettled']} ({row['checks_unsettled']}/{row['checks']} checks)",
            f"{pq(row['repair_s'], 'p50')} / {pq(row['repair_s'], 'p99')}",
            f"{pq(row['lateness_ms'], 'p50')} / {pq(row['lateness_ms'], 'p99')}",
        )
    table.add_section()
    table.add_row(
        f"{result['runs']} runs",
        result["status"],
        str(result["events_applied"]),
        str(result["violations"]),
        str(result["violations_unsettled"]),
        f"{pq(result['repair_s'], 'p50')} / {pq(result['repair_s'], 'p99')}",
        f"{pq(result['lateness_ms'], 'p50')} / {pq(result['lateness_ms'], 'p99')}",
    )
    console.print(table)
    for bad in result["violating_checks"][:10]:
        peers = sorted({p for v in bad["first"] for p in v["peers"]})
        lines = sorted({e["line"] for e in bad["events"]})
        unsettled = "" if bad["settled"] else f" (unsettled: quiet {bad['quiet_s']} s"
        if bad["departing"]:
            unsettled += f", still leaving: {', '.join(bad['departing'][:8])}"
        err_console.print(
            f"  [red]{bad['run']} {bad['check']}[/]{unsettled + ')' if unsettled else ''}: "
            f"{bad['by_kind']} peers {', '.join(peers[:8])}"
            f"; events since the last clean check: script lines {lines}"
        )
    print(folder)


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@engine_option
@overrides_option("e.g. --set topology.hosts=128 --set seed=7")
@run_folder_option
@_handled
def run(spec_path: str, engine: str | None, overrides: tuple[str, ...], out: Path | None) -> None:
    """Run an experiment spec (an overlay experiment, or kind = "predict",
    "cluster" or "sched"); prints the run folder as its last line."""
    from testbed.experiments.overlay import run_experiment
    from testbed.spec import ClusterSpec, PredictSpec, SchedSpec, load_any_spec

    extra = [*overrides, *([f'engine="{engine}"'] if engine else [])]
    spec, data = load_any_spec(spec_path, extra)
    if isinstance(spec, PredictSpec):
        print(_run_prediction(spec, data, out))
        return
    if isinstance(spec, ClusterSpec):
        print(_run_clusters(spec, data, out))
        return
    if isinstance(spec, SchedSpec):
        print(_run_sched(spec, data, out))
        return
    phases = Table(title=f"{spec.name} ({spec.engine}, seed {spec.seed})")
    for col in ("phase", "t (s)", "members", "violations", "routes", "hops"):
        phases.add_column(col)

    def on_phase(label: str, result: dict) -> None:
        err_console.print(
            f"  {label}: t={result['t']:.0f} s, {result['members']} members, "
            f"{result['violations']} violation(s) {result['by_kind'] or ''}"
        )
        phases.add_row(
            label,
            f"{result['t']:.0f}",
            str(result["members"]),
            str(result["violations"]),
            str(result["routes_checked"]),
            f"{result['mean_hops']:.2f}",
        )

    with (
        err_console.status(f"running {spec.name} on {spec.engine}")
        if err_console.is_terminal
        else contextlib.nullcontext()
    ) as status:
        last_said = [0.0]

        def progress(
            line: str,
        ) -> None:  # a jobs run's drain: a status line, and a log line a minute
            if status is not None:
                status.update(f"{spec.name}: {line}")
            if time.monotonic() - last_said[0] >= 60:
                last_said[0] = time.monotonic()
                err_console.print(f"  {line}")

        run_dir = run_experiment(spec, data, out=out, on_phase=on_phase, progress=progress)
    err_console.print(phases)
    if spec.jobs is not None:
        _print_jobs(json.loads((run_dir / "summary.json").read_text()))
    print(run_dir)


def _print_jobs(summary: dict[str, Any]) -> None:
    """The jobs of an overlay run: what became of them, and bounded slowdown."""
    jobs = summary.get("jobs")
    if not isinstance(jobs, dict) or "submitted" not in jobs:
        err_console.print(
            f"jobs: no results ({summary.get('jobs_error', 'the run stopped early')})"
        )
        return
    setup = summary["jobs_setup"]
    table = Table(
        title=f"{summary['name']}: {jobs['submitted']} jobs on the {setup['clustering']} clusters "
        f"(latency bound {setup['latency_ms']:g} ms), bounded slowdown in trace seconds",
        caption="central: the idealised central FCFS scheduler on the same trace, a reference",
    )
    for col in ("scheduler", "done", "failed", "lost", "mean", "median", "p95", "p99", "max"):
        table.add_column(col, justify="left" if col == "scheduler" else "right", no_wrap=True)
    for variant, figures in summary["slowdown"].items():
        ours = not variant.startswith("central/")
        counts = [str(jobs[k]) for k in ("completed", "failed", "lost")] if ours else ["-"] * 3
        table.add_row(
            variant,
            *counts,
            *(
                "-" if figures[k] is None else f"{figures[k]:.3g}"
                for k in ("mean", "median", "p95", "p99", "max")
            ),
        )
    console.print(table)
    extra = {k: jobs[k] for k in ("resubmitted", "duplicates", "executed_twice")}
    if jobs.get("running_at_end"):
        extra["still running at the end"] = jobs["running_at_end"]
    console.print(", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in extra.items()))
    for reason, count in jobs["failure_reasons"].items():
        console.print(f"  failed x{count}: {reason}")


def _run_clusters(spec: Any, data: dict, out: Path | None) -> Path:
    """Run a cluster spec with a status line; print its table; return the run folder."""
    from testbed.experiments.clusters import run_clusters

    with err_console.status(f"{spec.name}") as status:
        run_dir, summary = run_clusters(
            spec, data, out=out, progress=lambda what: status.update(f"{spec.name}: {what}")
        )
    table = Table(
        title=f"{spec.name}: {summary['hosts']:,} peers, D = {spec.diameter_ms:g} ms, "
        f"N = {summary['size']}, M = {summary['memberships']}"
    )
    for col in (
        "clustering",
        "clusters",
        "size p50",
        "per peer p50",
        "size max",
        "membership max",
        "accuracy",
        "capacity",
    ):
        table.add_column(col, justify="left" if col == "clustering" else "right")
    for name, q in summary["clusters"].items():
        table.add_row(
            name,
            f"{q['count']:,}",
            f"{q['size_p50']:g}" if q["size_p50"] is not None else "-",
            f"{q['peer_size_p50']:g}" if q["peer_size_p50"] is not None else "-",
            str(q["size_max"]),
            str(q["membership_max"]),
            f"{q['accuracy']:.3f}" if q["accuracy"] is not None else "-",
            f"{q['capacity']:.3f}" if q["capacity"] is not None else "-",
        )
    console.print(table)
    if "distributed" in summary:
        d = summary["distributed"]
        console.print(
            f"distributed refinement: {'every peer STEADY' if d['converged'] else '[red]NOT every peer STEADY[/]'}"
            f" at {d['steady_at_s']:g} s (virtual), messages per peer p50 {d['messages_per_peer']['p50']:g},"
            f" {d['wall_s']:g} s wall"
        )
    return run_dir


def _run_sched(spec: Any, data: dict, out: Path | None) -> Path:
    from testbed.experiments.sched import run_sched

    with err_console.status(f"scheduling {spec.name}") as status:
        run_dir, summary = run_sched(spec, data, out=out, progress=status.update)
    load = summary["workload"]["offered_load_on_grid"]
    table = Table(
        title=f"{spec.name}: {summary['workload']['jobs']} jobs on {summary['nodes']} nodes"
        f" (offered load {load}), bounded slowdown"
    )
    columns = (
        "variant",
        "completed",
        "failed",
        "lost",
        "mean",
        "median",
        "mode",
        "p95",
        "p99",
        "max",
    )
    for col in (*columns, "paper (intense SHARCNET set)"):
        table.add_column(
            col, justify="left" if col in ("variant", "paper (intense SHARCNET set)") else "right"
        )
    for variant, figures in summary["slowdown"].items():
        counts = summary["by_variant"][variant]
        paper = summary["paper"].get(variant, {})
        table.add_row(
            variant,
            *(str(counts[k]) for k in columns[1:4]),
            *("-" if figures[k] is None else f"{figures[k]:g}" for k in columns[4:]),
            " ".join(f"{k} {v:g}" for k, v in paper.items()) or "-",
        )
    console.print(table)
    return run_dir


def _run_prediction(spec: Any, data: dict[str, Any], out: Path | None) -> Path:
    """Run a prediction spec with a progress bar; print its table; return the run folder."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from testbed.experiments.predict import run_prediction

    seeds = spec.seed_list()
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=not err_console.is_terminal,
    ) as progress:
        task = progress.add_task(
            f"{spec.name}: {len(spec.techniques)} technique(s) x {len(seeds)} seed(s)",
            total=len(spec.techniques) * len(seeds),
        )

        def on_result(result: dict[str, Any]) -> None:
            progress.advance(task)
            progress.console.print(
                f"  {result['technique']} seed {result['seed']}: p50 {result['p50']:.3f} "
                f"p95 {result['p95']:.3f} p99 {result['p99']:.3f}, "
                f"{result['probes_per_host']:.0f} samples/host, {result['cpu_s']:.0f} s",
                highlight=False,
            )

        pinging: list[Any] = []

        def on_ping(done: int, hosts: int) -> None:
            if not pinging:
                pinging.append(progress.add_task("real pings: each peer measures all", total=hosts))
            progress.update(pinging[0], completed=done)

        run_dir = run_prediction(spec, data, out=out, on_result=on_result, on_ping=on_ping)
    summary = json.loads((run_dir / "summary.json").read_text())
    # piped or logged, 80 columns would fold the numbers
    out = console if console.is_terminal else Console(file=sys.stdout, width=120)
    out.print(prediction_table(summary))
    return run_dir


def prediction_table(summary: dict[str, Any]) -> Table:
    """Our percentiles per technique, the thesis's beside them when the spec names its table."""
    paper = summary.get("paper") or {}
    rows = paper.get("rows", {})
    boundary = paper.get("table") == "5.6"
    title = f"{summary['name']}: {summary['hosts']} hosts, {len(summary['seeds'])} seed(s)"
    if paper:
        title += f"; thesis Table {paper['table']}: {paper['source']}"
    table = Table(title=title)
    table.add_column("technique", no_wrap=True)
    columns = ("positive", "negative") if boundary else ("p50", "p95", "p99", "max")
    for col in columns:
        table.add_column(col, justify="right", no_wrap=True)
        if rows:
            table.add_column("thesis", justify="right", style="dim", no_wrap=True)
    table.add_column("samples/host", justify="right", no_wrap=True)
    sim = summary.get("sim", {})
    if sim:
        table.add_column("sim p50 / p95 / p99", justify="right", no_wrap=True)
    for name, result in summary["prediction"].items():
        ours = (
            [result["boundary"][c] for c in columns] if boundary else [result[c] for c in columns]
        )
        theirs = rows.get(name)
        cells = [name]
        for k, value in enumerate(ours):
            cells.append(f"{value:.3g}" if boundary else f"{value:,.3f}")
            if rows:
                cells.append("" if theirs is None else f"{theirs[k]:,.3g}")
        cells.append(f"{result['probes_per_host']:,.0f}")
        if sim:
            other = sim.get(name, {})
            cells.append(" / ".join(f"{other.get(q, math.nan):.3f}" for q in ("p50", "p95", "p99")))
        table.add_row(*cells)
    return table


# The bundled spec behind each of seed 002's prediction tables.
TABLE_SPECS = {
    "5.2": "predict-planetlab-sim.toml",
    "5.4": "predict-sharcnet-sim.toml",
    "5.5": "predict-sharcnet-dtm-variants.toml",
    "5.6": "predict-sharcnet-dtm-variants.toml",
}


@cli.command(name="table")
@click.argument("number", type=click.Choice(sorted(TABLE_SPECS)))
@click.option(
    "--seeds", type=click.IntRange(min=1), default=None, help="Seeds 1..N (default: the spec's)."
)
@overrides_option("e.g. --set topology.ref=my-matrix.txt")
@run_folder_option
@_handled
def table_(number: str, seeds: int | None, overrides: tuple[str, ...], out: Path | None) -> None:
    """Reproduce one of seed 002's latency prediction tables (5.2, 5.4, 5.5, 5.6) in the
    simulator, with the thesis's figures beside ours. Table 5.2 was measured on UMIACS
    (151 hosts), which is not public: ours runs on PlanetLab's 490 hosts."""
    from testbed.spec import load_any_spec

    path = Path(__file__).resolve().parents[1] / "scripts" / "experiments" / TABLE_SPECS[number]
    extra = [f'paper="{number}"', *([f"seeds={seeds}"] if seeds else []), *overrides]
    spec, data = load_any_spec(path, extra)
    print(_run_prediction(spec, data, out))


# -- fuzz ----------------------------------------------------------------------------------------------


@cli.command()
@click.option("--count", type=click.IntRange(1), default=100_000, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--grid-key", metavar="HEX", default=None, help="Run the target in a keyed grid.")
@run_folder_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_handled
def fuzz(count: int, seed: int, grid_key: str | None, out: Path | None, as_json: bool) -> None:
    """Send random and mutated datagrams to a live peer; check it survives and counts them all."""
    from testbed.progress import progress_bar
    from testbed.runs import new_run_dir, write_json
    from testbed.tools.fuzz import fuzz_local_peer

    try:
        key = bytes.fromhex(grid_key) if grid_key else None
    except ValueError:
        raise InputError("expected a hex string", source="--grid-key") from None
    folder = new_run_dir("fuzz", out)
    with progress_bar("fuzzing", count) as advance:
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
        console.print(table)
        console.print(
            f"received {result['rx_delta']} of {count}, uncounted {result['uncounted']}, "
            f"unexplained {result['unexplained']}, peer alive: {result['alive']}, "
            f"{result['datagrams_per_s']} datagrams/s, peer RSS {result['rss_kb']} kB"
        )
        print(folder)
    if not result.ok:
        sys.exit(1)


# -- clean ---------------------------------------------------------------------------------------------


@cli.command()
@click.option(
    "--force", is_flag=True, help="Also remove runs whose testbed process is still alive."
)
@click.option("--run", "run_id", metavar="RUN_ID", help="Only this run (the hex id in tb<id>-h1).")
@click.option("--json", "as_json", is_flag=True)
@_handled
def clean(force: bool, run_id: str | None, as_json: bool) -> None:
    """Remove the namespaces, links, rules and processes of runs that were killed."""
    from testbed.net import clean as do_clean

    report = do_clean(force=force, run_id=run_id)
    if as_json:
        print(json.dumps(report.__dict__))
    else:
        if report.nothing_done:
            console.print("nothing to clean")
        else:
            console.print(
                f"removed {len(report.runs)} run(s): {len(report.netns_removed)} namespaces, {len(report.processes_killed)} processes"
            )
        for rid in report.live_runs_skipped:
            console.print(f"[yellow]run {rid} is still running; left alone (use --force)[/]")
    if report.still_alive:
        err_console.print(f"[red]processes that would not die: {report.still_alive}[/]")
        sys.exit(1)


# -- topology ------------------------------------------------------------------------------------------


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
@click.option("--json", "as_json", is_flag=True)
@_handled
def topology_show(
    ref: str,
    hosts: str | None,
    pick: str,
    seed: int,
    scale: float,
    floor_ms: float | None,
    as_json: bool,
) -> None:
    """Validate a topology and print its figures."""
    from testbed.topology import load_topology

    topo = load_topology(ref)
    host_arg = _hosts_option(hosts)
    if isinstance(host_arg, list):
        topo = topo.select(hosts=host_arg)
    else:
        topo = topo.select(host_arg, pick=pick, seed=seed if pick == "random" else None)
    topo = topo.scaled(scale)
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
@_handled
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


@cli.command()
@click.option("--hosts", type=click.IntRange(4), default=32, show_default=True)
@run_folder_option
@_handled
def demo(hosts: int, out: Path | None) -> None:
    """32 PlanetLab hosts: fidelity check, a partition and heal, and a report."""
    from testbed.tools.demo import run_demo

    run_demo(hosts=hosts, out=out)


def main() -> None:
    # SIGTERM and SIGHUP unwind like Ctrl-C, so that every `with` tears down.
    def _terminate(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    cli(prog_name="testbed")


if __name__ == "__main__":
    main()
