# `make demo` / `testbed demo`: what the emulator does, shown on real sockets.
#
# Brings up a 32-host PlanetLab subset, measures delivered against configured
# RTT on every pair under load, partitions the network in two halves and heals
# it while probing, and prints (and saves) a short report.

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.progress import Progress
from rich.table import Table

from testbed.net import open_wan
from testbed.progress import BringupProgress, console, err_console
from testbed.runs import write_json
from testbed.tools.bench import delay_fidelity, partition_effect

__all__ = ["run_demo"]


def run_demo(*, hosts: int = 32, out: Path | None = None) -> dict[str, Any]:
    console.rule(f"[bold]P2P Grid Testbed demo: {hosts} PlanetLab hosts on an emulated WAN")
    with open_wan(
        "planetlab", hosts=hosts, clamp=True, name="demo", run_dir=out, progress=BringupProgress()
    ) as wan:
        cal = wan.calibration
        console.print(
            f"up in {wan.up_s:.1f} s; engine floor {cal.floor_rtt_ms:.3f} ms RTT; "
            f"{wan.clamped} ordered pair(s) below it clamped to it; run folder {wan.run_dir}"
        )
        n = len(wan.hosts)
        with Progress(
            console=err_console, transient=True, disable=not err_console.is_terminal
        ) as progress:
            task = progress.add_task("probing every pair", total=n * (n - 1) // 2 * 20)
            fidelity = delay_fidelity(
                wan, keep_pairs=True, on_sent=lambda k: progress.advance(task, k)
            )
        half = n // 2
        groups = [[h.name for h in wan.hosts[:half]], [h.name for h in wan.hosts[half:]]]
        effect = partition_effect(
            wan, groups, inside=("h1", "h2"), across=("h1", wan.hosts[half].name)
        )
        stats = wan.stats()

    pairs = sorted((p for p in fidelity["per_pair"] if p[3] is not None), key=lambda p: p[2])
    shown = [pairs[int(q * (len(pairs) - 1))] for q in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)]
    table = Table(title="configured versus measured RTT (median of 20 probes per pair)")
    for col in ("pair", "configured ms", "measured ms", "error ms"):
        table.add_column(col, justify="right")
    for a, b, configured, measured, _count in shown:
        table.add_row(
            f"{a}-{b}", f"{configured:.3f}", f"{measured:.3f}", f"{measured - configured:+.3f}"
        )
    console.print(table)

    err = fidelity["rtt_error_ms"]
    summary = Table(title="what was configured versus what was measured", show_header=False)
    summary.add_row(
        "pairs x probes",
        f"{fidelity['pairs']} x {fidelity['samples_per_pair']} ({fidelity['lost']} lost)",
    )
    summary.add_row("engine load", f"{fidelity['pps']:.0f} packets/s")
    summary.add_row(
        "|RTT error| p50 / p99 / max", f"{err['p50']:.3f} / {err['p99']:.3f} / {err['max']:.3f} ms"
    )
    summary.add_row(
        "relative error p50 / p99",
        f"{fidelity['rtt_rel_error']['p50']:.4f} / {fidelity['rtt_rel_error']['p99']:.4f}",
    )
    summary.add_row(
        "within max(0.5 ms, 2 %)",
        f"{fidelity['within_bound']:.2%} of samples (p99 ratio {fidelity['bound_ratio_p99']:.2f})",
    )
    summary.add_row(
        f"partition h1..h{half} | h{half + 1}..h{n}",
        f"took effect {effect['partition_effect_ms']:.1f} ms after the call; {effect['across_answered_during_partition']} of {effect['across_sent_during_partition']} probes across answered, {effect['inside_lost_during_partition']} of {effect['inside_sent_during_partition']} inside lost",
    )
    summary.add_row(
        "heal",
        f"first probe across answered was sent {effect['heal_effect_ms']:.1f} ms after the call",
    )
    summary.add_row(
        "engine",
        f"release error p50 {stats['lateness_us'].get('p50')} us, p99 {stats['lateness_us'].get('p99')} us; real-time {stats['realtime']}",
    )
    console.print(summary)
    result = {
        "fidelity": {k: v for k, v in fidelity.items() if k != "per_pair"},
        "partition": effect,
        "calibration": cal.__repr__(),
        "run_dir": str(wan.run_dir),
    }
    write_json(wan.run_dir / "summary.json", result)
    write_json(wan.run_dir / "pairs.json", fidelity["per_pair"])
    console.print(f"report saved in {wan.run_dir}/summary.json")
    return result
