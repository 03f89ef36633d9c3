# Churn for any program: a user's gossip protocol with a failure detector
# (examples/gossip/) on 32 emulated hosts, under a script of joins, crashes, a
# freeze, a partition and heal, a latency change, restarts and leaves, through
# a spec (`kind = "program"`) and through Wan.apply_churn; the user's check
# after every quiet period, its verdicts in checks.jsonl.

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from testbed.errors import ControlError, InputError
from testbed.experiments import run_spec
from testbed.spec import load_any_spec

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "gossip"
COMMAND = (
    f"{sys.executable} {EXAMPLE}/gossip.py --name {{name}} --ip {{ip}} --peers {{peers}} "
    "--views {run}/views"
)
# By name: the check's program is looked up on the PATH (Debian's python3 or another).
CHECK = f"python3 {EXAMPLE}/check.py {{run}}/views {{members}}"

SCRIPT = """
from 0s to 2s join 20
at 4s crash 2
from 7s to 11s freeze 1
at 13s join 3
from 16s to 17s partition random 50%
at 20s set latency h1 -- h2 120ms
at 23s restart 2
at 26s leave 2
at 30s stop
"""


def _verbs(folder: Path) -> set[str]:
    return {
        json.loads(line)["kind"] for line in (folder / "applied.jsonl").read_text().splitlines()
    }


def test_a_spec_runs_a_users_program_under_churn_and_checks_it(tmp_path):
    script = tmp_path / "gossip.churn"
    script.write_text(SCRIPT)
    spec, data = load_any_spec(
        None,
        [],
        defaults={
            "kind": "program",
            "name": "gossip-test",
            "command": COMMAND,
            "check": CHECK,
            "topology": {"ref": "planetlab", "hosts": 32, "clamp": True},
            "churn": {"script": str(script), "settle_s": 2.5},
        },
    )
    run_dir, summary = run_spec(spec, data, out=tmp_path / "run")
    assert summary["status"] == "complete"
    checks = [json.loads(line) for line in (run_dir / "checks.jsonl").read_text().splitlines()]
    assert len(checks) == summary["checks"]["count"] >= 7
    assert [c for c in checks if not c["ok"]] == []
    assert all(c["ran"] and "views right" in c["stdout"] for c in checks)
    assert summary["invariants"]["violations"] == 0
    assert {"join", "crash", "freeze", "thaw", "partition", "heal", "latency", "restart",
            "leave"} <= _verbs(run_dir)  # fmt: skip
    churn = summary["churn"]
    assert churn["events_applied"] == churn["events_scheduled"]
    assert churn["lateness_ms"]["p99"] is not None
    assert churn["leaves_abrupt"] == 0 and churn["absent"] == []
    assert summary["wan"]["fidelity"]["samples"] > 0
    assert summary["emu"]["teardown"]["leftovers"] == dict.fromkeys(
        summary["emu"]["teardown"]["leftovers"], 0
    )
    # Every process's end is in the WAN's log, with what ended it.
    exits = [
        json.loads(line)
        for line in (run_dir / "wan" / "testbed.log").read_text().splitlines()
        if '"process.exit"' in line
    ]
    causes = {e["cause"] for e in exits if e["label"] == "program"}
    assert {"crash", "leave", "teardown"} <= causes
    # The run's report beside its summary (tests/integration/test_report.py renders one).
    assert (run_dir / "timeline.png").stat().st_size > 10_000
    assert "gossip-test (emu, seed 1)" in (run_dir / "report.html").read_text()


def test_apply_churn_in_the_background_with_a_python_check(wan_factory):
    wan = wan_factory("planetlab", hosts=32, clamp=True)
    seen = []

    def everyone_agrees(info):
        views = Path(wan.run_dir, "views")
        members = set(info["members"])
        for name in members:
            view = json.loads((views / f"{name}.json").read_text())
            if set(view["alive"]) != members:
                return False
        return True

    handle = wan.apply_churn(
        SCRIPT,
        command=COMMAND,
        settle_s=2.5,
        check=everyone_agrees,
        on_event=seen.append,
        background=True,
        fidelity=True,
    )
    assert not handle.done  # returned at once
    summary = handle.wait(120)
    assert summary["status"] == "complete"
    assert summary["checks"] >= 7 and summary["checks_failed"] == 0, handle.checks
    assert [e["verb"] for e in seen].count("check") == summary["checks"]
    assert {e["verb"] for e in seen} >= {"join", "crash", "freeze", "thaw", "partition", "heal",
                                          "latency", "restart", "leave"}  # fmt: skip
    assert summary["lateness_ms"]["p99"] < 1000 and summary["wan_fidelity"]["samples"] > 0
    # The programs it started keep running after the schedule ends.
    running = [h.name for h in wan.hosts if wan.running(h)]
    assert sorted(running) == summary["members_final"] and len(running) == 19  # 23 in, 4 out
    for name in ("schedule.jsonl", "applied.jsonl", "checks.jsonl", "summary.json"):
        assert (handle.folder / name).exists()


def test_host_helpers_act_on_the_programs_of_a_host(wan):
    first = wan.popen("h1", f"{sys.executable} -c 'import time; time.sleep(60)'", label="sleeper")
    wan.freeze("h1")
    assert first.frozen and _eventually(lambda: _state(first.pid) == "T")  # signals are async
    with pytest.raises(ControlError, match="frozen already"):
        wan.freeze("h1")
    wan.thaw("h1")
    assert _eventually(lambda: _state(first.pid) != "T")
    with pytest.raises(ControlError, match="not frozen"):
        wan.thaw("h1")
    (again,) = wan.restart("h1")
    assert first.poll() is not None and again.poll() is None
    assert again.argv == first.argv and again.stdout_path.name == "sleeper.2.out"
    wan.crash("h1")
    assert again.poll() == -9
    with pytest.raises(ControlError, match="nothing the testbed started is running on h1"):
        wan.crash("h1")


def test_a_missing_program_fails_at_once(wan):
    with pytest.raises(InputError, match="'gosip' on h1: no such program on the PATH"):
        wan.popen("h1", "gosip --ip {ip}")
    with pytest.raises(InputError, match="no such file"):
        wan.exec("/nonexistent/peer", hosts=["h2"])
    with pytest.raises(InputError, match="no such program"):
        wan.apply_churn("at 1s join 1\n", command="gosip")
    with pytest.raises(InputError, match="needs its port"):
        wan.apply_churn("from 1s to 2s flood h1 -- h2 at 10/s\n", command="sleep 9")


# Counts the datagrams that reach {ip}:9999 until none came for a second, then writes how many.
COUNTER = (
    f'{sys.executable} -c "import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); '
    "s.bind(('{ip}',9999)); s.settimeout(4); n=0\n"
    "try:\n while True: s.recv(2048); n+=1; s.settimeout(1)\n"
    "except socket.timeout: open(sys.argv[1],'w').write(str(n))\" {run}/{name}.count"
)


def test_a_flood_reaches_a_programs_port_at_its_rate(wan):
    summary = wan.apply_churn(
        "at 0s join h2,h3\nfrom 1s to 3s flood h1 -- h2,h3 at 400/s port 9999\nat 6s stop\n",
        command=COUNTER,
        settle_s=1.0,
    ).wait(60)
    (flood,) = summary["floods"]
    assert flood["host"] == "h1" and flood["targets"] == 2 and flood["send_errors"] == 0
    assert 0.8 * 800 <= flood["sent"] <= 800 * 1.05, flood  # 2 s at 400/s
    received = sum(int(Path(wan.run_dir, f"{h}.count").read_text()) for h in ("h2", "h3"))
    assert received == flood["sent"]  # the WAN delivered every one (no loss configured)


def _eventually(condition, timeout_s: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


# The failure report: a test that fails with a program that died at start
# shows the run folder and the program's own error text.
FAILING_TEST = """
import sys
import time
import time

import pytest


@pytest.mark.wan("planetlab", hosts=2, clamp=True)
def test_my_protocol(wan):
    wan.popen("h1", [sys.executable, "-c",
                     "import sys; sys.stderr.write('gossip: unknown flag --prot\\\\n'); sys.exit(2)"],
              label="gossip")
    wan.popen("h2", [sys.executable, "-c", "import time; time.sleep(30)"], label="sleeper")
    time.sleep(1.0)
    assert 1 == 0
"""


def test_a_failing_test_reports_the_run_folder_and_the_programs_error(pytester):
    pytester.makepyfile(test_failing=FAILING_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "default")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "testbed network 1" in text
    assert "run folder:" in text
    assert "h1 gossip" in text and "exit 2" in text
    assert "gossip: unknown flag --prot" in text
    assert "h2 sleeper" in text and "running" in text


def test_runtime_control_traps_are_refused_with_the_users_names(wan):
    with pytest.raises(ControlError) as caught:
        wan.partition(["h1", "h2"], ["h2", "h3"])
    assert str(caught.value) == "partition: groups: h2 is in two groups"  # one prefix, h2
    with pytest.raises(ControlError, match=r"set_rtt: rtt_ms: expected an RTT in 0..120000 ms"):
        wan.set_rtt("h1", "h2", 1e9)
    with pytest.raises(ControlError, match="a and b are the same host"):
        wan.set_rtt("h1", "h1", 50)
    with pytest.raises(ControlError, match="normal needs sigma_ms"):
        wan.set_jitter("normal")
    with pytest.raises(ControlError, match="uniform takes width_ms, not sigma_ms"):
        wan.set_jitter("uniform", sigma_ms=2)
    wan.partition(["h1"], ["h2"])
    wan.heal()
    log = (wan.run_dir / "engine" / "engine.log").read_text().splitlines()
    applied = [json.loads(line) for line in log if '"op":"partition","ok":true' in line]
    assert applied[-1]["args"]["groups"] == [["h1"], ["h2"]]  # hosts by name, not index


def test_a_campaign_runs_a_program_spec_under_each_script_and_seed(tmp_path):
    from testbed.experiments.campaign import run_campaign

    scripts = []
    for name, body in (
        ("crashes", "at 0s join 5\nat 2s crash 1\n"),
        ("leaves", "at 0s join 5\nat 2s leave 1\n"),
    ):
        path = tmp_path / f"{name}.churn"
        path.write_text(body + "at 6s stop\n")
        scripts.append(str(path))
    spec, _ = load_any_spec(
        None,
        [],
        defaults={
            "kind": "program",
            "name": "gossip-campaign",
            "command": COMMAND,
            "check": CHECK,
            "topology": {"ref": "planetlab", "hosts": 6, "clamp": True},
            "churn": {"settle_s": 2.5},
            "campaign": {"scripts": scripts, "seeds": [1, 2]},
        },
    )
    folder, result = run_campaign(spec, out=tmp_path / "campaign")
    assert result["status"] == "complete" and result["runs"] == 4
    assert result["violations"] == 0, result["violating_checks"]
    assert all(row["status"] == "complete" for row in result["rows"])
    assert json.loads((folder / "campaign.json").read_text())["runs"] == 4
