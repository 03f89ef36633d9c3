# Scheduling specs (kind = "sched"): a trace prepared as the spec says, the
# central FCFS baseline per clustering, every job accounted for.

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from testbed.errors import InputError
from testbed.experiments.sched import run_sched
from testbed.spec import load_any_spec

ROOT = Path(__file__).parents[2]
SMALL = {
    "kind": "sched",
    "name": "sched-small",
    "topology": {"ref": "sharcnet:1", "hosts": 300, "pick": "random"},
    "clusterings": ["ACTUAL", "DISJOINT-4", "OVERLAP-16"],
    "schedulers": ["central", "static", "qb+dlb"],
    "workload": {
        "trace": str(ROOT / "traces/pwa/DAS2-fs1-2003-1.swf.gz"),
        "slice": 1000,
        "load": 1.5,
    },
}


def test_every_job_completes_or_fails_with_a_reason(tmp_path):
    spec, data = load_any_spec(None, [], defaults=SMALL)
    run_dir, summary = run_sched(spec, data, out=tmp_path / "run")
    assert list(summary["slowdown"]) == [
        f"{s}/{c}"
        for c in ("ACTUAL", "DISJOINT-4", "OVERLAP-16")
        for s in ("central", "STATIC", "QB+DLB")
    ]
    for variant, counts in summary["by_variant"].items():
        assert counts["submitted"] == 1000 and counts["lost"] == 0, variant
        assert counts["completed"] + counts["failed"] == 1000
        name = variant.replace("/", "-").replace("+", "_")
        placements = (run_dir / f"placements-{name}.jsonl").read_text()
        assert len(placements.splitlines()) == counts["completed"]
    # Pieces of 4 cannot hold the wider jobs: they fail, each with its reason,
    # and the same jobs under every scheduler.
    pieces = summary["by_variant"]["central/DISJOINT-4"]
    assert pieces["failed"] > 0 and all(
        "wider than every cluster within the latency bound (4)" in f["reason"]
        for f in pieces["failures"]
    )
    assert summary["by_variant"]["QB+DLB/DISJOINT-4"]["failed"] == pieces["failed"]
    # Balancing moves jobs, and the messages are counted.
    traffic = summary["traffic"]["QB+DLB/ACTUAL"]
    assert sum(traffic["moves"].values()) > 0 and traffic["messages"]["dispatch"] >= 1000
    assert summary["traffic"]["STATIC/ACTUAL"]["moves"] == {}
    assert summary["jobs"]["lost"] == 0
    assert summary["slowdown"]["central/ACTUAL"]["mean"] >= 1.0
    assert summary["workload"]["offered_load_on_grid"] == pytest.approx(1.5, rel=0.01)
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["slowdown"] == summary["slowdown"]
    assert (run_dir / "slowdown.png").stat().st_size > 10_000
    assert (run_dir / "workload.swf").read_text().count("Testbed:") >= 2  # its steps


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ("workload.window_s=10", "window_s or load"),
        ("workload.slice=0", "workload.slice"),
        ('clusterings=["HALVES"]', "HALVES"),
        ("workload.min_size=0", "workload.min_size"),
        ("overprovision=[0.5]", "overprovision"),
        ('schedulers=["fifo"]', "schedulers"),
        ("balance.period_s=0", "balance.period_s"),
        ("latency_ms=-1", "latency_ms"),
        ("workload.first=0", "workload.first"),
    ],
)
def test_bad_sched_specs_are_named(override, says):
    with pytest.raises(InputError, match=says):
        load_any_spec(None, [override], defaults=SMALL)


SCHED_SPECS = sorted(
    p
    for p in (ROOT / "scripts" / "experiments").glob("sched-*.toml")
    if tomllib.loads(p.read_text()).get("kind") == "sched"  # sched-emu: jobs in an overlay run
)


@pytest.mark.parametrize("path", SCHED_SPECS, ids=lambda p: p.stem)
def test_the_bundled_sched_specs_are_valid(path):
    spec, _ = load_any_spec(path)
    assert spec.kind == "sched" and Path(spec.workload.trace).exists()


def test_the_bundled_sched_specs_are_all_found():
    names = {p.stem for p in SCHED_SPECS}
    assert {"sched-central-sim", "sched-intense-sim", "sched-narrow-sim"} <= names
