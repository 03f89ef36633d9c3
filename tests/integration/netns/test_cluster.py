# Machines in one Ray cluster (testbed/net/_cluster.py, docs/beyond-one-machine.md), on this
# machine: two "machines" are network namespaces on a LAN of their own; the second
# runs an SSH server that `cluster up user@host` reaches, checks and starts Ray on;
# a campaign runs across both; down and `testbed clean` leave nothing behind.

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from testbed.cli import cli
from testbed.errors import EmulationError
from testbed.experiments.campaign import run_campaign
from testbed.net import (
    cluster_down,
    cluster_status,
    list_netns,
    local_cluster_up,
    parse_target,
    ssh_cluster_up,
)
from testbed.net._netns import nsenter_argv
from testbed.pool import CLUSTERS_DIR, cluster_records
from testbed.spec import load_spec

from ..test_churn_run import SMALL, write


def ray_processes(temp_dir: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if temp_dir.encode() in Path(f"/proc/{entry.name}/cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def nothing_left(cluster_id: str, temp_dirs: list[str]) -> dict[str, list]:
    return {
        "netns": [n for n in list_netns() if n.startswith(f"tb{cluster_id}-")],
        "processes": [p for d in temp_dirs for p in ray_processes(d)],
        "records": [r["id"] for r in cluster_records() if r["id"] == cluster_id],
    }


@pytest.fixture
def sshd(tmp_path):
    """An SSH server to start in a namespace: returns start(netns, address) -> key file."""
    procs = []

    def start(netns: str, address: str) -> str:
        for name in ("host", "user"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)],
                check=True,
            )
        (tmp_path / "authorized_keys").write_text((tmp_path / "user.pub").read_text())
        config = tmp_path / "sshd_config"
        config.write_text(
            f"ListenAddress {address}\nPort 22\nHostKey {tmp_path / 'host'}\n"
            f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            f"StrictModes no\nUsePAM no\nPidFile {tmp_path / 'sshd.pid'}\n"
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation folder
        proc = subprocess.Popen(
            [*nsenter_argv(netns), "/usr/sbin/sshd", "-D", "-f", str(config), "-E",
             str(tmp_path / "sshd.log")]
        )  # fmt: skip
        procs.append(proc)
        deadline = time.monotonic() + 10
        while "Server listening" not in _read(tmp_path / "sshd.log"):
            assert proc.poll() is None and time.monotonic() < deadline, _read(tmp_path / "sshd.log")
            time.sleep(0.05)
        return str(tmp_path / "user")

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def test_a_machine_joins_over_ssh_and_a_campaign_runs_across_both(tmp_path, sshd):
    cluster = local_cluster_up(2, cpus=1, ray_on=1)  # Ray on m1 only; m2 joins over SSH
    temp_dirs = [m.temp_dir for m in cluster.machines]
    try:
        m2 = cluster.machines[1]
        key = sshd(m2.netns, m2.address)
        target = parse_target(f"root@{m2.address}")
        # Refused, and nothing started, when the machine runs other code.
        with pytest.raises(EmulationError, match="runs other project sources"):
            ssh_cluster_up(
                [target], identity=key, accept_new_host_keys=True, cluster_id=cluster.id,
                python="/usr/bin/python3",
            )  # fmt: skip
        assert ray_processes(m2.temp_dir) == []
        joined = ssh_cluster_up(
            [target], identity=key, accept_new_host_keys=True, cluster_id=cluster.id, cpus=1
        )
        temp_dirs = [m.temp_dir for m in joined.machines]
        assert [m.kind for m in joined.machines] == ["local", "local", "ssh"]
        rows = {r["address"]: r for r in cluster_status(joined)}
        assert rows[m2.address]["ray"] == "alive" and rows[m2.address]["cpus"] == 1.0
        assert rows[cluster.machines[0].address]["ray"] == "alive"
        assert all(r["load_1m"] is not None for r in rows.values() if r["ray"] == "alive")

        a = write(tmp_path, "a.churn", "from 0s to 10s join 50%\nat 30s crash 1\nat 50s stop")
        overrides = [f'campaign.scripts=["{a}"]', "campaign.seeds=[1, 2]", "churn.settle_s=15"]
        spec, _ = load_spec(None, overrides, defaults=SMALL)
        _, local = run_campaign(spec, out=tmp_path / "local", jobs=1)
        there, remote = run_campaign(spec, out=tmp_path / "ray", jobs=2, ray=joined.head)
        assert remote["status"] == "complete"
        strip = [{k: v for k, v in r.items() if k != "wall_s"} for r in remote["rows"]]
        assert strip == [{k: v for k, v in r.items() if k != "wall_s"} for r in local["rows"]]
        for run in ("a-s1", "a-s2"):
            ours = (tmp_path / "local" / run / "events.jsonl").read_bytes()
            assert (there / run / "events.jsonl").read_bytes() == ours
        assert "RAY_AUTH_TOKEN" not in os.environ  # the token stays with the session
    finally:
        report = cluster_down(cluster_from_record(cluster.id) or cluster)
    assert report["problems"] == []
    assert nothing_left(cluster.id, temp_dirs) == {"netns": [], "processes": [], "records": []}


def cluster_from_record(cluster_id):
    from testbed.net import Cluster

    records = [r for r in cluster_records() if r["id"] == cluster_id]
    return Cluster.load(records[0]) if records else None


def test_the_cli_brings_a_local_cluster_up_and_down(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["cluster", "up", "--local", "2", "--json"])
    assert result.exit_code == 0, result.output
    made = json.loads(result.output.strip().splitlines()[-1])
    try:
        assert made["machines"] == ["m1", "m2"]
        assert (CLUSTERS_DIR / f"{made['id']}.json").stat().st_mode & 0o077 == 0  # its token
        result = runner.invoke(cli, ["cluster", "status", "--id", made["id"], "--json"])
        assert result.exit_code == 0, result.output
        status = json.loads(result.output.strip().splitlines()[-1])
        assert [(m["machine"], m["ray"]) for m in status["machines"]] == [
            ("m1", "alive"),
            ("m2", "alive"),
        ]
        result = runner.invoke(cli, ["clean", "--run", made["id"], "--json"])  # up: left alone
        assert made["id"] in json.loads(result.output)["live_clusters_skipped"]
    finally:
        result = runner.invoke(cli, ["cluster", "down", "--id", made["id"]])
    assert result.exit_code == 0, result.output
    temp_dirs = [f"/tmp/ray-tb{made['id']}-m{k}" for k in (1, 2)]
    assert nothing_left(made["id"], temp_dirs) == {"netns": [], "processes": [], "records": []}


def test_clean_removes_what_a_killed_cluster_up_left(tmp_path):
    up = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "cluster", "up", "--local", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    mine: set[str] = set()
    while not mine:  # its record comes first, then its namespaces and Rays
        assert time.monotonic() < deadline and up.poll() is None
        # by its owner, not by what is new: a suite beside this one starts clusters too
        mine = {r["id"] for r in cluster_records() if r.get("owner") == up.pid}
        time.sleep(0.05)
    (cluster_id,) = mine
    while not any(n == f"tb{cluster_id}-m2" for n in list_netns()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # Ray starting on m1
    os.kill(up.pid, signal.SIGKILL)
    up.wait()
    result = CliRunner().invoke(cli, ["clean", "--run", cluster_id, "--json"])  # this one only
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["clusters_removed"] == [cluster_id]
    temp_dirs = [f"/tmp/ray-tb{cluster_id}-m{k}" for k in (1, 2)]
    assert nothing_left(cluster_id, temp_dirs) == {"netns": [], "processes": [], "records": []}
