# Real peer processes (`python -m node`) on loopback: joining, the control
# API, graceful leave on SIGTERM, bad arguments. Robustness, not exact traces
# (trio's scheduler is deliberately not deterministic; traces belong to the
# simulator).

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from node.config import ConfigError, config_from_dict, config_to_dict, load_config
from node.control import ControlError, request
from testbed.analysis.can_oracle import check_can
from testbed.engines.local import LocalPeer
from testbed.engines.peers import build_node_config
from testbed.spec import NodeSpec, RunClustersSpec

FAST = NodeSpec(
    update_interval_s=0.3,
    suspect_after_s=1.2,
    probe_timeout_s=0.4,
    propose_timeout_s=0.5,
    join_timeout_s=2.0,
    retry_max_s=2.0,
)
CONFIG = build_node_config(FAST)
POINTS = [
    (200.0, 1024.0, 80.0, 1.0, 0.1),
    (240.0, 2048.0, 160.0, 2.0, 0.5),
    (320.0, 4096.0, 250.0, 4.0, 0.9),
    (360.0, 8192.0, 500.0, 8.0, 0.3),
]


def settled(peers, expected, timeout_s=20.0):
    """Dumps of `peers` once the oracle finds no violation (or the last report)."""
    deadline = time.monotonic() + timeout_s
    while True:
        dumps = [p.ask("dump")["dump"] for p in peers]
        report = check_can(CONFIG.can.space, dumps, expected_members=expected, routes=200)
        if report.ok or time.monotonic() > deadline:
            return report
        time.sleep(0.3)


def records(peer):
    return [json.loads(line) for line in peer.log.read_text().splitlines()]


def test_config_round_trips_and_errors_name_the_field(tmp_path):
    assert config_from_dict(config_to_dict(CONFIG)) == CONFIG
    bad = config_to_dict(CONFIG)
    bad["can"]["update_intervall_s"] = 1
    with pytest.raises(ConfigError, match="can.update_intervall_s: unknown field"):
        config_from_dict(bad)
    bad = config_to_dict(CONFIG)
    bad["can"]["suspect_after_s"] = -1
    with pytest.raises(ConfigError, match="suspect_after_s must be a positive number"):
        config_from_dict(bad)
    path = tmp_path / "node.json"
    path.write_text('{"can": {\n  "space": [}')
    with pytest.raises(ConfigError, match=r"node.json:2:\d+: not JSON"):
        load_config(path)


def test_peers_join_serve_control_and_leave_gracefully_on_sigterm(tmp_path):
    with (
        LocalPeer(tmp_path, "h1", CONFIG, POINTS[0], join=[]) as h1,
        LocalPeer(tmp_path, "h2", CONFIG, POINTS[1], join=[h1.address], seed=2) as h2,
        LocalPeer(tmp_path, "h3", CONFIG, POINTS[2], join=[h1.address], seed=3) as h3,
    ):
        report = settled([h1, h2, h3], ["h1", "h2", "h3"])
        assert report.ok, report.to_dict()

        # The control API answers bad requests and stays up.
        with pytest.raises(ControlError, match="unknown op 'bogus'"):
            request(h2.control, "bogus")
        with pytest.raises(ControlError, match=r"an address is \[host, port\]"):
            request(h2.control, "join", bootstraps=[["x"]])
        stats = h2.ask("stats")["stats"]
        assert stats["accepted"] > 0 and stats["rx"] == stats["accepted"]
        assert stats["rss_kb"] > 0

        # SIGTERM: a graceful leave (a MERGE), then exit 0.
        h3_id = h3.ask("status")["id"]
        h3.process.send_signal(signal.SIGTERM)
        assert h3.process.wait(15) == 0
        kinds = [r["kind"] for r in records(h3)]
        assert kinds[0] == "started" and kinds[-1] == "exit"
        left = next(r for r in records(h3) if r["kind"] == "left")
        assert left["graceful"] is True
        report = settled([h1, h2], ["h1", "h2"])
        assert report.ok, report.to_dict()
        # The others learnt of it from the MERGE commit, not by probing it after
        # it fell silent (which is what happens when the commit is lost as the
        # process exits).
        news = [r for p in (h1, h2) for r in records(p) if r["kind"] == "peer_dead"]
        assert {r["reason"] for r in news if r["peer"] == h3_id} == {"left"}

        # A leave through the control API ends the process as well.
        h2.ask("leave")
        assert h2.process.wait(15) == 0
        report = settled([h1], ["h1"])
        assert report.ok, report.to_dict()
        assert h1.ask("dump")["dump"]["lo"] == [d.lo for d in CONFIG.can.space.dims]


def test_a_crashed_peer_is_taken_over(tmp_path):
    with (
        LocalPeer(tmp_path, "h1", CONFIG, POINTS[0], join=[]) as h1,
        LocalPeer(tmp_path, "h2", CONFIG, POINTS[1], join=[h1.address], seed=2) as h2,
        LocalPeer(tmp_path, "h3", CONFIG, POINTS[3], join=[h1.address], seed=3) as h3,
    ):
        assert settled([h1, h2, h3], ["h1", "h2", "h3"]).ok
        dead = h3.ask("status")["id"]
        h3.process.kill()
        h3.process.wait()
        report = settled([h1, h2], ["h1", "h2"])
        assert report.ok, report.to_dict()
        takeovers = [r for p in (h1, h2) for r in records(p) if r["kind"] == "takeover"]
        assert any(dead in r["dead"] for r in takeovers)


def test_the_final_record_survives_a_teardowns_sigterm_after_exit(tmp_path):
    # A teardown asks a peer to exit, then signals it if it has not gone yet. The
    # signals that come while the peer writes its final counters must not lose them
    # (they did: a SIGTERM re-delivered as the peer left its signal receiver killed it
    # first, and a run's datagram totals disagreed with its peers' records).
    for attempt in range(5):
        with LocalPeer(tmp_path / str(attempt), "h1", CONFIG, POINTS[0], join=[]) as h1:
            h1.wait_status("member")
            h1.ask("exit")
            while h1.process.poll() is None:
                h1.process.send_signal(signal.SIGTERM)
                time.sleep(0.0005)
            last = records(h1)[-1]
            assert last["kind"] == "exit" and last["stats"]["rss_kb"] > 0, (attempt, last)


def run_node(tmp_path, *args):
    config = tmp_path / "node.json"
    config.write_text(json.dumps(config_to_dict(CONFIG)))
    argv = [sys.executable, "-m", "node", "--name", "h1", "--config", str(config), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bind", "127.0.0.1", "--point", "1,2,3,4,0.5"], "--bind: expected HOST:PORT"),
        (["--bind", "127.0.0.1:7", "--point", "1,2"], "--point: 2 values for a 5-dimensional"),
        (["--bind", "127.0.0.1:7", "--point", "a,b"], "--point: expected comma-separated"),
        (["--bind", "127.0.0.1:7", "--point", "1,2,3,4,0.5", "--join", "x"], "--join: expected"),
    ],
)
def test_bad_arguments_exit_2_naming_the_flag(tmp_path, args, message):
    result = run_node(tmp_path, *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_an_address_in_use_is_a_clear_error(tmp_path):
    with LocalPeer(tmp_path, "h1", CONFIG, POINTS[0], join=[]) as h1:
        h1.wait_status("member")
        host, port = h1.address
        result = run_node(tmp_path, "--bind", f"{host}:{port}", "--point", "1,2,3,4,0.5")
        assert result.returncode == 1
        assert f"{host}:{port}: Address already in use" in result.stderr


def test_the_rtt_request_measures_real_pings_without_joining(tmp_path):
    with (
        LocalPeer(tmp_path, "h1", CONFIG, POINTS[0], join=None) as h1,
        LocalPeer(tmp_path, "h2", CONFIG, POINTS[1], join=None, seed=2) as h2,
    ):
        h2.ask("status")  # up: its socket is bound before its control socket
        answer = h1.ask("rtt", targets=[list(h2.address), ["127.0.0.1", 9]], samples=3)
        here, nobody = answer["rtts_s"]
        assert len(here) == 3 and all(0 < rtt < 0.5 for rtt in here)
        assert nobody == [] and answer["lost"] == [0, 3]
        assert h2.ask("stats")["stats"]["accepted"] == 3  # the Pings
        measured = [r for r in records(h1) if r["kind"] == "rtt"]
        assert [len(r["rtts"]) for r in measured] == [3, 0]
        with pytest.raises(ControlError, match="samples must be an integer"):
            request(h1.control, "rtt", targets=[list(h2.address)], samples=0)
        with pytest.raises(ControlError, match=r"an address is \[host, port\]"):
            request(h1.control, "rtt", targets=["h2"])
        for bad in (7, None, {"h2": 1}):
            with pytest.raises(ControlError, match="targets must be a list"):
                request(h1.control, "rtt", targets=bad)
        assert h1.ask("status")["status"] == "idle"  # still serving


def test_real_peers_form_a_cluster_when_given_candidates(tmp_path):
    # Three processes on loopback (RTTs well under D = 50 ms): the first is
    # offered the other two through the control API and they form one cluster
    # with real pings; a peer without a cluster configuration refuses the op.
    clustered = build_node_config(
        FAST,
        RunClustersSpec(
            diameter_ms=50.0, size=3, stable_s=0.5, wait_s=0.3, heartbeat_s=0.5, dead_after_s=2.0
        ),
    )
    assert config_from_dict(config_to_dict(clustered)) == clustered
    bad = config_to_dict(clustered)
    bad["cluster"]["sise"] = 3
    with pytest.raises(ConfigError, match="cluster.sise: unknown field"):
        config_from_dict(bad)
    with (
        LocalPeer(tmp_path, "h1", clustered, POINTS[0], join=None) as h1,
        LocalPeer(tmp_path, "h2", clustered, POINTS[1], join=None, seed=2) as h2,
        LocalPeer(tmp_path, "h3", clustered, POINTS[2], join=None, seed=3) as h3,
        LocalPeer(tmp_path, "h4", CONFIG, POINTS[3], join=None, seed=4) as plain,
    ):
        for peer in (h2, h3):
            peer.ask("status")
        h1.ask("cluster", candidates=[list(h2.address), list(h3.address)])
        deadline = time.monotonic() + 20
        while (state := h1.ask("dump")["dump"]["cluster"])["head"] != "STEADY" or len(
            state["own"]
        ) < 3:
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        members = sorted(tuple(a) for a in state["own"])
        assert members == sorted([h1.address, h2.address, h3.address])
        assert h2.ask("dump")["dump"]["cluster"]["advertised"] == state["own"]
        assert any(r["kind"] == "cluster" and r["own"] == 3 for r in records(h1))
        with pytest.raises(ControlError, match="no cluster configuration"):
            request(plain.control, "cluster", candidates=[list(h1.address)])
        with pytest.raises(ControlError, match="candidates must be a list"):
            request(h1.control, "cluster", candidates="h2")


def test_a_burst_is_read_in_batches_and_every_datagram_is_counted(tmp_path):
    # 2,000 datagrams as fast as one socket sends them: the peer reads what gathered at
    # each wake-up (node/runtime.py), and every one is counted, taken or dropped (a
    # stranger beyond its burst: rate_limited).
    with LocalPeer(tmp_path, "h1", CONFIG, POINTS[0], join=[]) as h1:
        h1.ask("status")
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for k in range(2000):
            sender.sendto(b"junk %d" % k, tuple(h1.address))
        sender.close()
        deadline = time.monotonic() + 10.0
        while (stats := h1.ask("stats")["stats"])["rx"] < 2000 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert stats["rx"] == 2000
    dropped = sum(v for k, v in stats.items() if k.startswith("drop."))
    assert stats.get("accepted", 0) + dropped == 2000 and stats["drop.rate_limited"] > 0
    assert stats["runtime.rx_batches"] >= 1
