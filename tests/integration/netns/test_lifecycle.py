# Bringing networks up and down: what happens on errors, signals and crashes,
# and the command line around it.

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from testbed.errors import EmulationError, FloorError, TopologyError
from testbed.net import clean, list_netns, list_runs, open_wan
from testbed.tools.bench import bringup_cost

from .conftest import appeared_since, netns_of, run_id_of

CLI = [sys.executable, "-m", "testbed.cli"]


@pytest.fixture
def three(tmp_path):
    path = tmp_path / "three.txt"
    path.write_text("0 20 40\n20 0 30\n40 30 0\n")
    return path


def wait_for(predicate, timeout_s=20.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != b"Z"


def test_an_exception_inside_tears_everything_down(three, tmp_path):
    seen = {}

    def use_then_fail() -> None:
        with open_wan(three, run_dir=tmp_path / "run") as wan:
            seen["wan"], seen["sleeper"] = wan, wan.popen("h1", "sleep 600")
            seen["netns"] = len(netns_of(wan.plan.run_id))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        use_then_fail()
    wan, sleeper = seen["wan"], seen["sleeper"]
    assert seen["netns"] == 4
    assert netns_of(wan.plan.run_id) == []
    assert not alive(sleeper.pid)
    assert wan.teardown["leftovers"] == {"netns": 0, "links": 0, "rules": 0, "processes": 0}
    assert all(r.run_id != wan.plan.run_id for r in list_runs())
    log = [json.loads(line) for line in (tmp_path / "run" / "testbed.log").read_text().splitlines()]
    assert log[-1]["kind"] == "teardown.done"


def test_bad_input_creates_nothing(tmp_path):
    before = set(list_netns())
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1 2\n1 0 q\n2 1 0\n")
    with pytest.raises(TopologyError, match=r"bad.txt:2:3: 'q' is not a number"):
        open_wan(bad, run_dir=tmp_path / "r1")
    with pytest.raises(TopologyError, match="asked for 500 hosts but the matrix has only 490"):
        open_wan("planetlab", hosts=500, run_dir=tmp_path / "r2")
    with pytest.raises(TopologyError, match="unknown host 'zz'"):
        open_wan("planetlab", hosts=["n1", "zz"], run_dir=tmp_path / "r3")
    assert appeared_since(before) == []
    assert not (tmp_path / "r1").exists()


def test_latencies_below_the_floor_are_an_error_unless_clamped(tmp_path):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("0 0.001 30\n0.001 0 30\n30 30 0\n")
    with pytest.raises(
        FloorError, match=r"2 pair\(s\) have an RTT below the delay engine's measured floor"
    ) as info:
        open_wan(tiny, run_dir=tmp_path / "r1")
    assert [(a, b) for a, b, _ in info.value.pairs] == [("h1(n0)", "h2(n1)"), ("h2(n1)", "h1(n0)")]
    assert netns_of(run_id_of(tmp_path / "r1")) == []
    with open_wan(tiny, run_dir=tmp_path / "r2", clamp=True) as wan:
        assert wan.clamped == 2
        floor = wan.calibration.floor_rtt_ms
        assert 0 < floor < 5
        np.testing.assert_allclose(wan.configured_one_way_ms()[0, 1], floor / 2)
        description = json.loads((wan.run_dir / "emulation.json").read_text())
        assert description["clamped_pairs"] == 2 and description["clamped_to_rtt_ms"] == floor


def test_sigterm_tears_down(three, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*CLI, "exec", str(three), "--out", str(out), "--", "sleep", "600"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: (out / "hosts" / "h3" / "exec.out").exists(), what="the sleeps to start")
        assert len(netns_of(run_id_of(out))) == 4
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert netns_of(run_id_of(out)) == []
    assert "interrupted; torn down" in stderr.decode()


def test_a_killed_run_is_removed_by_testbed_clean(three, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*CLI, "exec", str(three), "--out", str(out), "--", "sleep", "600"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: (out / "hosts" / "h3" / "exec.out").exists(), what="the sleeps to start")
        events = [json.loads(line) for line in (out / "testbed.log").read_text().splitlines()]
        engine_pid = next(e["pid"] for e in events if e["kind"] == "bringup.engine")
        sleepers = [e["pid"] for e in events if e["kind"] == "process.start"]
    finally:
        proc.kill()
        proc.wait()
    # the engine follows its parent (PR_SET_PDEATHSIG); the rest waits for clean
    wait_for(lambda: not alive(engine_pid), timeout_s=10, what="the engine to exit")
    assert len(netns_of(run_id_of(out))) == 4
    assert all(alive(pid) for pid in sleepers)
    run_id = run_id_of(out)  # this run only: another suite's may be beside it
    clean_it = [*CLI, "clean", "--run", run_id]
    result = subprocess.run([*clean_it, "--json"], capture_output=True, text=True, check=True)
    report = json.loads(result.stdout)
    assert report["runs"] == [run_id] and len(report["netns_removed"]) == 4
    assert set(sleepers) <= set(report["processes_killed"])
    assert netns_of(run_id_of(out)) == []
    assert not any(alive(pid) for pid in sleepers)
    again = subprocess.run(clean_it, capture_output=True, text=True, check=True)
    assert "nothing to clean" in again.stdout


def test_clean_leaves_a_live_run_alone(three, tmp_path):
    with open_wan(three, run_dir=tmp_path / "run", mininet=False) as wan:
        report = clean(run_id=wan.plan.run_id)
        assert wan.plan.run_id in report.live_runs_skipped
        assert len(netns_of(wan.plan.run_id)) == 4
        assert len(wan.run("h1", ["true"]).args) > 0


def test_up_opens_the_mininet_cli(three, tmp_path):
    script = tmp_path / "commands.mn"
    script.write_text("h1 ping -c10 -i0.05 h2\nh3 ip -o -4 addr show dev eth0\n")
    result = subprocess.run(
        [*CLI, "up", str(three), "--out", str(tmp_path / "run"), "--script", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr  # Mininet's CLI writes through its logger, to stderr
    assert "10 packets transmitted, 10 received" in output
    times = [float(t) for t in re.findall(r"time=([\d.]+) ms", output)]
    # The matrix's 20 ms (not h1-h3's 40 or h2-h3's 30), never early; fidelity
    # itself is measured in test_wan, with retries through scheduling noise.
    assert len(times) == 10 and min(times) >= 19.5 and float(np.median(times)) < 25.0, times
    assert "inet 10.0.0.3/32" in output
    assert netns_of(run_id_of(tmp_path / "run")) == []


def test_mininet_shells_start_on_first_use_and_are_recorded(three, tmp_path):
    with open_wan(three, run_dir=tmp_path / "run") as wan:
        shells = {node.name: node for node in wan.net.hosts}
        assert sorted(shells) == ["h1", "h2", "h3"]
        assert all(node.shell is None for node in shells.values())  # none at bring-up
        assert "inet 10.0.0.2/32" in shells["h2"].cmd("ip -o -4 addr show dev eth0")
        assert [n for n, node in shells.items() if node.shell is not None] == ["h2"]
        pid = shells["h2"].pid
        netns = wan.host("h2").netns_path
        assert Path(f"/proc/{pid}/ns/net").stat().st_ino == netns.stat().st_ino
        record = next(r for r in list_runs() if r.run_id == wan.plan.run_id)
        assert pid in record.pids  # so that `testbed clean` stops it after a crash
        assert "not started" in repr(shells["h1"]) and shells["h1"].shell is None
    assert not alive(pid)


def test_cli_reports_bad_input_with_exit_code_2(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n1\n")
    result = subprocess.run([*CLI, "exec", str(bad), "--", "true"], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"{bad}:2: row has 1 values but the first row (line 1) has 2" in result.stderr.replace(
        "\n", ""
    )


def test_bench_delay_prints_the_promised_json(tmp_path):
    result = subprocess.run(
        [
            *CLI,
            "bench",
            "delay",
            "--hosts",
            "6",
            "--samples",
            "4",
            "--rate",
            "500",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["hosts"] == 6 and data["pairs"] == 15 and data["probes"] == 60 and data["lost"] == 0
    assert data["pps"] > 0
    assert set(data["rtt_error_ms"]) >= {"p50", "p99", "max"} and set(data["rtt_rel_error"]) >= {
        "p50",
        "p99",
    }
    assert data["rtt_error_ms"]["p50"] <= data["rtt_error_ms"]["p99"] <= data["rtt_error_ms"]["max"]
    # The pairs' RTTs, not others' (PlanetLab's differ by far more than 5 ms);
    # the bound itself is measured by the bench, on a machine that is quiet.
    assert data["pair_median_error_ms"]["p50"] < 5.0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["pairs"] == 15


def test_bringup_cost_leaves_nothing(tmp_path):
    result = bringup_cost("planetlab", 12, run_dir=str(tmp_path / "run"))
    assert result["hosts"] == 12 and result["leftovers"] == 0 and result["up_s"] > 0
    assert result["leftovers_detail"] == {"netns": 0, "links": 0, "rules": 0, "processes": 0}
    assert 10_000 < result["engine_resident_kb"] < 500_000  # the delay engine's, after loading
    assert not (tmp_path / "run" / "engine" / "zero.f64").exists()  # read at start, then removed


def test_switching_to_another_planetlab_frame(tmp_path):
    with open_wan(
        "planetlab", hosts=["n5", "n40", "n300"], run_dir=tmp_path / "run", mininet=False
    ) as wan:
        wan.load_topology("planetlab:7")
        from testbed.topology import planetlab_frame

        frame = planetlab_frame(7).select(hosts=["n5", "n40", "n300"])
        np.testing.assert_allclose(wan.configured_one_way_ms(), frame.rtt_ms / 2)
        with pytest.raises(TopologyError, match="frames are 1..18"):
            wan.load_topology("planetlab:40")


@pytest.mark.wan("planetlab", hosts=3, mininet=False)
def test_the_pytest_fixture_gives_a_working_network(wan):
    assert [h.name for h in wan.hosts] == ["h1", "h2", "h3"]
    assert wan.run("h1", ["ping", "-c1", "-W2", wan.hosts[2].ip]).returncode == 0


def test_teardown_refuses_later_use(three, tmp_path):
    wan = open_wan(three, run_dir=tmp_path / "run", mininet=False)
    wan.close()
    wan.close()  # idempotent
    with pytest.raises(EmulationError, match="torn down"):
        wan.set_rtt("h1", "h2", 10)


def test_a_failing_ip_batch_names_its_command():
    from testbed.net._build import ip_batch

    with pytest.raises(EmulationError, match=r"command: ip link set nosuchdev0 up"):
        ip_batch(["link show lo", "link set nosuchdev0 up", "link show lo"])
