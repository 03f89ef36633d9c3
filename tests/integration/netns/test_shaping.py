# Bandwidth, queues, reordering and duplication on a real emulated WAN of three
# hosts: what the kernel's shapers and the engine's compiled data path do to
# packets, measured with ping and iperf3.

from __future__ import annotations

import json
import re

import pytest

from testbed.errors import ControlError, EmulationError
from testbed.net import open_wan

from .conftest import rtts_ms


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    network = open_wan(
        "planetlab", hosts=3, clamp=True, run_dir=tmp_path_factory.mktemp("run") / "wan", seed=5
    )
    try:
        assert network.stats()["datapath"] == "c", "these tests need the compiled data path (make)"
        yield network
    finally:
        network.close()


def _ping(wan, src, dst, count=5):
    result = wan.run(
        src,
        ["ping", "-n", "-c", str(count), "-i", "0.05", "-W", "2", wan.host(dst).ip],
        timeout_s=30,
    )
    return result.stdout


def test_duplication_delivers_copies_and_is_undone(wan):
    assert wan.set_duplicate(1.0, src=["h1"], dst=["h2"]) == 1
    try:
        out = _ping(wan, "h1", "h2")
        # every request arrives twice, so h2 answers twice: ping says DUP! for each second one
        assert len(re.findall(r"DUP!", out)) >= 4, out  # ping may stop before the last copy
        assert wan.stats()["duplicated"] >= 5
    finally:
        wan.set_duplicate(0.0, src=["h1"], dst=["h2"])
    assert "DUP!" not in _ping(wan, "h1", "h2")


def test_reordering_holds_packets_longer(wan):
    base = min(rtts_ms(wan, [("h1", "h3")], samples=10)[("h1", "h3")])
    wan.set_reorder(1.0, gap_ms=30.0, src=["h1"], dst=["h3"])
    try:
        held = min(rtts_ms(wan, [("h1", "h3")], samples=10)[("h1", "h3")])
    finally:
        wan.set_reorder(0.0, src=["h1"], dst=["h3"])
    assert 28.0 < held - base < 32.0


def test_access_link_caps_tcp_and_is_removed(wan):
    wan.set_access(["h2"], down_mbit=20, queue_bytes=100_000)
    try:
        shown = wan.run("h2", ["tc", "qdisc", "show", "dev", "eth0"]).stdout
        assert "htb" not in shown  # the downlink is shaped on the core's side, not the host's
        server = wan.popen("h2", ["iperf3", "-s", "-1", "-p", "5301"], label="iperf3-s")
        import time

        time.sleep(0.5)
        (client,) = wan.exec(
            ["iperf3", "-c", wan.host("h2").ip, "-p", "5301", "-t", "3", "-J"],
            hosts=["h1"],
            timeout_s=30,
        )
        server.wait(10)
        mbit = json.loads(client.stdout())["end"]["sum_received"]["bits_per_second"] / 1e6
        assert 15.0 < mbit < 20.5, mbit
    finally:
        wan.set_access(["h2"])
    assert wan.access == {}


def test_bad_shaping_requests_change_nothing(wan):
    with pytest.raises(EmulationError, match="queue"):
        wan.set_access(["h1"], up_mbit=10)  # no queue size
    with pytest.raises(EmulationError, match="up_mbit"):
        wan.set_access(["h1"], up_mbit=-1, queue_packets=10)
    with pytest.raises(ControlError) as info:
        wan.set_bandwidth(10.0, src=["h1"], dst=["h2"])  # no queue size
    assert info.value.field == "queue_bytes"
    with pytest.raises(ControlError):
        wan.set_duplicate(2.0)
    described = wan.engine.describe()
    assert described["bandwidth_pairs"] == [] and described["duplicate_all"] == 0.0
    assert wan.access == {}


def test_a_churn_script_shapes_and_unshapes(wan, tmp_path):
    script = tmp_path / "shape.churn"
    script.write_text(
        "from 0s to 1s set access h3 down 5mbit queue 20kB\n"
        "from 0s to 1s set duplicate h1 -- h2 100%\n"
        "from 0s to 1s set bandwidth h1 -- h3 2mbit queue 10 packets\n"
        "at 2s stop\n"
    )
    seen = {}

    def look(record):
        if record.get("due_t") == 0.0 and record.get("verb") == "bandwidth":
            seen["access"] = dict(wan.access)
            seen["described"] = wan.engine.describe()

    wan.apply_churn(script, command="true", settle_s=0.5, on_event=look)
    assert set(seen["access"]) == {"h3"}
    pairs = {(s, d) for s, d, _ in seen["described"]["bandwidth_pairs"]}
    assert pairs == {(0, 2), (2, 0)}  # both directions of the pair
    assert {(s, d) for s, d, _ in seen["described"]["duplicate_pairs"]} == {(0, 1), (1, 0)}
    # undone at the spans' end
    assert wan.access == {}
    described = wan.engine.describe()
    assert described["bandwidth_pairs"] == [] and described["duplicate_pairs"] == []


def test_a_topology_specs_links_are_applied_at_bring_up(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(
        '[sharcnet]\nseed = 1\nclusters = [3, 3]\ninter = "planetlab:1"\n'
        'myrinet_latency = { dist = "uniform", low_ms = 0.56, high_ms = 0.64 }\n'
        'gige_latency = { dist = "uniform", low_ms = 8.0, high_ms = 12.0 }\n'
        '[[access]]\nhosts = "cluster=c1"\ndown_mbit = 50\nqueue_bytes = 100000\n'
        '[[bandwidth]]\nsrc = "cluster=c1"\ndst = "cluster=c0"\nrate_mbit = 20\nqueue_packets = 100\n'
    )
    with open_wan(path, clamp=True, mininet=False, run_dir=tmp_path / "run") as wan:
        c1 = sorted(h.name for h in wan.hosts if h.labels.get("cluster") == "c1")
        assert sorted(wan.access) == c1 and len(c1) == 3
        pairs = wan.engine.describe()["bandwidth_pairs"]
        assert len(pairs) == 9 and all(p[2]["rate_mbit"] == 20.0 for p in pairs)
        # labels work in the API too
        assert wan.set_access("cluster=c0", up_mbit=5, queue_packets=10) == 3
        assert len(wan.access) == 6
