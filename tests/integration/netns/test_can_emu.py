# The CAN overlay on real peer processes in emulated hosts: a short churn
# experiment through the same runner the simulator uses.

from __future__ import annotations

import json
import os

import pytest

from testbed.experiments.overlay import run_experiment
from testbed.spec import load_spec

from .conftest import SPEC, netns_of, run_id_of, run_small_churn


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_churn_on_real_processes_leaves_no_violation(tmp_path):
    run_dir, summary = run_small_churn(tmp_path)
    checks = summary["invariants"]["by_check"]
    # Every check says what the peers and the delay engine used.
    for check in checks:
        used = check["resources"]
        assert used["peers"] == check["members"]
        assert 0 < used["peer_private_memory_kb"]["p50"] <= used["peer_private_memory_kb"]["max"]
        assert 0 <= used["peer_cpu_pct"]["p50"] <= used["peer_cpu_pct"]["max"] < 200
        assert used["delay_engine"]["cpu_pct"] >= 0 and used["delay_engine"]["resident_kb"] > 0
        assert {"samples", "lost", "rounds", "error_p99_ms", "within_bound"} <= set(
            used["wan_fidelity"]
        )
    # The RTT the WAN delivered while the peers ran, sampled in the background: every
    # echo answered (hosts' kernels answer whatever their peers do), each check's share
    # part of the whole.
    fidelity = summary["wan"]["fidelity"]
    assert fidelity["samples"] > 0 and fidelity["lost"] == 0, fidelity
    assert fidelity["rounds"] >= sum(c["resources"]["wan_fidelity"]["rounds"] for c in checks)
    assert 0 <= fidelity["error_p50_ms"] <= fidelity["error_p99_ms"]
    assert (run_dir / "wan" / "fidelity.jsonl").stat().st_size > 0
    assert summary["emu"]["wan"]["leftovers"] == {
        "netns": 0,
        "links": 0,
        "rules": 0,
        "processes": 0,
    }
    # One log per host that ran a peer; a host that ran two (a joiner may land
    # where a peer crashed or left) keeps both in its log, one after the other.
    actions = [json.loads(line) for line in (run_dir / "actions.jsonl").read_text().splitlines()]
    joins: dict[str, int] = {}
    for action in actions:
        if action["kind"] == "join":
            joins[action["host"]] = joins.get(action["host"], 0) + 1
    assert sum(joins.values()) == 14  # 12 + 2 joiners
    logs = {p.stem: p for p in (run_dir / "peers").glob("h*.jsonl")}
    assert sorted(logs) == sorted(joins)
    for host, count in joins.items():
        events = [json.loads(line)["kind"] for line in logs[host].read_text().splitlines()]
        assert events.count("joined") == count, host
    assert netns_of(run_id_of(run_dir / "wan")) == []


@pytest.mark.parametrize("peers", ["fork", "exec"])
def test_an_engine_failure_still_tears_down_and_leaves_a_summary(tmp_path, peers):
    spec, data = load_spec(
        None,
        [
            "phases=[{action='join',count=4,over_s=1,settle_s=3},{action='crash',count=1,settle_s=1}]",
            f"peers='{peers}'",
        ],
        defaults=SPEC,
    )
    from testbed.engines.emu import EmuEngine

    class Failing(EmuEngine):
        def crash(self, host):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_experiment(spec, data, out=tmp_path / "run", make_engine=Failing)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert len(summary["invariants"]["checked_at"]) == 1
    # What the WAN delivered until it ended is kept (a round is taken at the start).
    assert (
        summary["wan"]["fidelity"]["samples"] > 0 and "error_p99_ms" in summary["wan"]["fidelity"]
    )
    assert netns_of(run_id_of(tmp_path / "run" / "wan")) == []
    # The peers ran as asked: forked by the zygote, or each started by itself.
    text = (tmp_path / "run" / "wan" / "testbed.log").read_text()
    log = [json.loads(line) for line in text.splitlines()]
    starts = [r for r in log if r["kind"] == "process.start"]
    nodes = [r for r in starts if r.get("label") == "node"]
    assert len(nodes) == 4
    assert all(bool(r.get("adopted")) == (peers == "fork") for r in nodes)
    assert any(r.get("label") == "zygote" for r in starts) == (peers == "fork")
    assert not any(pid_alive(r["pid"]) for r in starts)
