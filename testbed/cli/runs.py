# `testbed run`, `campaign` and `table`: experiment specs on either engine, their tables.

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from testbed.cli._common import cli, handled, overrides_option, ray_option, run_folder_option
from testbed.errors import InputError
from testbed.progress import console, err_console

engine_option = click.option(
    "--engine", type=click.Choice(["sim", "emu"]), default=None, help="Override the spec's engine."
)


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
    help="Simulated runs side by side (one process or Ray task each).",
)
@ray_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@handled
def campaign(
    spec_path: str,
    engine: str | None,
    overrides: tuple[str, ...],
    out: Path | None,
    jobs: int,
    ray: str | None,
    as_json: bool,
) -> None:
    """Run a spec under each of its [campaign] churn scripts x seeds; one table of
    what broke (invariant violations after each quiet period) and how fast it repaired."""
    from testbed.experiments.campaign import run_campaign
    from testbed.spec import ExperimentSpec, ProgramSpec, load_any_spec

    extra = [*overrides, *([f'engine="{engine}"'] if engine else [])]
    spec, _ = load_any_spec(spec_path, extra)
    if not isinstance(spec, ExperimentSpec | ProgramSpec):
        raise InputError(
            f"kind: a campaign runs an overlay ('can') or a 'program' spec, not {spec.kind!r}",
            source=spec_path,
        )
    if spec.campaign is None:
        raise InputError(
            "no [campaign] table (scripts = [...], seeds = [...]); `testbed run` runs one spec",
            source=spec_path,
        )
    with err_console.status(f"campaign {spec.name}") as status:

        def on_run(k: int, total: int, script: str, seed: int, row: dict | None) -> None:
            if row is None:
                what = script.replace("|", ", variant ")
                status.update(f"campaign {spec.name}: run {k + 1}/{total}, {what}, seed {seed}")
                return
            err_console.print(
                f"  {row['run']}: {row['status']}, {row['events_applied']} events, "
                f"{row['violations']} violation(s), {row['checks_unsettled']} unsettled "
                f"check(s), {row['leaves_abrupt']} abrupt leave(s), {row['wall_s']:.0f} s"
            )

        folder, result = run_campaign(spec, out=out, on_run=on_run, jobs=jobs, ray=ray)
    if as_json:
        print(json.dumps(result | {"folder": str(folder)}))
        return

    def pq(figures: dict, key: str, unit: str = "") -> str:
        value = figures.get(key)
        return "-" if value is None else f"{value:g}{unit}"

    table = Table(title=f"campaign {spec.name} ({spec.engine})")
    columns = (
        "run", "status", "events", "violations", "unsettled checks", "abrupt leaves",
        "settle wait max s", "repair p50/p99 s",
    )  # fmt: skip
    rows = result["rows"]
    extra = [
        (key, title)
        for key, title in (("within_bound", "WAN within bound"), ("flood_per_s", "flood /s"))
        if any(row.get(key) is not None for row in rows)
    ]
    for col in (*columns, "late p50/p99 ms", *(title for _, title in extra)):
        table.add_column(col, justify="left" if col in ("run", "status") else "right")
    for row in rows:
        table.add_row(
            row["run"],
            row["status"],
            str(row["events_applied"]),
            str(row["violations"]),
            f"{row['checks_unsettled']}/{row['checks']}",
            str(row["leaves_abrupt"]),
            pq(row["settle_wait_s"], "max"),
            f"{pq(row['repair_s'], 'p50')} / {pq(row['repair_s'], 'p99')}",
            f"{pq(row['lateness_ms'], 'p50')} / {pq(row['lateness_ms'], 'p99')}",
            *(pq(row, key) for key, _ in extra),
        )
    table.add_section()
    table.add_row(
        f"{result['runs']} runs",
        result["status"],
        str(result["events_applied"]),
        str(result["violations"]),
        str(result["checks_unsettled"]),
        str(result["leaves_abrupt"]),
        pq(result["settle_wait_s"], "max"),
        f"{pq(result['repair_s'], 'p50')} / {pq(result['repair_s'], 'p99')}",
        f"{pq(result['lateness_ms'], 'p50')} / {pq(result['lateness_ms'], 'p99')}",
        *("" for _ in extra),
    )
    console.print(table)
    by_script = result.get("repair_s_by_script", {})
    if len(by_script) > 1:  # side by side: one script against another (a flood, say)
        for script, figures in by_script.items():
            console.print(
                f"  crash to takeover under {script}: p50 {pq(figures, 'p50', ' s')}, "
                f"p99 {pq(figures, 'p99', ' s')}"
            )
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
    if result.get("wait_s"):
        waits = Table(title="mean wait per variant (mean over runs)")
        for col in ("variant", "wait s", "x CENTRAL", "pushed", "runs"):
            waits.add_column(col, justify="left" if col == "variant" else "right")
        for variant, figures in result["wait_s"].items():
            case = variant.rpartition("/")[0]
            central = result["wait_s"].get(f"{case}/CENTRAL" if case else "CENTRAL", {})
            ratio = f"{figures['mean'] / central['mean']:.2f}" if central.get("mean") else "-"
            runs = ", ".join(f"{v:g}" for v in figures["runs"])
            pushed = figures.get("pushed_share")
            share = "" if pushed is None else f"{pushed:.1%}"
            waits.add_row(variant, f"{figures['mean']:g}", ratio, share, runs)
        console.print(waits)
    if result.get("dlb"):
        dlb = result["dlb"]
        console.print(
            f"DLB over {dlb['runs']} PULL/PUSH runs: {dlb['messages']} messages, "
            f"{(dlb['share_of_messages'] or 0):.2%} of all datagrams, at most "
            f"{dlb['max_per_node_minute']} handled by one node in a minute"
        )
    print(folder)


@cli.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False))
@engine_option
@overrides_option("e.g. --set topology.hosts=128 --set seed=7")
@run_folder_option
@ray_option
@handled
def run(
    spec_path: str,
    engine: str | None,
    overrides: tuple[str, ...],
    out: Path | None,
    ray: str | None,
) -> None:
    """Run an experiment spec (an overlay experiment, or kind = "predict",
    "cluster" or "sched"); prints the run folder as its last line. --ray (the spec's
    `cluster` field) runs a prediction spec's seeds or a scheduling spec's clusterings
    as Ray tasks, and an emulated spec's network (an overlay's peers or your program)
    across a cluster's machines."""
    from testbed.spec import ExperimentSpec, PredictSpec, ProgramSpec, SchedSpec, load_any_spec

    extra = [*overrides, *([f'engine="{engine}"'] if engine else [])]
    spec, data = load_any_spec(spec_path, extra)
    if ray is not None:
        emulated = isinstance(spec, ExperimentSpec) and spec.engine == "emu"
        if not (isinstance(spec, PredictSpec | SchedSpec | ProgramSpec) or emulated):
            raise InputError(
                f"--ray: a {spec.kind!r} spec on the {getattr(spec, 'engine', 'sim')!r} engine "
                "runs as one task; --ray runs the seeds of a 'predict' spec, the clusterings "
                "of a 'sched' spec, an emulated spec's network (overlay or 'program') across "
                "the cluster's machines, and with `testbed campaign` the runs of a campaign",
                source=spec_path,
            )
        spec, data = load_any_spec(spec_path, [*extra, f'cluster="{ray}"'])
    started = time.time()
    try:
        print(_SHOWN[spec.kind](spec, data, out))
    except BaseException:
        _report_failure(out, spec.name, started)
        raise


@cli.command(name="report")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(exists=True, file_okay=False))
@handled
def report_(run_dir: str) -> None:
    """Write a run folder's timeline.png and report.html again (an emulated run writes
    them when it ends); prints the page's path."""
    from testbed.experiments.report import write_report

    folder = Path(run_dir)
    if not (folder / "summary.json").is_file():
        raise InputError("not a run folder: it has no summary.json", source=run_dir)
    print(write_report(folder))


def _report_failure(out: Path | None, name: str, started: float) -> None:
    """After a run failed: its folder and the programs on its hosts that failed or
    still ran, with the tail of their output (nothing if it made no folder)."""
    from testbed.net import process_report

    if out is not None:
        folder = out if out.is_dir() else None
    else:
        made = [p for p in Path("runs").glob(f"{name}-*") if p.stat().st_mtime >= started - 1]
        folder = max(made, key=lambda p: p.stat().st_mtime) if made else None
    if folder is None:
        return
    report = process_report(folder / "wan") or f"run folder: {folder}"
    err_console.print(report, markup=False, highlight=False)


def _run_overlay(spec: Any, data: dict[str, Any], out: Path | None) -> Path:
    """Run an overlay spec with a status line and a line per check; print its tables."""
    from testbed.experiments import Report, run_spec

    phases = Table(title=f"{spec.name} ({spec.engine}, seed {spec.seed})")
    for col in ("phase", "t (s)", "members", "violations", "routes", "hops"):
        phases.add_column(col)

    def on_phase(label: str, result: dict) -> None:
        err_console.print(
            f"  {label}: t={result['t']:.0f} s, {result['members']} members, "
            f"{result['violations']} violation(s) {result['by_kind'] or ''}"
        )
        fidelity = result.get("resources", {}).get("wan_fidelity")
        if fidelity:
            err_console.print(f"    {_fidelity_line(fidelity)}")
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

        result = run_spec(spec, data, out=out, report=Report(say=progress, phase=on_phase))
    err_console.print(phases)
    fidelity = result.summary.get("wan", {}).get("fidelity")
    if fidelity:
        err_console.print(f"the whole run: {_fidelity_line(fidelity)}")
    if spec.jobs is not None:
        _print_jobs(result.summary)
    return result.dir


def _fidelity_line(fidelity: dict[str, Any]) -> str:
    """What the emulated WAN delivered (FidelityMonitor's summary), with a warning
    when it did not keep up."""
    if not fidelity.get("samples"):
        why = fidelity.get("error", "no round ended yet")
        return f"WAN fidelity: no samples ({why})"
    line = (
        f"WAN fidelity: RTT error p50 {fidelity['error_p50_ms']:.3f} ms, "
        f"p99 {fidelity['error_p99_ms']:.3f} ms, {fidelity['within_bound']:.1%} within "
        f"{fidelity['bound']} ({fidelity['samples']} echoes, {fidelity['lost']} lost)"
    )
    if not fidelity["kept_up"]:
        line += (
            " [bold red]— the WAN did not keep up: figures measured now are the "
            "overloaded machine's, not the protocol's[/]"
        )
    return line


def _print_jobs(summary: dict[str, Any]) -> None:
    """The jobs of an overlay run: what became of them, and bounded slowdown."""
    jobs = summary.get("jobs")
    if not isinstance(jobs, dict) or "submitted" not in jobs:
        err_console.print(
            f"jobs: no results ({summary.get('jobs_error', 'the run stopped early')})"
        )
        return
    setup = summary["jobs_setup"]
    if "profiles" in setup:
        _print_kim_jobs(summary, jobs, setup)
        return
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
    if jobs.get("waiting_at_end"):
        extra["still waiting in a queue at the end"] = jobs["waiting_at_end"]
    console.print(", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in extra.items()))
    for reason, count in jobs["failure_reasons"].items():
        console.print(f"  failed x{count}: {reason}")


def _print_kim_jobs(summary: dict[str, Any], jobs: dict[str, Any], setup: dict[str, Any]) -> None:
    """The jobs of a run on Kim's grid: outcomes and waits (injection to start)."""
    p = setup["profiles"]
    table = Table(
        title=f"{summary['name']}: {jobs['submitted']} jobs on Kim's {p['model']} grid"
        f" ({p['constraints']} constraints, tau {p['tau_s']:g} s), wait in seconds",
    )
    columns = ("done", "failed", "infeasible", "lost", "misplaced", "mean", "median", "p99", "max")
    for col in columns:
        table.add_column(col, justify="right", no_wrap=True)
    wait = jobs["wait_s"]
    table.add_row(
        *(str(jobs[k]) for k in ("completed", "failed", "infeasible", "lost", "misplaced")),
        *("-" if v is None else f"{v:.3g}" for v in (jobs["wait_mean_s"], wait["p50"], wait["p99"], wait["max"])),
    )  # fmt: skip
    console.print(table)
    if jobs.get("running_at_end") or jobs.get("waiting_at_end"):
        console.print(
            f"when the run ended: {jobs['running_at_end']} still running, "
            f"{jobs['waiting_at_end']} still waiting in a queue (a longer jobs.drain_s lets them end)"
        )
    if jobs.get("central_wait_mean_s") is not None:
        console.print(
            f"Kim's CENTRAL on the same jobs and nodes (a cross-check, no redistribution): "
            f"mean wait {jobs['central_wait_mean_s']:.3g} s; ours x{jobs['wait_vs_central']}; "
            f"{jobs['central_busy_at_last']:.0%} of the nodes busy at the last arrival"
        )
    if jobs.get("central_redistributing_wait_mean_s") is not None:
        console.print(
            f"  with its queues redistributed every balance_s: mean wait "
            f"{jobs['central_redistributing_wait_mean_s']:.3g} s"
        )
    if jobs.get("pushed_share") is not None:
        console.print(
            f"placements: {jobs['pushed_share']:.1%} pushed, "
            f"{jobs['matchmaking_messages_per_placement']:g} matchmaking messages each "
            f"({jobs['route_hops_per_placement']:g} CAN hops, "
            f"{jobs['push_hops_per_placement']:g} pushes, the hand-over)"
        )
    dlb = summary.get("dlb")
    if dlb and dlb["balance"] in ("pull", "push"):
        console.print(
            f"DLB ({dlb['balance']}): {dlb['messages']} messages, "
            f"{(dlb['share_of_messages'] or 0):.2%} of all datagrams, at most "
            f"{dlb['max_per_node_minute']} handled by one node in a minute"
        )
    if jobs.get("rnt_wait_mean_s") is not None:
        console.print(
            f"Kim's RNT on the same jobs and nodes (a Chord-ring baseline, k = 5): mean wait "
            f"{jobs['rnt_wait_mean_s']:.3g} s, {jobs['rnt_messages_per_job']:g} nodes searched per job"
        )
    for reason, count in jobs["failure_reasons"].items():
        console.print(f"  failed x{count}: {reason}")


def _run_clusters(spec: Any, data: dict, out: Path | None) -> Path:
    """Run a cluster spec with a status line; print its table; return the run folder."""
    from testbed.experiments import Report, run_spec

    with err_console.status(f"{spec.name}") as status:
        run_dir, summary = run_spec(
            spec,
            data,
            out=out,
            report=Report(say=lambda what: status.update(f"{spec.name}: {what}")),
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
    from testbed.experiments import Report, run_spec

    with err_console.status(f"scheduling {spec.name}") as status:
        run_dir, summary = run_spec(spec, data, out=out, report=Report(say=status.update))
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

    from testbed.experiments import Report, run_spec

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

        run_dir, summary = run_spec(
            spec, data, out=out, report=Report(result=on_result, ping=on_ping)
        )
    # piped or logged, 80 columns would fold the numbers
    out = console if console.is_terminal else Console(file=sys.stdout, width=120)
    out.print(prediction_table(summary))
    fidelity = summary.get("wan", {}).get("fidelity")
    if fidelity:
        err_console.print(f"while the peers pinged: {_fidelity_line(fidelity)}")
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
@ray_option
@handled
def table_(
    number: str, seeds: int | None, overrides: tuple[str, ...], out: Path | None, ray: str | None
) -> None:
    """Reproduce one of seed 002's latency prediction tables (5.2, 5.4, 5.5, 5.6) in the
    simulator, with the thesis's figures beside ours. Table 5.2 was measured on UMIACS
    (151 hosts), which is not public: ours runs on PlanetLab's 490 hosts."""
    from testbed.spec import load_any_spec

    path = Path(__file__).resolve().parents[2] / "scripts" / "experiments" / TABLE_SPECS[number]
    extra = [f'paper="{number}"', *([f"seeds={seeds}"] if seeds else []), *overrides]
    extra += [f'cluster="{ray}"'] if ray is not None else []  # the seeds as Ray tasks
    spec, data = load_any_spec(path, extra)
    print(_run_prediction(spec, data, out))


# -- fuzz ----------------------------------------------------------------------------------------------


def _run_program(spec: Any, data: dict[str, Any], out: Path | None) -> Path:
    """Run a program spec: a status line, a line per check, the figures after; on a
    failure, the run folder and the programs that failed, with their output."""
    from testbed.experiments import Report, run_spec
    from testbed.net import process_report

    def on_check(label: str, record: dict[str, Any]) -> None:
        verdict = "[green]ok[/]" if record["ok"] else "[bold red]FAILED[/]"
        err_console.print(
            f"  {label}: {verdict}, {len(record['members'])} member(s), quiet {record['quiet_s']} s"
        )
        if not record["ok"]:
            for key in ("error", "stderr", "stdout"):
                text = str(record.get(key) or "").strip()
                if text:
                    err_console.print(f"    {key}: {text.splitlines()[-1][:200]}", markup=False)
                    break
            for failed in record.get("failed", [])[:5]:
                err_console.print(f"    {failed['host']}: {failed['status']}", markup=False)

    with (
        err_console.status(f"running {spec.name}")
        if err_console.is_terminal
        else contextlib.nullcontext()
    ) as status:

        def say(line: str) -> None:
            if status is not None:
                status.update(f"{spec.name}: {line}")

        result = run_spec(spec, data, out=out, report=Report(say=say, phase=on_check))
    summary = result.summary
    churn = summary.get("churn", {})
    lateness = churn.get("lateness_ms", {})
    err_console.print(
        f"{churn.get('events_applied', 0)} of {churn.get('events_scheduled', 0)} actions applied, "
        f"lateness p50 {lateness.get('p50')} ms, p99 {lateness.get('p99')} ms; "
        f"{summary['checks']['count']} checks, {summary['checks']['failed']} failed; "
        f"{churn.get('leaves_abrupt', 0)} abrupt leave(s); {churn.get('programs_started', 0)} "
        "program(s) started"
    )
    fidelity = summary.get("wan", {}).get("fidelity")
    if fidelity:
        err_console.print(f"the whole run: {_fidelity_line(fidelity)}")
    report = process_report(result.dir / "wan")
    if summary["checks"]["failed"] and report:
        err_console.print(report, markup=False, highlight=False)
    return result.dir


# How `testbed run` shows each kind of spec: progress while it runs, its table after.
_SHOWN = {
    "can": _run_overlay,
    "predict": _run_prediction,
    "cluster": _run_clusters,
    "sched": _run_sched,
    "program": _run_program,
}
