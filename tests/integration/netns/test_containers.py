# Container hosts: Docker containers of the project's Debian image on the same
# WAN core as namespace hosts, with CPU and memory limits, torn down with the
# run and removed by `testbed clean` after a kill -9.

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.errors import ControlError, InputError
from testbed.net import open_wan
from testbed.net._containers import DEFAULT_IMAGE, cgroup_limits, run_containers

from .conftest import foreign_runs

CLI = [sys.executable, "-m", "testbed.cli"]


def test_sixteen_containers_beside_sixteen_namespaces_keep_the_wan_bound(tmp_path):
    with open_wan(
        "planetlab", hosts=32, clamp=True, run_dir=tmp_path / "run", containers={"hosts": 16}
    ) as wan:
        boxed = [h.name for h in wan.hosts if h.container]
        assert boxed == [f"h{k}" for k in range(17, 33)]
        # A program on a container host runs in the container (its file system,
        # its host name) and reaches a namespace host through the delaying core.
        (result,) = wan.exec(
            ["sh", "-c", "cat /etc/hostname && ping -c 2 -q {peer}".replace("{peer}", "10.0.0.1")],
            hosts=["h20"],
            timeout_s=20,
        )
        assert result.returncode == 0, result.stderr()
        assert result.stdout().splitlines()[0] == "h20"
        monitor = wan.monitor_fidelity(interval_s=0.3, pairs=64, samples=4, rate_per_s=400.0)
        time.sleep(2.5)
        fidelity = monitor.close()
        assert fidelity["samples"] >= 500 and fidelity["lost"] == 0
        assert fidelity["within_bound"] >= 0.97, fidelity  # max(0.5 ms, 2 % of RTT)
        run_id = wan.plan.run_id
        assert len(run_containers(run_id)[run_id]) == 16
    assert wan.teardown["leftovers"] == {
        "netns": 0, "links": 0, "rules": 0, "processes": 0, "containers": 0
    }  # fmt: skip
    assert run_containers(run_id) == {}


def test_limits_apply_to_what_runs_on_a_container_host(tmp_path):
    with open_wan(
        "planetlab",
        hosts=3,
        clamp=True,
        run_dir=tmp_path / "run",
        containers={"hosts": ["h2"], "cpus": 0.5, "memory_mb": 96},
    ) as wan:
        box = wan.host("h2")
        assert cgroup_limits(box.container_pid) == {"cpus": 0.5, "memory_mb": 96.0}
        sleeper = wan.popen("h2", "sleep 60", label="sleeper")
        time.sleep(0.3)
        inside = _children(sleeper.pid)
        assert inside, "nsenter forked the program into the container's PID namespace"
        for pid in (sleeper.pid, *inside):
            assert box.container in Path(f"/proc/{pid}/cgroup").read_text()
        wan.freeze("h2")
        deadline = time.monotonic() + 2  # a signal is delivered when the process next runs
        while any(_state(p) != "T" for p in inside) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert all(_state(pid) == "T" for pid in inside)
        wan.thaw("h2")
        wan.crash("h2")
        assert sleeper.poll() is not None
        deadline = time.monotonic() + 5  # the container's init reaps what was inside
        while any(_gone(p) is False for p in inside) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(p) for p in inside)
        # A program the container does not have is refused before anything starts.
        with pytest.raises(InputError, match="no such program in its container's PATH"):
            wan.popen("h2", "mnexec -h")
        with pytest.raises(ControlError, match="nothing the testbed started"):
            wan.crash("h2")


def test_groups_of_containers_have_their_own_limits(tmp_path):
    # Heterogeneous nodes: a slow group and a fast one, beside namespace hosts.
    groups = [{"hosts": ["h2", "h3"], "cpus": 0.25}, {"hosts": ["h4"], "cpus": 1.5}]
    with open_wan(
        "planetlab", hosts=4, clamp=True, run_dir=tmp_path / "run", containers=groups
    ) as wan:
        limits = {h.name: cgroup_limits(h.container_pid)["cpus"] for h in wan.hosts if h.container}
        assert limits == {"h2": 0.25, "h3": 0.25, "h4": 1.5} and wan.host("h1").container is None
    with pytest.raises(InputError, match="h3 is in group 1 and in group 2"):
        open_wan("planetlab", hosts=4, clamp=True, run_dir=tmp_path / "bad",
                 containers=[{"hosts": ["h3"]}, {"hosts": ["h3", "h4"]}])  # fmt: skip


@pytest.mark.parametrize(
    ("containers", "message"),
    [
        ({"hosts": 5}, "5 containers, but the network has 3 hosts"),
        ({"hosts": ["h9"]}, "no host named 'h9'"),
        ({"cpus": 0}, "containers.cpus: expected a number of cores > 0"),
        ({"memory_mb": 2}, "containers.memory_mb"),
        ({"colour": "red"}, "unknown field 'colour'"),
        ({"image": "no-such/image:1"}, "no local Docker image 'no-such/image:1'"),
    ],
)
def test_bad_container_options_are_refused(tmp_path, containers, message):
    with pytest.raises(Exception, match=message):
        open_wan("planetlab", hosts=3, clamp=True, run_dir=tmp_path / "r", containers=containers)
    # Nothing left running (another suite's containers beside this one are its own).
    assert not set(run_containers()) - foreign_runs()


def test_a_killed_run_with_containers_is_removed_by_testbed_clean(tmp_path):
    out = tmp_path / "run"
    script = (
        "import time; from testbed.net import open_wan\n"
        f"wan = open_wan('planetlab', hosts=4, clamp=True, run_dir={str(out)!r}, "
        "containers={'hosts': 2})\n"
        "print(wan.plan.run_id, flush=True); time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert run_id and len(run_containers(run_id)[run_id]) == 2
    clean = [*CLI, "clean", "--run", run_id, "--json"]  # this run's: another suite may be beside
    result = subprocess.run(clean, capture_output=True, text=True, check=True)
    report = json.loads(result.stdout)
    assert len(report["containers_removed"]) == 2 and report["runs"] == [run_id]
    assert run_containers(run_id) == {}
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    assert run_id not in links.stdout


def test_the_image_is_the_projects_own(tmp_path):
    docker = subprocess.run(
        ["docker", "image", "inspect", DEFAULT_IMAGE, "--format", "{{.RepoTags}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert docker.returncode == 0, "make install builds it (scripts/build-image.sh)"


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        out += [int(c) for c in children]
    return out


def _gone(pid: int) -> bool:
    try:
        return _state(pid) == "Z"
    except FileNotFoundError:
        return True


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_up_brings_container_hosts_up_and_down(tmp_path):
    out = subprocess.run(
        [*CLI, "up", "planetlab", "--hosts", "4", "--clamp", "--container", DEFAULT_IMAGE,
         "--containers", "2", "--no-cli", "--out", str(tmp_path / "up")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "containers" in out.stderr and "h3..h4" in out.stderr  # the table goes to stderr
    emulation = json.loads((tmp_path / "up" / "emulation.json").read_text())
    assert emulation["teardown"]["leftovers"]["containers"] == 0
