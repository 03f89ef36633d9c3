# A churn script on real peer processes: every kind of event goes through the
# emulator's verbs (processes, SIGSTOP/SIGCONT, the delay engine's partition,
# loss and matrix), on time and logged, and the overlay is whole after each
# quiet period.

from __future__ import annotations

import json

from testbed.experiments.overlay import run_experiment
from testbed.spec import load_spec

from .conftest import SPEC as CAN_SPEC

SCRIPT = """
from 0s to 6s join 75%
from 2s to 5s flood h1 -- all at 300/s  # Pings to every host, a peer's or not
at 8s crash 1                           # repaired before the check at 20 s
from 22s to 23s partition random 50%    # shorter than suspect_after_s
from 25s to 27s freeze 1
from 29s to 31s set latency all -- all 150ms
at 32s frame 2
from 33s to 36s flap h1 -- h2 every 1s
at 37s churn 20%                        # the check waits for the leavers to exit
at 60s stop
"""

# The CAN emulator test's grid and timers, with a script instead of phases.
SPEC = {k: v for k, v in CAN_SPEC.items() if k != "phases"} | {
    "name": "churn-emu-small",
    "churn": {"settle_s": 12.0},
}


def test_a_churn_script_on_real_processes(tmp_path):
    script = tmp_path / "small.churn"
    script.write_text(SCRIPT)
    spec, data = load_spec(None, [f'churn.script="{script}"'], defaults=SPEC)
    run_dir = run_experiment(spec, data, out=tmp_path / "run").dir
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete"
    churn = summary["churn"]
    assert churn["events_applied"] == churn["events_scheduled"]
    applied = [json.loads(line) for line in (run_dir / "applied.jsonl").read_text().splitlines()]
    kinds = {a["kind"] for a in applied}
    assert kinds == {"join", "crash", "partition", "heal", "freeze", "thaw", "latency", "frame"} | {
        "cut",
        "mend",
        "leave",
        "flood",
        "stop",
    }
    (flood,) = summary["floods"]
    assert flood["host"] == "h1" and flood["send_errors"] == 0
    assert 0.8 * 900 <= flood["sent"] <= 900 * 1.05, flood  # 3 s at 300/s
    datagrams = summary["emu"]["peer_datagrams"]
    assert datagrams["rx"] == datagrams["accepted"] + sum(datagrams["dropped"].values())
    # Counted once per peer: at most what the peers' final records say (each peer that
    # exited, early or at the end, wrote its counters as it went).
    finals = [
        json.loads(line)["stats"]["rx"]
        for log in (run_dir / "peers").glob("*.jsonl")
        for line in log.read_text().splitlines()
        if '"kind":"exit"' in line
    ]
    assert 0.9 * sum(finals) <= datagrams["rx"] <= sum(finals), (datagrams, sum(finals))
    # Every action is timed against its due time (the 50 ms figure is a campaign's
    # measurement, not a test: machines are shared); here only gross faults fail.
    assert all(a["applied_t"] >= a["due_t"] for a in applied)
    assert churn["lateness_ms"]["max"] < 2000, churn
    # The delay engine did what the script said: the partition dropped packets,
    # and two latency changes and a frame switch each loaded a matrix.
    stats = json.loads((run_dir / "wan" / "engine" / "final-stats.json").read_text())
    assert stats["drops"]["partition"] > 0
    wan_log = (run_dir / "wan" / "testbed.log").read_text()
    assert wan_log.count('"control.load_one_way"') == 3
    checks = summary["invariants"]["by_check"]
    assert [(c["phase"], c["members"]) for c in checks[:1]] == [("quiet@20.0s", 11)]
    assert [c["members"] for c in checks] == [11, 11]
    # The second check came 12 s after the last leaver's process exited, not 12 s after the churn.
    assert 49.0 < checks[1]["t"] < 59.0 and checks[1]["quiet_s"] >= 12.0, checks
    assert all(c["settled"] for c in checks), checks
    assert summary["invariants"]["violations"] == 0, checks
    assert summary["emu"]["wan"]["leftovers"] == {
        "netns": 0,
        "links": 0,
        "rules": 0,
        "processes": 0,
    }
