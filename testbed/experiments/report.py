# A run's report: its timeline as a PNG and one HTML page with its figures, beside
# summary.json (`timeline.png`, `report.html`), made from the run folder alone.
#
# The timeline has three panels on the run's clock: the actions applied (a mark
# per action, by verb), the members and the violations (or failed checks) found
# at each check, and the WAN's delivered RTT error per fidelity round (each
# sampled pair's median, and p50 and p99 over the round, against the bound). The page shows the summary's figures as tables, the
# timeline and the checks; it needs no script and no network (the plot is
# embedded). Any folder of an overlay or program run can be reported again with
# `testbed report RUN_DIR`.

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

__all__ = ["report_quietly", "write_report"]


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return out


def _wall_start(applied: list[dict[str, Any]], rounds: list[dict[str, Any]]) -> float | None:
    """The wall time of the run's time 0 (from the applied actions' two clocks)."""
    starts = [a["t"] - a["applied_t"] for a in applied if "applied_t" in a and "t" in a]
    if starts:
        return min(starts)
    return rounds[0]["started"] if rounds else None


def _checks(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for check in _lines(run_dir / "checks.jsonl"):
        members = check.get("members")
        count = len(members) if isinstance(members, list) else members
        bad = check.get("violations")
        if bad is None:
            bad = 0 if check.get("ok", True) else 1
        out.append({"t": check.get("t"), "members": count, "bad": bad, "record": check})
    return out


def _timeline(run_dir: Path, title: str) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    applied = [a for a in _lines(run_dir / "applied.jsonl") if "applied_t" in a]
    rounds = [r for r in _lines(run_dir / "wan" / "fidelity.jsonl") if "error_p99_ms" in r]
    checks = [c for c in _checks(run_dir) if c["t"] is not None]
    if not (applied or rounds or checks):
        return None
    t0 = _wall_start(applied, rounds)
    fig, (top, middle, bottom) = plt.subplots(
        3, 1, figsize=(10, 7), sharex=True, layout="constrained"
    )
    verbs = sorted({a["kind"] for a in applied})
    for k, verb in enumerate(verbs):
        times = [a["applied_t"] for a in applied if a["kind"] == verb]
        top.scatter(times, [k] * len(times), s=12, label=verb)
    top.set_yticks(range(len(verbs)), verbs)
    top.set_title("actions applied")
    if checks:
        middle.plot([c["t"] for c in checks], [c["members"] for c in checks], "o-", label="members")
        twin = middle.twinx()
        twin.bar([c["t"] for c in checks], [c["bad"] for c in checks], width=1.0, color="tab:red")
        twin.set_ylabel("violations / failed checks", color="tab:red")
        twin.set_ylim(bottom=0)
        twin.yaxis.set_major_locator(MaxNLocator(integer=True))
    middle.set_ylabel("members")
    middle.set_title("at each check")
    if rounds and t0 is not None:
        when = [r["started"] - t0 for r in rounds]
        dots = [(r["started"] - t0, pair[2]) for r in rounds for pair in r.get("pair_error_ms", [])]
        if dots:
            xs, ys = zip(*dots, strict=True)
            bottom.scatter(xs, ys, s=6, alpha=0.35, color="grey", label="a pair (median)")
        bottom.plot(when, [r["error_p50_ms"] for r in rounds], "o-", label="p50")
        bottom.plot(when, [r["error_p99_ms"] for r in rounds], "s-", label="p99")
        bottom.axhline(0.5, color="grey", linestyle="--", label="0.5 ms (bound for RTT <= 25 ms)")
        bottom.legend(loc="upper right", fontsize="small")
    bottom.set_ylabel("|RTT error| (ms)")
    bottom.set_title("delivered RTT error per fidelity round")
    bottom.set_xlabel("run time (s)")
    for ax in (top, middle, bottom):
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    path = run_dir / "timeline.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _flat(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), inner, out)
    elif isinstance(value, list):
        if len(value) <= 8 and all(not isinstance(v, dict | list) for v in value):
            out.append((prefix, ", ".join(map(str, value))))
        else:
            out.append((prefix, f"[{len(value)} entries]"))
    else:
        out.append((prefix, str(value)))


def _table(rows: list[tuple[str, str]], head: tuple[str, str] = ("figure", "value")) -> str:
    body = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in rows)
    return f"<table><tr><th>{head[0]}</th><th>{head[1]}</th></tr>{body}</table>"


def write_report(run_dir: str | Path) -> Path:
    """Write timeline.png and report.html into the run folder; returns the page's path."""
    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    name = str(summary.get("name", run_dir.name))
    title = f"{name} ({summary.get('engine', '?')}, seed {summary.get('seed', '?')})"
    plot = _timeline(run_dir, title)
    headline = [
        (key, str(summary[key]))
        for key in ("status", "hosts", "topology", "wall_s", "members_final")
        if key in summary
    ]
    invariants = summary.get("invariants", {})
    if "violations" in invariants:
        headline.append(("violations after quiet periods", str(invariants["violations"])))
    fidelity = summary.get("wan", {}).get("fidelity", {})
    if fidelity.get("samples"):
        headline.append(
            (
                "WAN RTT error",
                f"p50 {fidelity['error_p50_ms']} ms, p99 {fidelity['error_p99_ms']} ms, "
                f"{fidelity['within_bound']:.1%} within {fidelity['bound']}"
                + ("" if fidelity.get("kept_up") else " - the WAN did not keep up"),
            )
        )
    details: list[tuple[str, str]] = []
    for key in ("churn", "checks", "emu", "wan", "sim", "repair_s"):
        if key in summary:
            _flat(key, summary[key], details)
    checks = _checks(run_dir)
    check_rows = "".join(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class='{}'>{}</td></tr>".format(
            html.escape(str(c["t"])),
            html.escape(str(c["members"])),
            html.escape(str(c["record"].get("quiet_s", ""))),
            "bad" if c["bad"] else "ok",
            c["bad"],
        )
        for c in checks
    )
    image = ""
    if plot is not None:
        data = base64.b64encode(plot.read_bytes()).decode()
        image = f'<img id="timeline" alt="timeline of {html.escape(name)}" src="data:image/png;base64,{data}">'
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }}
td.bad {{ color: #b00; font-weight: bold; }} img {{ max-width: 100%; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Run folder: <code>{html.escape(str(run_dir.resolve()))}</code></p>
<h2>Figures</h2>{_table(headline)}
<h2>Timeline</h2>{image or "<p>Nothing to plot.</p>"}
<h2>Checks</h2>
<table id="checks"><tr><th>t (s)</th><th>members</th><th>quiet (s)</th><th>violations</th></tr>{check_rows}</table>
<h2>All figures</h2>{_table(details)}
</body></html>
"""
    path = run_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def report_quietly(run_dir: Path) -> str | None:
    """write_report after a run whose summary is written: a failure to plot must not
    fail the run; it is returned (and written to report.error) instead."""
    try:
        write_report(run_dir)
    except Exception as exc:  # the run's results are safe in summary.json already
        why = f"{type(exc).__name__}: {exc}"
        (run_dir / "report.error").write_text(why + "\n")
        return why
    return None
