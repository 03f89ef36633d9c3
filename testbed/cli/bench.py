# `testbed bench ...`: the emulator's fidelity and cost (delay, probes, bring-up, MPI) and the
# simulator's speed against another commit (sim).

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from testbed.cli._common import (
    cli,
    handled,
    hosts_option,
    no_clamp_option,
    overrides_option,
    run_folder_option,
    topology_options,
)
from testbed.errors import InputError
from testbed.progress import BringupProgress, console, err_console
from testbed.tools.simbench import DEFAULT_SPEC, compare_sim_speed  # stdlib only: light


@cli.group()
def bench() -> None:
    """Benchmarks of the emulator and the simulator."""


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
@click.option(
    "--sweep",
    is_flag=True,
    help="Step the probe rate up until the p99 error leaves the bound; report the knee.",
)
@click.option(
    "--against",
    metavar="REV",
    help="Also run the delay engine of commit REV (a temporary worktree), same probes, "
    "in this invocation; report both and the ratio.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
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
    sweep: bool,
    against: str | None,
    as_json: bool,
) -> None:
    """Measure achieved RTT on host pairs against the configured matrix.

    Pairs below the engine's floor are clamped to it (see --no-clamp) and
    compared with the clamped value, which is what the engine was asked for.
    """
    from testbed.runs import new_run_dir, write_json
    from testbed.tools.simbench import commit_worktree, resolve_commit

    clamp = not no_clamp
    host_arg = hosts_option(hosts) or 32

    def side(run_dir: Path | None, engine_source: Path | None) -> dict[str, Any]:
        return _delay_side(
            topology, host_arg, pick, seed, scale, clamp, run_dir, samples, rate, max_pairs,
            sweep, engine_source, as_json,
        )  # fmt: skip

    if against is None:
        result = side(out, None)
    else:
        commit = resolve_commit(against, "<bench delay>")
        folder = new_run_dir("bench-delay-against", out)
        with commit_worktree(commit) as tree:
            if not as_json:
                console.print(f"old side: the delay engine of {commit[:10]}")
            old = side(folder / "old", tree)
        if not as_json:
            console.print("new side: this checkout's delay engine")
        result = side(folder / "new", None)
        result["against"] = {
            "rev": against,
            "commit": commit,
            "old": old,
            **_delay_ratio(old, result),
        }
        result["run_dir"] = str(folder)
        write_json(folder / "summary.json", result)
    if as_json:
        print(json.dumps(result))
        return
    if sweep:
        _print_sweep(result)
    if "against" in result:
        ratio = result["against"]
        console.print(f"against {ratio['commit'][:10]}: {ratio['ratio_what']} = {ratio['ratio']}")
    if sweep:
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


def _delay_side(
    topology: str,
    host_arg: Any,
    pick: str,
    seed: int,
    scale: float,
    clamp: bool,
    run_dir: Path | None,
    samples: int,
    rate: float,
    max_pairs: int,
    sweep: bool,
    engine_source: Path | None,
    quiet: bool,
) -> dict[str, Any]:
    """One WAN, one delay engine (this checkout's, or `engine_source`'s): a fidelity
    run at `rate`, or a sweep."""
    from rich.progress import Progress

    from testbed.net import open_wan
    from testbed.runs import write_json
    from testbed.tools.bench import delay_fidelity, delay_sweep

    with open_wan(
        topology,
        hosts=host_arg,
        pick=pick,
        seed=seed,
        scale=scale,
        clamp=clamp,
        run_dir=run_dir,
        name="bench-delay",
        mininet=False,
        progress=BringupProgress(),
        engine_source=engine_source,
    ) as wan:
        if sweep:

            def said(step: dict[str, Any]) -> None:
                if not quiet:
                    console.print(
                        f"  {step['rate_per_s']:>8g} probes/s: {step['pps']:>9.0f} packets/s, "
                        f"|error| p99 {step['rtt_error_ms']['p99']:.3f} ms, "
                        f"{step['bound_ratio_p99']:.2f} of the bound"
                    )

            swept = delay_sweep(wan, max_pairs=max_pairs, seed=seed, on_step=said)
            best = swept["best"] or swept["steps"][0]
            result = {**best, "sweep": {k: v for k, v in swept.items() if k != "best"}}
        else:
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
        result["engine_source"] = None if engine_source is None else str(engine_source)
        write_json(wan.run_dir / "summary.json", result)
    return result


def _delay_ratio(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """How the new engine compares: with a sweep, the highest achieved packet rate
    within the bound (new / old; each side's knee is reported too); else the p99
    error at the same offered rate (old / new)."""
    if "sweep" in new:
        best = {
            name: side["sweep"]["max_pps_within_bound"]
            for name, side in (("old", old), ("new", new))
        }
        return {
            "ratio_what": "highest packet rate within the bound, new / old",
            "ratio": round(best["new"] / best["old"], 2) if best["old"] and best["new"] else None,
            "max_pps_within_bound": best,
            "max_pps_p99_within_0.1ms": {
                "old": old["sweep"]["max_pps_p99_within_0.1ms"],
                "new": new["sweep"]["max_pps_p99_within_0.1ms"],
            },
            "knee_pps": {"old": old["sweep"]["knee_pps"], "new": new["sweep"]["knee_pps"]},
        }
    p_old, p_new = old["rtt_error_ms"]["p99"], new["rtt_error_ms"]["p99"]
    return {
        "ratio_what": "p99 |RTT error| at the same offered rate, old / new",
        "ratio": round(p_old / p_new, 2) if p_new else None,
        "pps": {"old": old["pps"], "new": new["pps"]},
    }


def _print_sweep(result: dict[str, Any]) -> None:
    swept = result["sweep"]
    table = Table(title="delay engine rate sweep")
    for column in ("probes/s", "packets/s", "|error| p99 ms", "of bound", "lost"):
        table.add_column(column, justify="right")
    for step in swept["steps"]:
        table.add_row(
            f"{step['rate_per_s']:g}",
            f"{step['pps']:.0f}",
            f"{step['rtt_error_ms']['p99']:.3f}",
            f"{step['bound_ratio_p99']:.2f}",
            str(step["lost"]),
        )
    console.print(table)
    knee = swept["knee_pps"]
    console.print(
        f"knee: {'not reached' if knee is None else f'{knee:.0f} packets/s'}; "
        f"highest within the bound {swept['max_pps_within_bound']} packets/s; "
        f"highest with p99 <= 0.1 ms {swept['max_pps_p99_within_0.1ms']} packets/s"
    )


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
@handled
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
@handled
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
    for key in (
        "up_s",
        "down_s",
        "leftovers",
        "floor_rtt_ms",
        "clamped_pairs",
        "engine_resident_kb",
    ):
        table.add_row(key, str(result[key]))
    console.print(table)


def _rates(value: str) -> list[float]:
    try:
        rates = [float(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: expected rates in Mbit/s separated by commas, e.g. 10,100,1000"
        ) from None
    if not rates or not all(0.001 <= r <= 100_000 for r in rates):
        raise click.BadParameter(f"{value!r}: each rate must be within 0.001..100000 Mbit/s")
    return rates


@bench.command(name="throughput")
@click.option(
    "--rates-mbit",
    default="10,100,1000",
    show_default=True,
    help="One TCP flow per bottleneck rate (Mbit/s, comma-separated).",
)
@click.option("--rtt-ms", type=click.FloatRange(1, 1000), default=40.0, show_default=True)
@click.option(
    "--seconds", type=click.FloatRange(1, 600), default=8.0, show_default=True,
    help="Each TCP flow's measured time (after 2 s of slow start left out).",
)  # fmt: skip
@click.option(
    "--queue-bdp", type=click.FloatRange(0.05, 100), default=1.0, show_default=True,
    help="The bottleneck's drop-tail queue, in bandwidth-delay products.",
)  # fmt: skip
@run_folder_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
def bench_throughput(
    rates_mbit: str,
    rtt_ms: float,
    seconds: float,
    queue_bdp: float,
    out: Path | None,
    as_json: bool,
) -> None:
    """TCP goodput and queueing delay through a bottleneck (iperf3), one flow per rate,
    against what the rate and the queue's size predict."""
    from testbed.runs import write_json
    from testbed.tools.bench import throughput

    rates = _rates(rates_mbit)
    result = throughput(
        rates,
        rtt_ms=rtt_ms,
        seconds=seconds,
        queue_bdp=queue_bdp,
        run_dir=None if out is None else str(out),
        on_flow=None if as_json else lambda what: console.print(f"flow at {what} ..."),
    )
    write_json(Path(result["run_dir"]) / "summary.json", result)
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"TCP through a bottleneck, RTT {rtt_ms:g} ms, queue {queue_bdp:g} BDP")
    for column in ("rate Mbit/s", "goodput Mbit/s", "of rate", "queue delay ms", "expected ms"):
        table.add_column(column, justify="right")
    for flow in result["flows"]:
        table.add_row(
            f"{flow['rate_mbit']:g}",
            f"{flow['goodput_mbit']:.1f}",
            f"{flow['goodput_ratio']:.1%}",
            "-" if flow["queue_delay_ms"] is None else f"{flow['queue_delay_ms']:.2f}",
            f"{flow['expected_queue_delay_ms']:.2f}",
        )
    console.print(table)
    for flow in result["flows"]:
        if flow["limited_by"]:
            console.print(f"[yellow]{flow['rate_mbit']:g} Mbit/s: {flow['limited_by']}[/]")
    console.print(f"run folder: {result['run_dir']}")


@bench.command(name="container-cpu")
@click.option(
    "--cpus", type=float, default=0.5, show_default=True, help="The container's CPU limit."
)
@click.option("--repeat", type=click.IntRange(1, 20), default=3, show_default=True)
@run_folder_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
def bench_container_cpu(cpus: float, repeat: int, out: Path | None, as_json: bool) -> None:
    """A CPU-bound program on a namespace host and on a container host limited to
    --cpus: the wall-time ratio (about 1 / cpus below one core)."""
    from testbed.tools.bench import container_cpu

    if not cpus > 0:
        raise click.BadParameter("must be > 0", param_hint="--cpus")
    result = container_cpu(cpus, repeat=repeat, run_dir=out)
    if as_json:
        print(json.dumps(result))
        return
    console.print(
        f"namespace host {result['namespace_s']} s, container (--cpus {cpus:g}) "
        f"{result['container_s']} s: ratio {result['ratio']} (expected {result['expected_ratio']})"
    )


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
@handled
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


@bench.command(name="sim")
@click.option(
    "--against",
    "rev",
    required=True,
    help="The commit to compare with (e.g. d603307, main~3); it runs from a temporary worktree.",
)
@click.option(
    "--spec",
    default=DEFAULT_SPEC,
    show_default=True,
    help="Spec path inside the repository; each side reads its own copy.",
)
@overrides_option("applied to both sides, e.g. --set phases.0.count=100")
@click.option(
    "--repeat",
    type=click.IntRange(1, 20),
    default=1,
    show_default=True,
    help="Runs per side, alternating; each side's median run is compared.",
)
@run_folder_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
def bench_sim(
    rev: str,
    spec: str,
    overrides: tuple[str, ...],
    repeat: int,
    out: Path | None,
    as_json: bool,
) -> None:
    """The simulator's speed: SPEC on commit REV and on this checkout, one after the other,
    and the wall-time ratio (old / new)."""
    import time

    from testbed.runs import new_run_dir, write_json

    folder = new_run_dir("bench-sim", out).resolve()
    with err_console.status("bench sim") as status:
        result = compare_sim_speed(
            rev,
            spec=spec,
            overrides=list(overrides),
            out=folder,
            repeat=repeat,
            say=status.update,
        )
    result["when"] = time.strftime("%Y-%m-%d %H:%M:%S")
    write_json(folder / "bench-sim.json", result)
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"bench sim: {spec} ({', '.join(overrides) or 'as bundled'})")
    for col in ("side", "wall s", "events", "events/s", "datagrams", "virtual s", "violations"):
        table.add_column(col, justify="left" if col == "side" else "right")
    for side in ("old", "new"):
        row = result[side]
        label = f"old {result['against'][:8]}" if side == "old" else "new"
        table.add_row(
            label,
            f"{row['wall_s']:.1f}",
            "-" if row["events"] is None else f"{row['events']:,}",
            "-" if row["events_per_s"] is None else f"{row['events_per_s']:,.0f}",
            f"{row['datagrams']:,}",
            f"{row['virtual_s']:g}",
            str(row["violations"]),
        )
    console.print(table)
    same = "" if result["same_virtual_time"] else " [red](the sides ran different virtual times)[/]"
    if repeat > 1:
        for side in ("old", "new"):
            walls = ", ".join(f"{w:.1f}" for w in result[f"{side}_walls_s"])
            console.print(f"{side} wall times (s): {walls}; the table shows the median run")
    console.print(f"wall-time ratio old / new: [bold]{result['ratio']}[/]{same}")
    print(folder)
