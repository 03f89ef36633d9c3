# Campaigns: one overlay spec run under several churn scripts x seeds, and one
# table (and JSON object) of what broke and how fast the system repaired.
#
# Every script is compiled for every seed before the first run starts, so a
# bad script fails the campaign at once rather than an hour in. Runs go one
# after the other into <campaign folder>/<script>-s<seed>/, each a complete
# run folder; campaign.json is rewritten after every run, so an interrupted
# campaign still reports the runs it finished; campaign.png plots the CDFs of
# the repair times and of the actions' lateness over all runs.
#
# `violations` counts what every check found: checks are strict (a check waits
# for leaves in progress and a full quiet period, testbed/churn/_execute.py);
# `checks_unsettled` are those whose wait ran out, `settle_wait_s` what the
# waits took, `leaves_abrupt` the leaves that gave up their MERGE. Violating
# checks are listed with their peers and events.
#
# With [campaign.variants] every script and seed runs once per variant (the
# spec with that variant's overrides, into <script>-<variant>-s<seed>/), and
# when the runs schedule jobs campaign.json adds `wait_s.<variant>` (the mean
# over seeds of each run's mean wait, and the seeds' values) and
# `wait_s.RNT`, `wait_s.CENTRAL` and `wait_s.CENTRAL-REDIST` (the models of
# testbed/models/kim_rnt.py and kim_central.py, without and with periodic
# redistribution, on the same seeds' jobs and nodes, which no variant changes
# unless it changes the jobs or balance_s): Kim's E2 and Table 4.1
# (docs/workloads.md).

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from testbed.analysis.stats import quantiles
from testbed.errors import InputError
from testbed.experiments.overlay import churn_schedule, run_experiment, select_topology
from testbed.experiments.program import program_schedule, run_program
from testbed.pool import run_tasks
from testbed.runs import new_run_dir, pack_folder, strip_none, unpack_folder, write_json
from testbed.spec import ChurnSpec, ExperimentSpec, ProgramSpec, load_any_spec
from testbed.topology import resolve_topology

Spec = ExperimentSpec | ProgramSpec

__all__ = ["run_campaign"]


def _variant(spec: Spec, name: str, sets: dict[str, Any]) -> Spec:
    """The spec with a variant's overrides, checked as a spec of its own."""
    assert spec.campaign is not None
    plain = msgspec.structs.replace(spec.campaign, variants={})
    data = strip_none(msgspec.to_builtins(msgspec.structs.replace(spec, campaign=plain)))
    for key, value in sets.items():
        node = data
        *path, last = key.split(".")
        for depth, part in enumerate(path):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                where = ".".join(path[: depth + 1])
                raise InputError(
                    f"campaign.variants.{name}.{key}: {where} is not a table", source="<spec>"
                )
        node[last] = value
    try:
        varied, _ = load_any_spec(None, defaults=data)
    except InputError as exc:
        raise InputError(f"campaign.variants.{name}: {exc.reason}", source=exc.source) from None
    assert isinstance(varied, type(spec))
    return varied


def _run_specs(spec: Spec) -> list[tuple[str, int, Spec]]:
    """(script, seed, spec) per run; with variants, the script is named
    "<script>|<variant>" (_split_script) and the run's spec has the overrides."""
    assert spec.campaign is not None
    base = spec.churn or ChurnSpec()
    stems = [Path(script).stem for script in spec.campaign.scripts]
    for script, stem in zip(spec.campaign.scripts, stems, strict=True):
        if stems.count(stem) > 1:
            raise InputError(
                f"campaign.scripts: two scripts named {stem!r} would share run folders; rename one",
                source=script,
            )
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,55}", stem):
            raise InputError(
                f"campaign.scripts: {stem!r} cannot name a run folder "
                "(letters, digits, '.', '_', '-'; a letter or digit first)",
                source=script,
            )
    variants = {name: _variant(spec, name, sets) for name, sets in spec.campaign.variants.items()}
    out = []
    for script in spec.campaign.scripts:
        stem = Path(script).stem
        for variant, varied in variants.items() or [("", spec)]:
            label = f"{script}|{variant}" if variant else script
            for seed in spec.campaign.seeds:
                run = msgspec.structs.replace(
                    varied,
                    name=_folder_name(label, seed)[:64],
                    seed=seed,
                    churn=msgspec.structs.replace(varied.churn or base, script=script, trace=None),
                    campaign=None,
                )
                out.append((label, seed, run))
    return out


def _split_script(label: str) -> tuple[str, str]:
    """(script, variant) of a run's label ("" when the campaign has no variants)."""
    script, _, variant = label.partition("|")
    return script, variant


def _folder_name(label: str, seed: int) -> str:
    script, variant = _split_script(label)
    cases = variant.replace("/", "_")
    return "-".join([Path(script).stem, *([cases] if cases else []), f"s{seed}"])


OnRun = Callable[[int, int, str, int, dict[str, Any] | None], None]


def run_campaign(
    spec: Spec,
    *,
    out: str | Path | None = None,
    on_run: OnRun | None = None,
    jobs: int = 1,
    ray: str | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Run the campaign; returns (its folder, the campaign object also in campaign.json).

    on_run(k, total, script, seed, row) is called before each run (row None; one
    at a time only) and after it. jobs > 1 runs simulated runs side by side;
    `ray` (testbed.pool.LOCAL or a cluster's address) runs them as Ray tasks, `jobs`
    at a time. Emulated runs go one at a time either way.
    """
    runs = _run_specs(spec)
    for _, _, run in runs:  # compile everything first: nothing half-run
        if isinstance(run, ProgramSpec):
            program_schedule(run, resolve_topology(run.topology, run.seed))
            continue
        topology = select_topology(run)
        churn_schedule(run, topology, [f"h{k + 1}" for k in range(topology.n)])
    campaign = _Campaign(spec, runs, new_run_dir(spec.name, out), on_run)
    status = "interrupted"
    try:
        jobs = min(jobs, len(runs)) if spec.engine == "sim" else 1
        if jobs <= 1 and ray is None:
            campaign.run_one_at_a_time()
        else:
            campaign.run_side_by_side(jobs, ray)
        status = "complete"
    finally:
        campaign.write(status)
    return campaign.folder, campaign.result(status)


class _Campaign:
    """A campaign under way: its runs' rows and pooled figures, written as each run ends."""

    def __init__(
        self,
        spec: Spec,
        runs: list[tuple[str, int, Spec]],
        folder: Path,
        on_run: OnRun | None,
    ) -> None:
        self.spec, self.runs, self.folder, self.on_run = spec, runs, folder, on_run
        self.rows: list[dict[str, Any]] = []
        self.repair: list[float] = []
        self.lateness: list[float] = []
        self.waits: list[float] = []  # each check's settle_wait_s
        self.violating: list[dict[str, Any]] = []
        self.totals = {"crashes": 0, "unrepaired": 0}
        self.wall0 = time.monotonic()
        self.order = {_folder_name(script, seed): k for k, (script, seed, _) in enumerate(runs)}

    def result(self, status: str) -> dict[str, Any]:
        rows = self.rows
        return (
            {
                "name": self.spec.name,
                "engine": self.spec.engine,
                "status": status,
                "runs": len(rows),
                "runs_planned": len(self.runs),
                "events_applied": sum(r["events_applied"] for r in rows),
                "violations": sum(r["violations"] for r in rows),
                "checks_unsettled": sum(r["checks_unsettled"] for r in rows),
                "leaves_abrupt": sum(r["leaves_abrupt"] for r in rows),
                "settle_wait_s": quantiles(self.waits),
                "repair_s": {**quantiles(self.repair), **self.totals},
                "repair_s_by_script": {
                    script: quantiles(
                        [v for r in rows if r["script"] == script for v in r["values"]]
                    )
                    for script in dict.fromkeys(r["script"] for r in rows)
                },
                "lateness_ms": quantiles(self.lateness),
                "wall_s": round(time.monotonic() - self.wall0, 1),
                "rows": rows,
                "violating_checks": self.violating[:50],
            }
            | _waits(rows, self.spec.campaign.central if self.spec.campaign else "naive")
            | _dlb(rows)
        )

    def _run_dir(self, script: str, seed: int) -> Path:
        return self.folder / _folder_name(script, seed)

    def _finished(self, k: int, script: str, seed: int, run_dir: Path) -> None:
        row = _row(run_dir, script, seed, self.repair, self.lateness, self.violating, self.totals)
        self.waits.extend(row.pop("waits"))
        row["values"] = row.pop("repair_values")  # kept for the by-script figures, not shown
        self.rows.append(row)
        self.rows.sort(key=lambda r: self.order[r["run"]])
        write_json(self.folder / "campaign.json", self.result("running"))
        if self.on_run is not None:
            self.on_run(k, len(self.runs), script, seed, row)

    def run_one_at_a_time(self) -> None:
        for k, (script, seed, run) in enumerate(self.runs):
            if self.on_run is not None:
                self.on_run(k, len(self.runs), script, seed, None)
            run_dir = self._run_dir(script, seed)
            runner = run_program if isinstance(run, ProgramSpec) else run_experiment
            runner(run, strip_none(msgspec.to_builtins(run)), out=run_dir)  # type: ignore[arg-type]
            self._finished(k, script, seed, run_dir)

    def run_side_by_side(self, jobs: int, ray: str | None = None) -> None:
        """Runs side by side: simulated ones in `jobs` processes, or any as Ray tasks
        (each packs its run folder where it ran; it is unpacked here as it ends)."""
        calls = [
            (run, strip_none(msgspec.to_builtins(run)), str(self._run_dir(script, seed)), ray)
            for script, seed, run in self.runs
        ]
        for k, packed in run_tasks(_run_one, calls, jobs=jobs, ray=ray):
            script, seed, _ = self.runs[k]
            run_dir = self._run_dir(script, seed)
            if packed is not None:
                unpack_folder(packed, run_dir)
            self._finished(k, script, seed, run_dir)

    def write(self, status: str) -> None:
        """campaign.json, and the plot once a run has finished."""
        write_json(self.folder / "campaign.json", self.result(status))
        if self.rows:
            title = f"{self.spec.name} ({self.spec.engine})"
            write_plot(self.folder / "campaign.png", self.repair, self.lateness, title)


_MODELS = {
    "RNT": "rnt_wait_mean_s",
    "CENTRAL-NAIVE": "central_wait_mean_s",
    "CENTRAL-REDIST": "central_redistributing_wait_mean_s",
}


def _waits(rows: list[dict[str, Any]], central: str) -> dict[str, Any]:
    """Kim's figures over a campaign's runs with jobs: per variant, the mean over
    its runs of each run's mean wait; per case (a variant's name up to its last
    '/'), the same for the baseline models, one value per script and seed (the
    variants of a case share their jobs and nodes); CENTRAL is `central`'s model."""
    jobs = [r for r in rows if r.get("jobs", {}).get("wait_mean_s") is not None]
    if not jobs:
        return {}

    def mean(values: list[float]) -> dict[str, Any]:
        return {"mean": round(sum(values) / len(values), 3), "runs": values}

    out: dict[str, Any] = {}
    for variant in dict.fromkeys(r["variant"] for r in jobs):
        mine = [r for r in jobs if r["variant"] == variant]
        out[variant or "spec"] = mean([r["jobs"]["wait_mean_s"] for r in mine])
        pushed = [
            r["jobs"]["pushed_share"] for r in mine if r["jobs"].get("pushed_share") is not None
        ]
        if pushed:
            out[variant or "spec"]["pushed_share"] = round(sum(pushed) / len(pushed), 4)
    chosen = "CENTRAL-REDIST" if central == "redistributing" else "CENTRAL-NAIVE"
    for case in dict.fromkeys(r["variant"].rpartition("/")[0] for r in jobs):
        prefix = f"{case}/" if case else ""
        mine = [r for r in jobs if r["variant"].rpartition("/")[0] == case]
        for model, key in _MODELS.items():
            per_seed = {
                (r["script"], r["seed"]): r["jobs"][key]
                for r in mine
                if r["jobs"].get(key) is not None
            }
            if per_seed:
                out[prefix + model] = mean(list(per_seed.values()))
        if prefix + chosen in out:
            out[prefix + "CENTRAL"] = out[prefix + chosen]
    return {"wait_s": out}


def _dlb(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Kim's DLB overhead over the runs that balance by PULL or PUSH: DLB messages
    as a share of all datagrams, and the most one node handled in a minute."""
    dlb = [r["dlb"] for r in rows if r.get("dlb", {}).get("balance") in ("pull", "push")]
    if not dlb:
        return {}
    sent = sum(d["datagrams"] for d in dlb)
    return {
        "dlb": {
            "runs": len(dlb),
            "messages": sum(d["messages"] for d in dlb),
            "share_of_messages": round(sum(d["messages"] for d in dlb) / sent, 6) if sent else None,
            "max_per_node_minute": max(d["max_per_node_minute"] for d in dlb),
        }
    }


def _run_one(run: Spec, data: dict[str, Any], run_dir: str, ray: str | None) -> bytes | None:
    """One run of the campaign into `run_dir`; as a Ray task (which may run on
    another machine) into a folder of its own, returned packed."""
    runner = run_program if isinstance(run, ProgramSpec) else run_experiment
    if ray is None:
        runner(run, data, out=run_dir)  # type: ignore[arg-type]
        return None
    with tempfile.TemporaryDirectory(prefix="testbed-task-") as tmp:
        out = Path(tmp) / Path(run_dir).name
        runner(run, data, out=out)  # type: ignore[arg-type]
        return pack_folder(out)


def write_plot(path: Path, repair_s: list[float], lateness_ms: list[float], title: str) -> None:
    """Two CDFs over all runs: crash-to-takeover times and the actions' lateness."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for ax, values, label in (
        (left, repair_s, "crash to takeover (s)"),
        (right, lateness_ms, "action lateness (ms)"),
    ):
        if values:
            x = np.sort(np.asarray(values, dtype=float))
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction")
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _row(
    run_dir: Path,
    script: str,
    seed: int,
    repair: list[float],
    lateness: list[float],
    violating: list[dict[str, Any]],
    totals: dict[str, int],
) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    churn = summary.get("churn", {})
    run_repair = summary.get("repair_s", {})
    repair.extend(run_repair.get("values", []))
    totals["crashes"] += run_repair.get("crashes", 0)
    totals["unrepaired"] += run_repair.get("unrepaired", 0)
    late = [
        record["lateness_ms"]
        for record in map(json.loads, (run_dir / "applied.jsonl").read_text().splitlines())
        if "lateness_ms" in record
    ]
    lateness.extend(late)
    checks = summary["invariants"]["by_check"]
    violating.extend(
        {
            "run": run_dir.name,
            "check": check["phase"],
            "t": check["t"],
            "by_kind": check["by_kind"],
            "settled": check.get("settled", True),
            "quiet_s": check.get("quiet_s"),
            "departing": check.get("departing", []),
            "first": check["first"][:5],
            "events": check.get("events", []),
        }
        for check in checks
        if check["violations"]
    )
    script, variant = _split_script(script)
    jobs = summary.get("jobs")
    return (
        {
            "run": run_dir.name,
            "script": script,
            "variant": variant,
            "seed": seed,
            "status": summary["status"],
            "events_applied": churn.get("events_applied", 0),
            "violations": sum(c["violations"] for c in checks),
            "checks": len(checks),
            "checks_unsettled": sum(1 for c in checks if not c.get("settled", True)),
            "waits": (waits := [c.get("settle_wait_s", 0.0) for c in checks]),
            "settle_wait_s": quantiles(waits),
            "leaves_abrupt": summary.get("leaves", {}).get("abrupt", 0),
            "repair_s": {k: run_repair.get(k) for k in ("p50", "p99", "crashes", "unrepaired")},
            "repair_values": run_repair.get("values", []),
            "lateness_ms": quantiles(late),
            # The emulated WAN's verdict on itself (None in the simulator), what floods sent.
            "within_bound": summary.get("wan", {}).get("fidelity", {}).get("within_bound"),
            "flood_per_s": (
                round(sum(f.get("per_s") or 0.0 for f in summary["floods"]), 1)
                if summary.get("floods")
                else None
            ),
            "wall_s": summary["wall_s"],
        }
        | ({"jobs": {k: jobs.get(k) for k in _JOB_FIGURES}} if jobs else {})
        | ({"dlb": summary["dlb"]} if "dlb" in summary else {})
    )


_JOB_FIGURES = (
    "submitted", "completed", "failed", "lost", "waiting_at_end", "executed_twice", "misplaced",
    "wait_mean_s", "central_wait_mean_s", "wait_vs_central", "central_busy_at_last",
    "rnt_wait_mean_s", "rnt_messages_per_job", "central_redistributing_wait_mean_s",
    "pushed_share", "matchmaking_messages_per_placement",
)  # fmt: skip
