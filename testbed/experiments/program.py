# kind = "program": a user's program on the hosts of an emulated WAN under a
# churn script or trace, checked after each quiet period by the user's check.
#
# The run is Wan.apply_churn (testbed/net/_churn.py) in a run folder: the WAN
# under <run>/wan/ (its testbed.log records every process start and exit, the
# programs' output is under wan/hosts/), the schedule, the applied actions and
# the checks at the top (schedule.jsonl, applied.jsonl, checks.jsonl, as for
# the peers' runs), and summary.json however the run ends. The delivered RTT
# is sampled throughout (wan.fidelity). For campaigns, a failed check counts
# as a violation (`invariants`), so `testbed campaign` tabulates programs and
# peers alike.

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from testbed.churn import Schedule, Universe, schedule_for
from testbed.experiments.report import report_quietly
from testbed.experiments.run import Report, Run, RunResult
from testbed.net import open_cluster_wan, open_wan, process_report
from testbed.spec import ProgramSpec
from testbed.topology import Topology, resolve_topology

__all__ = ["program_schedule", "run_program"]


def program_schedule(spec: ProgramSpec, topology: Topology) -> Schedule:
    """The run's churn compiled on its hosts (h1.., the topology's labels) with its seed."""
    names = [f"h{k + 1}" for k in range(topology.n)]
    labels = list(topology.labels) if topology.labels else [{} for _ in names]
    churn = spec.churn
    return schedule_for(
        churn.script, churn.trace, churn.trace_down, Universe(names, labels), spec.seed
    )


def run_program(
    spec: ProgramSpec,
    data: dict[str, Any],
    *,
    out: str | Path | None = None,
    report: Report | None = None,
) -> RunResult:
    """Run a program spec; returns its folder and summary. A bad script, command or
    check fails before the network comes up."""
    report = report or Report()
    topology = resolve_topology(spec.topology, spec.seed)
    schedule = program_schedule(spec, topology)
    with Run(spec.name, data, out) as run:
        wall0 = time.monotonic()
        for warning in schedule.room_warnings(spec.churn.settle_s, spec.leave_grace_s):
            report.say(f"warning: {schedule.source}: {warning}")
        summary: dict[str, Any] = {
            "name": spec.name,
            "kind": "program",
            "engine": "emu",
            "status": "interrupted",
            "seed": spec.seed,
            "hosts": topology.n,
            "topology": topology.source,
        }
        churn: dict[str, Any] = {}
        wan = None
        monitor = None
        try:
            report.say(f"bringing up {topology.n} hosts")
            if spec.cluster is None:
                wan = open_wan(
                    topology, clamp=spec.topology.clamp, run_dir=run.dir / "wan", seed=spec.seed
                )
            else:  # the hosts spread over the machines of a Ray cluster
                wan = open_cluster_wan(
                    topology,
                    address=spec.cluster,
                    clamp=spec.topology.clamp,
                    run_dir=run.dir / "wan",
                    seed=spec.seed,
                )
            summary["emu"] = {"up_s": round(time.monotonic() - wall0, 3)}
            monitor = wan.monitor_fidelity(seed=spec.seed)

            def on_event(record: dict[str, Any]) -> None:
                if record["verb"] == "check":
                    report.phase(f"check t={record['t']:.0f}s", record)
                else:
                    report.say(f"t={record['applied_t']:.0f}s {record['verb']}")

            handle = wan.apply_churn(
                schedule,
                command=spec.command,
                seed=spec.seed,
                settle_s=spec.churn.settle_s,
                settle_wait_max_s=spec.churn.settle_wait_max_s,
                check=spec.check,
                check_on=spec.check_on,
                check_timeout_s=spec.check_timeout_s,
                leave=spec.leave,
                leave_grace_s=spec.leave_grace_s,
                env=dict(spec.env) or None,
                on_event=on_event,
                folder=run.dir,
            )
            churn = handle.summary or {}
            summary["status"] = "complete"
        finally:
            if monitor is not None:
                summary["wan"] = {"fidelity": monitor.close()}
            if wan is not None:
                run.teardown(wan.close)
                summary.setdefault("emu", {})["teardown"] = wan.teardown
            summary.update(_figures(run.dir, churn))
            summary["wall_s"] = round(time.monotonic() - wall0, 3)
            if summary["status"] != "complete":
                summary["failure_report"] = process_report(run.dir / "wan")
            result = run.finish(summary)
            problem = report_quietly(run.dir)  # timeline.png and report.html
            if problem:
                report.say(f"no report: {problem}")
        run.raise_teardown_error()
        return result


def _figures(run_dir: Path, churn: dict[str, Any]) -> dict[str, Any]:
    """The churn's figures and the checks, shaped as the peers' runs shape theirs
    (`invariants`: a failed check is one violation), for `testbed campaign`."""
    checks = []
    checks_path = run_dir / "checks.jsonl"
    if checks_path.exists():
        checks = [json.loads(line) for line in checks_path.read_text().splitlines() if line]
    by_check = [
        {
            "phase": f"check {k + 1}",
            "t": check["t"],
            "violations": 0 if check["ok"] else 1,
            "by_kind": {} if check["ok"] else {"check failed": 1},
            "settled": check.get("settled", True),
            "quiet_s": check.get("quiet_s"),
            "settle_wait_s": check.get("settle_wait_s", 0.0),
            "departing": [],
            "first": [] if check["ok"] else [{"peers": [], "check": _why(check)}],
            "events": [],
        }
        for k, check in enumerate(checks)
    ]
    failed = sum(1 for c in checks if not c["ok"])
    return {
        "churn": {k: v for k, v in churn.items() if k not in ("folder", "status")},
        "checks": {"count": len(checks), "failed": failed},
        "invariants": {
            "violations": failed,
            "by_check": by_check,
        },
        "members_final": len(churn.get("members_final", [])),
        "leaves": {"abrupt": churn.get("leaves_abrupt", 0)},
    }


def _why(check: dict[str, Any]) -> str:
    if "error" in check:
        return str(check["error"])
    if "failed" in check:
        return "; ".join(f"{f['host']}: {f['status']}" for f in check["failed"][:5])
    tail = (check.get("stderr") or check.get("stdout") or "").strip().splitlines()
    return f"{check.get('status', '?')}: {tail[-1] if tail else 'no output'}"
